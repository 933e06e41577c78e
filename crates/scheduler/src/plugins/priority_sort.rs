//! PrioritySort: higher `spec.priority` first, then earlier arrival in the queue.

use std::sync::Arc;

use serde_json::Value;

use crate::framework::{Plugin, QueueSortPlugin};
use crate::types::PodInfo;

pub const NAME: &str = "PrioritySort";

pub struct PrioritySort;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(PrioritySort))
}

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &PodInfo, a_ts: u64, b: &PodInfo, b_ts: u64) -> bool {
        a.priority > b.priority || (a.priority == b.priority && a_ts < b_ts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::testing::pod;

    #[test]
    fn higher_priority_then_earlier_arrival_first() {
        let mut hi = pod("hi", &[]);
        hi.spec.as_mut().unwrap().priority = Some(10);
        let (hi, lo) = (PodInfo::new(hi), PodInfo::new(pod("lo", &[])));
        assert!(PrioritySort.less(&hi, 5, &lo, 1));
        assert!(!PrioritySort.less(&lo, 1, &hi, 5));
        assert!(PrioritySort.less(&lo, 1, &lo, 2));
        assert!(!PrioritySort.less(&lo, 2, &lo, 1));
    }
}
