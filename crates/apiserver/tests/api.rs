//! The API server's semantics, through its full request pipeline in-process (no TLS hop).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use capstan_apiserver::auth::{
    AuthChain, ConnInfo, InProcessAuthenticator, MastersAuthorizer, User,
};
use capstan_apiserver::{ApiServer, Config};
use capstan_store::embedded::EmbeddedStore;
use http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::{json, Value};

struct Api {
    server: Arc<ApiServer>,
    conn: ConnInfo,
    _dir: tempfile::TempDir,
}

struct Resp {
    code: u16,
    body: Value,
    headers: http::HeaderMap,
}

async fn api() -> Api {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let auth = AuthChain {
        authenticators: vec![Box::new(InProcessAuthenticator)],
        authorizers: vec![Box::new(MastersAuthorizer)],
        ..Default::default()
    };
    let server = ApiServer::new(store, auth, Config::default())
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
    Api {
        server,
        conn,
        _dir: dir,
    }
}

impl Api {
    async fn call(&self, method: Method, uri: &str, content_type: &str, body: &str) -> Resp {
        let mut req = Request::builder().method(method).uri(uri);
        if !content_type.is_empty() {
            req = req.header("content-type", content_type);
        }
        let req = req.body(Bytes::from(body.to_string())).unwrap();
        let resp = self.server.handle(req, &self.conn).await;
        let code = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
        Resp {
            code,
            body,
            headers,
        }
    }

    async fn get(&self, uri: &str) -> Resp {
        self.call(Method::GET, uri, "", "").await
    }

    async fn post(&self, uri: &str, body: Value) -> Resp {
        self.call(Method::POST, uri, "application/json", &body.to_string())
            .await
    }

    async fn put(&self, uri: &str, body: Value) -> Resp {
        self.call(Method::PUT, uri, "application/json", &body.to_string())
            .await
    }

    async fn patch(&self, uri: &str, ct: &str, body: Value) -> Resp {
        self.call(Method::PATCH, uri, ct, &body.to_string()).await
    }

    async fn delete(&self, uri: &str) -> Resp {
        self.call(Method::DELETE, uri, "", "").await
    }
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"app": "a"}}, "data": {"k": "v"}})
}

#[tokio::test]
async fn create_get_update_delete_follow_kubernetes() {
    let a = api().await;
    let r = a.post(CMS, cm("one")).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let rv = r.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(r.body["metadata"]["namespace"], "default");
    assert!(r.body["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .ends_with('Z'));

    let got = a.get(&format!("{CMS}/one")).await;
    assert_eq!(got.code, 200);
    assert_eq!(got.body["metadata"]["resourceVersion"], rv.as_str());

    let dup = a.post(CMS, cm("one")).await;
    assert_eq!(
        (dup.code, dup.body["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );
    assert_eq!(dup.body["message"], "configmaps \"one\" already exists");

    let mut upd = got.body.clone();
    upd["data"]["k"] = json!("v2");
    // A body without a namespace takes the URL's, as in Kubernetes.
    upd["metadata"].as_object_mut().unwrap().remove("namespace");
    let r = a.put(&format!("{CMS}/one"), upd.clone()).await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_ne!(r.body["metadata"]["resourceVersion"], rv.as_str());
    // The same body again is stale now.
    let stale = a.put(&format!("{CMS}/one"), upd).await;
    assert_eq!(
        (stale.code, stale.body["reason"].as_str()),
        (409, Some("Conflict"))
    );
    assert!(stale.body["message"]
        .as_str()
        .unwrap()
        .contains("the object has been modified"));

    let gone = a.delete(&format!("{CMS}/one")).await;
    assert_eq!(gone.code, 200, "{}", gone.body);
    let missing = a.get(&format!("{CMS}/one")).await;
    assert_eq!(
        (missing.code, missing.body["reason"].as_str()),
        (404, Some("NotFound"))
    );
    assert_eq!(missing.body["details"]["kind"], "configmaps");
}

#[tokio::test]
async fn generate_name_and_generation() {
    let a = api().await;
    let r = a
        .post("/apis/apps/v1/namespaces/default/deployments", json!({
            "metadata": {"generateName": "web-"},
            "spec": {"selector": {"matchLabels": {"app": "w"}},
                     "template": {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
        }))
        .await;
    assert_eq!(r.code, 201, "{}", r.body);
    let name = r.body["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("web-") && name.len() == 9);
    assert_eq!(r.body["metadata"]["generation"], 1);
    let uri = format!("/apis/apps/v1/namespaces/default/deployments/{name}");
    // Metadata-only changes keep the generation; spec changes bump it.
    let r = a
        .patch(
            &uri,
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await;
    assert_eq!(r.body["metadata"]["generation"], 1, "{}", r.body);
    let r = a
        .patch(
            &uri,
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await;
    assert_eq!(r.body["metadata"]["generation"], 2);
    // Status writes go through /status only.
    let r = a
        .patch(
            &uri,
            "application/merge-patch+json",
            json!({"status": {"replicas": 7}}),
        )
        .await;
    assert!(
        r.body
            .get("status")
            .and_then(|s| s.get("replicas"))
            .is_none(),
        "{}",
        r.body
    );
    let r = a
        .patch(
            &format!("{uri}/status"),
            "application/merge-patch+json",
            json!({"status": {"replicas": 7}}),
        )
        .await;
    assert_eq!(r.body["status"]["replicas"], 7, "{}", r.body);
    // Scale.
    let s = a.get(&format!("{uri}/scale")).await;
    assert_eq!(
        (s.body["kind"].as_str(), s.body["spec"]["replicas"].as_i64()),
        (Some("Scale"), Some(3))
    );
    assert_eq!(s.body["status"]["selector"], "app=w");
    let r = a
        .patch(
            &format!("{uri}/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!(r.body["spec"]["replicas"], 5, "{}", r.body);
    assert_eq!(a.get(&uri).await.body["spec"]["replicas"], 5);
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let a = api().await;
    let mut obj = cm("held");
    obj["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(a.post(CMS, obj).await.code, 201);
    let r = a.delete(&format!("{CMS}/held")).await;
    assert_eq!(r.code, 200);
    assert!(
        r.body["metadata"]["deletionTimestamp"].is_string(),
        "{}",
        r.body
    );
    assert_eq!(a.get(&format!("{CMS}/held")).await.code, 200);
    let r = a
        .patch(
            &format!("{CMS}/held"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(a.get(&format!("{CMS}/held")).await.code, 404);
}

#[tokio::test]
async fn bound_pods_are_deleted_gracefully() {
    let a = api().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}});
    assert_eq!(a.post(pods, pod).await.code, 201);
    let r = a.delete(&format!("{pods}/p")).await;
    assert_eq!(
        r.body["metadata"]["deletionGracePeriodSeconds"], 30,
        "{}",
        r.body
    );
    assert_eq!(
        a.get(&format!("{pods}/p")).await.code,
        200,
        "still there for its kubelet"
    );
    let r = a
        .call(
            Method::DELETE,
            &format!("{pods}/p?gracePeriodSeconds=0"),
            "",
            "",
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(a.get(&format!("{pods}/p")).await.code, 404);
}

#[tokio::test]
async fn deletecollection_deletes_what_the_selector_selects() {
    let a = api().await;
    for i in 0..6 {
        let mut c = cm(&format!("d{i}"));
        c["metadata"]["labels"]["parity"] = json!(if i % 2 == 0 { "even" } else { "odd" });
        assert_eq!(a.post(CMS, c).await.code, 201);
    }
    let names = |body: &Value| -> Vec<String> {
        let mut n: Vec<String> = body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    let r = a
        .delete(&format!("{CMS}?labelSelector=parity%3Deven"))
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["kind"], "ConfigMapList");
    assert_eq!(names(&r.body), ["d0", "d2", "d4"], "the deleted objects");
    assert_eq!(
        names(&a.get(CMS).await.body),
        ["d1", "d3", "d5"],
        "what is left"
    );
    let bad = a
        .delete(&format!("{CMS}?labelSelector=parity%3D%3D%3D"))
        .await;
    assert_eq!(bad.code, 400, "{}", bad.body);
    assert_eq!(
        names(&a.get(CMS).await.body).len(),
        3,
        "a bad selector deletes nothing"
    );
}

#[tokio::test]
async fn lists_filter_page_and_watch() {
    let a = api().await;
    for i in 0..25 {
        let mut c = cm(&format!("c{i:02}"));
        c["metadata"]["labels"]["parity"] = json!(if i % 2 == 0 { "even" } else { "odd" });
        assert_eq!(a.post(CMS, c).await.code, 201);
    }
    let all = a.get(CMS).await;
    assert_eq!(all.body["kind"], "ConfigMapList");
    assert_eq!(all.body["items"].as_array().unwrap().len(), 25);
    let even = a.get(&format!("{CMS}?labelSelector=parity%3Deven")).await;
    assert_eq!(even.body["items"].as_array().unwrap().len(), 13);
    let bad = a.get(&format!("{CMS}?fieldSelector=spec.nope%3Dx")).await;
    assert_eq!(bad.code, 400);
    assert!(
        bad.body["message"]
            .as_str()
            .unwrap()
            .contains("is not a known field selector"),
        "{}",
        bad.body
    );

    // Pages of 10 at one snapshot, even with writes in between.
    let p1 = a.get(&format!("{CMS}?limit=10")).await;
    assert_eq!(p1.body["items"].as_array().unwrap().len(), 10);
    assert_eq!(p1.body["metadata"]["remainingItemCount"], 15);
    let token = p1.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(a.post(CMS, cm("c99")).await.code, 201);
    let p2 = a.get(&format!("{CMS}?limit=10&continue={token}")).await;
    let p3 = a
        .get(&format!(
            "{CMS}?limit=10&continue={}",
            p2.body["metadata"]["continue"].as_str().unwrap()
        ))
        .await;
    assert_eq!(p3.body["items"].as_array().unwrap().len(), 5);
    assert!(p3.body["metadata"].get("continue").is_none());

    // Watch from a resourceVersion sees later events, in order.
    let rv = all.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let req = Request::builder()
        .uri(format!(
            "{CMS}?watch=1&resourceVersion={rv}&timeoutSeconds=2"
        ))
        .body(Bytes::new())
        .unwrap();
    let resp = a.server.handle(req, &a.conn).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut text = String::new();
    while let Some(frame) = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .unwrap()
    {
        if let Ok(data) = frame.unwrap().into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
        if text.lines().count() >= 1 {
            break;
        }
    }
    let ev: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "c99");

    // A resourceVersion before the cache's window is an ERROR event (410 Expired) in a 200
    // stream; one the window still covers replays what happened since.
    let r = a
        .get(&format!("{CMS}?watch=1&resourceVersion=1&timeoutSeconds=1"))
        .await;
    assert_eq!(r.code, 200);
    let first = match &r.body {
        Value::String(text) => text.clone(),
        v => v.to_string(),
    };
    assert!(
        first.contains("\"ADDED\"") || (first.contains("\"ERROR\"") && first.contains("410")),
        "{first}"
    );
}

#[tokio::test]
async fn bad_input_gets_a_clear_4xx() {
    let a = api().await;
    let cases: Vec<(Method, &str, &str, String, u16)> = vec![
        (
            Method::POST,
            CMS,
            "application/json",
            "{not json".into(),
            400,
        ),
        (Method::POST, CMS, "application/json", "[1,2]".into(), 400),
        (
            Method::POST,
            CMS,
            "application/vnd.kubernetes.protobuf",
            "x".into(),
            400,
        ),
        (Method::POST, CMS, "text/plain", "x".into(), 415),
        (
            Method::POST,
            CMS,
            "application/json",
            json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
                .to_string(),
            400,
        ),
        (
            Method::POST,
            CMS,
            "application/json",
            json!({"kind": "Secret", "metadata": {"name": "x"}}).to_string(),
            400,
        ),
        (
            Method::POST,
            CMS,
            "application/json",
            json!({"metadata": {"name": "x", "namespace": "other"}}).to_string(),
            400,
        ),
        (
            Method::POST,
            CMS,
            "application/json",
            json!({"metadata": {"name": "UPPER"}}).to_string(),
            422,
        ),
        (
            Method::POST,
            CMS,
            "application/json",
            json!({"metadata": {}}).to_string(),
            422,
        ),
        (
            Method::POST,
            CMS,
            "application/json",
            format!(
                "{{\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"k\":\"{}\"}}}}",
                "x".repeat(4 << 20)
            ),
            413,
        ),
        (Method::POST, CMS, "application/json", "[".repeat(1000), 400),
        (
            Method::GET,
            "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(",
            "",
            String::new(),
            400,
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/configmaps?limit=abc",
            "",
            String::new(),
            400,
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/configmaps?continue=garbage",
            "",
            String::new(),
            400,
        ),
        (Method::GET, "/api/v1/nothings", "", String::new(), 404),
    ];
    for (method, uri, ct, body, code) in cases {
        let r = a.call(method.clone(), uri, ct, &body).await;
        assert_eq!(
            r.code,
            code,
            "{method} {uri} {}: {}",
            &body[..body.len().min(80)],
            r.body
        );
        assert_eq!(r.body["kind"], "Status", "{}", r.body);
    }
    assert_eq!(a.post(CMS, cm("ok")).await.code, 201);
    // Malformed patches change nothing.
    let before = a.get(&format!("{CMS}/ok")).await.body;
    for (ct, body) in [
        ("application/json-patch+json", "{\"op\":\"add\"}"),
        (
            "application/json-patch+json",
            "[{\"op\":\"remove\",\"path\":\"/data/missing\"}]",
        ),
        ("application/merge-patch+json", "not json"),
        ("text/plain", "{}"),
    ] {
        let r = a.call(Method::PATCH, &format!("{CMS}/ok"), ct, body).await;
        assert!(
            (400..500).contains(&r.code),
            "{ct} {body}: {} {}",
            r.code,
            r.body
        );
    }
    assert_eq!(a.get(&format!("{CMS}/ok")).await.body, before);
}

#[tokio::test]
async fn discovery_and_version() {
    let a = api().await;
    let v = a.get("/version").await;
    assert_eq!(v.body["gitVersion"], "v1.32.0");
    let apis = a.get("/apis").await;
    assert!(apis.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["name"] == "apps"));
    let core = a.get("/api/v1").await;
    assert!(core.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "pods/status"));
    let ns = a.get("/api/v1/namespaces").await;
    let names: Vec<&str> = ns.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(names.contains(&n), "{names:?}");
    }
    let svc = a
        .get("/api/v1/namespaces/default/services/kubernetes")
        .await;
    assert_eq!(svc.body["spec"]["clusterIP"], "10.43.0.1", "{}", svc.body);
    let m = a.get("/metrics").await;
    assert!(m.body.as_str().unwrap().contains("apiserver_request_total"));
    let _ = &m.headers;
}

#[tokio::test]
async fn binding_assigns_once_and_eviction_honours_budgets() {
    let a = api().await;
    let pods = "/api/v1/namespaces/default/pods";
    for name in ["a", "b"] {
        let pod = json!({"metadata": {"name": name, "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        let r = a.post(pods, pod).await;
        assert_eq!(r.code, 201, "{}", r.body);
        // Defaults as Kubernetes fills them in.
        assert_eq!(r.body["spec"]["restartPolicy"], "Always");
        assert_eq!(r.body["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(r.body["status"]["phase"], "Pending");
        assert_eq!(r.body["status"]["qosClass"], "BestEffort");
    }
    let bind = |name: &str, node: &str| json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}});
    let r = a.post(&format!("{pods}/a/binding"), bind("a", "n1")).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let pod = a.get(&format!("{pods}/a")).await.body;
    assert_eq!(pod["spec"]["nodeName"], "n1");
    assert!(pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["status"] == "True"));
    let again = a.post(&format!("{pods}/a/binding"), bind("a", "n2")).await;
    assert_eq!(again.code, 409, "{}", again.body);
    // The legacy bindings resource does the same; a Binding's annotations go to the pod.
    let mut with_annotations = bind("b", "n1");
    with_annotations["metadata"]["annotations"] = json!({"example.com/why": "test"});
    let r = a
        .post("/api/v1/namespaces/default/bindings", with_annotations)
        .await;
    assert_eq!(r.code, 201, "{}", r.body);
    let pod = a.get(&format!("{pods}/b")).await.body;
    assert_eq!(pod["spec"]["nodeName"], "n1");
    assert_eq!(pod["metadata"]["annotations"]["example.com/why"], "test");

    // A budget that allows no disruption blocks eviction with 429.
    let pdb = json!({"metadata": {"name": "budget"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "x"}}}});
    assert_eq!(
        a.post(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            pdb
        )
        .await
        .code,
        201
    );
    let status = json!({"status": {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2, "observedGeneration": 1}});
    let r = a
        .patch(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets/budget/status",
            "application/merge-patch+json",
            status,
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    let evict = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}});
    let r = a.post(&format!("{pods}/a/eviction"), evict.clone()).await;
    assert_eq!(
        (r.code, r.body["reason"].as_str()),
        (429, Some("TooManyRequests")),
        "{}",
        r.body
    );
    let allow = json!({"status": {"disruptionsAllowed": 1}});
    a.patch(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/budget/status",
        "application/merge-patch+json",
        allow,
    )
    .await;
    let r = a.post(&format!("{pods}/a/eviction"), evict).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let pod = a.get(&format!("{pods}/a")).await.body;
    assert!(
        pod["metadata"]["deletionTimestamp"].is_string(),
        "evicted pods terminate gracefully: {pod}"
    );
    let pdb = a
        .get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/budget")
        .await
        .body;
    assert_eq!(pdb["status"]["disruptionsAllowed"], 0);
    assert!(pdb["status"]["disruptedPods"]["a"].is_string());
}

#[tokio::test]
async fn server_side_apply_validates_options_and_reports_conflicts() {
    let a = api().await;
    let cm_yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  k: one\n";
    let uri = "/api/v1/namespaces/default/configmaps/applied";
    // No field manager: 422 on PatchOptions.
    let r = a
        .call(Method::PATCH, uri, "application/apply-patch+yaml", cm_yaml)
        .await;
    assert_eq!(r.code, 422, "{}", r.body);
    assert_eq!(
        r.body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    // force on a non-apply patch is forbidden.
    let r = a
        .call(
            Method::PATCH,
            &format!("{uri}?force=true"),
            "application/merge-patch+json",
            "{}",
        )
        .await;
    assert_eq!(r.code, 422, "{}", r.body);
    // Not YAML.
    let r = a
        .call(
            Method::PATCH,
            &format!("{uri}?fieldManager=a"),
            "application/apply-patch+yaml",
            "a: [",
        )
        .await;
    assert_eq!(r.code, 400, "{}", r.body);
    // Creates, owned by "a".
    let r = a
        .call(
            Method::PATCH,
            &format!("{uri}?fieldManager=a"),
            "application/apply-patch+yaml",
            cm_yaml,
        )
        .await;
    assert_eq!(r.code, 201, "{}", r.body);
    let mf = &r.body["metadata"]["managedFields"][0];
    assert_eq!(mf["manager"], "a");
    assert_eq!(mf["operation"], "Apply");
    assert_eq!(mf["fieldsV1"], json!({"f:data": {"f:k": {}}}));
    // "b" applies a different value: 409 with Kubernetes' message and causes.
    let other = cm_yaml.replace("one", "two");
    let r = a
        .call(
            Method::PATCH,
            &format!("{uri}?fieldManager=b"),
            "application/apply-patch+yaml",
            &other,
        )
        .await;
    assert_eq!(r.code, 409, "{}", r.body);
    assert_eq!(r.body["reason"], "Conflict");
    assert_eq!(
        r.body["message"],
        "Apply failed with 1 conflict: conflict with \"a\": .data.k"
    );
    assert_eq!(
        r.body["details"]["causes"][0],
        json!({"reason": "FieldManagerConflict", "message": "conflict with \"a\"", "field": ".data.k"})
    );
    // Nothing was changed by the failed apply.
    let r = a.get(uri).await;
    assert_eq!(r.body["data"]["k"], "one");
    // Forced: "b" owns it now.
    let r = a
        .call(
            Method::PATCH,
            &format!("{uri}?fieldManager=b&force=true"),
            "application/apply-patch+yaml",
            &other,
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["data"]["k"], "two");
    let managers: Vec<&str> = r.body["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, vec!["b"], "{}", r.body);
    // A PUT records an Update entry for its manager (from the User-Agent when not given).
    let mut body = r.body.clone();
    body["data"]["extra"] = json!("x");
    let req = Request::builder()
        .method(Method::PUT)
        .uri(uri)
        .header("content-type", "application/json")
        .header("user-agent", "my-controller/v1.2 (linux)")
        .body(Bytes::from(body.to_string()))
        .unwrap();
    let resp = a.server.handle(req, &a.conn).await;
    assert_eq!(resp.status().as_u16(), 200);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let update = v["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "my-controller")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(update["operation"], "Update");
    assert_eq!(update["fieldsV1"], json!({"f:data": {"f:extra": {}}}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_patches_without_a_resource_version_all_apply() {
    // A patch whose body names no resourceVersion is unconditional: a store conflict with
    // another writer is retried on the new state, never answered with 409.
    let a = Arc::new(api().await);
    let r = a
        .post(CMS, json!({"metadata": {"name": "shared"}, "data": {}}))
        .await;
    assert_eq!(r.code, 201);
    let mut tasks = Vec::new();
    for i in 0..24 {
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            a.patch(
                &format!("{CMS}/shared"),
                "application/merge-patch+json",
                json!({"data": {format!("k{i}"): "v"}}),
            )
            .await
            .code
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let r = a.get(&format!("{CMS}/shared")).await;
    assert_eq!(r.body["data"].as_object().unwrap().len(), 24);
    // A resourceVersion in the body is a precondition: a stale one is a Conflict.
    let r = a
        .patch(
            &format!("{CMS}/shared"),
            "application/merge-patch+json",
            json!({"metadata": {"resourceVersion": "2"}, "data": {"x": "y"}}),
        )
        .await;
    assert_eq!(r.code, 409);
}

/// A status write changes the status and (for built-in kinds) the metadata a controller sets
/// with it, never the spec, the owners of a pod, or what identifies the object.
#[tokio::test]
async fn status_writes_keep_the_spec_and_identity() {
    let a = api().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"metadata": {"name": "p", "labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let created = a.post(pods, pod).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let patch = json!({
        "metadata": {"labels": {"app": "b"}, "annotations": {"note": "n"}, "uid": "other",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]},
        "spec": {"activeDeadlineSeconds": 5},
        "status": {"phase": "Running", "podIP": "10.0.0.5"},
        "extra": 1
    });
    let r = a
        .patch(
            &format!("{pods}/p/status"),
            "application/merge-patch+json",
            patch,
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    let got = a.get(&format!("{pods}/p")).await.body;
    assert_eq!(got["status"]["phase"], "Running");
    assert_eq!(got["status"]["podIP"], "10.0.0.5");
    assert_eq!(got["metadata"]["labels"], json!({"app": "b"}));
    assert_eq!(got["metadata"]["annotations"], json!({"note": "n"}));
    assert_eq!(got["metadata"]["uid"], created.body["metadata"]["uid"]);
    assert!(got["metadata"].get("ownerReferences").is_none(), "{got}");
    assert_eq!(got["spec"], created.body["spec"]);
    assert!(got.get("extra").is_none(), "{got}");

    // A status replaced without a spec keeps the spec; one without a status clears it.
    let mut whole = got.clone();
    whole.as_object_mut().unwrap().remove("spec");
    whole["status"] = json!({"phase": "Succeeded"});
    let r = a.put(&format!("{pods}/p/status"), whole).await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["spec"], created.body["spec"]);
    assert_eq!(r.body["status"], json!({"phase": "Succeeded"}));
}

/// Field validation of patches: unknown fields and type errors the patch brings are found
/// wherever they are (warned and dropped, or refused with `fieldValidation=Strict`), and the
/// members the patch did not name come out as stored.
#[tokio::test]
async fn patches_are_field_validated_where_they_reach() {
    let a = api().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    assert_eq!(a.post(pods, pod).await.code, 201);
    let stored = a.get(&format!("{pods}/p")).await.body;

    // An unknown field in a merge patch of the status: warned about and dropped.
    let r = a
        .patch(
            &format!("{pods}/p/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running", "bogus": 1, "podIP": "10.0.0.9"}}),
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    let warning = r.headers.get("warning").and_then(|w| w.to_str().ok());
    assert!(
        warning.is_some_and(|w| w.contains("unknown field") && w.contains("status.bogus")),
        "{warning:?}"
    );
    assert!(r.body["status"].get("bogus").is_none());
    assert_eq!(r.body["status"]["podIP"], "10.0.0.9");
    assert_eq!(r.body["spec"], stored["spec"]);

    // Strict: the same is a 400 naming the field, and nothing is written.
    let r = a
        .patch(
            &format!("{pods}/p/status?fieldValidation=Strict"),
            "application/strategic-merge-patch+json",
            json!({"status": {"phase": "Failed", "alsoBogus": true}}),
        )
        .await;
    assert_eq!(r.code, 400, "{}", r.body);
    let message = r.body["message"].as_str().unwrap_or("");
    assert!(
        message.contains("unknown field \"status.alsoBogus\""),
        "{message}"
    );
    assert_eq!(
        a.get(&format!("{pods}/p")).await.body["status"]["phase"],
        "Running"
    );

    // A type error deep in the member a patch names.
    let r = a
        .patch(
            &format!("{pods}/p"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": "http"}]}]}}),
        )
        .await;
    assert_eq!(r.code, 400, "{}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap_or("")
            .contains("containerPort"),
        "{}",
        r.body
    );

    // A directive at the top of a strategic merge patch reaches everything: the whole
    // object is checked.
    let r = a
        .patch(
            &format!("{pods}/p?fieldValidation=Strict"),
            "application/strategic-merge-patch+json",
            json!({"$retainKeys": ["metadata", "spec", "status"], "metadata": {"labels": {"a": "b"}}, "extra": 1}),
        )
        .await;
    assert_eq!(r.code, 400, "{}", r.body);
}
