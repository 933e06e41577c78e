//! VolumeRestrictions: in-tree disks that only one pod may mount read-write (GCE PD, AWS EBS,
//! Ceph RBD, iSCSI) must not clash with the volumes of the node's pods, and a
//! `ReadWriteOncePod` PersistentVolumeClaim may be used by only one pod in the cluster.
//! Mirrors `pkg/scheduler/framework/plugins/volumerestrictions` of Kubernetes v1.32.
//!
//! The scheduler has no PersistentVolumeClaim objects yet, so which claims are
//! `ReadWriteOncePod` comes from [`set_read_write_once_pod_claims`] (keys `namespace/name`),
//! empty until something calls it. Claims that do not exist are not reported (Kubernetes
//! rejects such pods with `persistentvolumeclaim "x" not found`).

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Volume;
use serde_json::Value;

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
};
use crate::snapshot::Snapshot;
use crate::types::{NodeInfo, PodInfo};

pub const NAME: &str = "VolumeRestrictions";

pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
pub const ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

type ClaimSet = Arc<HashSet<String>>;

/// The process-wide set of `ReadWriteOncePod` claims (`namespace/name`).
static RWOP_CLAIMS: RwLock<Option<ClaimSet>> = RwLock::new(None);

/// Replace the set of PersistentVolumeClaims (`namespace/name`) whose access modes include
/// `ReadWriteOncePod`; read by every VolumeRestrictions plugin built by [`new`].
pub fn set_read_write_once_pod_claims(claims: HashSet<String>) {
    let mut guard = RWOP_CLAIMS.write().unwrap_or_else(|e| e.into_inner());
    *guard = Some(Arc::new(claims));
}

fn global_claims() -> Option<ClaimSet> {
    RWOP_CLAIMS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

pub struct VolumeRestrictions {
    /// Fixed claims (tests); None reads the process-wide set.
    claims: Option<ClaimSet>,
}

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(VolumeRestrictions { claims: None }))
}

/// Per-pod state: the pod's `ReadWriteOncePod` claim names and how many pods use them.
#[derive(Debug, Clone)]
struct PreFilterState {
    rwop_claims: Arc<Vec<String>>,
    conflicting_ref_count: i64,
}

impl PreFilterState {
    /// References by `other` to the pod's RWOP claims. Like Kubernetes, compares claim names
    /// only (not namespaces).
    fn refs(&self, other: &PodInfo) -> i64 {
        pod_volumes(other)
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .filter(|c| self.rwop_claims.contains(&c.claim_name))
            .count() as i64
    }
}

fn pod_volumes(pod: &PodInfo) -> &[Volume] {
    pod.volumes()
}

/// Volumes whose conflicts this plugin checks.
fn needs_restrictions_check(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

fn have_overlap(a: &[String], b: &[String]) -> bool {
    a.iter().any(|x| b.contains(x))
}

/// An RBD volume's pool; the API defaults an empty one to "rbd".
fn rbd_pool(pool: &Option<String>) -> &str {
    pool.as_deref().filter(|s| !s.is_empty()).unwrap_or("rbd")
}

/// Whether `volume` clashes with one of `pod`'s volumes.
fn is_volume_conflict(volume: &Volume, pod: &PodInfo) -> bool {
    let ro = |r: Option<bool>| r.unwrap_or(false);
    pod_volumes(pod).iter().any(|existing| {
        if let (Some(d), Some(e)) = (&volume.gce_persistent_disk, &existing.gce_persistent_disk) {
            if d.pd_name == e.pd_name && !(ro(d.read_only) && ro(e.read_only)) {
                return true;
            }
        }
        if let (Some(d), Some(e)) = (
            &volume.aws_elastic_block_store,
            &existing.aws_elastic_block_store,
        ) {
            if d.volume_id == e.volume_id {
                return true;
            }
        }
        if let (Some(d), Some(e)) = (&volume.iscsi, &existing.iscsi) {
            if d.iqn == e.iqn && !(ro(d.read_only) && ro(e.read_only)) {
                return true;
            }
        }
        if let (Some(d), Some(e)) = (&volume.rbd, &existing.rbd) {
            if have_overlap(&d.monitors, &e.monitors)
                && rbd_pool(&d.pool) == rbd_pool(&e.pool)
                && d.image == e.image
                && !(ro(d.read_only) && ro(e.read_only))
            {
                return true;
            }
        }
        false
    })
}

/// Whether none of the pod's checked volumes clashes with the volumes of `pods`.
fn satisfies_volume_conflicts<'a>(
    pod: &PodInfo,
    pods: impl Iterator<Item = &'a PodInfo> + Clone,
) -> bool {
    pod_volumes(pod)
        .iter()
        .filter(|v| needs_restrictions_check(v))
        .all(|v| pods.clone().all(|other| !is_volume_conflict(v, other)))
}

impl VolumeRestrictions {
    /// A plugin reading a fixed set of `ReadWriteOncePod` claims (`namespace/name`).
    pub fn with_read_write_once_pod_claims(claims: HashSet<String>) -> VolumeRestrictions {
        VolumeRestrictions {
            claims: Some(Arc::new(claims)),
        }
    }

    fn rwop_claims(&self) -> Option<ClaimSet> {
        match &self.claims {
            Some(c) => Some(c.clone()),
            None => global_claims(),
        }
    }
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> Vec<ClusterEvent> {
        // StorageChange stands for Kubernetes' PersistentVolumeClaim/Add.
        vec![
            ClusterEvent::PodDelete,
            ClusterEvent::NodeAdd,
            ClusterEvent::StorageChange,
        ]
    }
    /// A deleted pod in the same namespace helps if it held a conflicting disk or one of the
    /// same claims.
    fn hint(&self, pod: &PodInfo, event: ClusterEvent, changed: Option<&PodInfo>) -> bool {
        let (ClusterEvent::PodDelete, Some(deleted)) = (event, changed) else {
            return true;
        };
        if deleted.namespace() != pod.namespace() {
            return false;
        }
        if !satisfies_volume_conflicts(pod, std::iter::once(deleted)) {
            return true;
        }
        let claims: Vec<&str> = pod_volumes(pod)
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.as_str())
            .collect();
        pod_volumes(deleted)
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .any(|c| claims.contains(&c.claim_name.as_str()))
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let volumes = pod_volumes(pod);
        let needs_check = volumes.iter().any(needs_restrictions_check);
        let mut rwop_claims: Vec<String> = Vec::new();
        if volumes.iter().any(|v| v.persistent_volume_claim.is_some()) {
            if let Some(set) = self.rwop_claims() {
                for c in volumes
                    .iter()
                    .filter_map(|v| v.persistent_volume_claim.as_ref())
                {
                    let key = format!("{}/{}", pod.namespace(), c.claim_name);
                    if set.contains(&key) && !rwop_claims.contains(&c.claim_name) {
                        rwop_claims.push(c.claim_name.clone());
                    }
                }
            }
        }
        // Each RWOP claim already used by a placed pod counts once.
        let conflicting_ref_count = rwop_claims
            .iter()
            .filter(|c| {
                let key = format!("{}/{}", pod.namespace(), c);
                snapshot
                    .nodes()
                    .iter()
                    .any(|n| n.pvc_ref_counts.contains_key(&key))
            })
            .count() as i64;
        if !needs_check && conflicting_ref_count == 0 {
            return (PreFilterResult::default(), Status::skip());
        }
        state.write(
            NAME,
            PreFilterState {
                rwop_claims: Arc::new(rwop_claims),
                conflicting_ref_count,
            },
        );
        (PreFilterResult::default(), Status::success())
    }

    fn has_extensions(&self) -> bool {
        true
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        added: &PodInfo,
        _node: &NodeInfo,
        _snapshot: &Snapshot,
    ) -> Status {
        match state.read_mut::<PreFilterState>(NAME) {
            Some(s) => {
                s.conflicting_ref_count += s.refs(added);
                Status::success()
            }
            None => Status::error(format!("cannot read {NAME:?} from cycleState")),
        }
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        removed: &PodInfo,
        _node: &NodeInfo,
        _snapshot: &Snapshot,
    ) -> Status {
        match state.read_mut::<PreFilterState>(NAME) {
            Some(s) => {
                s.conflicting_ref_count -= s.refs(removed);
                Status::success()
            }
            None => Status::error(format!("cannot read {NAME:?} from cycleState")),
        }
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !satisfies_volume_conflicts(pod, node.pods.iter().map(|p| &**p)) {
            return Status::unschedulable(ERR_REASON_DISK_CONFLICT);
        }
        match state.read::<PreFilterState>(NAME) {
            None => Status::error(format!("cannot read {NAME:?} from cycleState")),
            Some(s) if s.conflicting_ref_count > 0 => {
                Status::unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT)
            }
            Some(_) => Status::success(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::snapshot::testing::{node, snapshot};
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn raw_pod(name: &str, ns: &str, volumes: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
            "spec": {"containers": [], "volumes": volumes},
        }))
        .expect("pod")
    }

    fn pod(volumes: Value) -> PodInfo {
        PodInfo::new(raw_pod("p", "default", volumes))
    }

    fn node_with(volumes: Value) -> NodeInfo {
        let mut n = NodeInfo::new(node("node-1", &[], &[]));
        n.add_pod(Arc::new(PodInfo::new(raw_pod(
            "existing", "default", volumes,
        ))));
        n
    }

    fn run(
        plugin: &VolumeRestrictions,
        p: &PodInfo,
        n: &NodeInfo,
        snap: &Snapshot,
    ) -> (Status, Option<Status>) {
        let mut state = CycleState::new();
        let (_, pre) = plugin.pre_filter(&mut state, p, snap);
        if !pre.is_success() {
            return (pre, None);
        }
        let got = plugin.filter(&state, p, n);
        (pre, Some(got))
    }

    fn disk_conflict_cases(kind: &str, vol: Value, other: Value) {
        let plugin = VolumeRestrictions::with_read_write_once_pod_claims(HashSet::new());
        let state = json!([{"name": "v", kind: vol}]);
        let state2 = json!([{"name": "v", kind: other}]);
        let snap = Snapshot::new();
        // nothing
        let (pre, _) = run(
            &plugin,
            &pod(json!([])),
            &NodeInfo::new(node("n", &[], &[])),
            &snap,
        );
        assert_eq!(pre.code, Code::Skip, "{kind}: nothing");
        // one state: the pod has no volumes
        let (pre, _) = run(&plugin, &pod(json!([])), &node_with(state.clone()), &snap);
        assert_eq!(pre.code, Code::Skip, "{kind}: one state");
        // same state
        let (pre, got) = run(
            &plugin,
            &pod(state.clone()),
            &node_with(state.clone()),
            &snap,
        );
        assert!(pre.is_success(), "{kind}: same state");
        let got = got.expect("filtered");
        assert_eq!(got.code, Code::Unschedulable, "{kind}: same state");
        assert_eq!(got.message(), ERR_REASON_DISK_CONFLICT);
        // different state
        let (_, got) = run(&plugin, &pod(state2), &node_with(state), &snap);
        assert!(
            got.expect("filtered").is_success(),
            "{kind}: different state"
        );
    }

    #[test]
    fn gce_disks_conflict_on_the_same_pd() {
        disk_conflict_cases(
            "gcePersistentDisk",
            json!({"pdName": "foo"}),
            json!({"pdName": "bar"}),
        );
    }

    #[test]
    fn aws_disks_conflict_on_the_same_volume_id() {
        disk_conflict_cases(
            "awsElasticBlockStore",
            json!({"volumeID": "foo"}),
            json!({"volumeID": "bar"}),
        );
    }

    #[test]
    fn rbd_disks_conflict_on_shared_monitor_pool_and_image() {
        disk_conflict_cases(
            "rbd",
            json!({"monitors": ["a", "b"], "pool": "foo", "image": "bar", "fsType": "ext4"}),
            json!({"monitors": ["c", "d"], "pool": "foo", "image": "bar", "fsType": "ext4"}),
        );
    }

    #[test]
    fn iscsi_disks_conflict_on_the_same_iqn() {
        disk_conflict_cases(
            "iscsi",
            json!({"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2016-12.server:storage.target01", "fsType": "ext4", "lun": 0}),
            json!({"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2017-12.server:storage.target01", "fsType": "ext4", "lun": 0}),
        );
    }

    #[test]
    fn read_only_mounts_share_gce_and_iscsi_disks_but_not_ebs() {
        let plugin = VolumeRestrictions::with_read_write_once_pod_claims(HashSet::new());
        let snap = Snapshot::new();
        let cases = [
            (
                "gcePersistentDisk",
                json!({"pdName": "foo", "readOnly": true}),
                true,
            ),
            (
                "iscsi",
                json!({"targetPortal": "p", "iqn": "iqn.x", "lun": 0, "readOnly": true}),
                true,
            ),
            (
                "rbd",
                json!({"monitors": ["a"], "image": "bar", "readOnly": true}),
                true,
            ),
            (
                "awsElasticBlockStore",
                json!({"volumeID": "foo", "readOnly": true}),
                false,
            ),
        ];
        for (kind, vol, fits) in cases {
            let vols = json!([{"name": "v", kind: vol}]);
            let (_, got) = run(&plugin, &pod(vols.clone()), &node_with(vols), &snap);
            assert_eq!(got.expect("filtered").is_success(), fits, "{kind}");
        }
        // One read-write mount is enough to conflict.
        let ro = json!([{"name": "v", "gcePersistentDisk": {"pdName": "foo", "readOnly": true}}]);
        let rw = json!([{"name": "v", "gcePersistentDisk": {"pdName": "foo"}}]);
        let (_, got) = run(&plugin, &pod(ro), &node_with(rw), &snap);
        assert_eq!(got.expect("filtered").code, Code::Unschedulable);
    }

    fn claim(name: &str) -> Value {
        json!([{"name": "v", "persistentVolumeClaim": {"claimName": name}}])
    }

    fn rwop_plugin() -> VolumeRestrictions {
        VolumeRestrictions::with_read_write_once_pod_claims(
            ["default/claim-with-rwop".to_string()]
                .into_iter()
                .collect(),
        )
    }

    #[test]
    fn read_write_once_pod_claims_conflict_with_any_pod_using_them() {
        let plugin = rwop_plugin();
        let with_rwop = raw_pod("pod-with-rwop", "default", claim("claim-with-rwop"));
        let with_rwx = raw_pod("pod-with-rwx", "default", claim("claim-with-rwx"));
        let target = PodInfo::new(raw_pod("target", "default", claim("claim-with-rwop")));
        let empty_node = NodeInfo::new(node("node-2", &[], &[]));

        // nothing
        let (pre, _) = run(&plugin, &pod(json!([])), &empty_node, &Snapshot::new());
        assert_eq!(pre.code, Code::Skip);
        // no access mode conflict: only the RWX claim is in use
        let snap = snapshot(vec![(node("node-1", &[], &[]), vec![with_rwx.clone()])]);
        let (pre, _) = run(&plugin, &target, &empty_node, &snap);
        assert_eq!(pre.code, Code::Skip);
        // access mode conflict: every node is rejected, preemption may help
        let snap = snapshot(vec![(
            node("node-1", &[], &[]),
            vec![with_rwop.clone(), with_rwx],
        )]);
        let (pre, got) = run(&plugin, &target, &empty_node, &snap);
        assert!(pre.is_success(), "{pre:?}");
        let got = got.expect("filtered");
        assert_eq!(got.code, Code::Unschedulable);
        assert_eq!(got.message(), ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT);
        // A claim of the same name in another namespace is another claim.
        let other_ns = PodInfo::new(raw_pod("target", "other", claim("claim-with-rwop")));
        let (pre, _) = run(&plugin, &other_ns, &empty_node, &snap);
        assert_eq!(pre.code, Code::Skip);
    }

    #[test]
    fn preemption_extensions_track_pods_using_the_claim() {
        let plugin = rwop_plugin();
        let user = PodInfo::new(raw_pod("user", "default", claim("claim-with-rwop")));
        let target = PodInfo::new(raw_pod("target", "default", claim("claim-with-rwop")));
        let snap = snapshot(vec![(node("node-1", &[], &[]), vec![user.pod().clone()])]);
        let n = snap.get("node-1").expect("node").clone();
        let mut state = CycleState::new();
        let (_, pre) = plugin.pre_filter(&mut state, &target, &snap);
        assert!(pre.is_success());
        assert_eq!(plugin.filter(&state, &target, &n).code, Code::Unschedulable);
        assert!(plugin
            .remove_pod(&mut state, &target, &user, &n, &snap)
            .is_success());
        assert!(plugin.filter(&state, &target, &n).is_success());
        assert!(plugin
            .add_pod(&mut state, &target, &user, &n, &snap)
            .is_success());
        assert_eq!(plugin.filter(&state, &target, &n).code, Code::Unschedulable);
    }

    #[test]
    fn claims_come_from_the_process_wide_set() {
        let plugin = VolumeRestrictions { claims: None };
        let snap = snapshot(vec![(
            node("node-1", &[], &[]),
            vec![raw_pod("user", "global-ns", claim("global-claim"))],
        )]);
        let target = PodInfo::new(raw_pod("target", "global-ns", claim("global-claim")));
        set_read_write_once_pod_claims(
            ["global-ns/global-claim".to_string()].into_iter().collect(),
        );
        let mut state = CycleState::new();
        let (_, pre) = plugin.pre_filter(&mut state, &target, &snap);
        assert!(pre.is_success(), "{pre:?}");
    }

    #[test]
    fn delete_hint_queues_for_released_disks_and_claims() {
        let plugin = rwop_plugin();
        let ev = ClusterEvent::PodDelete;
        let gce = |pd: &str| json!([{"name": "v", "gcePersistentDisk": {"pdName": pd}}]);
        let target = PodInfo::new(raw_pod("p", "default", gce("foo")));
        let deleted = |ns: &str, vols: Value| PodInfo::new(raw_pod("d", ns, vols));
        assert!(plugin.hint(&target, ev, Some(&deleted("default", gce("foo")))));
        assert!(!plugin.hint(&target, ev, Some(&deleted("default", gce("bar")))));
        assert!(!plugin.hint(&target, ev, Some(&deleted("other", gce("foo")))));
        let claimer = PodInfo::new(raw_pod("p", "default", claim("c")));
        assert!(plugin.hint(&claimer, ev, Some(&deleted("default", claim("c")))));
        assert!(!plugin.hint(&claimer, ev, Some(&deleted("default", claim("d")))));
        assert!(!plugin.hint(&claimer, ev, Some(&deleted("default", json!([])))));
    }
}
