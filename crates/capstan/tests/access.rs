//! End to end: access control (authentication, RBAC, the Node authorizer, admission, audit)
//! with the real kubectl against `capstan server`, each identity through its own kubeconfig.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use capstan_apiserver::authn::serviceaccount::DEFAULT_ISSUER;
use capstan_apiserver::authn::{ObjectRef, ServiceAccountTokens};
use capstan_apiserver::objects::MemoryObjects;
use capstan_pki::{Pki, PkiOptions};
use serde_json::Value;
use support::Server;

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// kubectl with `kubeconfig`, optionally fed `stdin`.
fn run(kc: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    support::kubectl(kc, args, stdin)
}

/// kubectl must succeed; its stdout.
fn ok(kc: &Path, args: &[&str]) -> String {
    ok_in(kc, args, None)
}

fn ok_in(kc: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = run(kc, args, stdin);
    assert!(
        out.status.success(),
        "kubectl --kubeconfig {} {args:?} failed:\n{}",
        kc.display(),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// kubectl must fail; its stderr.
fn fails_in(kc: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = run(kc, args, stdin);
    assert!(
        !out.status.success(),
        "kubectl --kubeconfig {} {args:?} unexpectedly succeeded:\n{}",
        kc.display(),
        text(&out.stdout)
    );
    text(&out.stderr)
}

/// Where a forbidden request was aimed: Kubernetes' wording of the scope.
fn scope(ns: Option<&str>) -> String {
    match ns {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".into(),
    }
}

/// kubectl must be refused with 403, in Kubernetes' words.
#[allow(clippy::too_many_arguments)]
fn forbidden_in(
    kc: &Path,
    args: &[&str],
    stdin: Option<&str>,
    user: &str,
    verb: &str,
    resource: &str,
    group: &str,
    ns: Option<&str>,
) {
    let err = fails_in(kc, args, stdin);
    let want = format!(
        "User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {}",
        scope(ns)
    );
    assert!(
        err.contains("forbidden") && err.contains(&want),
        "kubectl {args:?}: expected 403 with\n  {want}\ngot:\n{err}"
    );
}

fn forbidden(
    kc: &Path,
    args: &[&str],
    user: &str,
    verb: &str,
    resource: &str,
    group: &str,
    ns: Option<&str>,
) {
    forbidden_in(kc, args, None, user, verb, resource, group, ns)
}

/// kubectl must be refused with 401.
fn unauthorized(kc: &Path, args: &[&str]) {
    let err = fails_in(kc, args, None);
    assert!(
        err.contains("Unauthorized"),
        "kubectl {args:?}: expected 401, got:\n{err}"
    );
}

/// `kubectl auth can-i`: exit 0 with "yes", or exit 1 with "no".
fn can_i(kc: &Path, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let out = run(kc, &all, None);
    let answer = text(&out.stdout);
    match (out.status.code(), answer.trim()) {
        (Some(0), "yes") => true,
        (Some(1), "no") => false,
        (code, _) => panic!(
            "kubectl {all:?}: exit {code:?}, stdout {answer:?}, stderr {}",
            text(&out.stderr)
        ),
    }
}

/// Poll `f` until it succeeds (at most 10 s).
fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => panic!("{what}: still not so after 10 s: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// A kubeconfig for this server with `user` (a YAML flow mapping) as its credentials.
fn kubeconfig(s: &Server, name: &str, user: &str) -> PathBuf {
    let dir = s.dir.path();
    let path = dir.join(format!("{name}.kubeconfig"));
    let ca = dir.join("pki").join(capstan_pki::CA_CERT_FILE);
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: capstan\n  cluster:\n    \
             server: https://127.0.0.1:{}\n    certificate-authority: {}\nusers:\n- name: {name}\n  \
             user: {user}\ncontexts:\n- name: {name}\n  context: {{cluster: capstan, user: {name}}}\n\
             current-context: {name}\n",
            s.port,
            ca.display()
        ),
    )
    .unwrap();
    path
}

fn token_kubeconfig(s: &Server, name: &str, token: &str) -> PathBuf {
    kubeconfig(s, name, &format!("{{token: {}}}", Value::from(token)))
}

/// A kubeconfig presenting a client certificate (PEM cert and key).
fn cert_kubeconfig(s: &Server, name: &str, (cert, key): &(String, String)) -> PathBuf {
    let dir = s.dir.path();
    let (crt_path, key_path) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&crt_path, cert).unwrap();
    std::fs::write(&key_path, key).unwrap();
    kubeconfig(
        s,
        name,
        &format!(
            "{{client-certificate: {}, client-key: {}}}",
            crt_path.display(),
            key_path.display()
        ),
    )
}

/// `auth whoami`: (username, groups).
fn whoami(kc: &Path) -> (String, Vec<String>) {
    let review = json(&ok(kc, &["auth", "whoami", "-o", "json"]));
    let info = &review["status"]["userInfo"];
    let groups = info["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(String::from))
        .collect();
    (info["username"].as_str().unwrap_or("").to_string(), groups)
}

fn create_namespace(admin: &Path, ns: &str) {
    ok(admin, &["create", "namespace", ns]);
    // Pods need the namespace's default service account, which appears shortly after.
    eventually(&format!("serviceaccount default in {ns}"), || {
        let out = run(admin, &["get", "serviceaccount", "default", "-n", ns], None);
        out.status
            .success()
            .then_some(())
            .ok_or_else(|| text(&out.stderr))
    });
}

/// An object as the admin reads it, with one more label: a valid update of it (it keeps the
/// resourceVersion, so kubectl replace PUTs it without reading it first).
fn relabelled(admin: &Path, kind: &str, name: &str, ns: &str) -> String {
    let mut obj = json(&ok(admin, &["get", kind, name, "-n", ns, "-o", "json"]));
    obj["metadata"]["labels"]["touched"] = Value::from("yes");
    obj.to_string()
}

/// Signs service-account tokens with the key of the PKI in `dir` (created if missing).
fn signer(dir: &Path) -> ServiceAccountTokens {
    let pki = Pki::load_or_create(dir, PkiOptions::default()).unwrap();
    ServiceAccountTokens::new(
        Arc::new(pki),
        String::new(),
        Vec::new(),
        Arc::new(MemoryObjects::default()),
    )
}

/// Authentication, RBAC, escalation checks, validation of RBAC objects, service-account
/// tokens and the audit log, on a server with a token file and an audit log.
#[test]
fn rbac_authentication_and_audit() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    let audit = dir.path().join("audit.log");
    std::fs::write(
        &tokens,
        "alice-token,alice,u-alice,\"devs\"\nbob-token,bob,u-bob\n",
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
    let alice = token_kubeconfig(&s, "alice", "alice-token");
    let alice = alice.as_path();
    let bob = token_kubeconfig(&s, "bob", "bob-token");
    let bob = bob.as_path();

    // The admin sets up namespace team with one object of each kind.
    create_namespace(admin, "team");
    ok(admin, &["create", "configmap", "c0", "-n", "team"]);
    ok(admin, &["create", "secret", "generic", "s0", "-n", "team"]);
    ok(
        admin,
        &["create", "deployment", "d0", "--image=nginx", "-n", "team"],
    );
    ok(admin, &["run", "p0", "--image=nginx", "-n", "team"]);

    // --- 1. alice has no access to team until she is bound to a role there ---
    let team = Some("team");
    let kinds = [
        ("pods", "pods", "", "p0"),
        ("configmaps", "configmaps", "", "c0"),
        ("deployments.apps", "deployments", "apps", "d0"),
        ("secrets", "secrets", "", "s0"),
    ];
    let updates: Vec<String> = kinds
        .iter()
        .map(|(kind, _, _, name)| relabelled(admin, kind, name, "team"))
        .collect();
    for ((kind, resource, group, name), update) in kinds.iter().zip(&updates) {
        let f = |args: &[&str], verb| forbidden(alice, args, "alice", verb, resource, group, team);
        f(&["get", kind, "-n", "team"], "list");
        f(&["get", kind, name, "-n", "team"], "get");
        f(&["delete", kind, name, "-n", "team"], "delete");
        forbidden_in(
            alice,
            &["replace", "-f", "-"],
            Some(update),
            "alice",
            "update",
            resource,
            group,
            team,
        );
    }
    let creates: [(&[&str], &str, &str); 4] = [
        (&["run", "p1", "--image=nginx", "-n", "team"], "pods", ""),
        (
            &["create", "configmap", "c1", "-n", "team"],
            "configmaps",
            "",
        ),
        (
            &["create", "deployment", "d1", "--image=nginx", "-n", "team"],
            "deployments",
            "apps",
        ),
        (
            &["create", "secret", "generic", "s1", "-n", "team"],
            "secrets",
            "",
        ),
    ];
    for (args, resource, group) in creates {
        forbidden(alice, args, "alice", "create", resource, group, team);
    }
    // Nothing was changed by the refused requests.
    assert!(!ok(admin, &["get", "cm", "c0", "-n", "team", "-o", "json"]).contains("touched"));
    assert!(ok(admin, &["get", "pods", "-n", "team", "-o", "name"]).contains("pod/p0"));

    ok(
        admin,
        &[
            "create",
            "rolebinding",
            "alice-edit",
            "--clusterrole=edit",
            "--user=alice",
            "-n",
            "team",
        ],
    );
    eventually("alice may list pods in team", || {
        can_i(alice, &["list", "pods", "-n", "team"])
            .then_some(())
            .ok_or_else(|| "no".to_string())
    });
    for ((kind, _, _, name), update) in kinds.iter().zip(&updates) {
        let listed = ok(alice, &["get", kind, "-n", "team", "-o", "name"]);
        assert!(listed.contains(&format!("/{name}\n")), "{kind}: {listed}");
        ok(alice, &["get", kind, name, "-n", "team"]);
        ok_in(alice, &["replace", "-f", "-"], Some(update));
        let labels = ok(
            admin,
            &[
                "get",
                kind,
                name,
                "-n",
                "team",
                "-o",
                "jsonpath={.metadata.labels.touched}",
            ],
        );
        assert_eq!(labels, "yes", "{kind} {name} was updated by alice");
    }
    for (args, _, _) in creates {
        ok(alice, args);
    }
    for (kind, name) in [
        ("pods", "p1"),
        ("configmaps", "c1"),
        ("deployments.apps", "d1"),
        ("secrets", "s1"),
    ] {
        ok(alice, &["delete", kind, name, "-n", "team", "--wait=false"]);
        let err = fails_in(admin, &["get", kind, name, "-n", "team"], None);
        assert!(err.contains("not found"), "{kind} {name} deleted: {err}");
    }
    // Still nothing elsewhere, nor on cluster-scoped resources.
    forbidden(
        alice,
        &["get", "pods", "-n", "default"],
        "alice",
        "list",
        "pods",
        "",
        Some("default"),
    );
    forbidden(
        alice,
        &["create", "configmap", "x", "-n", "default"],
        "alice",
        "create",
        "configmaps",
        "",
        Some("default"),
    );
    forbidden(alice, &["get", "nodes"], "alice", "list", "nodes", "", None);
    forbidden(
        alice,
        &["get", "namespaces"],
        "alice",
        "list",
        "namespaces",
        "",
        None,
    );

    // --- 3. can-i, its --list, and whoami ---
    let table: [(&[&str], bool); 7] = [
        (&["get", "pods", "-n", "team"], true),
        (&["create", "deployments.apps", "-n", "team"], true),
        (&["get", "secrets", "-n", "team"], true),
        (&["get", "pods", "-n", "default"], false),
        (&["list", "nodes"], false),
        (&["create", "rolebindings", "-n", "team"], false),
        (
            &["create", "roles.rbac.authorization.k8s.io", "-n", "team"],
            false,
        ),
    ];
    for (args, want) in table {
        assert_eq!(can_i(alice, args), want, "alice: can-i {args:?}");
    }
    assert!(can_i(admin, &["*", "*"]), "the admin can do anything");
    assert!(
        !can_i(bob, &["get", "pods", "-n", "team"]),
        "bob has no role"
    );
    let rules = ok(alice, &["auth", "can-i", "--list", "-n", "team"]);
    let pods = rules
        .lines()
        .find(|l| l.starts_with("pods "))
        .unwrap_or_else(|| panic!("can-i --list lacks pods:\n{rules}"));
    for verb in ["get", "list", "create", "delete"] {
        assert!(pods.contains(verb), "pods rule lacks {verb}: {pods}");
    }
    let (name, groups) = whoami(alice);
    assert_eq!(name, "alice");
    for g in ["devs", "system:authenticated"] {
        assert!(groups.iter().any(|x| x == g), "alice's groups: {groups:?}");
    }
    let table = ok(alice, &["auth", "whoami"]);
    assert!(
        table.contains("alice") && table.contains("[devs system:authenticated]"),
        "{table}"
    );

    // --- 7. no escalation through roles and bindings ---
    create_namespace(admin, "esc");
    ok(
        admin,
        &[
            "create",
            "rolebinding",
            "alice-admin",
            "--clusterrole=admin",
            "--user=alice",
            "-n",
            "esc",
        ],
    );
    eventually("alice may create rolebindings in esc", || {
        can_i(alice, &["create", "rolebindings", "-n", "esc"])
            .then_some(())
            .ok_or_else(|| "no".to_string())
    });
    let err = fails_in(
        alice,
        &[
            "create",
            "rolebinding",
            "grab",
            "--clusterrole=cluster-admin",
            "--user=alice",
            "-n",
            "esc",
        ],
        None,
    );
    assert!(
        err.contains(r#"rolebindings.rbac.authorization.k8s.io "grab" is forbidden"#)
            && err.contains("attempting to grant RBAC permissions not currently held"),
        "{err}"
    );
    // admin may read resource quotas but not create them: nor may a role alice writes.
    let err = fails_in(
        alice,
        &[
            "create",
            "role",
            "quota-maker",
            "--verb=create",
            "--resource=resourcequotas",
            "-n",
            "esc",
        ],
        None,
    );
    assert!(
        err.contains("attempting to grant RBAC permissions not currently held")
            && err.contains("resourcequotas"),
        "{err}"
    );
    for missing in ["rolebinding/grab", "role/quota-maker"] {
        let err = fails_in(admin, &["get", missing, "-n", "esc"], None);
        assert!(err.contains("not found"), "{missing}: {err}");
    }
    // What she holds she may hand on.
    ok(
        alice,
        &[
            "create",
            "role",
            "pod-reader",
            "--verb=get",
            "--resource=pods",
            "-n",
            "esc",
        ],
    );
    ok(
        alice,
        &[
            "create",
            "rolebinding",
            "bob-view",
            "--clusterrole=view",
            "--user=bob",
            "-n",
            "esc",
        ],
    );
    eventually("bob may list pods in esc", || {
        can_i(bob, &["list", "pods", "-n", "esc"])
            .then_some(())
            .ok_or_else(|| "no".to_string())
    });
    assert!(!can_i(bob, &["create", "pods", "-n", "esc"]));
    assert!(!can_i(bob, &["list", "pods", "-n", "team"]));

    // --- 8. an invalid RoleBinding is 422 ---
    let bad = "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
               metadata: {name: bad, namespace: esc}\n\
               roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Foo, name: view}\n\
               subjects: [{kind: User, name: bob, apiGroup: rbac.authorization.k8s.io}]\n";
    let err = fails_in(admin, &["create", "-f", "-", "-v=6"], Some(bad));
    assert!(
        err.contains("422 Unprocessable Entity"),
        "expected a 422 response:\n{err}"
    );
    assert!(
        err.contains(r#"The RoleBinding "bad" is invalid"#)
            && err.contains(r#"roleRef.kind: Unsupported value: "Foo""#),
        "{err}"
    );

    // --- 2. service-account tokens ---
    ok(admin, &["create", "serviceaccount", "robot", "-n", "team"]);
    let robot_user = "system:serviceaccount:team:robot";
    let token = ok(admin, &["create", "token", "robot", "-n", "team"]);
    let robot = token_kubeconfig(&s, "robot", token.trim());
    let robot = robot.as_path();
    let (name, groups) = whoami(robot);
    assert_eq!(name, robot_user);
    for g in [
        "system:serviceaccounts",
        "system:serviceaccounts:team",
        "system:authenticated",
    ] {
        assert!(groups.iter().any(|x| x == g), "robot's groups: {groups:?}");
    }
    forbidden(
        robot,
        &["get", "pods", "-n", "team"],
        robot_user,
        "list",
        "pods",
        "",
        team,
    );
    ok(
        admin,
        &[
            "create",
            "rolebinding",
            "robot-view",
            "--clusterrole=view",
            "--serviceaccount=team:robot",
            "-n",
            "team",
        ],
    );
    eventually("robot may list pods in team", || {
        let out = run(robot, &["get", "pods", "-n", "team", "-o", "name"], None);
        out.status
            .success()
            .then(|| text(&out.stdout))
            .filter(|o| o.contains("pod/p0"))
            .ok_or_else(|| text(&out.stderr))
    });
    forbidden(
        robot,
        &["delete", "pod", "p0", "-n", "team"],
        robot_user,
        "delete",
        "pods",
        "",
        team,
    );

    // A token bound to a secret lives as long as the secret.
    ok(admin, &["create", "secret", "generic", "s1", "-n", "team"]);
    let bound = ok(
        admin,
        &[
            "create",
            "token",
            "robot",
            "-n",
            "team",
            "--bound-object-kind",
            "Secret",
            "--bound-object-name",
            "s1",
        ],
    );
    let robot_s1 = token_kubeconfig(&s, "robot-s1", bound.trim());
    let robot_s1 = robot_s1.as_path();
    assert_eq!(whoami(robot_s1).0, robot_user);
    ok(robot_s1, &["get", "pods", "-n", "team"]);

    // Tokens signed with the server's own key: good while valid, refused once expired.
    let pki_dir = s.dir.path().join("pki");
    let ours = signer(&pki_dir);
    assert!(
        Pki::load_or_create(&pki_dir, PkiOptions::default())
            .unwrap()
            .written_files()
            .is_empty(),
        "loading the server's PKI must not rewrite it"
    );
    let uid = ok(
        admin,
        &[
            "get",
            "sa",
            "robot",
            "-n",
            "team",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    );
    let sa = ObjectRef::new("robot", uid.trim());
    let audiences = [DEFAULT_ISSUER.to_string()];
    let now = SystemTime::now();
    let (fresh, _) = ours.issue_bound("team", &sa, &audiences, 3600, None, now);
    assert_eq!(
        whoami(&token_kubeconfig(&s, "forged-fresh", &fresh)).0,
        robot_user,
        "a valid token signed with the server's key authenticates"
    );
    let an_hour_and_ten_ago = now - Duration::from_secs(70 * 60);
    let (expired, expiry) =
        ours.issue_bound("team", &sa, &audiences, 600, None, an_hour_and_ten_ago);
    assert!(expiry + Duration::from_secs(3000) < now);
    unauthorized(
        &token_kubeconfig(&s, "expired", &expired),
        &["get", "pods", "-n", "team"],
    );
    // Signed by another key, or not a token at all.
    let elsewhere = tempfile::tempdir().unwrap();
    let other_pki_dir = elsewhere.path().join("pki");
    let (foreign, _) = signer(&other_pki_dir).issue_bound("team", &sa, &audiences, 3600, None, now);
    unauthorized(
        &token_kubeconfig(&s, "foreign", &foreign),
        &["get", "pods", "-n", "team"],
    );
    unauthorized(
        &token_kubeconfig(&s, "garbage", "not-a-token"),
        &["get", "pods", "-n", "team"],
    );
    unauthorized(
        &token_kubeconfig(&s, "tampered", &format!("{}x", token.trim())),
        &["get", "pods", "-n", "team"],
    );

    ok(admin, &["delete", "secret", "s1", "-n", "team"]);
    eventually("the secret-bound token is refused", || {
        let out = run(robot_s1, &["get", "pods", "-n", "team"], None);
        let err = text(&out.stderr);
        (!out.status.success() && err.contains("Unauthorized"))
            .then_some(())
            .ok_or(err)
    });
    // The unbound token still works; then goes with its service account.
    ok(robot, &["get", "pods", "-n", "team"]);
    ok(admin, &["delete", "serviceaccount", "robot", "-n", "team"]);
    eventually("the token of a deleted service account is refused", || {
        let out = run(robot, &["get", "pods", "-n", "team"], None);
        let err = text(&out.stderr);
        (!out.status.success() && err.contains("Unauthorized"))
            .then_some(())
            .ok_or(err)
    });
    unauthorized(
        &token_kubeconfig(&s, "forged-fresh-2", &fresh),
        &["get", "pods", "-n", "team"],
    );

    // --- 6. client certificates: the cluster CA's are users; another CA's are 401 ---
    let cluster_ca = Pki::load_or_create(&pki_dir, PkiOptions::default()).unwrap();
    let carol = cluster_ca
        .issue_client_cert("carol", &["devs"], Duration::from_secs(3600))
        .unwrap();
    let (name, groups) = whoami(&cert_kubeconfig(&s, "carol", &carol));
    assert_eq!(name, "carol");
    assert!(groups.iter().any(|g| g == "devs"), "{groups:?}");
    let other_ca = Pki::load_or_create(&other_pki_dir, PkiOptions::default()).unwrap();
    let impostor = other_ca
        .issue_client_cert(
            "kubernetes-admin",
            &["system:masters"],
            Duration::from_secs(3600),
        )
        .unwrap();
    let impostor = cert_kubeconfig(&s, "impostor", &impostor);
    unauthorized(&impostor, &["get", "--raw", "/api/v1/namespaces"]);
    unauthorized(&impostor, &["get", "secrets", "-A"]);

    // --- 6. no credentials at all: 401 (anonymous auth is off by default) ---
    // kubectl asks for a user name and password when a kubeconfig has no credentials, so the
    // request without any is sent with kube-rs.
    let anonymous = kubeconfig(&s, "anonymous", "{}");
    let status = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let kc = kube::config::Kubeconfig::read_from(&anonymous).unwrap();
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .unwrap();
            let client = kube::Client::try_from(config).unwrap();
            let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                kube::Api::all(client);
            namespaces.list(&Default::default()).await
        });
    match status {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 401, "{status:?}");
            assert_eq!(status.reason, "Unauthorized", "{status:?}");
        }
        other => panic!("an unauthenticated list must be 401, got {other:?}"),
    }

    // --- 9. the audit log records alice's refused requests ---
    let (username, groups) = eventually("alice's 403 in the audit log", || {
        let log = std::fs::read_to_string(&audit).unwrap_or_default();
        log.lines()
            .map(json)
            .find(|e| {
                e["user"]["username"] == "alice"
                    && e["responseStatus"]["code"] == 403
                    && e["verb"] == "list"
                    && e["objectRef"]["resource"] == "pods"
                    && e["objectRef"]["namespace"] == "team"
            })
            .map(|e| (e["user"]["username"].clone(), e["user"]["groups"].clone()))
            .ok_or_else(|| format!("{} lines, none matching", log.lines().count()))
    });
    assert_eq!(username, "alice");
    assert!(
        groups
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g == "devs")),
        "{groups}"
    );
    let log = std::fs::read_to_string(&audit).unwrap();
    let event = log
        .lines()
        .map(json)
        .find(|e| e["user"]["username"] == "alice" && e["verb"] == "create")
        .expect("alice's creates are audited");
    assert_eq!(event["kind"], "Event");
    assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
}

/// The Node authorizer, and the LimitRanger and ResourceQuota admission plugins.
#[test]
fn node_authorizer_and_admission() {
    let s = Server::start();
    let admin = s.kubeconfig();
    let admin = admin.as_path();
    let kubelet = s.dir.path().join("components/kubelet.kubeconfig");
    let kubelet = kubelet.as_path();
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_ascii_lowercase();
    let node_user = format!("system:node:{node}");

    // --- 4. a node reads what its pods need, and nothing else ---
    let (name, groups) = whoami(kubelet);
    assert_eq!(name, node_user);
    assert!(groups.iter().any(|g| g == "system:nodes"), "{groups:?}");
    create_namespace(admin, "team");
    ok(
        admin,
        &[
            "create",
            "secret",
            "generic",
            "mounted",
            "--from-literal=k=v",
            "-n",
            "team",
        ],
    );
    ok(
        admin,
        &["create", "secret", "generic", "other", "-n", "team"],
    );
    ok_in(
        admin,
        &["create", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: here, namespace: team}}\n\
             spec:\n  nodeName: {node}\n  containers: [{{name: c, image: nginx}}]\n  \
             volumes: [{{name: s, secret: {{secretName: mounted}}}}]\n\
             ---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: there, namespace: team}}\n\
             spec:\n  nodeName: n2\n  containers: [{{name: c, image: nginx}}]\n"
        )),
    );
    let team = Some("team");
    let data = eventually("the node reads the secret its pod mounts", || {
        let out = run(
            kubelet,
            &[
                "get",
                "secret",
                "mounted",
                "-n",
                "team",
                "-o",
                "jsonpath={.data.k}",
            ],
            None,
        );
        out.status
            .success()
            .then(|| text(&out.stdout))
            .ok_or_else(|| text(&out.stderr))
    });
    assert_eq!(data, "dg==", "base64 of v");
    forbidden(
        kubelet,
        &["get", "secret", "other", "-n", "team"],
        &node_user,
        "get",
        "secrets",
        "",
        team,
    );
    forbidden(
        kubelet,
        &["get", "secrets", "-n", "team"],
        &node_user,
        "list",
        "secrets",
        "",
        team,
    );
    assert_eq!(
        ok(kubelet, &["get", "pod", "here", "-n", "team", "-o", "name"]).trim(),
        "pod/here"
    );
    forbidden(
        kubelet,
        &["get", "pod", "there", "-n", "team"],
        &node_user,
        "get",
        "pods",
        "",
        team,
    );
    forbidden(
        kubelet,
        &["get", "pods", "-A"],
        &node_user,
        "list",
        "pods",
        "",
        None,
    );
    let mine = ok(
        kubelet,
        &[
            "get",
            "pods",
            "-A",
            "--field-selector",
            &format!("spec.nodeName={node}"),
            "-o",
            "name",
        ],
    );
    assert_eq!(mine.trim(), "pod/here", "only the node's own pods");
    // Its own Node (absent here: 404, not 403), but no other.
    let err = fails_in(kubelet, &["get", "node", &node], None);
    assert!(
        err.contains(&format!(r#"nodes "{node}" not found"#)),
        "{err}"
    );
    forbidden(
        kubelet,
        &["get", "node", "n2"],
        &node_user,
        "get",
        "nodes",
        "",
        None,
    );
    // The node cannot write what is not its own.
    forbidden(
        kubelet,
        &["delete", "secret", "mounted", "-n", "team"],
        &node_user,
        "delete",
        "secrets",
        "",
        team,
    );

    // --- 5. LimitRange defaults and maxima ---
    create_namespace(admin, "q");
    ok_in(
        admin,
        &["create", "-f", "-"],
        Some(
            "apiVersion: v1\nkind: LimitRange\nmetadata: {name: mem, namespace: q}\n\
             spec:\n  limits:\n  - type: Container\n    default: {memory: 512Mi}\n    \
             max: {memory: 1Gi}\n",
        ),
    );
    ok(admin, &["get", "limitrange", "mem", "-n", "q"]);
    ok(admin, &["run", "plain", "--image=nginx", "-n", "q"]);
    let resources = json(&ok(
        admin,
        &[
            "get",
            "pod",
            "plain",
            "-n",
            "q",
            "-o",
            "jsonpath={.spec.containers[0].resources}",
        ],
    ));
    assert_eq!(resources["limits"]["memory"], "512Mi", "{resources}");
    let pod = |name: &str, memory: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: q}}\nspec:\n  \
             containers: [{{name: c, image: nginx, resources: {{limits: {{memory: {memory}}}}}}}]\n"
        )
    };
    let err = fails_in(admin, &["create", "-f", "-"], Some(&pod("big", "2Gi")));
    assert!(
        err.contains(
            r#"pods "big" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi"#
        ),
        "{err}"
    );
    ok_in(admin, &["create", "-f", "-"], Some(&pod("fits", "1Gi")));

    // --- 5. ResourceQuota, created before any pod of its namespace ---
    create_namespace(admin, "quota");
    ok(
        admin,
        &["create", "quota", "one-pod", "--hard=pods=1", "-n", "quota"],
    );
    ok(admin, &["get", "resourcequota", "one-pod", "-n", "quota"]);
    ok(admin, &["run", "first", "--image=nginx", "-n", "quota"]);
    let err = fails_in(
        admin,
        &["run", "second", "--image=nginx", "-n", "quota"],
        None,
    );
    assert!(
        err.contains(r#"pods "second" is forbidden: exceeded quota: one-pod"#)
            && err.contains("limited: pods=1"),
        "{err}"
    );
    let used = ok(
        admin,
        &[
            "get",
            "quota",
            "one-pod",
            "-n",
            "quota",
            "-o",
            "jsonpath={.status.used.pods}",
        ],
    );
    assert_eq!(used, "1");
    let pods = ok(admin, &["get", "pods", "-n", "quota", "-o", "name"]);
    assert_eq!(pods.trim(), "pod/first");
}
