//! The REST operations of every catalogue resource, in one neutral form that the Swagger 2.0
//! and OpenAPI 3.0 writers both render.

use std::collections::BTreeMap;

use crate::catalogue::{self, ResourceInfo};
use crate::schema::BuiltinDefinitions;

pub(crate) const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
pub(crate) const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
pub(crate) const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";
pub(crate) const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
pub(crate) const API_RESOURCE_LIST: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList";
pub(crate) const API_GROUP: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroup";
pub(crate) const API_GROUP_LIST: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroupList";
pub(crate) const API_VERSIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIVersions";
pub(crate) const VERSION_INFO: &str = "io.k8s.apimachinery.pkg.version.Info";
const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";
const EVICTION: &str = "io.k8s.api.policy.v1.Eviction";
const BINDING: &str = "io.k8s.api.core.v1.Binding";
const TOKEN_REQUEST: &str = "io.k8s.api.authentication.v1.TokenRequest";

/// Media types of object responses: what the API server encodes.
pub(crate) const OBJECT_MEDIA: &[&str] = &["application/json", "application/yaml"];
/// Lists can also be watched through `?watch=true`.
pub(crate) const LIST_MEDIA: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/json;stream=watch",
];
pub(crate) const WATCH_MEDIA: &[&str] = LIST_MEDIA;
pub(crate) const TEXT_MEDIA: &[&str] = &["application/json", "application/yaml", "text/plain"];
pub(crate) const ANY_MEDIA: &[&str] = &["*/*"];
pub(crate) const PATCH_MEDIA: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];
pub(crate) const PATCH_MEDIA_SMP: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    fn new(group: &str, version: &str, kind: &str) -> Gvk {
        Gvk {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Location {
    Path,
    Query,
}

impl Location {
    pub fn as_str(self) -> &'static str {
        match self {
            Location::Path => "path",
            Location::Query => "query",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Param {
    pub name: &'static str,
    pub location: Location,
    pub ty: &'static str,
    pub description: String,
}

/// What a request or response body holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Payload {
    Definition(String),
    Text,
}

#[derive(Debug, Clone)]
pub(crate) struct Response {
    pub code: &'static str,
    pub description: &'static str,
    pub body: Option<(Payload, &'static [&'static str])>,
}

#[derive(Debug, Clone)]
pub(crate) struct Operation {
    /// Lower-case HTTP method.
    pub method: &'static str,
    /// `x-kubernetes-action`, absent on discovery endpoints.
    pub action: Option<&'static str>,
    pub id: String,
    pub description: String,
    pub params: Vec<Param>,
    pub body: Option<(Payload, &'static [&'static str])>,
    pub responses: Vec<Response>,
    pub gvk: Option<Gvk>,
    pub tag: String,
}

/// URL path → operations, before parameters shared by all of a path's operations are hoisted.
pub(crate) type Paths = BTreeMap<String, Vec<Operation>>;

/// "rbac.authorization.k8s.io" → "RbacAuthorization"; "" → "Core".
pub(crate) fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    let trimmed = group.strip_suffix(".k8s.io").unwrap_or(group);
    trimmed
        .split(['.', '-'])
        .map(capitalize)
        .collect::<Vec<_>>()
        .concat()
}

/// Tag of a group-version's operations: "core_v1", "rbacAuthorization_v1".
pub(crate) fn tag(group: &str, version: &str) -> String {
    let g = group_camel(group);
    let mut chars = g.chars();
    let first = chars.next().map(|c| c.to_ascii_lowercase());
    format!(
        "{}{}_{version}",
        first.map(String::from).unwrap_or_default(),
        chars.as_str()
    )
}

pub(crate) fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

/// "/api/v1" or "/apis/apps/v1".
pub(crate) fn url_prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

fn param(name: &'static str, location: Location, ty: &'static str, description: &str) -> Param {
    Param {
        name,
        location,
        ty,
        description: description.to_string(),
    }
}

fn q(name: &'static str, ty: &'static str, description: &str) -> Param {
    param(name, Location::Query, ty, description)
}

fn pretty() -> Param {
    q("pretty", "string", "Indent the response when 'true'.")
}

fn namespace_param() -> Param {
    param(
        "namespace",
        Location::Path,
        "string",
        "The namespace the object lives in.",
    )
}

fn name_param(kind: &str) -> Param {
    param(
        "name",
        Location::Path,
        "string",
        &format!("The name of the {kind}."),
    )
}

fn list_params() -> Vec<Param> {
    vec![
        q(
            "allowWatchBookmarks",
            "boolean",
            "Ask a watch for BOOKMARK events, which carry only a resourceVersion.",
        ),
        q(
            "continue",
            "string",
            "The continue token of a previous, paginated list response.",
        ),
        q(
            "fieldSelector",
            "string",
            "Only objects whose fields match this selector.",
        ),
        q(
            "labelSelector",
            "string",
            "Only objects whose labels match this selector.",
        ),
        q(
            "limit",
            "integer",
            "At most this many items; the response carries a continue token for the rest.",
        ),
        q(
            "resourceVersion",
            "string",
            "The resource version the list or watch starts from (see resourceVersionMatch).",
        ),
        q(
            "resourceVersionMatch",
            "string",
            "How resourceVersion applies to a list: Exact or NotOlderThan.",
        ),
        q(
            "sendInitialEvents",
            "boolean",
            "Start a watch with synthetic ADDED events for the current objects.",
        ),
        q(
            "timeoutSeconds",
            "integer",
            "End the list or watch call after this many seconds.",
        ),
        q(
            "watch",
            "boolean",
            "Stream changes (ADDED, MODIFIED, DELETED) instead of returning a list.",
        ),
    ]
}

fn write_params() -> Vec<Param> {
    vec![
        q(
            "dryRun",
            "string",
            "'All' runs every stage of the request without persisting anything.",
        ),
        q(
            "fieldManager",
            "string",
            "The name of the actor making the change, recorded in managedFields.",
        ),
        q(
            "fieldValidation",
            "string",
            "What to do with unknown or duplicate fields in the body: Ignore, Warn or Strict.",
        ),
    ]
}

fn delete_params() -> Vec<Param> {
    vec![
        q(
            "dryRun",
            "string",
            "'All' runs every stage of the request without persisting anything.",
        ),
        q(
            "gracePeriodSeconds",
            "integer",
            "Seconds before the object is deleted; 0 deletes at once.",
        ),
        q(
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            "boolean",
            "Delete an object that cannot be read from storage, skipping the normal checks.",
        ),
        q(
            "orphanDependents",
            "boolean",
            "Deprecated in favour of propagationPolicy: orphan the dependents.",
        ),
        q(
            "propagationPolicy",
            "string",
            "How dependents are garbage collected: Orphan, Background or Foreground.",
        ),
    ]
}

fn merge(mut a: Vec<Param>, b: Vec<Param>) -> Vec<Param> {
    for p in b {
        if !a
            .iter()
            .any(|x| x.name == p.name && x.location == p.location)
        {
            a.push(p);
        }
    }
    a
}

fn ok(payload: Payload, media: &'static [&'static str]) -> Response {
    Response {
        code: "200",
        description: "OK",
        body: Some((payload, media)),
    }
}

fn resp(code: &'static str, description: &'static str, def: &str) -> Response {
    Response {
        code,
        description,
        body: Some((Payload::Definition(def.to_string()), OBJECT_MEDIA)),
    }
}

fn unauthorized() -> Response {
    Response {
        code: "401",
        description: "Unauthorized",
        body: None,
    }
}

/// Builds the operations of one group-version.
struct GvBuilder<'a> {
    defs: &'a BuiltinDefinitions,
    smp: bool,
    paths: Paths,
}

/// One resource's naming, shared by its operations.
struct Res<'r> {
    info: &'r ResourceInfo,
    /// "CoreV1"
    gv: String,
    /// "Namespaced" or ""
    ns: &'static str,
    def: String,
    list_def: Option<String>,
    gvk: Gvk,
    tag: String,
}

impl Res<'_> {
    fn id(&self, verb: &str, middle: &str, suffix: &str) -> String {
        format!(
            "{verb}{}{middle}{}{}{suffix}",
            self.gv, self.ns, self.info.kind
        )
    }

    fn scope_params(&self) -> Vec<Param> {
        if self.info.namespaced {
            vec![namespace_param()]
        } else {
            vec![]
        }
    }

    fn item_params(&self) -> Vec<Param> {
        let mut p = vec![name_param(self.info.kind)];
        p.extend(self.scope_params());
        p
    }
}

impl GvBuilder<'_> {
    #[allow(clippy::too_many_arguments)]
    fn op(
        &mut self,
        path: &str,
        method: &'static str,
        action: &'static str,
        id: String,
        description: String,
        params: Vec<Param>,
        body: Option<(Payload, &'static [&'static str])>,
        responses: Vec<Response>,
        gvk: &Gvk,
        tag: &str,
    ) {
        let mut responses = responses;
        responses.push(unauthorized());
        self.paths
            .entry(path.to_string())
            .or_default()
            .push(Operation {
                method,
                action: Some(action),
                id,
                description,
                params,
                body,
                responses,
                gvk: Some(gvk.clone()),
                tag: tag.to_string(),
            });
    }

    fn patch_media(&self) -> &'static [&'static str] {
        if self.smp {
            PATCH_MEDIA_SMP
        } else {
            PATCH_MEDIA
        }
    }

    /// get / put / patch of an object (the object itself or a subresource with its own kind).
    #[allow(clippy::too_many_arguments)]
    fn read_write(
        &mut self,
        r: &Res<'_>,
        path: &str,
        suffix: &str,
        def: &str,
        gvk: &Gvk,
        what: &str,
        verbs: (bool, bool, bool),
    ) {
        let (get, put, patch) = verbs;
        let base = merge(r.item_params(), vec![pretty()]);
        let payload = || Payload::Definition(def.to_string());
        if get {
            self.op(
                path,
                "get",
                "get",
                r.id("read", "", suffix),
                format!("Read {what}."),
                base.clone(),
                None,
                vec![ok(payload(), OBJECT_MEDIA)],
                gvk,
                &r.tag,
            );
        }
        if put {
            self.op(
                path,
                "put",
                "put",
                r.id("replace", "", suffix),
                format!("Replace {what}."),
                merge(base.clone(), write_params()),
                Some((payload(), ANY_MEDIA)),
                vec![resp("200", "OK", def), resp("201", "Created", def)],
                gvk,
                &r.tag,
            );
        }
        if patch {
            let media = self.patch_media();
            self.op(
                path,
                "patch",
                "patch",
                r.id("patch", "", suffix),
                format!("Partially update {what}."),
                merge(
                    merge(base, write_params()),
                    vec![q(
                        "force",
                        "boolean",
                        "Take over fields other managers own (apply patches only).",
                    )],
                ),
                Some((Payload::Definition(PATCH.to_string()), media)),
                vec![resp("200", "OK", def), resp("201", "Created", def)],
                gvk,
                &r.tag,
            );
        }
    }

    fn create(
        &mut self,
        r: &Res<'_>,
        path: &str,
        id: String,
        def: &str,
        gvk: &Gvk,
        params: Vec<Param>,
    ) {
        let what = gvk.kind.clone();
        self.op(
            path,
            "post",
            "post",
            id,
            format!("Create a {what}."),
            merge(merge(params, vec![pretty()]), write_params()),
            Some((Payload::Definition(def.to_string()), ANY_MEDIA)),
            vec![
                resp("200", "OK", def),
                resp("201", "Created", def),
                resp("202", "Accepted", def),
            ],
            gvk,
            &r.tag,
        );
    }

    fn resource(&mut self, info: &ResourceInfo) {
        let Some(k) = self.defs.kind(info.group, info.version, info.kind) else {
            return;
        };
        let r = Res {
            info,
            gv: format!("{}{}", group_camel(info.group), capitalize(info.version)),
            ns: if info.namespaced { "Namespaced" } else { "" },
            def: k.definition.clone(),
            list_def: k.list.as_ref().map(|(_, d)| d.clone()),
            gvk: Gvk::new(info.group, info.version, info.kind),
            tag: tag(info.group, info.version),
        };
        let prefix = url_prefix(info.group, info.version);
        let kind = info.kind;
        let collection = if info.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", info.plural)
        } else {
            format!("{prefix}/{}", info.plural)
        };
        let item = format!("{collection}/{{name}}");
        let def = r.def.clone();
        let gvk = r.gvk.clone();

        // The collection.
        if info.has_verb("list") {
            if let Some(list_def) = &r.list_def {
                let params = merge(merge(r.scope_params(), vec![pretty()]), list_params());
                self.op(
                    &collection,
                    "get",
                    "list",
                    r.id("list", "", ""),
                    format!("List or watch {kind} objects."),
                    params.clone(),
                    None,
                    vec![ok(Payload::Definition(list_def.clone()), LIST_MEDIA)],
                    &gvk,
                    &r.tag,
                );
                if info.namespaced {
                    self.op(
                        &format!("{prefix}/{}", info.plural),
                        "get",
                        "list",
                        format!("list{}{kind}ForAllNamespaces", r.gv),
                        format!("List or watch {kind} objects of every namespace."),
                        merge(vec![pretty()], list_params()),
                        None,
                        vec![ok(Payload::Definition(list_def.clone()), LIST_MEDIA)],
                        &gvk,
                        &r.tag,
                    );
                }
            }
        }
        if info.has_verb("create") {
            self.create(
                &r,
                &collection,
                r.id("create", "", ""),
                &def,
                &gvk,
                r.scope_params(),
            );
        }
        if info.has_verb("deletecollection") {
            let params = merge(
                merge(r.scope_params(), vec![pretty()]),
                merge(delete_params(), list_params()),
            )
            .into_iter()
            .filter(|p| p.name != "watch" && p.name != "allowWatchBookmarks")
            .collect();
            self.op(
                &collection,
                "delete",
                "deletecollection",
                r.id("delete", "Collection", ""),
                format!("Delete a collection of {kind} objects."),
                params,
                Some((Payload::Definition(DELETE_OPTIONS.into()), ANY_MEDIA)),
                vec![resp("200", "OK", STATUS)],
                &gvk,
                &r.tag,
            );
        }

        // One object.
        let what = format!("the named {kind}");
        self.read_write(
            &r,
            &item,
            "",
            &def,
            &gvk,
            &what,
            (
                info.has_verb("get"),
                info.has_verb("update"),
                info.has_verb("patch"),
            ),
        );
        if info.has_verb("delete") {
            self.op(
                &item,
                "delete",
                "delete",
                r.id("delete", "", ""),
                format!("Delete a {kind}."),
                merge(merge(r.item_params(), vec![pretty()]), delete_params()),
                Some((Payload::Definition(DELETE_OPTIONS.into()), ANY_MEDIA)),
                vec![resp("200", "OK", STATUS), resp("202", "Accepted", STATUS)],
                &gvk,
                &r.tag,
            );
        }

        // Watch endpoints (deprecated in favour of ?watch=true, still served).
        if info.has_verb("watch") {
            let watch_prefix = format!("{prefix}/watch");
            let watch_collection = if info.namespaced {
                format!("{watch_prefix}/namespaces/{{namespace}}/{}", info.plural)
            } else {
                format!("{watch_prefix}/{}", info.plural)
            };
            let event = || vec![ok(Payload::Definition(WATCH_EVENT.into()), WATCH_MEDIA)];
            self.op(
                &watch_collection,
                "get",
                "watchlist",
                r.id("watch", "", "List"),
                format!("Watch {kind} objects (deprecated: list with watch=true)."),
                merge(merge(r.scope_params(), vec![pretty()]), list_params()),
                None,
                event(),
                &gvk,
                &r.tag,
            );
            self.op(
                &format!("{watch_collection}/{{name}}"),
                "get",
                "watch",
                r.id("watch", "", ""),
                format!("Watch one {kind} (deprecated: list with watch=true and a fieldSelector)."),
                merge(merge(r.item_params(), vec![pretty()]), list_params()),
                None,
                event(),
                &gvk,
                &r.tag,
            );
            if info.namespaced {
                self.op(
                    &format!("{watch_prefix}/{}", info.plural),
                    "get",
                    "watchlist",
                    format!("watch{}{kind}ListForAllNamespaces", r.gv),
                    format!("Watch {kind} objects of every namespace (deprecated)."),
                    merge(vec![pretty()], list_params()),
                    None,
                    event(),
                    &gvk,
                    &r.tag,
                );
            }
        }

        for sub in info.subresources {
            self.subresource(&r, &item, sub);
        }
    }

    fn subresource(&mut self, r: &Res<'_>, item: &str, sub: &str) {
        let info = r.info;
        let kind = info.kind;
        let path = format!("{item}/{sub}");
        let suffix = capitalize(sub);
        let own = r.gvk.clone();
        let rw = (
            info.has_verb("get"),
            info.has_verb("update"),
            info.has_verb("patch"),
        );
        match sub {
            "status" | "ephemeralcontainers" | "resize" | "approval" => {
                let what = format!("the {sub} of the named {kind}");
                self.read_write(r, &path, &suffix, &r.def, &own, &what, rw);
            }
            "scale" => {
                let what = format!("the scale of the named {kind}");
                let gvk = Gvk::new("autoscaling", "v1", "Scale");
                self.read_write(r, &path, &suffix, SCALE, &gvk, &what, rw);
            }
            "finalize" => {
                let params = merge(merge(r.item_params(), vec![pretty()]), write_params());
                self.op(
                    &path,
                    "put",
                    "put",
                    r.id("replace", "", &suffix),
                    format!("Replace the finalizers of the named {kind}."),
                    params,
                    Some((Payload::Definition(r.def.clone()), ANY_MEDIA)),
                    vec![resp("200", "OK", &r.def), resp("201", "Created", &r.def)],
                    &own,
                    &r.tag,
                );
            }
            "binding" | "eviction" | "token" => {
                let (def, gvk) = match sub {
                    "binding" => (BINDING, Gvk::new("", "v1", "Binding")),
                    "eviction" => (EVICTION, Gvk::new("policy", "v1", "Eviction")),
                    _ => (
                        TOKEN_REQUEST,
                        Gvk::new("authentication.k8s.io", "v1", "TokenRequest"),
                    ),
                };
                self.create(
                    r,
                    &path,
                    r.id("create", "", &suffix),
                    def,
                    &gvk,
                    r.item_params(),
                );
            }
            "log" => {
                let params = merge(
                    merge(r.item_params(), vec![pretty()]),
                    vec![
                        q("container", "string", "The container whose log to read."),
                        q("follow", "boolean", "Stream the log as it grows."),
                        q(
                            "insecureSkipTLSVerifyBackend",
                            "boolean",
                            "Do not verify the kubelet's serving certificate.",
                        ),
                        q("limitBytes", "integer", "Stop after this many bytes."),
                        q(
                            "previous",
                            "boolean",
                            "Read the log of the previous, terminated container.",
                        ),
                        q(
                            "sinceSeconds",
                            "integer",
                            "Only lines newer than this many seconds.",
                        ),
                        q("stream", "string", "Which stream: All, Stdout or Stderr."),
                        q("tailLines", "integer", "Only this many lines from the end."),
                        q("timestamps", "boolean", "Prefix every line with its time."),
                    ],
                );
                self.op(
                    &path,
                    "get",
                    "get",
                    r.id("read", "", &suffix),
                    format!("Read the log of the named {kind}."),
                    params,
                    None,
                    vec![ok(Payload::Text, TEXT_MEDIA)],
                    &own,
                    &r.tag,
                );
            }
            "exec" | "attach" | "portforward" => {
                let options = match sub {
                    "exec" => "PodExecOptions",
                    "attach" => "PodAttachOptions",
                    _ => "PodPortForwardOptions",
                };
                let gvk = Gvk::new("", "v1", options);
                let streams = || {
                    vec![
                        q("container", "string", "The container to connect to."),
                        q("stderr", "boolean", "Connect standard error."),
                        q("stdin", "boolean", "Connect standard input."),
                        q("stdout", "boolean", "Connect standard output."),
                        q("tty", "boolean", "Allocate a terminal."),
                    ]
                };
                let extra = match sub {
                    "exec" => {
                        let mut v = vec![q("command", "string", "The command to run.")];
                        v.extend(streams());
                        v
                    }
                    "attach" => streams(),
                    _ => vec![q("ports", "integer", "The ports to forward.")],
                };
                for method in ["get", "post"] {
                    self.connect(
                        r,
                        &path,
                        method,
                        &suffix,
                        "",
                        merge(r.item_params(), extra.clone()),
                        &gvk,
                    );
                }
            }
            "proxy" => {
                let gvk = Gvk::new("", "v1", &format!("{kind}ProxyOptions"));
                let query_path = q("path", "string", "The path to forward to.");
                let with_path = format!("{path}/{{path}}");
                for method in ["delete", "get", "head", "options", "patch", "post", "put"] {
                    self.connect(
                        r,
                        &path,
                        method,
                        &suffix,
                        "",
                        merge(r.item_params(), vec![query_path.clone()]),
                        &gvk,
                    );
                    let mut params = r.item_params();
                    params.push(param(
                        "path",
                        Location::Path,
                        "string",
                        "The path to forward to.",
                    ));
                    params.push(query_path.clone());
                    self.connect(r, &with_path, method, &suffix, "WithPath", params, &gvk);
                }
            }
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn connect(
        &mut self,
        r: &Res<'_>,
        path: &str,
        method: &'static str,
        suffix: &str,
        with: &str,
        params: Vec<Param>,
        gvk: &Gvk,
    ) {
        let id = format!(
            "connect{}{}{}{}{suffix}{with}",
            r.gv,
            capitalize(method),
            r.ns,
            r.info.kind
        );
        self.op(
            path,
            method,
            "connect",
            id,
            format!(
                "Connect {} requests to {} of the named {}.",
                method.to_ascii_uppercase(),
                suffix.to_ascii_lowercase(),
                r.info.kind
            ),
            params,
            None,
            vec![ok(Payload::Text, ANY_MEDIA)],
            gvk,
            &r.tag,
        );
    }
}

/// Every operation of one group-version, with its discovery endpoint (`/api/v1/`).
pub(crate) fn group_version_paths(
    defs: &BuiltinDefinitions,
    group: &str,
    version: &str,
    smp: bool,
) -> Paths {
    let mut b = GvBuilder {
        defs,
        smp,
        paths: Paths::new(),
    };
    let gv = format!("{}{}", group_camel(group), capitalize(version));
    b.paths.insert(
        format!("{}/", url_prefix(group, version)),
        vec![discovery_op(
            format!("get{gv}APIResources"),
            "Get the resources of the group-version.",
            API_RESOURCE_LIST,
            tag(group, version),
        )],
    );
    for info in catalogue::RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        b.resource(info);
    }
    b.paths
}

pub(crate) fn discovery_op(id: String, description: &str, def: &str, tag: String) -> Operation {
    Operation {
        method: "get",
        action: None,
        id,
        description: description.to_string(),
        params: vec![],
        body: None,
        responses: vec![
            ok(Payload::Definition(def.to_string()), OBJECT_MEDIA),
            unauthorized(),
        ],
        gvk: None,
        tag,
    }
}

/// Every group-version the catalogue serves, core first: (group, version, "api/v1" form).
pub(crate) fn served_group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for r in catalogue::RESOURCES {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// Split a path's parameters into those every operation shares (which move to the path) and
/// each operation's own, all sorted by name.
pub(crate) fn hoist(ops: &mut [Operation]) -> Vec<Param> {
    let mut shared: Vec<Param> = match ops.first() {
        Some(first) => first
            .params
            .iter()
            .filter(|p| {
                ops.iter().all(|op| {
                    op.params
                        .iter()
                        .any(|x| x.name == p.name && x.location == p.location)
                })
            })
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    for op in ops.iter_mut() {
        op.params.retain(|p| {
            !shared
                .iter()
                .any(|s| s.name == p.name && s.location == p.location)
        });
        op.params
            .sort_by(|a, b| (a.name, a.location).cmp(&(b.name, b.location)));
    }
    shared.sort_by(|a, b| (a.name, a.location).cmp(&(b.name, b.location)));
    shared
}
