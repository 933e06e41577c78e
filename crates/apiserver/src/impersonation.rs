//! User impersonation (Kubernetes' impersonation filter): a request carrying
//! `Impersonate-User` (and optionally `Impersonate-Group`, repeated, `Impersonate-Uid` and
//! `Impersonate-Extra-<key>`) is served as that user, provided its authenticated requester
//! may `impersonate` each part: `users`, `groups`, `serviceaccounts` (in their namespace, for
//! `system:serviceaccount:<ns>:<name>`), and in authentication.k8s.io `uids` and
//! `userextras/<key>`. It runs after authentication and before the request is authorized,
//! which then judges the impersonated user.

use std::collections::BTreeMap;

use http::HeaderMap;
use serde_json::json;

use crate::auth::{forbidden_message, AuthChain, User};
use crate::error::ApiError;
use crate::request::RequestInfo;

pub const USER_HEADER: &str = "impersonate-user";
pub const GROUP_HEADER: &str = "impersonate-group";
pub const UID_HEADER: &str = "impersonate-uid";
/// Followed by the extra's key (percent-encoded where it needs to be).
pub const EXTRA_HEADER_PREFIX: &str = "impersonate-extra-";

const SA_PREFIX: &str = "system:serviceaccount:";
const AUTHENTICATED: &str = "system:authenticated";
const UNAUTHENTICATED: &str = "system:unauthenticated";
const ANONYMOUS: &str = "system:anonymous";
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";

/// One thing a request asks to act as (Kubernetes builds an ObjectReference of each).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    ServiceAccount { namespace: String, name: String },
    User(String),
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

impl Target {
    /// What the requester must be allowed: verb `impersonate` on this.
    fn request(&self) -> RequestInfo {
        let (group, version, resource, sub, ns, name) = match self {
            Target::ServiceAccount { namespace, name } => {
                ("", "v1", "serviceaccounts", "", namespace.as_str(), name)
            }
            Target::User(name) => ("", "", "users", "", "", name),
            Target::Group(name) => ("", "", "groups", "", "", name),
            Target::Extra { key, value } => (
                AUTHENTICATION_GROUP,
                "v1",
                "userextras",
                key.as_str(),
                "",
                value,
            ),
            Target::Uid(uid) => (AUTHENTICATION_GROUP, "v1", "uids", "", "", uid),
        };
        RequestInfo {
            is_resource: true,
            verb: "impersonate".into(),
            api_prefix: if group.is_empty() { "api" } else { "apis" }.into(),
            group: group.into(),
            version: version.into(),
            namespace: ns.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.clone(),
            ..Default::default()
        }
    }

    /// The ObjectReference as Go's `%v` prints it (`{Kind Namespace Name UID APIVersion
    /// ResourceVersion FieldPath}`), for the bad-request message.
    fn go_string(&self) -> String {
        let (kind, ns, name, api_version, field_path) = match self {
            Target::ServiceAccount { namespace, name } => {
                ("ServiceAccount", namespace.as_str(), name.as_str(), "", "")
            }
            Target::User(n) => ("User", "", n.as_str(), "", ""),
            Target::Group(n) => ("Group", "", n.as_str(), "", ""),
            Target::Extra { key, value } => (
                "UserExtra",
                "",
                value.as_str(),
                "authentication.k8s.io/v1",
                key.as_str(),
            ),
            Target::Uid(uid) => ("UID", "", uid.as_str(), "authentication.k8s.io/v1", ""),
        };
        format!("{{{kind} {ns} {name}  {api_version}  {field_path}}}")
    }
}

fn header_values<'a>(headers: &'a HeaderMap, name: &str) -> impl Iterator<Item = String> + 'a {
    headers
        .get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// `system:serviceaccount:<namespace>:<name>` with a valid namespace and name (Kubernetes'
/// `serviceaccount.SplitUsername`).
fn split_service_account(user: &str) -> Option<(String, String)> {
    use capstan_api::validation::names::{dns1123_label, dns1123_subdomain};
    let rest = user.strip_prefix(SA_PREFIX)?;
    let (ns, name) = rest.split_once(':')?;
    if name.contains(':') || !dns1123_label(ns).is_empty() || !dns1123_subdomain(name).is_empty() {
        return None;
    }
    Some((ns.to_string(), name.to_string()))
}

/// Go's `url.PathUnescape`, keeping the key as sent when it does not decode.
fn unescape_extra_key(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = key
                .get(i + 1..i + 3)
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(b) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                None => return key.to_string(),
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

/// What the headers ask to act as, in Kubernetes' order: the user, the groups, the extras,
/// the UID. A bad request when anything but a user is asked without a user.
fn targets(headers: &HeaderMap) -> Result<Vec<Target>, ApiError> {
    let mut out = Vec::new();
    let user = header_values(headers, USER_HEADER)
        .next()
        .unwrap_or_default();
    let has_user = !user.is_empty();
    if has_user {
        out.push(match split_service_account(&user) {
            Some((namespace, name)) => Target::ServiceAccount { namespace, name },
            None => Target::User(user),
        });
    }
    let mut others = false;
    for g in header_values(headers, GROUP_HEADER) {
        others = true;
        out.push(Target::Group(g));
    }
    for name in headers.keys() {
        let Some(key) = name.as_str().strip_prefix(EXTRA_HEADER_PREFIX) else {
            continue;
        };
        others = true;
        let key = unescape_extra_key(&key.to_ascii_lowercase());
        for value in header_values(headers, name.as_str()) {
            out.push(Target::Extra {
                key: key.clone(),
                value,
            });
        }
    }
    let uid = header_values(headers, UID_HEADER)
        .next()
        .unwrap_or_default();
    if !uid.is_empty() {
        others = true;
        out.push(Target::Uid(uid));
    }
    if others && !has_user {
        let list: Vec<String> = out.iter().map(Target::go_string).collect();
        return Err(ApiError::bad_request(format!(
            "requested [{}] without impersonating a user",
            list.join(" ")
        )));
    }
    Ok(out)
}

/// The user `requester` acts as: `None` when the request impersonates nobody. Err is the
/// answer: 400 for impersonation headers without a user, 403 when the requester may not
/// impersonate one of them.
pub fn impersonate(
    chain: &AuthChain,
    requester: &User,
    headers: &HeaderMap,
) -> Result<Option<User>, ApiError> {
    // Cheap for the usual request: no header of the family at all.
    if !headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-"))
    {
        return Ok(None);
    }
    let targets = targets(headers)?;
    if targets.is_empty() {
        return Ok(None);
    }
    // Groups that are asked for are the whole list (system:authenticated aside); otherwise a
    // service account gets its own.
    let groups_specified = headers.contains_key(GROUP_HEADER);
    let mut user = User::default();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in &targets {
        match t {
            Target::ServiceAccount { namespace, name } => {
                user.name = format!("{SA_PREFIX}{namespace}:{name}");
                if !groups_specified {
                    user.groups = vec![
                        "system:serviceaccounts".to_string(),
                        format!("system:serviceaccounts:{namespace}"),
                    ];
                }
            }
            Target::User(name) => user.name = name.clone(),
            Target::Group(g) => user.groups.push(g.clone()),
            Target::Extra { key, value } => {
                extra.entry(key.clone()).or_default().push(value.clone())
            }
            Target::Uid(uid) => user.uid = uid.clone(),
        }
        let req = t.request();
        if let Err(reason) = chain.authorize(requester, &req) {
            let mut e = ApiError::new(
                403,
                "Forbidden",
                forbidden_message(requester, &req, &reason),
            );
            let mut details = json!({"name": req.name, "kind": req.resource});
            if !req.group.is_empty() {
                details["group"] = json!(req.group);
            }
            e.details = Some(details);
            return Err(e);
        }
    }
    user.extra = extra;
    if user.name != ANONYMOUS {
        if !user.in_group(AUTHENTICATED) && !user.in_group(UNAUTHENTICATED) {
            user.groups.push(AUTHENTICATED.into());
        }
    } else if !user.in_group(UNAUTHENTICATED) {
        user.groups.push(UNAUTHENTICATED.into());
    }
    Ok(Some(user))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Authorizer, Decision};

    /// Allows what `rules` lists as (requester, resource, name, namespace).
    struct Allow(Vec<(&'static str, &'static str, &'static str, &'static str)>);

    impl Authorizer for Allow {
        fn authorize(&self, user: &User, req: &RequestInfo) -> Decision {
            let resource = if req.subresource.is_empty() {
                req.resource.clone()
            } else {
                format!("{}/{}", req.resource, req.subresource)
            };
            let hit = self.0.iter().any(|(u, r, n, ns)| {
                *u == user.name
                    && *r == resource
                    && (n.is_empty() || *n == req.name)
                    && *ns == req.namespace
            });
            if hit && req.verb == "impersonate" {
                Decision::Allow
            } else {
                Decision::NoOpinion
            }
        }
    }

    fn chain(rules: Vec<(&'static str, &'static str, &'static str, &'static str)>) -> AuthChain {
        AuthChain {
            authorizers: vec![Box::new(Allow(rules))],
            ..Default::default()
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn alice() -> User {
        User {
            name: "alice".into(),
            groups: vec![AUTHENTICATED.into()],
            ..Default::default()
        }
    }

    #[test]
    fn no_headers_no_impersonation() {
        let c = chain(vec![]);
        assert_eq!(
            impersonate(&c, &alice(), &headers(&[("accept", "*/*")])).unwrap(),
            None
        );
    }

    #[test]
    fn a_user_with_groups_extras_and_uid() {
        let c = chain(vec![
            ("alice", "users", "bob", ""),
            ("alice", "groups", "", ""),
            ("alice", "userextras/scopes", "", ""),
            ("alice", "uids", "1234", ""),
        ]);
        let h = headers(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-Group", "ops"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Impersonate-Extra-Scopes", "edit"),
            ("Impersonate-Uid", "1234"),
        ]);
        let bob = impersonate(&c, &alice(), &h).unwrap().unwrap();
        assert_eq!(bob.name, "bob");
        assert_eq!(bob.uid, "1234");
        assert_eq!(bob.groups, ["devs", "ops", AUTHENTICATED]);
        assert_eq!(bob.extra["scopes"], ["view", "edit"]);
    }

    #[test]
    fn service_accounts_get_their_groups_and_are_checked_in_their_namespace() {
        let c = chain(vec![("alice", "serviceaccounts", "builder", "ci")]);
        let h = headers(&[("Impersonate-User", "system:serviceaccount:ci:builder")]);
        let sa = impersonate(&c, &alice(), &h).unwrap().unwrap();
        assert_eq!(sa.name, "system:serviceaccount:ci:builder");
        assert_eq!(
            sa.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ci",
                AUTHENTICATED
            ]
        );
        let h = headers(&[("Impersonate-User", "system:serviceaccount:other:builder")]);
        let e = impersonate(&c, &alice(), &h).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "serviceaccounts \"builder\" is forbidden: User \"alice\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"other\""
        );
    }

    #[test]
    fn refusals_name_what_was_refused() {
        let c = chain(vec![("alice", "users", "bob", "")]);
        let e = impersonate(&c, &alice(), &headers(&[("Impersonate-User", "carol")])).unwrap_err();
        assert_eq!(
            e.message,
            "users \"carol\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
        let h = headers(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Extra-Scopes", "x"),
        ]);
        let e = impersonate(&c, &alice(), &h).unwrap_err();
        assert_eq!(
            e.message,
            "userextras.authentication.k8s.io \"x\" is forbidden: User \"alice\" cannot impersonate resource \"userextras/scopes\" in API group \"authentication.k8s.io\" at the cluster scope"
        );
        let e = impersonate(&c, &alice(), &headers(&[("Impersonate-Group", "devs")])).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "requested [{Group  devs    }] without impersonating a user"
        );
    }

    #[test]
    fn anonymous_stays_unauthenticated() {
        let c = chain(vec![("alice", "users", "", "")]);
        let h = headers(&[("Impersonate-User", ANONYMOUS)]);
        let anon = impersonate(&c, &alice(), &h).unwrap().unwrap();
        assert_eq!(anon.groups, [UNAUTHENTICATED]);
    }

    #[test]
    fn extra_keys_are_unescaped() {
        assert_eq!(
            unescape_extra_key("example.com%2fscope"),
            "example.com/scope"
        );
        assert_eq!(unescape_extra_key("bad%zz"), "bad%zz");
    }
}
