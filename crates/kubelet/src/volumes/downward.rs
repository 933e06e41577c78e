//! The downward API: pod fields (`metadata.name`, `metadata.labels['k']`, ...) and
//! container resources (`limits.cpu` with a divisor) as text, for downwardAPI volumes and
//! for env `fieldRef` / `resourceFieldRef`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::quantity::{ceil_div, Quantity};

/// What the downward API needs to know of the node.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    /// status.allocatable of the node (limits default to it).
    pub allocatable: BTreeMap<String, ApiQuantity>,
    /// The node's IPs, primary first (status.hostIP / hostIPs).
    pub host_ips: Vec<String>,
    /// The node's addresses as known, for the error when no IP is.
    pub addresses: Vec<String>,
}

/// Go's `%q` of a string (strconv.Quote): double quotes, backslash escapes for quotes,
/// backslashes and control characters, `\uXXXX` for other non-printable characters.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            ' ' => out.push(' '),
            c if !is_go_printable(c) => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's unicode.IsPrint for characters beyond ASCII: controls,
/// spaces other than ' ', and format characters are not printable.
fn is_go_printable(c: char) -> bool {
    if c.is_ascii() {
        return (0x20..0x7f).contains(&(c as u32));
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32,
        0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x180e | 0x200b..=0x200f
        | 0x202a..=0x202e | 0x2060..=0x206f | 0xfeff | 0xfff9..=0xfffb
        | 0xe000..=0xf8ff | 0xf0000..=0x10ffff)
}

/// `k="v"` lines sorted by key, without a trailing newline (labels and annotations as a
/// whole).
pub fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    let Some(map) = map else {
        return String::new();
    };
    map.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `metadata.labels['key']` → ("metadata.labels", "key").
pub fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let s = path.strip_suffix("']")?;
    let (head, key) = s.split_once("['")?;
    if head.is_empty() {
        return None;
    }
    Some((head, key))
}

/// Whether `key` is a qualified name (`[prefix/]name`), as subscripts must be.
fn qualified_name_errors(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if key.matches('/').count() > 1 {
        return Some(
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into(),
        );
    }
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Some("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
        }
    }
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 characters".into());
    }
    let b = name.as_bytes();
    let ok = b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !ok {
        return Some("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into());
    }
    None
}

/// The metadata fields every downward API user may read (`fieldpath.ExtractFieldPathAsString`).
pub fn extract_field_path(pod: &Pod, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    if let Some((head, key)) = split_subscript(path) {
        let map = match head {
            "metadata.annotations" => meta.annotations.as_ref(),
            "metadata.labels" => meta.labels.as_ref(),
            _ => {
                return Err(format!(
                    "fieldPath {} does not support subscript",
                    go_quote(path)
                ))
            }
        };
        if let Some(e) = qualified_name_errors(&key.to_lowercase()) {
            return Err(format!("invalid key subscript in {path}: {e}"));
        }
        return Ok(map.and_then(|m| m.get(key)).cloned().unwrap_or_default());
    }
    match path {
        "metadata.annotations" => Ok(format_map(meta.annotations.as_ref())),
        "metadata.labels" => Ok(format_map(meta.labels.as_ref())),
        "metadata.name" => Ok(meta.name.clone().unwrap_or_default()),
        "metadata.namespace" => Ok(meta.namespace.clone().unwrap_or_default()),
        "metadata.uid" => Ok(meta.uid.clone().unwrap_or_default()),
        _ => Err(format!("unsupported fieldPath: {path}")),
    }
}

/// Check an env fieldRef's apiVersion and path (`ConvertDownwardAPIFieldLabel`) and give
/// the path to resolve.
pub fn convert_field_label(api_version: &str, path: &str) -> Result<String, String> {
    if api_version != "v1" {
        return Err(format!("unsupported pod version: {api_version}"));
    }
    if let Some((head, _)) = split_subscript(path) {
        return match head {
            "metadata.annotations" | "metadata.labels" => Ok(path.to_string()),
            _ => Err(format!("field label does not support subscript: {path}")),
        };
    }
    match path {
        "spec.host" => Ok("spec.nodeName".into()),
        "metadata.annotations"
        | "metadata.labels"
        | "metadata.name"
        | "metadata.namespace"
        | "metadata.uid"
        | "spec.nodeName"
        | "spec.restartPolicy"
        | "spec.serviceAccountName"
        | "spec.schedulerName"
        | "status.phase"
        | "status.hostIP"
        | "status.hostIPs"
        | "status.podIP"
        | "status.podIPs" => Ok(path.to_string()),
        _ => Err(format!("field label not supported: {path}")),
    }
}

/// The container of `pod` named `name` (regular, init or ephemeral as a container).
pub fn find_container(pod: &Pod, name: &str) -> Result<Container, String> {
    let spec = pod.spec.as_ref();
    if let Some(c) = spec
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == name)
    {
        return Ok(c.clone());
    }
    Err(format!("container {name} not found"))
}

/// A copy of `container` whose missing (or zero) cpu, memory and ephemeral-storage limits
/// are the node's allocatable (`MergeContainerResourceLimits`).
pub fn with_default_limits(container: &Container, node: &NodeInfo) -> Container {
    let mut c = container.clone();
    let resources = c.resources.get_or_insert_with(Default::default);
    let limits = resources.limits.get_or_insert_with(BTreeMap::new);
    for name in ["cpu", "memory", "ephemeral-storage"] {
        let missing = limits
            .get(name)
            .map(|q| Quantity::parse(&q.0).is_none_or(|q| q.is_zero()))
            .unwrap_or(true);
        if missing {
            if let Some(cap) = node.allocatable.get(name) {
                limits.insert(name.to_string(), cap.clone());
            }
        }
    }
    c
}

fn resource_quantity(container: &Container, kind: &str, name: &str) -> Quantity {
    let list = container.resources.as_ref().and_then(|r| match kind {
        "limits" => r.limits.as_ref(),
        _ => r.requests.as_ref(),
    });
    list.and_then(|l| l.get(name))
        .and_then(|q| Quantity::parse(&q.0))
        .unwrap_or(Quantity::ZERO)
}

/// `ExtractContainerResourceValue`: the resource of `container` named by the selector,
/// divided by the divisor and rounded up.
pub fn container_resource_value(
    fs: &ResourceFieldSelector,
    container: &Container,
) -> Result<String, String> {
    let divisor = fs
        .divisor
        .as_ref()
        .and_then(|d| Quantity::parse(&d.0))
        .filter(|d| !d.is_zero())
        .unwrap_or(Quantity::from_int(1));
    let Some((kind, name)) = fs.resource.split_once('.') else {
        return Err(format!("unsupported container resource : {}", fs.resource));
    };
    if kind != "limits" && kind != "requests" {
        return Err(format!("unsupported container resource : {}", fs.resource));
    }
    let q = resource_quantity(container, kind, name);
    let v = match name {
        "cpu" => ceil_div(q.milli_value(), divisor.milli_value()),
        "memory" | "ephemeral-storage" => ceil_div(q.value(), divisor.value()),
        n if n.starts_with("hugepages-") => ceil_div(q.value(), divisor.value()),
        _ => return Err(format!("unsupported container resource : {}", fs.resource)),
    };
    Ok(v.to_string())
}

/// A resourceFieldRef of a downwardAPI volume (or of env with a containerName): the named
/// container's resource, its limits defaulted to the node's allocatable.
pub fn resource_value_by_container(
    fs: &ResourceFieldSelector,
    pod: &Pod,
    container_name: &str,
    node: &NodeInfo,
) -> Result<String, String> {
    let c = find_container(pod, container_name)?;
    container_resource_value(fs, &with_default_limits(&c, node))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                uid: Some("u-1".into()),
                labels: Some(BTreeMap::from([
                    ("zone".to_string(), "b".to_string()),
                    ("app".to_string(), "web \"x\"\n".to_string()),
                ])),
                annotations: Some(BTreeMap::from([(
                    "example.com/note".to_string(),
                    "tab\there é".to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        limits: Some(BTreeMap::from([(
                            "memory".to_string(),
                            ApiQuantity("64Mi".into()),
                        )])),
                        requests: Some(BTreeMap::from([(
                            "cpu".to_string(),
                            ApiQuantity("250m".into()),
                        )])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn labels_are_sorted_quoted_lines() {
        let p = pod();
        assert_eq!(
            extract_field_path(&p, "metadata.labels").unwrap(),
            "app=\"web \\\"x\\\"\\n\"\nzone=\"b\""
        );
        assert_eq!(
            extract_field_path(&p, "metadata.annotations").unwrap(),
            "example.com/note=\"tab\\there é\""
        );
        assert_eq!(
            extract_field_path(&p, "metadata.labels['zone']").unwrap(),
            "b"
        );
        assert_eq!(
            extract_field_path(&p, "metadata.labels['missing']").unwrap(),
            ""
        );
        assert_eq!(extract_field_path(&p, "metadata.uid").unwrap(), "u-1");
        assert_eq!(
            extract_field_path(&p, "spec.nodeName").unwrap_err(),
            "unsupported fieldPath: spec.nodeName"
        );
        assert!(extract_field_path(&p, "metadata.labels['-bad-']")
            .unwrap_err()
            .starts_with("invalid key subscript in metadata.labels['-bad-']: "));
        assert_eq!(format_map(None), "");
    }

    #[test]
    fn go_quote_escapes() {
        assert_eq!(go_quote("a\u{1}b"), "\"a\\x01b\"");
        assert_eq!(go_quote("\u{a0}"), "\"\\u00a0\"");
        assert_eq!(go_quote("日本"), "\"日本\"");
        assert_eq!(go_quote("\\"), "\"\\\\\"");
    }

    #[test]
    fn field_labels() {
        assert_eq!(
            convert_field_label("v1", "spec.host").unwrap(),
            "spec.nodeName"
        );
        assert_eq!(
            convert_field_label("v2", "metadata.name").unwrap_err(),
            "unsupported pod version: v2"
        );
        assert_eq!(
            convert_field_label("v1", "spec.containers").unwrap_err(),
            "field label not supported: spec.containers"
        );
    }

    #[test]
    fn resources_with_divisors_round_up() {
        let p = pod();
        let node = NodeInfo {
            allocatable: BTreeMap::from([
                ("cpu".to_string(), ApiQuantity("2".into())),
                ("memory".to_string(), ApiQuantity("4Gi".into())),
            ]),
            ..Default::default()
        };
        let sel = |r: &str, d: Option<&str>| ResourceFieldSelector {
            resource: r.into(),
            divisor: d.map(|d| ApiQuantity(d.into())),
            container_name: Some("c".into()),
        };
        let v = |r: &str, d: Option<&str>| resource_value_by_container(&sel(r, d), &p, "c", &node);
        assert_eq!(v("limits.memory", None).unwrap(), "67108864");
        assert_eq!(v("limits.memory", Some("1Mi")).unwrap(), "64");
        assert_eq!(v("limits.memory", Some("1G")).unwrap(), "1");
        // No cpu limit: the node's allocatable.
        assert_eq!(v("limits.cpu", None).unwrap(), "2");
        assert_eq!(v("limits.cpu", Some("1m")).unwrap(), "2000");
        // 250m in whole cores rounds up.
        assert_eq!(v("requests.cpu", None).unwrap(), "1");
        assert_eq!(v("requests.cpu", Some("1m")).unwrap(), "250");
        assert_eq!(v("requests.memory", None).unwrap(), "0");
        assert_eq!(
            v("limits.gpu", None).unwrap_err(),
            "unsupported container resource : limits.gpu"
        );
        assert_eq!(
            resource_value_by_container(&sel("limits.cpu", None), &p, "nope", &node).unwrap_err(),
            "container nope not found"
        );
    }
}
