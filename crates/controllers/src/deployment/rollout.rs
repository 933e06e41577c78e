//! One sync of one deployment (Kubernetes' syncDeployment and what it calls): find or create
//! the new replica set, scale, roll out (RollingUpdate or Recreate), roll back, clean up old
//! replica sets and write the status. Every write keeps the in-memory copies current, so one
//! sync does not trip over its own earlier writes.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use capstan_api::selector::LabelSelector as Matcher;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use super::helpers::*;
use super::{error_message, is_already_exists, Controller};
use crate::util;

pub(super) struct Run<'a> {
    c: &'a Controller,
    d: Deployment,
    /// The deployment's replica sets, oldest first; new ones are appended, updated ones
    /// replaced in place (so indices stay valid for the whole sync).
    rs_list: Vec<ReplicaSet>,
    selector: Matcher,
    ns: String,
    name: String,
}

type Split = (Option<usize>, Vec<usize>);

fn anyhow_msg(e: String) -> anyhow::Error {
    anyhow::anyhow!(e)
}

impl<'a> Run<'a> {
    pub(super) fn new(
        c: &'a Controller,
        d: Deployment,
        rs_list: Vec<ReplicaSet>,
        selector: Matcher,
    ) -> Run<'a> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        Run {
            c,
            d,
            rs_list,
            selector,
            ns,
            name,
        }
    }

    fn rs_api(&self) -> Api<ReplicaSet> {
        Api::namespaced(self.c.client.clone(), &self.ns)
    }

    fn d_api(&self) -> Api<Deployment> {
        Api::namespaced(self.c.client.clone(), &self.ns)
    }

    fn key(&self) -> String {
        capstan_runtime::key(Some(&self.ns), &self.name)
    }

    fn rs(&self, i: usize) -> &ReplicaSet {
        &self.rs_list[i]
    }

    fn refs(&self, idx: &[usize]) -> Vec<&ReplicaSet> {
        idx.iter().map(|i| &self.rs_list[*i]).collect()
    }

    /// Old replica sets then the new one (if any).
    fn all(new: Option<usize>, olds: &[usize]) -> Vec<usize> {
        olds.iter().copied().chain(new).collect()
    }

    fn active(&self, idx: &[usize]) -> Vec<usize> {
        idx.iter()
            .copied()
            .filter(|i| rs_replicas(self.rs(*i)) > 0)
            .collect()
    }

    fn rs_name(&self, i: usize) -> String {
        self.rs(i).metadata.name.clone().unwrap_or_default()
    }

    pub(super) async fn sync(&mut self) -> anyhow::Result<()> {
        if self.d.metadata.deletion_timestamp.is_some() {
            let (new, olds) = self.all_and_sync_revision(false).await?;
            return self.sync_deployment_status(new, &olds).await;
        }
        self.check_paused_conditions().await?;
        if is_paused(&self.d) {
            return self.sync_scaling().await;
        }
        if rollback_to(&self.d).is_some() {
            return self.rollback().await;
        }
        if self.is_scaling_event().await? {
            return self.sync_scaling().await;
        }
        match strategy_type(&self.d) {
            RECREATE => self.rollout_recreate().await,
            ROLLING_UPDATE => self.rollout_rolling().await,
            other => anyhow::bail!("unexpected deployment strategy type: {other}"),
        }
    }

    // ---- status writes ----

    /// Write the deployment's status (and its revision annotation, which Kubernetes'
    /// status update also takes; if this server's status update kept the old annotations,
    /// they are written with an update of the deployment itself).
    async fn write_status(&mut self) -> kube::Result<()> {
        let pp = PostParams::default();
        if let Some(s) = self.d.status.as_ref() {
            self.d.status = Some(normalized(s));
        }
        let want = self.d.metadata.annotations.clone();
        let mut out = self
            .d_api()
            .replace_status(&self.name, &pp, &self.d)
            .await?;
        if out.metadata.annotations != want {
            out.metadata.annotations = want;
            out = self.d_api().replace(&self.name, &pp, &out).await?;
        }
        self.d.metadata.resource_version = out.metadata.resource_version;
        Ok(())
    }

    async fn sync_deployment_status(
        &mut self,
        new: Option<usize>,
        olds: &[usize],
    ) -> anyhow::Result<()> {
        let all = Self::all(new, olds);
        let status = calculate_status(
            &self.refs(&all),
            new.map(|i| self.rs(i)),
            &self.d,
            now_seconds(),
        );
        if status == status_of(&self.d) {
            return Ok(());
        }
        self.d.status = Some(status);
        Ok(self.write_status().await?)
    }

    /// The status during a rollout, with the Progressing condition (progress, completion or
    /// the deadline passed) and replica failures carried over from the replica sets.
    async fn sync_rollout_status(
        &mut self,
        new: Option<usize>,
        olds: &[usize],
    ) -> anyhow::Result<()> {
        let now = now_seconds();
        let all = Self::all(new, olds);
        let new_rs = new.map(|i| self.rs(i));
        let mut s = calculate_status(&self.refs(&all), new_rs, &self.d, now);
        let deadline = progress_deadline(&self.d);
        if deadline.is_none() {
            remove_condition(&mut s, PROGRESSING);
        }
        let current = status_of(&self.d);
        let current = get_condition(&current, PROGRESSING).cloned();
        let complete_before = s.replicas == s.updated_replicas
            && current
                .as_ref()
                .is_some_and(|c| cond_reason(c) == NEW_RS_AVAILABLE);
        if deadline.is_some() && !complete_before {
            let what = |what: &str| match new_rs {
                Some(rs) => format!(
                    "ReplicaSet {:?} {what}",
                    rs.metadata.name.as_deref().unwrap_or_default()
                ),
                None => format!("Deployment {:?} {what}", self.name),
            };
            if deployment_complete(&self.d, &s) {
                let c = new_condition(
                    PROGRESSING,
                    "True",
                    NEW_RS_AVAILABLE,
                    what("has successfully progressed."),
                    now,
                );
                set_condition(&mut s, c);
            } else if deployment_progressing(&self.d, &s) {
                let mut c = new_condition(
                    PROGRESSING,
                    "True",
                    REPLICA_SET_UPDATED,
                    what("is progressing."),
                    now,
                );
                if let Some(cur) = current.as_ref() {
                    if cur.status == "True" {
                        c.last_transition_time = cur.last_transition_time.clone();
                    }
                    remove_condition(&mut s, PROGRESSING);
                }
                set_condition(&mut s, c);
            } else if deployment_timed_out(&self.d, &s, now) {
                let c = new_condition(
                    PROGRESSING,
                    "False",
                    TIMED_OUT,
                    what("has timed out progressing."),
                    now,
                );
                set_condition(&mut s, c);
            }
        }
        match self.replica_failure(new, olds) {
            Some(c) => set_condition(&mut s, c),
            None => remove_condition(&mut s, REPLICA_FAILURE),
        }
        let s = normalized(&s);
        if s == status_of(&self.d) {
            self.requeue_stuck(&s, now);
            return Ok(());
        }
        self.d.status = Some(s);
        Ok(self.write_status().await?)
    }

    /// The new replica set's ReplicaFailure condition, else any old one's.
    fn replica_failure(
        &self,
        new: Option<usize>,
        olds: &[usize],
    ) -> Option<k8s_openapi::api::apps::v1::DeploymentCondition> {
        let failure = |i: usize| {
            self.rs(i)
                .status
                .as_ref()?
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == REPLICA_FAILURE)
                .map(rs_condition_to_deployment)
        };
        new.and_then(failure)
            .or_else(|| Self::all(new, olds).into_iter().find_map(failure))
    }

    /// A rollout without progress is looked at again when its progress deadline passes.
    fn requeue_stuck(
        &self,
        s: &k8s_openapi::api::apps::v1::DeploymentStatus,
        now: k8s_openapi::jiff::Timestamp,
    ) {
        let Some(deadline) = progress_deadline(&self.d) else {
            return;
        };
        let current = status_of(&self.d);
        let Some(c) = get_condition(&current, PROGRESSING) else {
            return;
        };
        if deployment_complete(&self.d, s) || cond_reason(c) == TIMED_OUT {
            return;
        }
        let Some(from) = c.last_update_time.as_ref() else {
            return;
        };
        let due = from.0.as_second() + i64::from(deadline);
        let after = (due - now.as_second()).max(0) as u64;
        // A second more, so that the deadline has passed when it is looked at.
        self.c
            .queue
            .add_after(self.key(), Duration::from_secs(after + 1));
    }

    /// Paused and resumed deployments get a Progressing condition of status Unknown, so that
    /// the time spent paused does not count against the progress deadline.
    async fn check_paused_conditions(&mut self) -> anyhow::Result<()> {
        if progress_deadline(&self.d).is_none() {
            return Ok(());
        }
        let status = status_of(&self.d);
        let cond = get_condition(&status, PROGRESSING);
        if cond.is_some_and(|c| cond_reason(c) == TIMED_OUT) {
            return Ok(());
        }
        let paused_exists = cond.is_some_and(|c| cond_reason(c) == PAUSED);
        let paused = is_paused(&self.d);
        let c = if paused && !paused_exists {
            new_condition(
                PROGRESSING,
                "Unknown",
                PAUSED,
                "Deployment is paused",
                now_seconds(),
            )
        } else if !paused && paused_exists {
            new_condition(
                PROGRESSING,
                "Unknown",
                RESUMED,
                "Deployment is resumed",
                now_seconds(),
            )
        } else {
            return Ok(());
        };
        let mut status = status;
        set_condition(&mut status, c);
        self.d.status = Some(status);
        Ok(self.write_status().await?)
    }

    // ---- the new replica set and revisions ----

    /// The new replica set (the one with the deployment's template; created when `create`
    /// and missing) and the old ones. The new one's annotations (revision above every old
    /// one, the deployment's annotations) and the deployment's revision are brought up to
    /// date on the way.
    async fn all_and_sync_revision(&mut self, create: bool) -> anyhow::Result<Split> {
        let template = self
            .d
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let new = (0..self.rs_list.len()).find(|i| {
            self.rs(*i)
                .spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .is_some_and(|t| equal_ignore_hash(t, &template))
        });
        let olds: Vec<usize> = (0..self.rs_list.len())
            .filter(|i| Some(*i) != new)
            .collect();
        let new_revision = max_revision(self.refs(&olds)) + 1;

        if let Some(i) = new {
            let mut copy = self.rs(i).clone();
            let annotations_changed =
                set_new_rs_annotations(&self.d, &mut copy, new_revision, true);
            let mrs = min_ready_seconds(&self.d);
            let rs_mrs = copy
                .spec
                .as_ref()
                .and_then(|s| s.min_ready_seconds)
                .unwrap_or(0);
            if annotations_changed || rs_mrs != mrs {
                copy.spec
                    .get_or_insert_with(Default::default)
                    .min_ready_seconds = (mrs != 0).then_some(mrs);
                let updated = self
                    .rs_api()
                    .replace(&self.rs_name(i), &PostParams::default(), &copy)
                    .await?;
                self.rs_list[i] = updated;
                return Ok((Some(i), olds));
            }
            let rev = annotation(&copy.metadata, REVISION)
                .unwrap_or_default()
                .to_string();
            let mut needs_update = set_deployment_revision(&mut self.d, &rev);
            let mut status = status_of(&self.d);
            if progress_deadline(&self.d).is_some() && get_condition(&status, PROGRESSING).is_none()
            {
                let msg = format!("Found new replica set {:?}", self.rs_name(i));
                set_condition(
                    &mut status,
                    new_condition(PROGRESSING, "True", FOUND_NEW_RS, msg, now_seconds()),
                );
                self.d.status = Some(status);
                needs_update = true;
            }
            if needs_update {
                self.write_status().await?;
            }
            return Ok((Some(i), olds));
        }
        if !create {
            return Ok((None, olds));
        }
        self.create_new_replica_set(template, olds, new_revision)
            .await
    }

    async fn create_new_replica_set(
        &mut self,
        template: k8s_openapi::api::core::v1::PodTemplateSpec,
        olds: Vec<usize>,
        new_revision: i64,
    ) -> anyhow::Result<Split> {
        let collision_count = self.d.status.as_ref().and_then(|s| s.collision_count);
        let hash = compute_hash(&template, collision_count);
        let mut rs_template = template.clone();
        let tm = rs_template.metadata.get_or_insert_with(Default::default);
        tm.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), hash.clone());
        let labels = tm.labels.clone();
        let mut selector = self
            .d
            .spec
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), hash.clone());
        let rs_name = format!("{}-{hash}", self.name);
        let mrs = min_ready_seconds(&self.d);
        let mut new_rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(rs_name.clone()),
                namespace: Some(self.ns.clone()),
                owner_references: Some(vec![util::owner_ref(&self.d)]),
                labels,
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: (mrs != 0).then_some(mrs),
                selector,
                template: Some(rs_template),
            }),
            status: None,
        };
        let replicas = {
            let mut all = self.refs(&olds);
            all.push(&new_rs);
            new_rs_new_replicas(&self.d, &all, &new_rs).map_err(anyhow_msg)?
        };
        set_rs_replicas(&mut new_rs, replicas);
        set_new_rs_annotations(&self.d, &mut new_rs, new_revision, false);

        let mut already_exists = false;
        let created = match self.rs_api().create(&PostParams::default(), &new_rs).await {
            Ok(rs) => rs,
            Err(e) if is_already_exists(&e) => {
                already_exists = true;
                let Some(existing) = self.c.rss.get(&self.ns, &rs_name) else {
                    return Err(e.into());
                };
                let ours = util::controller_ref(&existing.metadata)
                    .is_some_and(|r| Some(r.uid.as_str()) == self.d.metadata.uid.as_deref());
                let same = existing
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| equal_ignore_hash(t, &template));
                if !(ours && same) {
                    // A different template hashed to this name: count the collision, so the
                    // next attempt hashes differently.
                    let status = self.d.status.get_or_insert_with(Default::default);
                    let before = status.collision_count.unwrap_or(0);
                    status.collision_count = Some(before.saturating_add(1));
                    if self.write_status().await.is_ok() {
                        tracing::info!(
                            deployment = %self.key(),
                            old = before,
                            new = before.saturating_add(1),
                            "hash collision for deployment; collisionCount bumped"
                        );
                    }
                    return Err(e.into());
                }
                (*existing).clone()
            }
            Err(e) if super::is_namespace_terminating(&e) => return Err(e.into()),
            Err(e) => {
                let msg = format!(
                    "Failed to create new replica set {rs_name:?}: {}",
                    error_message(&e)
                );
                if progress_deadline(&self.d).is_some() {
                    let mut status = status_of(&self.d);
                    set_condition(
                        &mut status,
                        new_condition(PROGRESSING, "False", FAILED_RS_CREATE, &msg, now_seconds()),
                    );
                    self.d.status = Some(status);
                    let _ = self.write_status().await;
                }
                self.c.recorder.warning(&self.d, FAILED_RS_CREATE, msg);
                return Err(e.into());
            }
        };
        if !already_exists && replicas > 0 {
            self.c.recorder.normal(
                &self.d,
                "ScalingReplicaSet",
                format!("Scaled up replica set {rs_name} from 0 to {replicas}"),
            );
        }
        let idx = match self
            .rs_list
            .iter()
            .position(|r| r.metadata.uid.is_some() && r.metadata.uid == created.metadata.uid)
        {
            Some(i) => {
                self.rs_list[i] = created;
                i
            }
            None => {
                self.rs_list.push(created);
                self.rs_list.len() - 1
            }
        };
        let olds: Vec<usize> = olds.into_iter().filter(|i| *i != idx).collect();

        let mut needs_update = set_deployment_revision(&mut self.d, &new_revision.to_string());
        if !already_exists && progress_deadline(&self.d).is_some() {
            let mut status = status_of(&self.d);
            let msg = format!("Created new replica set {rs_name:?}");
            set_condition(
                &mut status,
                new_condition(PROGRESSING, "True", NEW_REPLICA_SET, msg, now_seconds()),
            );
            self.d.status = Some(status);
            needs_update = true;
        }
        if needs_update {
            self.write_status().await?;
        }
        Ok((Some(idx), olds))
    }

    // ---- scaling ----

    /// Resize replica set `i` (and record the replica annotations); an event if the size
    /// changed. True if it did.
    async fn scale_rs(&mut self, i: usize, new_scale: i32, op: &str) -> anyhow::Result<bool> {
        let desired = replicas(&self.d);
        let max = desired + max_surge(&self.d);
        let rs = self.rs(i);
        let old = rs_replicas(rs);
        let size_changes = old != new_scale;
        if !size_changes && !replicas_annotations_need_update(rs, desired, max) {
            return Ok(false);
        }
        let mut copy = rs.clone();
        set_rs_replicas(&mut copy, new_scale);
        set_replicas_annotations(&mut copy, desired, max);
        let name = self.rs_name(i);
        let updated = self
            .rs_api()
            .replace(&name, &PostParams::default(), &copy)
            .await?;
        self.rs_list[i] = updated;
        if size_changes {
            self.c.recorder.normal(
                &self.d,
                "ScalingReplicaSet",
                format!("Scaled {op} replica set {name} from {old} to {new_scale}"),
            );
        }
        Ok(size_changes)
    }

    async fn scale_rs_and_record(&mut self, i: usize, new_scale: i32) -> anyhow::Result<bool> {
        let cur = rs_replicas(self.rs(i));
        if cur == new_scale {
            return Ok(false);
        }
        let op = if cur < new_scale { "up" } else { "down" };
        self.scale_rs(i, new_scale, op).await
    }

    /// The only active replica set, or the newest one if none is active (None if several
    /// are active).
    fn active_or_latest(&self, new: Option<usize>, olds: &[usize]) -> Option<usize> {
        if new.is_none() && olds.is_empty() {
            return None;
        }
        let mut olds = olds.to_vec();
        olds.sort_by(|a, b| by_creation(self.rs(*b), self.rs(*a)));
        let active = self.active(&Self::all(new, &olds));
        match active.len() {
            0 => new.or_else(|| olds.first().copied()),
            1 => Some(active[0]),
            _ => None,
        }
    }

    /// A scaling event (or a paused deployment): resize without rolling forward, spreading
    /// the change over the active replica sets in proportion to their sizes.
    async fn scale(&mut self, new: Option<usize>, olds: &[usize]) -> anyhow::Result<()> {
        let desired = replicas(&self.d);
        if let Some(i) = self.active_or_latest(new, olds) {
            if rs_replicas(self.rs(i)) != desired {
                self.scale_rs_and_record(i, desired).await?;
            }
            return Ok(());
        }
        if is_saturated(&self.d, new.map(|i| self.rs(i))) {
            for i in self.active(olds) {
                self.scale_rs_and_record(i, 0).await?;
            }
            return Ok(());
        }
        if !is_rolling(&self.d) {
            return Ok(());
        }
        let mut active = self.active(&Self::all(new, olds));
        let total: i32 = active.iter().map(|i| rs_replicas(self.rs(*i))).sum();
        let allowed = if desired > 0 {
            desired + max_surge(&self.d)
        } else {
            0
        };
        let to_add = allowed - total;
        let op = match to_add.cmp(&0) {
            std::cmp::Ordering::Greater => {
                active.sort_by(|a, b| by_size_newer(self.rs(*a), self.rs(*b)));
                "up"
            }
            std::cmp::Ordering::Less => {
                active.sort_by(|a, b| by_size_older(self.rs(*a), self.rs(*b)));
                "down"
            }
            std::cmp::Ordering::Equal => "",
        };
        let sizes = proportional_sizes(&self.d, &self.refs(&active), to_add);
        for (i, size) in active.into_iter().zip(sizes) {
            self.scale_rs(i, size, op).await?;
        }
        Ok(())
    }

    /// Whether the deployment was resized since its active replica sets were sized.
    async fn is_scaling_event(&mut self) -> anyhow::Result<bool> {
        let (new, olds) = self.all_and_sync_revision(false).await?;
        let desired = replicas(&self.d);
        Ok(self
            .active(&Self::all(new, &olds))
            .into_iter()
            .any(|i| int_annotation(self.rs(i), DESIRED_REPLICAS).is_some_and(|n| n != desired)))
    }

    /// Paused deployments and scaling events: scale, clean up (when paused) and report.
    async fn sync_scaling(&mut self) -> anyhow::Result<()> {
        let (new, olds) = self.all_and_sync_revision(false).await?;
        self.scale(new, &olds).await?;
        if is_paused(&self.d) && rollback_to(&self.d).is_none() {
            self.cleanup(&olds).await?;
        }
        self.sync_deployment_status(new, &olds).await
    }

    /// Delete the oldest zero-sized replica sets beyond `revisionHistoryLimit`.
    async fn cleanup(&mut self, olds: &[usize]) -> anyhow::Result<()> {
        let Some(limit) = revision_history_limit(&self.d) else {
            return Ok(());
        };
        let mut cleanable: Vec<usize> = olds
            .iter()
            .copied()
            .filter(|i| self.rs(*i).metadata.deletion_timestamp.is_none())
            .collect();
        let diff = cleanable.len() as i64 - i64::from(limit);
        if diff <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| by_revision(self.rs(*a), self.rs(*b)));
        for &i in cleanable.iter().take(diff as usize) {
            let rs = self.rs(i);
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation);
            if rs_status_replicas(rs) != 0
                || rs_replicas(rs) != 0
                || rs.metadata.generation.unwrap_or(0) > observed.unwrap_or(0)
                || rs.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let name = self.rs_name(i);
            match self.rs_api().delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if util::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    // ---- RollingUpdate ----

    async fn rollout_rolling(&mut self) -> anyhow::Result<()> {
        let (new, olds) = self.all_and_sync_revision(true).await?;
        let Some(new_i) = new else {
            return self.sync_rollout_status(new, &olds).await;
        };
        let all = Self::all(new, &olds);
        if self.reconcile_new(new_i, &all).await? {
            return self.sync_rollout_status(new, &olds).await;
        }
        let active_olds = self.active(&olds);
        if self.reconcile_old(new_i, &all, &active_olds).await? {
            return self.sync_rollout_status(new, &olds).await;
        }
        if deployment_complete(&self.d, &status_of(&self.d)) {
            self.cleanup(&olds).await?;
        }
        self.sync_rollout_status(new, &olds).await
    }

    /// Grow the new replica set as far as maxSurge allows (or shrink it to replicas).
    async fn reconcile_new(&mut self, new: usize, all: &[usize]) -> anyhow::Result<bool> {
        let desired = replicas(&self.d);
        let cur = rs_replicas(self.rs(new));
        if cur == desired {
            return Ok(false);
        }
        if cur > desired {
            return self.scale_rs_and_record(new, desired).await;
        }
        let target =
            new_rs_new_replicas(&self.d, &self.refs(all), self.rs(new)).map_err(anyhow_msg)?;
        self.scale_rs_and_record(new, target).await
    }

    /// Shrink old replica sets as far as maxUnavailable allows: their unhealthy pods first,
    /// then as many as the available pods above the minimum allow.
    async fn reconcile_old(
        &mut self,
        new: usize,
        all: &[usize],
        olds: &[usize],
    ) -> anyhow::Result<bool> {
        let old_pods: i32 = olds.iter().map(|i| rs_replicas(self.rs(*i))).sum();
        if old_pods == 0 {
            return Ok(false);
        }
        let all_pods: i32 = all.iter().map(|i| rs_replicas(self.rs(*i))).sum();
        let min_available = replicas(&self.d) - max_unavailable(&self.d);
        let new_rs = self.rs(new);
        let new_unavailable = rs_replicas(new_rs) - rs_available(new_rs);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        let mut olds = olds.to_vec();
        olds.sort_by(|a, b| by_creation(self.rs(*a), self.rs(*b)));
        let cleaned = self.cleanup_unhealthy(&olds, max_scaled_down).await?;
        let scaled = self.scale_down_old_rolling(new, &olds).await?;
        Ok(cleaned + scaled > 0)
    }

    /// Scale old replica sets down by their unavailable pods (at most `max` in all).
    async fn cleanup_unhealthy(&mut self, olds: &[usize], max: i32) -> anyhow::Result<i32> {
        let mut total = 0;
        for &i in olds {
            if total >= max {
                break;
            }
            let rs = self.rs(i);
            let (cur, available) = (rs_replicas(rs), rs_available(rs));
            if cur == 0 || cur == available {
                continue;
            }
            let down = (max - total).min(cur - available);
            let target = cur - down;
            if target > cur {
                anyhow::bail!(
                    "when cleaning up unhealthy replicas, got invalid request to scale down {}/{} {cur} -> {target}",
                    self.ns,
                    self.rs_name(i)
                );
            }
            self.scale_rs_and_record(i, target).await?;
            total += down;
        }
        Ok(total)
    }

    /// Scale old replica sets down, oldest first, by the available pods above the minimum.
    async fn scale_down_old_rolling(&mut self, new: usize, olds: &[usize]) -> anyhow::Result<i32> {
        let min_available = replicas(&self.d) - max_unavailable(&self.d);
        let available: i32 = olds
            .iter()
            .chain(Some(&new))
            .map(|i| rs_available(self.rs(*i)))
            .sum();
        if available <= min_available {
            return Ok(0);
        }
        let to_scale = available - min_available;
        let mut total = 0;
        for &i in olds {
            if total >= to_scale {
                break;
            }
            let cur = rs_replicas(self.rs(i));
            if cur == 0 {
                continue;
            }
            let down = cur.min(to_scale - total);
            self.scale_rs_and_record(i, cur - down).await?;
            total += down;
        }
        Ok(total)
    }

    // ---- Recreate ----

    async fn rollout_recreate(&mut self) -> anyhow::Result<()> {
        // The new replica set is not created before the old pods are gone.
        let (mut new, mut olds) = self.all_and_sync_revision(false).await?;
        let mut scaled_down = false;
        for i in self.active(&olds) {
            if self.scale_rs_and_record(i, 0).await? {
                scaled_down = true;
            }
        }
        if scaled_down || self.old_pods_running(new, &olds) {
            return self.sync_rollout_status(new, &olds).await;
        }
        if new.is_none() {
            (new, olds) = self.all_and_sync_revision(true).await?;
        }
        if let Some(i) = new {
            self.scale_rs_and_record(i, replicas(&self.d)).await?;
        }
        if deployment_complete(&self.d, &status_of(&self.d)) {
            self.cleanup(&olds).await?;
        }
        self.sync_rollout_status(new, &olds).await
    }

    /// Old replica sets still report pods, or pods of theirs are not yet terminated.
    fn old_pods_running(&self, new: Option<usize>, olds: &[usize]) -> bool {
        if olds
            .iter()
            .map(|i| rs_status_replicas(self.rs(*i)))
            .sum::<i32>()
            > 0
        {
            return true;
        }
        let new_uid = new.and_then(|i| self.rs(i).metadata.uid.clone());
        let old_uids: HashSet<&str> = self
            .rs_list
            .iter()
            .filter_map(|rs| rs.metadata.uid.as_deref())
            .filter(|u| Some(*u) != new_uid.as_deref())
            .collect();
        let mut running = false;
        self.c.pods.for_each_in(&self.ns, |pod| {
            if running || !util::matches(&self.selector, pod.metadata.labels.as_ref()) {
                return;
            }
            let Some(r) = util::controller_ref(&pod.metadata) else {
                return;
            };
            if !old_uids.contains(r.uid.as_str()) {
                return;
            }
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if !matches!(phase, Some("Failed") | Some("Succeeded")) {
                running = true;
            }
        });
        running
    }

    // ---- rollback (the deprecated rollbackTo, kept as an annotation) ----

    async fn rollback(&mut self) -> anyhow::Result<()> {
        let (new, olds) = self.all_and_sync_revision(true).await?;
        let all = Self::all(new, &olds);
        let mut to = rollback_to(&self.d).unwrap_or(0);
        if to == 0 {
            to = last_revision(self.refs(&all));
            if to == 0 {
                self.c.recorder.warning(
                    &self.d,
                    ROLLBACK_NOT_FOUND,
                    "Unable to find last revision.",
                );
                return self.clear_rollback_to().await;
            }
        }
        let Some(i) = all
            .iter()
            .copied()
            .find(|i| revision(self.rs(*i)).ok() == Some(to))
        else {
            self.c.recorder.warning(
                &self.d,
                ROLLBACK_NOT_FOUND,
                "Unable to find the revision to rollback to.",
            );
            return self.clear_rollback_to().await;
        };
        let rs_template = self
            .rs(i)
            .spec
            .as_ref()
            .and_then(|s| s.template.clone())
            .unwrap_or_default();
        let current = self
            .d
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let performed = !equal_ignore_hash(&current, &rs_template);
        if performed {
            let mut t = rs_template;
            if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
                labels.remove(HASH_LABEL);
            }
            if let Some(spec) = self.d.spec.as_mut() {
                spec.template = t;
            }
            let rs = self.rs(i).clone();
            set_annotations_from_rs(&mut self.d, &rs);
        } else {
            self.c.recorder.warning(
                &self.d,
                ROLLBACK_UNCHANGED,
                format!(
                    "The rollback revision contains the same template as current deployment {:?}",
                    self.name
                ),
            );
        }
        self.clear_rollback_to().await?;
        if performed {
            self.c.recorder.normal(
                &self.d,
                ROLLBACK_DONE,
                format!("Rolled back deployment {:?} to revision {to}", self.name),
            );
        }
        Ok(())
    }

    async fn clear_rollback_to(&mut self) -> anyhow::Result<()> {
        if let Some(a) = self.d.metadata.annotations.as_mut() {
            a.remove(ROLLBACK_TO);
        }
        let out = self
            .d_api()
            .replace(&self.name, &PostParams::default(), &self.d)
            .await?;
        self.d = out;
        Ok(())
    }
}

/// The revision a deprecated `rollbackTo` asked for (an unparsable one is ignored).
fn rollback_to(d: &Deployment) -> Option<i64> {
    annotation(&d.metadata, ROLLBACK_TO)?.parse().ok()
}
