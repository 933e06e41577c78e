//! API discovery as the garbage collector and the namespace controller use it: the server's
//! preferred resources (client-go's `ServerPreferredResources`: per group and resource, the
//! group's preferred version, else the first version serving it), and a REST mapper from
//! `apiVersion` + `kind` to a resource over every served version.
//!
//! (Shared by the namespace controller; it lives here because the garbage collector owns it.)

use std::collections::{HashMap, HashSet};

use kube::discovery::{ApiResource, Discovery, Scope};
use kube::Client;

/// One discovered resource (never a subresource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    pub ar: ApiResource,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

impl Discovered {
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// The resource's group/version/resource.
    pub fn gvr(&self) -> Gvr {
        Gvr {
            group: self.ar.group.clone(),
            version: self.ar.version.clone(),
            resource: self.ar.plural.clone(),
        }
    }
}

/// A group/version/resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl std::fmt::Display for Gvr {
    /// Go's `schema.GroupVersionResource.String()`: `apps/v1, Resource=deployments`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}, Resource={}",
            self.group, self.version, self.resource
        )
    }
}

/// What one discovery run found.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    /// The preferred version of every resource, in discovery order.
    pub preferred: Vec<Discovered>,
    /// (group, version, kind) → resource, for every served version.
    pub kinds: HashMap<(String, String, String), Discovered>,
}

impl Resources {
    /// The resource serving `kind` at `api_version` (a REST mapping), if any.
    pub fn mapping(&self, api_version: &str, kind: &str) -> Option<&Discovered> {
        let (group, version) = parse_api_version(api_version)?;
        self.kinds
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
    }
}

/// Split an `apiVersion` into group and version as Go's `schema.ParseGroupVersion` does
/// (`v1` → core; `apps/v1`; anything with more slashes, or empty, is invalid).
pub fn parse_api_version(api_version: &str) -> Option<(&str, &str)> {
    if api_version.is_empty() {
        return None;
    }
    match api_version.split_once('/') {
        None => Some(("", api_version)),
        Some((g, v)) if !v.contains('/') && !v.is_empty() => Some((g, v)),
        _ => None,
    }
}

/// Build [`Resources`] from discovered groups: for each group, the preferred version first,
/// then the others in the order given.
pub fn collect<'a>(
    groups: impl IntoIterator<Item = (String, Option<String>, Vec<(String, Vec<Discovered>)>)> + 'a,
) -> Resources {
    let mut out = Resources::default();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    for (group, preferred, mut versions) in groups {
        if let Some(p) = &preferred {
            if let Some(i) = versions.iter().position(|(v, _)| v == p) {
                let pv = versions.remove(i);
                versions.insert(0, pv);
            }
        }
        for (version, resources) in versions {
            for r in resources {
                if r.ar.plural.contains('/') {
                    continue;
                }
                out.kinds
                    .entry((group.clone(), version.clone(), r.ar.kind.clone()))
                    .or_insert_with(|| r.clone());
                if seen.insert((group.clone(), r.ar.plural.clone())) {
                    out.preferred.push(r);
                }
            }
        }
    }
    out
}

/// Run discovery (aggregated, falling back to per-group discovery).
pub async fn discover(client: &Client) -> kube::Result<Resources> {
    let d = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!(error = %e, "aggregated discovery failed; discovering group by group");
            Discovery::new(client.clone()).run().await?
        }
    };
    let mut groups: Vec<_> = d.groups().collect();
    // The core group first, then the others by name (a stable order).
    groups.sort_by(|a, b| (!a.name().is_empty(), a.name()).cmp(&(!b.name().is_empty(), b.name())));
    let list = groups.into_iter().map(|g| {
        let versions = g
            .versions()
            .map(|v| {
                let rs = g
                    .versioned_resources(v)
                    .into_iter()
                    .map(|(ar, caps)| Discovered {
                        namespaced: matches!(caps.scope, Scope::Namespaced),
                        verbs: caps.operations.clone(),
                        ar,
                    })
                    .collect();
                (v.to_string(), rs)
            })
            .collect();
        (
            g.name().to_string(),
            g.preferred_version().map(str::to_string),
            versions,
        )
    });
    Ok(collect(list))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(group: &str, version: &str, plural: &str, kind: &str, verbs: &[&str]) -> Discovered {
        Discovered {
            ar: ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: if group.is_empty() {
                    version.into()
                } else {
                    format!("{group}/{version}")
                },
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced: true,
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn preferred_version_wins_and_other_versions_fill_in() {
        let r = collect(vec![(
            "example.com".to_string(),
            Some("v1".to_string()),
            vec![
                (
                    "v2".to_string(),
                    vec![
                        res("example.com", "v2", "foos", "Foo", &["list"]),
                        res("example.com", "v2", "bars", "Bar", &["list"]),
                    ],
                ),
                (
                    "v1".to_string(),
                    vec![
                        res("example.com", "v1", "foos", "Foo", &["list"]),
                        res("example.com", "v1", "foos/status", "Foo", &["get"]),
                    ],
                ),
            ],
        )]);
        let p: Vec<_> = r
            .preferred
            .iter()
            .map(|d| format!("{}/{}", d.ar.api_version, d.ar.plural))
            .collect();
        assert_eq!(p, ["example.com/v1/foos", "example.com/v2/bars"]);
        assert_eq!(
            r.mapping("example.com/v2", "Foo")
                .map(|d| d.ar.plural.as_str()),
            Some("foos")
        );
        assert!(r.mapping("example.com/v3", "Foo").is_none());
        assert!(r.mapping("example.com/v1/x", "Foo").is_none());
    }

    #[test]
    fn api_versions_parse_like_go() {
        assert_eq!(parse_api_version("v1"), Some(("", "v1")));
        assert_eq!(parse_api_version("apps/v1"), Some(("apps", "v1")));
        assert_eq!(parse_api_version("a/b/c"), None);
        assert_eq!(parse_api_version(""), None);
        let g = Gvr {
            group: "".into(),
            version: "v1".into(),
            resource: "pods".into(),
        };
        assert_eq!(g.to_string(), "/v1, Resource=pods");
    }
}
