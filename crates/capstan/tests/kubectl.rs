//! End to end: the real kubectl v1.32 against `capstan server`.

mod support;

use serde_json::Value;
use support::Server;

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn kubectl_talks_to_capstan() {
    let s = Server::start();

    // Version and discovery.
    let v = json(&s.ok(&["version", "-o", "json"]));
    assert_eq!(v["serverVersion"]["gitVersion"], "v1.32.0");
    let resources = s.ok(&["api-resources"]);
    for needle in [
        "pods",
        "deployments",
        "apps/v1",
        "rbac.authorization.k8s.io/v1",
        "po ",
    ] {
        assert!(
            resources.contains(needle),
            "api-resources lacks {needle}:\n{resources}"
        );
    }
    let versions = s.ok(&["api-versions"]);
    assert!(versions.lines().any(|l| l == "batch/v1"), "{versions}");

    // The system namespaces exist from the start.
    let ns = s.ok(&["get", "namespaces", "-o", "name"]);
    for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(ns.contains(&format!("namespace/{n}")), "{ns}");
    }

    // Create, read back in every output format.
    s.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  labels: {app: web, tier: front}\ndata:\n  k: v\n",
    );
    let cm = json(&s.ok(&["get", "configmap", "cfg", "-o", "json"]));
    assert_eq!(cm["data"]["k"], "v");
    assert!(cm["metadata"]["uid"]
        .as_str()
        .is_some_and(|u| u.len() == 36));
    assert!(cm["metadata"]["resourceVersion"].as_str().is_some());
    assert!(s.ok(&["get", "cm", "cfg", "-o", "yaml"]).contains("k: v"));
    assert_eq!(s.ok(&["get", "cm", "cfg", "-o", "jsonpath={.data.k}"]), "v");
    assert_eq!(
        s.ok(&["get", "cm", "-l", "app=web", "-o", "name"]).trim(),
        "configmap/cfg"
    );
    assert_eq!(
        s.ok(&["get", "cm", "-l", "app!=web", "-o", "name"]).trim(),
        // Every namespace has its CA bundle.
        "configmap/kube-root-ca.crt"
    );
    assert_eq!(
        s.ok(&[
            "get",
            "cm",
            "--field-selector",
            "metadata.name=cfg",
            "-o",
            "name"
        ])
        .trim(),
        "configmap/cfg"
    );
    let table = s.ok(&["get", "cm", "cfg"]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("DATA") && table.contains("cfg"), "{table}");

    // Label, annotate, the three patch types, replace.
    s.ok(&["label", "cm", "cfg", "env=prod"]);
    s.ok(&["annotate", "cm", "cfg", "note=hello"]);
    s.ok(&[
        "patch",
        "cm",
        "cfg",
        "--type=merge",
        "-p",
        r#"{"data":{"m":"1"}}"#,
    ]);
    s.ok(&[
        "patch",
        "cm",
        "cfg",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/data/j","value":"2"}]"#,
    ]);
    s.ok(&["patch", "cm", "cfg", "-p", r#"{"data":{"s":"3"}}"#]);
    let cm = json(&s.ok(&["get", "cm", "cfg", "-o", "json"]));
    assert_eq!(cm["metadata"]["labels"]["env"], "prod");
    assert_eq!(cm["metadata"]["annotations"]["note"], "hello");
    for (k, v) in [("m", "1"), ("j", "2"), ("s", "3"), ("k", "v")] {
        assert_eq!(cm["data"][k], v, "{cm}");
    }

    // Apply twice with a change: client-side three-way apply removes what was dropped.
    s.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  labels: {app: web}\ndata:\n  k: v2\n",
    );
    let cm = json(&s.ok(&["get", "cm", "cfg", "-o", "json"]));
    assert_eq!(cm["data"]["k"], "v2");
    assert!(cm["metadata"]["labels"].get("tier").is_none(), "{cm}");

    // A stale update is a conflict.
    let mut stale = cm.clone();
    s.ok(&[
        "patch",
        "cm",
        "cfg",
        "--type=merge",
        "-p",
        r#"{"data":{"x":"y"}}"#,
    ]);
    stale["data"]["k"] = Value::String("stale".into());
    let err = String::from_utf8(
        s.kubectl_stdin(&["replace", "-f", "-"], &stale.to_string())
            .stderr,
    )
    .unwrap();
    assert!(err.contains("the object has been modified"), "{err}");
    let mut fresh = json(&s.ok(&["get", "cm", "cfg", "-o", "json"]));
    fresh["data"]["k"] = Value::String("replaced".into());
    s.ok_stdin(&["replace", "-f", "-"], &fresh.to_string());
    assert_eq!(
        s.ok(&["get", "cm", "cfg", "-o", "jsonpath={.data.k}"]),
        "replaced"
    );

    // Errors as Kubernetes words them.
    let err = s.fails(&["get", "cm", "missing"]);
    assert!(err.contains(r#"configmaps "missing" not found"#), "{err}");
    let err = s.fails(&["create", "configmap", "cfg"]);
    assert!(err.contains(r#"configmaps "cfg" already exists"#), "{err}");
    let err = s.fails(&["create", "configmap", "x", "-n", "nope"]);
    assert!(err.contains(r#"namespaces "nope" not found"#), "{err}");
    let err = s.fails(&["create", "configmap", "Bad_Name"]);
    assert!(err.contains("RFC 1123"), "{err}");

    // Delete.
    s.ok(&["delete", "cm", "cfg"]);
    let err = s.fails(&["get", "cm", "cfg"]);
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn chunked_lists_page_through_every_object() {
    let s = Server::start();
    let mut yaml = String::new();
    for i in 0..1200 {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i:04}\n  labels: {{batch: \"{}\"}}\ndata: {{i: \"{i}\"}}\n",
            i % 2
        ));
    }
    s.ok_stdin(&["create", "-f", "-"], &yaml);
    let names = s.ok(&["get", "cm", "--chunk-size=100", "-o", "name"]);
    let got: Vec<&str> = names
        .lines()
        .filter(|l| l.starts_with("configmap/c"))
        .collect();
    assert_eq!(got.len(), 1200);
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(got, sorted, "pages come in key order");
    let half = s.ok(&[
        "get",
        "cm",
        "-l",
        "batch=1",
        "--chunk-size=70",
        "-o",
        "name",
    ]);
    assert_eq!(half.lines().count(), 600);
    // The raw API reports remainingItemCount on a page.
    let page = json(&s.ok(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/configmaps?limit=500",
    ]));
    assert_eq!(page["items"].as_array().unwrap().len(), 500);
    assert!(page["metadata"]["continue"].as_str().is_some());
    let total = json(&s.ok(&["get", "--raw", "/api/v1/namespaces/default/configmaps"]))["items"]
        .as_array()
        .unwrap()
        .len() as i64;
    assert_eq!(page["metadata"]["remainingItemCount"], total - 500);
}
