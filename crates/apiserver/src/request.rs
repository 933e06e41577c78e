//! What a request asks for, from its method, path and query (Kubernetes' `RequestInfo`).

use std::collections::HashMap;

use http::Method;

/// A parsed request path and method.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// False for paths like /version, /healthz, /api, /apis/<group>.
    pub is_resource: bool,
    pub path: String,
    /// Kubernetes' verb: get, list, watch, create, update, patch, delete, deletecollection
    /// for resources; the lower-case HTTP method for other paths.
    pub verb: String,
    pub api_prefix: String,
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// Path segments after the subresource (e.g. proxy paths).
    pub rest: Vec<String>,
    /// The raw `fieldSelector` and `labelSelector` of a list, watch or deletecollection, which
    /// authorizers may consider (Kubernetes' AuthorizeWithSelectors).
    pub field_selector: String,
    pub label_selector: String,
}

/// Subresources of a namespace that are not namespaced resources: /namespaces/<n>/status.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

impl RequestInfo {
    pub fn parse(method: &Method, path: &str, query: &Query) -> RequestInfo {
        let mut info = RequestInfo {
            path: path.to_string(),
            verb: method.as_str().to_ascii_lowercase(),
            ..Default::default()
        };
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let rest: &[&str] = match parts.first() {
            Some(&"api") if parts.len() >= 2 => {
                info.api_prefix = "api".into();
                info.version = parts[1].to_string();
                &parts[2..]
            }
            Some(&"apis") if parts.len() >= 3 => {
                info.api_prefix = "apis".into();
                info.group = parts[1].to_string();
                info.version = parts[2].to_string();
                &parts[3..]
            }
            _ => return info,
        };
        if rest.is_empty() || rest[0].is_empty() {
            return info;
        }
        info.is_resource = true;
        let mut rest = rest;
        let mut watch_prefix = false;
        if rest[0] == "watch" {
            watch_prefix = true;
            rest = &rest[1..];
        }
        if rest.first() == Some(&"namespaces") && rest.len() > 1 {
            info.namespace = rest[1].to_string();
            if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
                rest = &rest[2..];
            }
        }
        if let Some(r) = rest.first() {
            info.resource = r.to_string();
        }
        if let Some(n) = rest.get(1) {
            info.name = n.to_string();
        }
        if let Some(s) = rest.get(2) {
            info.subresource = s.to_string();
        }
        info.rest = rest.iter().skip(3).map(|s| s.to_string()).collect();
        // /namespaces/<name> names the namespace itself, not a namespace scope.
        if info.resource == "namespaces" {
            info.namespace.clear();
        }
        info.verb = match *method {
            Method::GET | Method::HEAD => {
                if watch_prefix || query.flag("watch") {
                    "watch"
                } else if info.name.is_empty() {
                    "list"
                } else {
                    "get"
                }
            }
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => {
                if info.name.is_empty() {
                    "deletecollection"
                } else {
                    "delete"
                }
            }
            _ => "",
        }
        .to_string();
        if matches!(info.verb.as_str(), "list" | "watch" | "deletecollection") {
            info.field_selector = query.str("fieldSelector").to_string();
            info.label_selector = query.str("labelSelector").to_string();
        }
        info
    }
}

/// Decoded query parameters (the last value of a repeated parameter wins).
#[derive(Debug, Clone, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(query: Option<&str>) -> Query {
        let mut map = HashMap::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            map.insert(percent_decode(k), percent_decode(v));
        }
        Query(map)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// A parameter as a string, "" when absent.
    pub fn str(&self, key: &str) -> &str {
        self.get(key).unwrap_or("")
    }

    /// A boolean flag: present with an empty value, or true as Go's strconv.ParseBool reads it.
    pub fn flag(&self, key: &str) -> bool {
        matches!(
            self.get(key),
            Some("" | "1" | "t" | "T" | "true" | "TRUE" | "True")
        )
    }

    pub fn insert(&mut self, key: &str, value: &str) {
        self.0.insert(key.to_string(), value.to_string());
    }
}

/// Decode `%XX` escapes and `+` (as a space, per form encoding).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (hex, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: Method, path_query: &str) -> RequestInfo {
        let (path, q) = path_query.split_once('?').unwrap_or((path_query, ""));
        RequestInfo::parse(&method, path, &Query::parse(Some(q)))
    }

    #[test]
    fn resource_paths_parse_like_kubernetes() {
        let cases = [
            (Method::GET, "/api/v1/pods", "list", "", "", "pods", "", ""),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods",
                "list",
                "",
                "default",
                "pods",
                "",
                "",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods/p",
                "get",
                "",
                "default",
                "pods",
                "p",
                "",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods/p/log",
                "get",
                "",
                "default",
                "pods",
                "p",
                "log",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods?watch=1",
                "watch",
                "",
                "default",
                "pods",
                "",
                "",
            ),
            (
                Method::GET,
                "/api/v1/watch/namespaces/default/pods",
                "watch",
                "",
                "default",
                "pods",
                "",
                "",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/kube-system",
                "get",
                "",
                "",
                "namespaces",
                "kube-system",
                "",
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/ns1/finalize",
                "update",
                "",
                "",
                "namespaces",
                "ns1",
                "finalize",
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/ns1/status",
                "update",
                "",
                "",
                "namespaces",
                "ns1",
                "status",
            ),
            (
                Method::POST,
                "/apis/apps/v1/namespaces/a/deployments",
                "create",
                "apps",
                "a",
                "deployments",
                "",
                "",
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/a/deployments/d/scale",
                "patch",
                "apps",
                "a",
                "deployments",
                "d",
                "scale",
            ),
            (
                Method::DELETE,
                "/apis/apps/v1/namespaces/a/deployments",
                "deletecollection",
                "apps",
                "a",
                "deployments",
                "",
                "",
            ),
            (
                Method::DELETE,
                "/api/v1/nodes/n1",
                "delete",
                "",
                "",
                "nodes",
                "n1",
                "",
            ),
        ];
        for (method, path, verb, group, ns, resource, name, sub) in cases {
            let i = parse(method, path);
            assert!(i.is_resource, "{path}");
            assert_eq!(
                (
                    i.verb.as_str(),
                    i.group.as_str(),
                    i.namespace.as_str(),
                    i.resource.as_str(),
                    i.name.as_str(),
                    i.subresource.as_str()
                ),
                (verb, group, ns, resource, name, sub),
                "{path}"
            );
        }
    }

    #[test]
    fn non_resource_paths_are_not_resources() {
        for p in [
            "/version",
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/healthz",
        ] {
            assert!(!parse(Method::GET, p).is_resource, "{p}");
        }
    }

    #[test]
    fn queries_decode_escapes() {
        let q = Query::parse(Some("labelSelector=app%3Dweb%2Ctier+in+(a)&watch"));
        assert_eq!(q.str("labelSelector"), "app=web,tier in (a)");
        assert!(q.flag("watch"));
        assert!(!q.flag("missing"));
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
