//! Pods, pod templates and pod specs (`ValidatePodCreate`, `ValidatePodTemplateSpec`,
//! `ValidatePodSpec`).

use std::collections::BTreeSet;

use serde_json::Value;

use super::container::{self, PodCtx};
use super::{
    arr, child, dns_label, dns_subdomain, flag, get, idx, int, jstr, meta, names, qualified, s,
    Errs,
};
use crate::field::FieldError;
use crate::meta::At as _;

/// `ValidatePodCreate`.
pub fn validate_pod(errs: &mut Errs, pod: &Value) {
    pod_metadata_and_spec(errs, pod);
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    if !arr(spec, "ephemeralContainers").is_empty() {
        errs.push(FieldError::forbidden(
            "spec.ephemeralContainers",
            "cannot be set on create",
        ));
    }
    if !s(spec, "nodeName").is_empty() && !arr(spec, "schedulingGates").is_empty() {
        errs.push(FieldError::forbidden(
            "spec.nodeName",
            "cannot be set until all schedulingGates have been cleared",
        ));
    }
}

/// `validatePodMetadataAndSpec`: what create and update share.
pub fn pod_metadata_and_spec(errs: &mut Errs, pod: &Value) {
    let md = pod.get("metadata");
    meta::object_meta(errs, md, true, names::name_is_dns_subdomain, "metadata");
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    pod_annotations(
        errs,
        md.and_then(|m| m.get("annotations")),
        spec,
        "metadata.annotations",
    );
    let name = md.and_then(|m| m.get("name")).and_then(Value::as_str);
    pod_spec(errs, spec, name, true, "spec");
    if s(spec, "serviceAccountName").is_empty() {
        for (vi, vol) in arr(spec, "volumes").iter().enumerate() {
            if let Some(proj) = get(vol, "projected") {
                for (si, src) in arr(proj, "sources").iter().enumerate() {
                    if get(src, "serviceAccountToken").is_some() {
                        errs.push(FieldError::forbidden(
                            format!(
                                "spec.volumes[{vi}].projected.sources[{si}].serviceAccountToken"
                            ),
                            "must not be specified when serviceAccountName is not set",
                        ));
                    }
                }
            }
        }
    }
    for (list, path) in [
        ("containers", "spec.containers"),
        ("initContainers", "spec.initContainers"),
    ] {
        for (i, c) in arr(spec, list).iter().enumerate() {
            container::only_for_pod(errs, c, &idx(path, i));
        }
    }
}

/// `ValidatePodSpecificAnnotations` (the parts that apply to v1 objects).
fn pod_annotations(errs: &mut Errs, ann: Option<&Value>, spec: &Value, path: &str) {
    let Some(ann) = ann.and_then(Value::as_object) else {
        return;
    };
    if let Some(v) = ann
        .get("kubernetes.io/config.mirror")
        .and_then(Value::as_str)
    {
        if s(spec, "nodeName").is_empty() {
            errs.push(FieldError::invalid(
                super::key(path, "kubernetes.io/config.mirror"),
                &jstr(v),
                "must set spec.nodeName if mirror pod annotation is set",
            ));
        }
    }
    if let Some(v) = ann
        .get("controller.kubernetes.io/pod-deletion-cost")
        .and_then(Value::as_str)
    {
        if v.parse::<i32>().is_err() {
            errs.push(FieldError::invalid(
                super::key(path, "controller.kubernetes.io/pod-deletion-cost"),
                &jstr(v),
                "must be a 32bit integer",
            ));
        }
    }
}

/// The metadata part of a template's validation: its labels and annotations (reported at
/// `<path>.labels` and `<path>.annotations`, as Kubernetes does) and the pod-specific
/// annotation rules. A StatefulSet's template gets only this (and no `ValidatePodSpec`).
pub fn template_metadata(errs: &mut Errs, template: &Value, path: &str) {
    let md = template.get("metadata");
    let annotations = md.and_then(|m| m.get("annotations"));
    meta::labels(
        errs,
        md.and_then(|m| m.get("labels")),
        &child(path, "labels"),
    );
    meta::annotations(errs, annotations, &child(path, "annotations"));
    let spec = template.get("spec").unwrap_or(&Value::Null);
    pod_annotations(errs, annotations, spec, &child(path, "annotations"));
}

/// `ValidatePodTemplateSpec` of an embedded template (Deployments, Jobs, PodTemplates ...).
pub fn template_spec(errs: &mut Errs, template: Option<&Value>, path: &str) {
    let t = template.unwrap_or(&Value::Null);
    template_metadata(errs, t, path);
    let spec = t.get("spec").unwrap_or(&Value::Null);
    pod_spec(errs, spec, None, false, &child(path, "spec"));
    if !arr(spec, "ephemeralContainers").is_empty() {
        errs.push(FieldError::forbidden(
            child(&child(path, "spec"), "ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
}

/// `ValidatePodSpec`. `pod_name` is the Pod's own name (not for templates); `is_pod` applies
/// the rules only real pods get.
pub fn pod_spec(errs: &mut Errs, spec: &Value, pod_name: Option<&str>, is_pod: bool, path: &str) {
    let grace = int(spec, "terminationGracePeriodSeconds");
    if get(spec, "terminationGracePeriodSeconds").is_none() {
        errs.push(FieldError::required(
            child(path, "terminationGracePeriodSeconds"),
            "",
        ));
    }
    let host_users = spec.at("/hostUsers").and_then(Value::as_bool) != Some(false);
    let vols = super::volume::volumes(
        errs,
        arr(spec, "volumes"),
        pod_name,
        &child(path, "volumes"),
    );
    let mut claim_names = BTreeSet::new();
    let cp = child(path, "resourceClaims");
    for (i, c) in arr(spec, "resourceClaims").iter().enumerate() {
        let name = s(c, "name");
        let np = child(&idx(&cp, i), "name");
        if name.is_empty() {
            errs.push(FieldError::required(np, ""));
        } else if claim_names.contains(name) {
            errs.push(FieldError::duplicate(np, &jstr(name)));
        } else {
            dns_label(errs, name, &np);
            claim_names.insert(name.to_string());
        }
    }
    let ctx = PodCtx {
        volumes: vols,
        grace_period: grace,
        restart_policy: s(spec, "restartPolicy"),
        claim_names,
        host_users,
    };
    let containers = arr(spec, "containers");
    let init = arr(spec, "initContainers");
    container::containers(errs, containers, &ctx, &child(path, "containers"));
    container::init_containers(errs, init, containers, &ctx, &child(path, "initContainers"));
    container::ephemeral_containers(
        errs,
        arr(spec, "ephemeralContainers"),
        containers,
        init,
        &ctx,
        &child(path, "ephemeralContainers"),
    );
    if flag(spec, "hostNetwork") {
        for (i, c) in containers.iter().enumerate() {
            for (j, port) in arr(c, "ports").iter().enumerate() {
                let hp = int(port, "hostPort").unwrap_or(0);
                let cp = int(port, "containerPort").unwrap_or(0);
                if (is_pod || hp != 0) && hp != cp {
                    let p = format!("{path}.containers[{i}].ports[{j}].hostPort");
                    errs.push(FieldError::invalid(
                        p,
                        &Value::from(hp),
                        "must match `containerPort` when `hostNetwork` is true",
                    ));
                }
            }
        }
    }
    super::required_enum(
        errs,
        s(spec, "restartPolicy"),
        &child(path, "restartPolicy"),
        &["Always", "OnFailure", "Never"],
    );
    let dns_policy = s(spec, "dnsPolicy");
    super::required_enum(
        errs,
        dns_policy,
        &child(path, "dnsPolicy"),
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    );
    meta::labels(
        errs,
        get(spec, "nodeSelector"),
        &child(path, "nodeSelector"),
    );
    super::resources::pod_security_context(errs, spec, &child(path, "securityContext"));
    for (i, r) in arr(spec, "imagePullSecrets").iter().enumerate() {
        if r.as_object().is_some_and(|o| o.keys().any(|k| k != "name")) {
            errs.push(FieldError::invalid_shown(
                idx(&child(path, "imagePullSecrets"), i),
                "core.LocalObjectReference{...}",
                "only name may be set",
            ));
        }
    }
    if let Some(a) = get(spec, "affinity") {
        affinity(errs, a, &child(path, "affinity"));
    }
    dns_config(
        errs,
        get(spec, "dnsConfig"),
        dns_policy,
        &child(path, "dnsConfig"),
    );
    for (i, g) in arr(spec, "readinessGates").iter().enumerate() {
        qualified(
            errs,
            s(g, "conditionType"),
            &child(&idx(&child(path, "readinessGates"), i), "conditionType"),
        );
    }
    let mut gates = BTreeSet::new();
    for (i, g) in arr(spec, "schedulingGates").iter().enumerate() {
        let p = idx(&child(path, "schedulingGates"), i);
        qualified(errs, s(g, "name"), &p);
        if !gates.insert(s(g, "name")) {
            errs.push(FieldError::duplicate(&p, &jstr(s(g, "name"))));
        }
    }
    topology_spread(
        errs,
        arr(spec, "topologySpreadConstraints"),
        &child(path, "topologySpreadConstraints"),
    );
    if !host_users {
        for (f, p) in [
            ("hostNetwork", "hostNetwork"),
            ("hostPID", "HostPID"),
            ("hostIPC", "HostIPC"),
        ] {
            if flag(spec, f) {
                errs.push(FieldError::forbidden(
                    child(path, p),
                    "when `pod.Spec.HostUsers` is false",
                ));
            }
        }
    }
    let sa = s(spec, "serviceAccountName");
    if !sa.is_empty() {
        super::name_ref(
            errs,
            names::name_is_dns_subdomain,
            sa,
            &child(path, "serviceAccountName"),
        );
    }
    let node = s(spec, "nodeName");
    if !node.is_empty() {
        super::name_ref(
            errs,
            names::name_is_dns_subdomain,
            node,
            &child(path, "nodeName"),
        );
    }
    if let Some(ads) = int(spec, "activeDeadlineSeconds") {
        if !(1..=i32::MAX as i64).contains(&ads) {
            errs.push(FieldError::invalid(
                child(path, "activeDeadlineSeconds"),
                &Value::from(ads),
                &names::inclusive_range_error(1, i32::MAX as i64),
            ));
        }
    }
    for f in ["hostname", "subdomain"] {
        let v = s(spec, f);
        if !v.is_empty() {
            dns_label(errs, v, &child(path, f));
        }
    }
    tolerations(errs, arr(spec, "tolerations"), &child(path, "tolerations"));
    for (i, ha) in arr(spec, "hostAliases").iter().enumerate() {
        let p = idx(&child(path, "hostAliases"), i);
        let ip = s(ha, "ip");
        if !names::is_ip(ip) {
            errs.push(FieldError::invalid(
                child(&p, "ip"),
                &jstr(ip),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
        for (j, h) in arr(ha, "hostnames").iter().enumerate() {
            dns_subdomain(
                errs,
                h.as_str().unwrap_or(""),
                &idx(&child(&p, "hostnames"), j),
            );
        }
    }
    let pc = s(spec, "priorityClassName");
    if !pc.is_empty() {
        super::name_ref(
            errs,
            names::name_is_dns_subdomain,
            pc,
            &child(path, "priorityClassName"),
        );
    }
    if let Some(rc) = spec.get("runtimeClassName").and_then(Value::as_str) {
        super::name_ref(
            errs,
            names::name_is_dns_subdomain,
            rc,
            &child(path, "runtimeClassName"),
        );
    }
    if let Some(pp) = spec.get("preemptionPolicy").and_then(Value::as_str) {
        super::required_enum(
            errs,
            pp,
            &child(path, "preemptionPolicy"),
            &["PreemptLowerPriority", "Never"],
        );
    }
    if let Some(oh) = super::obj(spec, "overhead") {
        for (name, v) in oh {
            let p = super::key(&child(path, "overhead"), name);
            super::resources::container_resource_name(errs, name, &p);
            super::resources::quantity_value(errs, name, v, &p);
        }
    }
    if let Some(os) = get(spec, "os") {
        let name = s(os, "name");
        if name.is_empty() {
            errs.push(FieldError::required(child(&child(path, "os"), "name"), ""));
        } else if name != "linux" && name != "windows" {
            errs.push(FieldError::not_supported(
                child(&child(path, "os"), "name"),
                &jstr(name),
                &["linux", "windows"],
            ));
        }
    }
}

fn dns_config(errs: &mut Errs, cfg: Option<&Value>, policy: &str, path: &str) {
    if policy == "None" {
        match cfg {
            None => {
                errs.push(FieldError::required(
                    path,
                    "must provide `dnsConfig` when `dnsPolicy` is None",
                ));
                return;
            }
            Some(c) if arr(c, "nameservers").is_empty() => {
                errs.push(FieldError::required(
                    child(path, "nameservers"),
                    "must provide at least one DNS nameserver when `dnsPolicy` is None",
                ));
                return;
            }
            _ => {}
        }
    }
    let Some(cfg) = cfg else {
        return;
    };
    let ns = arr(cfg, "nameservers");
    if ns.len() > 3 {
        errs.push(FieldError::invalid_shown(
            child(path, "nameservers"),
            &super::gofmt::string_slice(cfg.get("nameservers")),
            "must not have more than 3 nameservers",
        ));
    }
    for (i, n) in ns.iter().enumerate() {
        let ip = n.as_str().unwrap_or("");
        if !names::is_ip(ip) {
            errs.push(FieldError::invalid(
                idx(&child(path, "nameservers"), i),
                &jstr(ip),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    let searches = arr(cfg, "searches");
    if searches.len() > 32 {
        errs.push(FieldError::invalid_shown(
            child(path, "searches"),
            &super::gofmt::string_slice(cfg.get("searches")),
            "must not have more than 32 search paths",
        ));
    }
    let total: usize = searches
        .iter()
        .map(|x| x.as_str().unwrap_or("").len())
        .sum::<usize>()
        + searches.len().saturating_sub(1);
    if total > 2048 {
        errs.push(FieldError::invalid_shown(
            child(path, "searches"),
            &super::gofmt::string_slice(cfg.get("searches")),
            "must not have more than 2048 characters (including spaces) in the search list",
        ));
    }
    for (i, x) in searches.iter().enumerate() {
        let v = x.as_str().unwrap_or("");
        dns_subdomain(
            errs,
            v.strip_suffix('.').unwrap_or(v),
            &idx(&child(path, "searches"), i),
        );
    }
    for (i, o) in arr(cfg, "options").iter().enumerate() {
        if s(o, "name").is_empty() {
            errs.push(FieldError::required(
                idx(&child(path, "options"), i),
                "must not be empty",
            ));
        }
    }
}

/// `ValidateTolerations`.
pub fn tolerations(errs: &mut Errs, list: &[Value], path: &str) {
    for (i, t) in list.iter().enumerate() {
        let p = idx(path, i);
        let key = s(t, "key");
        let op = s(t, "operator");
        let effect = s(t, "effect");
        if !key.is_empty() {
            meta::label_name(errs, key, &child(&p, "key"));
        }
        if key.is_empty() && op != "Exists" {
            errs.push(FieldError::invalid(child(&p, "operator"), &jstr(op), "operator must be Exists when `key` is empty, which means \"match all values and all keys\""));
        }
        if get(t, "tolerationSeconds").is_some() && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                child(&p, "effect"),
                &jstr(effect),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        let value = s(t, "value");
        match op {
            "Equal" | "" => {
                let msgs = names::label_value(value);
                if !msgs.is_empty() {
                    errs.push(FieldError::invalid(
                        child(&p, "operator"),
                        &jstr(value),
                        &msgs.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(FieldError::invalid(
                        child(&p, "operator"),
                        &jstr(value),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                child(&p, "operator"),
                &jstr(other),
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect)
        {
            errs.push(FieldError::not_supported(
                child(&p, "effect"),
                &jstr(effect),
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
}

fn node_selector_term(errs: &mut Errs, term: &Value, check_values: bool, path: &str) {
    for (j, r) in arr(term, "matchExpressions").iter().enumerate() {
        let p = idx(&child(path, "matchExpressions"), j);
        let values = arr(r, "values");
        match s(r, "operator") {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                child(&p, "values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::forbidden(
                child(&p, "values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "Gt" | "Lt" if values.len() != 1 => errs.push(FieldError::required(
                child(&p, "values"),
                "must be specified single value when `operator` is 'Lt' or 'Gt'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
            op => errs.push(FieldError::invalid(
                child(&p, "operator"),
                &jstr(op),
                "not a valid selector operator",
            )),
        }
        meta::label_name(errs, s(r, "key"), &child(&p, "key"));
        if check_values {
            for (k, v) in values.iter().enumerate() {
                let v = v.as_str().unwrap_or("");
                for m in names::label_value(v) {
                    errs.push(FieldError::invalid(
                        idx(&child(&p, "values"), k),
                        &jstr(v),
                        &m,
                    ));
                }
            }
        }
    }
    for (j, r) in arr(term, "matchFields").iter().enumerate() {
        let p = idx(&child(path, "matchFields"), j);
        let values = arr(r, "values");
        match s(r, "operator") {
            "In" | "NotIn" => {
                if values.len() != 1 {
                    errs.push(FieldError::required(child(&p, "values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"));
                }
            }
            op => errs.push(FieldError::invalid(
                child(&p, "operator"),
                &jstr(op),
                "not a valid selector operator",
            )),
        }
        if s(r, "key") != "metadata.name" {
            errs.push(FieldError::invalid(
                child(&p, "key"),
                &jstr(s(r, "key")),
                "not a valid field selector key",
            ));
        } else {
            for (k, v) in values.iter().enumerate() {
                super::name_ref(
                    errs,
                    names::name_is_dns_subdomain,
                    v.as_str().unwrap_or(""),
                    &idx(&child(&p, "values"), k),
                );
            }
        }
    }
}

fn pod_affinity_term(errs: &mut Errs, t: &Value, path: &str) {
    meta::label_selector(errs, get(t, "labelSelector"), &child(path, "labelSelector"));
    meta::label_selector(
        errs,
        get(t, "namespaceSelector"),
        &child(path, "namespaceSelector"),
    );
    for n in arr(t, "namespaces") {
        let n = n.as_str().unwrap_or("");
        for m in names::dns1123_label(n) {
            errs.push(FieldError::invalid(child(path, "namespace"), &jstr(n), &m));
        }
    }
    let tk = s(t, "topologyKey");
    if tk.is_empty() {
        errs.push(FieldError::required(
            child(path, "topologyKey"),
            "can not be empty",
        ));
    }
    meta::label_name(errs, tk, &child(path, "topologyKey"));
}

fn weight(errs: &mut Errs, t: &Value, path: &str) {
    let w = int(t, "weight").unwrap_or(0);
    if !(1..=100).contains(&w) {
        errs.push(FieldError::invalid(
            child(path, "weight"),
            &Value::from(w),
            "must be in the range 1-100",
        ));
    }
}

fn affinity(errs: &mut Errs, a: &Value, path: &str) {
    if let Some(na) = get(a, "nodeAffinity") {
        let np = child(path, "nodeAffinity");
        if let Some(req) = get(na, "requiredDuringSchedulingIgnoredDuringExecution") {
            let rp = child(
                &child(&np, "requiredDuringSchedulingIgnoredDuringExecution"),
                "nodeSelectorTerms",
            );
            let terms = arr(req, "nodeSelectorTerms");
            if terms.is_empty() {
                errs.push(FieldError::required(
                    &rp,
                    "must have at least one node selector term",
                ));
            }
            for (i, t) in terms.iter().enumerate() {
                node_selector_term(errs, t, true, &idx(&rp, i));
            }
        }
        for (i, t) in arr(na, "preferredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            let p = idx(
                &child(&np, "preferredDuringSchedulingIgnoredDuringExecution"),
                i,
            );
            weight(errs, t, &p);
            node_selector_term(
                errs,
                t.get("preference").unwrap_or(&Value::Null),
                false,
                &child(&p, "preference"),
            );
        }
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(pa) = get(a, kind) else {
            continue;
        };
        let kp = child(path, kind);
        for (i, t) in arr(pa, "requiredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            pod_affinity_term(
                errs,
                t,
                &idx(
                    &child(&kp, "requiredDuringSchedulingIgnoredDuringExecution"),
                    i,
                ),
            );
        }
        for (i, t) in arr(pa, "preferredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            let p = idx(
                &child(&kp, "preferredDuringSchedulingIgnoredDuringExecution"),
                i,
            );
            weight(errs, t, &p);
            pod_affinity_term(
                errs,
                t.get("podAffinityTerm").unwrap_or(&Value::Null),
                &child(&p, "podAffinityTerm"),
            );
        }
    }
}

fn topology_spread(errs: &mut Errs, list: &[Value], path: &str) {
    let mut seen = BTreeSet::new();
    for (i, c) in list.iter().enumerate() {
        let p = idx(path, i);
        let skew = int(c, "maxSkew").unwrap_or(0);
        if skew <= 0 {
            errs.push(FieldError::invalid(
                child(&p, "maxSkew"),
                &Value::from(skew),
                "must be greater than zero",
            ));
        }
        let tk = s(c, "topologyKey");
        if tk.is_empty() {
            errs.push(FieldError::required(
                child(&p, "topologyKey"),
                "can not be empty",
            ));
        } else {
            meta::label_name(errs, tk, &child(&p, "topologyKey"));
        }
        let wu = s(c, "whenUnsatisfiable");
        if !["DoNotSchedule", "ScheduleAnyway"].contains(&wu) {
            errs.push(FieldError::not_supported(
                child(&p, "whenUnsatisfiable"),
                &jstr(wu),
                &["DoNotSchedule", "ScheduleAnyway"],
            ));
        }
        if !seen.insert((tk, wu)) {
            errs.push(FieldError::duplicate_shown(
                child(&p, "{topologyKey, whenUnsatisfiable}"),
                &format!("{tk}, {wu}"),
            ));
        }
        if let Some(md) = int(c, "minDomains") {
            if md <= 0 {
                errs.push(FieldError::invalid(
                    child(&p, "minDomains"),
                    &Value::from(md),
                    "must be greater than 0",
                ));
            } else if wu != "DoNotSchedule" {
                errs.push(FieldError::invalid(child(&p, "minDomains"), &Value::from(md), "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway"));
            }
        }
        meta::label_selector(errs, get(c, "labelSelector"), &child(&p, "labelSelector"));
        for f in ["nodeAffinityPolicy", "nodeTaintsPolicy"] {
            if let Some(v) = c.get(f).and_then(Value::as_str) {
                if v != "Honor" && v != "Ignore" {
                    errs.push(FieldError::not_supported(
                        child(&p, f),
                        &jstr(v),
                        &["Honor", "Ignore"],
                    ));
                }
            }
        }
    }
}
