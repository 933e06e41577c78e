//! Independent client libraries against `capstan server`: kube-rs (Rust) and the official
//! Python client.

mod support;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Config};
use support::Server;

async fn client(s: &Server) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(s.kubeconfig()).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_works_against_capstan() {
    let s = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let client = client(&s).await;
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.git_version, "v1.32.0");

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"kube-system".to_string()), "{names:?}");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // A watcher started first sees the object appear.
    let mut events = watcher(
        cms.clone(),
        watcher::Config::default().labels("from=kube-rs"),
    )
    .applied_objects()
    .boxed();
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "rs", "labels": {"from": "kube-rs"}},
        "data": {"k": "v"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), events.try_next())
        .await
        .expect("watch event in time")
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("rs"));

    let patched = cms
        .patch(
            "rs",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"k": "v2"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["k"], "v2");
    let err = cms.create(&PostParams::default(), &cm).await.unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("expected a 409 Status, got {other}"),
    }
    cms.delete("rs", &DeleteParams::default()).await.unwrap();
    assert!(cms.get_opt("rs").await.unwrap().is_none());
}

#[test]
fn python_client_works_against_capstan() {
    let s = Server::start();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/client_check.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(s.kubeconfig())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python client failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python client OK"));
}

/// A kube-rs controller's way of writing: a CustomResourceDefinition, then its objects through
/// server-side apply (`Patch::Apply`), spec and status, with conflicts between managers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_applies_custom_resources() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

    let s = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let client = client(&s).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer"},
                        "ports": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "required": ["name"], "properties": {
                                "name": {"type": "string"}, "port": {"type": "integer"}}}}}},
                    "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}}
            }]
        }
    }))
    .unwrap();
    let pp = PatchParams::apply("widget-controller");
    crds.patch("widgets.example.com", &pp, &Patch::Apply(&crd))
        .await
        .unwrap();
    let established = kube::runtime::wait::await_condition(
        crds.clone(),
        "widgets.example.com",
        kube::runtime::conditions::is_crd_established(),
    );
    tokio::time::timeout(std::time::Duration::from_secs(20), established)
        .await
        .expect("established in time")
        .unwrap();

    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let ar = ApiResource::from_gvk(&gvk);
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let desired = serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 3, "ports": [{"name": "http", "port": 80}]}
    });
    // Served as soon as it is established; retry briefly for the discovery of the handler.
    let mut applied = None;
    for _ in 0..50 {
        match widgets.patch("w1", &pp, &Patch::Apply(&desired)).await {
            Ok(o) => {
                applied = Some(o);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
    let w = applied.expect("the widget applies");
    assert_eq!(w.data["spec"]["size"], 3);
    let mf = w.metadata.managed_fields.clone().unwrap_or_default();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("widget-controller"));

    // A second manager adds a port (list of map type: merged by name, no conflict).
    let other = PatchParams::apply("port-adder");
    let w = widgets
        .patch(
            "w1",
            &other,
            &Patch::Apply(serde_json::json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w1"},
                "spec": {"ports": [{"name": "metrics", "port": 9090}]}
            })),
        )
        .await
        .unwrap();
    let ports: Vec<&str> = w.data["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(ports, vec!["http", "metrics"]);
    // ...but changing the size the controller owns conflicts.
    let err = widgets
        .patch(
            "w1",
            &other,
            &Patch::Apply(serde_json::json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w1"}, "spec": {"size": 9}
            })),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert!(
                s.message.contains("conflict with \"widget-controller\""),
                "{}",
                s.message
            );
        }
        other => panic!("expected a 409, got {other}"),
    }
    // Status through the status subresource, by apply.
    let w = widgets
        .patch_status(
            "w1",
            &pp,
            &Patch::Apply(serde_json::json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w1"}, "status": {"ready": true}
            })),
        )
        .await
        .unwrap();
    assert_eq!(w.data["status"]["ready"], true);
    assert_eq!(w.data["spec"]["size"], 3);
}
