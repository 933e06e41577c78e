//! The capstan scheduler: watches pods without a node, filters the nodes that can take each,
//! scores the rest and binds the pod to the best (the seeds; `pkg/scheduler`).

pub mod framework;
pub mod plugins;
pub mod snapshot;
pub mod types;
