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
