//! End to end: server-side apply and managedFields with the real kubectl.

mod support;

use serde_json::Value;
use support::Server;

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn deployment(replicas: u32, image: &str, extra_label: Option<&str>) -> String {
    let label = extra_label
        .map(|l| format!("\n    {l}: \"yes\""))
        .unwrap_or_default();
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    app: web{label}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n"
    )
}

/// `(manager, operation)` of each managedFields entry.
fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or("").to_string(),
                        e["operation"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn entry<'a>(obj: &'a Value, manager: &str) -> &'a Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["manager"] == manager))
        .unwrap_or_else(|| panic!("no entry for {manager}: {obj}"))
}

#[test]
fn server_side_apply_owns_fields_and_reports_conflicts() {
    let s = Server::start();
    // First apply creates, owned by "kubectl" (Apply).
    s.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &deployment(2, "nginx:1", None),
    );
    let d = json(&s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "json",
        "--show-managed-fields",
    ]));
    assert_eq!(
        managers(&d),
        vec![("kubectl".to_string(), "Apply".to_string())],
        "{d}"
    );
    let kubectl = entry(&d, "kubectl");
    assert_eq!(kubectl["apiVersion"], "apps/v1");
    assert_eq!(kubectl["fieldsType"], "FieldsV1");
    assert!(
        kubectl["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
            .get("k:{\"name\":\"web\"}")
            .is_some(),
        "{kubectl}"
    );
    assert!(kubectl["fieldsV1"]["f:spec"].get("f:replicas").is_some());
    let rv = d["metadata"]["resourceVersion"].clone();

    // Applying the same configuration again changes nothing.
    s.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &deployment(2, "nginx:1", None),
    );
    let d = json(&s.ok(&["get", "deploy", "web", "-o", "json"]));
    assert_eq!(d["metadata"]["resourceVersion"], rv);

    // Another manager sets replicas differently: a conflict naming the owner and field.
    let out = s.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager=autoscaler",
            "-f",
            "-",
        ],
        &deployment(5, "nginx:1", None),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"),
        "{stderr}"
    );
    let d = json(&s.ok(&["get", "deploy", "web", "-o", "json"]));
    assert_eq!(d["spec"]["replicas"], 2);

    // Forced, the field moves to the new manager.
    s.ok_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager=autoscaler",
            "--force-conflicts",
            "-f",
            "-",
        ],
        &deployment(5, "nginx:1", None),
    );
    let d = json(&s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "json",
        "--show-managed-fields",
    ]));
    assert_eq!(d["spec"]["replicas"], 5);
    assert!(entry(&d, "autoscaler")["fieldsV1"]["f:spec"]
        .get("f:replicas")
        .is_some());
    assert!(entry(&d, "kubectl")["fieldsV1"]["f:spec"]
        .get("f:replicas")
        .is_none());

    // A label the first manager stops applying (and no one else owns) is removed.
    s.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &deployment(5, "nginx:1", Some("tier")),
    );
    let d = json(&s.ok(&["get", "deploy", "web", "-o", "json"]));
    assert_eq!(d["metadata"]["labels"]["tier"], "yes");
    s.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &deployment(5, "nginx:1", None),
    );
    let d = json(&s.ok(&["get", "deploy", "web", "-o", "json"]));
    assert!(d["metadata"]["labels"].get("tier").is_none(), "{d}");

    // Ordinary writes are recorded too (operation Update).
    s.ok(&["label", "deploy", "web", "team=a"]);
    let d = json(&s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "json",
        "--show-managed-fields",
    ]));
    let label = entry(&d, "kubectl-label");
    assert_eq!(label["operation"], "Update");
    assert!(label["fieldsV1"]["f:metadata"]["f:labels"]
        .get("f:team")
        .is_some());

    // Bad input: not YAML, no field manager.
    let out = s.kubectl(&["patch", "deploy", "web", "--type=merge", "-p", "{"]);
    assert!(!out.status.success());
    let raw = s.kubectl(&[
        "get",
        "--raw",
        "/apis/apps/v1/namespaces/default/deployments/web",
    ]);
    assert!(raw.status.success());
}

#[test]
fn client_side_and_server_side_apply_hand_over() {
    let s = Server::start();
    // Client-side apply first: kubectl-client-side-apply owns the fields (Update).
    s.ok_stdin(&["apply", "-f", "-"], &deployment(2, "nginx:1", None));
    let d = json(&s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "json",
        "--show-managed-fields",
    ]));
    assert!(
        managers(&d).contains(&("kubectl-client-side-apply".into(), "Update".into())),
        "{d}"
    );
    assert!(
        d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );

    // Server-side apply of a changed configuration takes over without conflicts.
    s.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &deployment(3, "nginx:2", None),
    );
    let d = json(&s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "json",
        "--show-managed-fields",
    ]));
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    assert!(
        managers(&d).contains(&("kubectl".into(), "Apply".into())),
        "{d}"
    );
    // The last-applied annotation follows the server-side apply.
    let last = d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .unwrap_or("");
    assert!(last.contains("nginx:2"), "{last}");

    // And client-side apply works again afterwards.
    s.ok_stdin(&["apply", "-f", "-"], &deployment(4, "nginx:3", None));
    let d = json(&s.ok(&["get", "deploy", "web", "-o", "json"]));
    assert_eq!(d["spec"]["replicas"], 4);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:3"
    );
}
