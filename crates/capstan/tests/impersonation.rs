//! End to end: user impersonation (`kubectl --as`, `--as-group`, `--as-uid`, and a
//! kubeconfig's `as-user-extra`) against `capstan server`: the requester must be allowed to
//! `impersonate` each part, RBAC then judges the impersonated user, and the audit log records
//! both.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use support::{wait_until, Server};

const WAIT: Duration = Duration::from_secs(10);

/// A request kubectl makes without discovery and whose refusal it prints as the server
/// words it. (Commands that need discovery fail there first, which kubectl reports as
/// "Forbidden: unknown", as it does against Kubernetes.)
const RAW: [&str; 3] = ["get", "--raw", "/api/v1/namespaces/default/configmaps"];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(kc: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    support::kubectl(kc, args, stdin)
}

fn ok(kc: &Path, args: &[&str]) -> String {
    let out = run(kc, args, None);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// kubectl must be refused with 403; its stderr must hold `want`.
fn forbidden(kc: &Path, args: &[&str], want: &str) {
    let out = run(kc, args, None);
    let err = text(&out.stderr);
    assert!(
        !out.status.success() && err.contains("Forbidden") && err.contains(want),
        "kubectl {args:?}: expected 403 with\n  {want}\ngot:\n{err}"
    );
}

/// `auth whoami` with extra flags: (username, uid, groups).
fn whoami(kc: &Path, flags: &[&str]) -> (String, String, Vec<String>) {
    let mut args = vec!["auth", "whoami", "-o", "json"];
    args.extend_from_slice(flags);
    let review: Value = serde_json::from_str(&ok(kc, &args)).unwrap();
    let info = &review["status"]["userInfo"];
    let groups = info["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(String::from))
        .collect();
    let s = |k: &str| info[k].as_str().unwrap_or("").to_string();
    (s("username"), s("uid"), groups)
}

/// A kubeconfig for this server with `user` (YAML flow mapping) as its user entry.
fn kubeconfig(s: &Server, name: &str, user: &str) -> PathBuf {
    let dir = s.dir.path().join(format!("{name}-home"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    let ca = s.dir.path().join("pki/ca.crt");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    \
             server: https://127.0.0.1:{}\n    certificate-authority: {}\nusers:\n- name: u\n  \
             user: {user}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\n\
             current-context: c\n",
            s.port,
            ca.display()
        ),
    )
    .unwrap();
    path
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn impersonation_is_authorized_and_acts_as_the_impersonated_user() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    let audit = dir.path().join("audit.log");
    std::fs::write(
        &tokens,
        "alice-token,alice,u-alice\ncarol-token,carol,u-carol\n",
    )
    .unwrap();
    let s = Server::start_in(
        dir,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--audit-log-path",
            audit.to_str().unwrap(),
        ],
    );
    let admin = s.kubeconfig();
    let admin = admin.as_path();
    let alice = kubeconfig(&s, "alice", "{token: alice-token}");
    let carol = kubeconfig(&s, "carol", "{token: carol-token}");

    // --- The admin (system:masters) may impersonate anyone. ---
    let (name, _, groups) = whoami(admin, &["--as", "bob", "--as-group", "devs"]);
    assert_eq!(name, "bob");
    assert_eq!(groups, ["devs", "system:authenticated"]);
    let (name, uid, groups) = whoami(admin, &["--as", "bob", "--as-uid", "b-42"]);
    assert_eq!((name.as_str(), uid.as_str()), ("bob", "b-42"));
    assert_eq!(groups, ["system:authenticated"]);
    // A service account user gets its groups.
    let (name, _, groups) = whoami(admin, &["--as", "system:serviceaccount:default:builder"]);
    assert_eq!(name, "system:serviceaccount:default:builder");
    assert_eq!(
        groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ]
    );

    // --- RBAC decides for the impersonated user, not for the admin. ---
    forbidden(
        admin,
        &["get", "pods", "--as", "bob"],
        "pods is forbidden: User \"bob\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"",
    );
    ok(
        admin,
        &[
            "create",
            "rolebinding",
            "bob-view",
            "--clusterrole=view",
            "--user=bob",
            "-n",
            "default",
        ],
    );
    wait_until("bob may list pods", WAIT, || {
        run(admin, &["get", "pods", "--as", "bob"], None)
            .status
            .success()
    });
    // Groups asked for count too.
    forbidden(
        admin,
        &["get", "configmaps", "-n", "kube-public", "--as", "dave"],
        "User \"dave\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"kube-public\"",
    );
    ok(
        admin,
        &[
            "create",
            "rolebinding",
            "devs-view",
            "--clusterrole=view",
            "--group=devs",
            "-n",
            "kube-public",
        ],
    );
    wait_until("the devs group may list configmaps", WAIT, || {
        let args = [
            "get",
            "configmaps",
            "-n",
            "kube-public",
            "--as",
            "dave",
            "--as-group",
            "devs",
        ];
        run(admin, &args, None).status.success()
    });

    // --- Without the impersonate verb: 403, in Kubernetes' words. ---
    forbidden(
        &alice,
        &[RAW[0], RAW[1], RAW[2], "--as", "bob"],
        "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
    );
    forbidden(&alice, &["get", "pods", "--as", "bob"], "");
    forbidden(
        &alice,
        &[RAW[0], RAW[1], RAW[2], "--as", "system:serviceaccount:default:builder"],
        "serviceaccounts \"builder\" is forbidden: User \"alice\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"default\"",
    );

    // --- carol may impersonate bob and the devs group, nothing else. ---
    let impersonator = r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "bob-impersonator"}, "rules": [
        {"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["bob"]},
        {"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"], "resourceNames": ["devs"]}]}"#;
    let out = run(admin, &["create", "-f", "-"], Some(impersonator));
    assert!(out.status.success(), "{}", text(&out.stderr));
    ok(
        admin,
        &[
            "create",
            "clusterrolebinding",
            "carol-impersonates",
            "--clusterrole=bob-impersonator",
            "--user=carol",
        ],
    );
    wait_until("carol may impersonate bob", WAIT, || {
        run(&carol, &["auth", "whoami", "--as", "bob"], None)
            .status
            .success()
    });
    let (name, _, groups) = whoami(&carol, &["--as", "bob", "--as-group", "devs"]);
    assert_eq!(name, "bob");
    assert_eq!(groups, ["devs", "system:authenticated"]);
    // As bob, carol has bob's permissions (and not her own lack of them).
    ok(&carol, &["get", "pods", "--as", "bob"]);
    forbidden(
        &carol,
        &["get", "pods"],
        "User \"carol\" cannot list resource \"pods\"",
    );
    forbidden(
        &carol,
        &[RAW[0], RAW[1], RAW[2], "--as", "eve"],
        "users \"eve\" is forbidden: User \"carol\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
    );
    forbidden(
        &carol,
        &[RAW[0], RAW[1], RAW[2], "--as", "bob", "--as-group", "ops"],
        "groups \"ops\" is forbidden: User \"carol\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope",
    );
    forbidden(
        &carol,
        &[RAW[0], RAW[1], RAW[2], "--as", "bob", "--as-uid", "b-42"],
        "uids.authentication.k8s.io \"b-42\" is forbidden: User \"carol\" cannot impersonate resource \"uids\" in API group \"authentication.k8s.io\" at the cluster scope",
    );
    // User extras (from the kubeconfig) need userextras/<key>.
    let carol_scoped = kubeconfig(
        &s,
        "carol-scoped",
        "{token: carol-token, as: bob, as-user-extra: {scopes: [view]}}",
    );
    forbidden(
        &carol_scoped,
        &RAW,
        "userextras.authentication.k8s.io \"view\" is forbidden: User \"carol\" cannot impersonate resource \"userextras/scopes\" in API group \"authentication.k8s.io\" at the cluster scope",
    );
    let admin_scoped = kubeconfig(
        &s,
        "admin-scoped",
        &admin_user_with(admin, "as: bob, as-user-extra: {scopes: [view, edit]}"),
    );
    let review: Value =
        serde_json::from_str(&ok(&admin_scoped, &["auth", "whoami", "-o", "json"])).unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], "bob");
    assert_eq!(
        strings(&review["status"]["userInfo"]["extra"]["scopes"]),
        ["view", "edit"]
    );

    // --- The audit log names the requester and whom it acted as. ---
    wait_until("the audit log records carol acting as bob", WAIT, || {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|e| {
                e["user"]["username"] == "carol"
                    && e["impersonatedUser"]["username"] == "bob"
                    && strings(&e["impersonatedUser"]["groups"]) == ["system:authenticated"]
                    && e["objectRef"]["resource"] == "pods"
                    && e["responseStatus"]["code"] == 200
            })
    });
}

/// The admin kubeconfig's credentials (client certificate and key, inline) as a flow
/// mapping, with `more` added.
fn admin_user_with(admin: &Path, more: &str) -> String {
    let kc = std::fs::read_to_string(admin).unwrap();
    let field = |key: &str| {
        kc.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("{key} in the admin kubeconfig"))
            .to_string()
    };
    format!(
        "{{client-certificate-data: {}, client-key-data: {}, {more}}}",
        field("client-certificate-data"),
        field("client-key-data")
    )
}
