//! Versions that share storage, through the full request pipeline in-process: core/v1 and
//! events.k8s.io/v1 events, autoscaling/v2 and autoscaling/v1 autoscalers. Whatever version an
//! object was written in, every read, list, watch event, table and write response comes in the
//! version of the request.

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
    async fn call(&self, method: Method, uri: &str, headers: &[(&str, &str)], body: &str) -> Resp {
        let mut req = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Bytes::from(body.to_string())).unwrap();
        let resp = self.server.handle(req, &self.conn).await;
        let code = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
        Resp { code, body }
    }

    async fn get(&self, uri: &str) -> Resp {
        self.call(Method::GET, uri, &[], "").await
    }

    async fn table(&self, uri: &str, include: &str) -> Resp {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
        let sep = if uri.contains('?') { '&' } else { '?' };
        self.call(
            Method::GET,
            &format!("{uri}{sep}includeObject={include}"),
            &[("accept", accept)],
            "",
        )
        .await
    }

    async fn send(&self, method: Method, uri: &str, ct: &str, body: Value) -> Resp {
        self.call(method, uri, &[("content-type", ct)], &body.to_string())
            .await
    }

    async fn post(&self, uri: &str, body: Value) -> Resp {
        self.send(Method::POST, uri, "application/json", body).await
    }

    /// The first `n` events of a watch, parsed.
    async fn watch(&self, uri: &str, n: usize) -> Vec<Value> {
        self.watch_as(uri, n, "application/json").await
    }

    /// The first `n` events of a watch asking for `accept`, parsed.
    async fn watch_as(&self, uri: &str, n: usize, accept: &str) -> Vec<Value> {
        let req = Request::builder()
            .uri(uri)
            .header("accept", accept)
            .body(Bytes::new())
            .unwrap();
        let resp = self.server.handle(req, &self.conn).await;
        assert_eq!(resp.status(), 200, "{uri}");
        let mut body = resp.into_body();
        let mut text = String::new();
        while text.lines().count() < n {
            let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
                .await
                .expect("a watch event in time")
                .expect("the watch goes on");
            if let Ok(data) = frame.unwrap().into_data() {
                text.push_str(&String::from_utf8_lossy(&data));
            }
        }
        text.lines()
            .take(n)
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

const CORE_EVENTS: &str = "/api/v1/namespaces/default/events";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
const HPA_V1: &str = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers";
const HPA_V2: &str = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers";

/// An event as the scheduler writes it through events.k8s.io/v1.
fn scheduled(name: &str, pod: &str) -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2024-01-01T00:00:01.000000Z",
        "reportingController": "default-scheduler", "reportingInstance": "default-scheduler-n1",
        "action": "Binding", "reason": "Scheduled", "type": "Normal",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": "default"},
        "note": format!("Successfully assigned default/{pod} to n1")
    })
}

/// An event as the kubelet writes it through core/v1.
fn pulled(name: &str, pod: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": "default",
                           "fieldPath": "spec.containers{web}"},
        "reason": "Pulled", "message": "Container image already present", "type": "Normal",
        "source": {"component": "kubelet", "host": "n1"},
        "firstTimestamp": "2024-01-01T00:00:02Z", "lastTimestamp": "2024-01-01T00:00:02Z",
        "count": 1
    })
}

fn names(list: &Value) -> Vec<String> {
    let mut n: Vec<String> = list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

#[tokio::test]
async fn events_read_in_the_version_asked_for() {
    let a = api().await;
    let r = a.post(EVENTS, scheduled("web-0.1", "web-0")).await;
    assert_eq!(r.code, 201, "{}", r.body);
    // The write response is in the request's version.
    assert_eq!(r.body["apiVersion"], "events.k8s.io/v1");
    assert_eq!(r.body["note"], "Successfully assigned default/web-0 to n1");
    assert!(r.body.get("message").is_none(), "{}", r.body);
    let rv = r.body["metadata"]["resourceVersion"].clone();

    // core/v1 reads the same object with its own names.
    let core = a.get(&format!("{CORE_EVENTS}/web-0.1")).await;
    assert_eq!(core.code, 200);
    let c = &core.body;
    assert_eq!(c["apiVersion"], "v1");
    assert_eq!(c["metadata"]["resourceVersion"], rv);
    assert_eq!(c["involvedObject"]["name"], "web-0");
    assert_eq!(c["message"], "Successfully assigned default/web-0 to n1");
    assert_eq!(c["reportingComponent"], "default-scheduler");
    assert_eq!(c["reportingInstance"], "default-scheduler-n1");
    assert_eq!(c["source"], json!({}));
    assert_eq!(c["firstTimestamp"], Value::Null);
    assert!(
        c.get("regarding").is_none() && c.get("note").is_none(),
        "{c}"
    );

    // And the other way round.
    assert_eq!(
        a.post(CORE_EVENTS, pulled("web-0.2", "web-0")).await.code,
        201
    );
    let e = a.get(&format!("{EVENTS}/web-0.2")).await.body;
    assert_eq!(e["apiVersion"], "events.k8s.io/v1");
    assert_eq!(e["regarding"]["fieldPath"], "spec.containers{web}");
    assert_eq!(e["note"], "Container image already present");
    assert_eq!(e["deprecatedSource"]["host"], "n1");
    assert_eq!(e["deprecatedCount"], 1);
    assert_eq!(e["deprecatedFirstTimestamp"], "2024-01-01T00:00:02Z");
    assert_eq!(e["eventTime"], Value::Null);
    assert!(e.get("involvedObject").is_none() && e.get("message").is_none());

    // Lists, from the cache and paged from the store, in each version.
    for (uri, version) in [
        (CORE_EVENTS.to_string(), "v1"),
        (format!("{CORE_EVENTS}?limit=1"), "v1"),
        (EVENTS.to_string(), "events.k8s.io/v1"),
        (format!("{EVENTS}?limit=1"), "events.k8s.io/v1"),
    ] {
        let l = a.get(&uri).await.body;
        assert_eq!(l["apiVersion"], version, "{uri}");
        assert_eq!(l["kind"], "EventList");
        for item in l["items"].as_array().unwrap() {
            assert_eq!(item["apiVersion"], version, "{uri}: {item}");
            let message = if version == "v1" { "message" } else { "note" };
            assert!(item[message].is_string(), "{uri}: {item}");
        }
    }

    // Tables print either form; an embedded object is in the request's version.
    let t = a.table(EVENTS, "Object").await.body;
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{t}");
    for row in rows {
        assert_eq!(row["object"]["apiVersion"], "events.k8s.io/v1");
        assert!(row["cells"].to_string().contains("pod/web-0"), "{row}");
    }
    let t = a.table(CORE_EVENTS, "Object").await.body;
    for row in t["rows"].as_array().unwrap() {
        assert_eq!(row["object"]["apiVersion"], "v1");
        let cells = row["cells"].to_string();
        assert!(
            cells.contains("Successfully assigned") || cells.contains("already present"),
            "{row}"
        );
    }
}

#[tokio::test]
async fn event_field_selectors_use_each_versions_names() {
    let a = api().await;
    assert_eq!(a.post(EVENTS, scheduled("a.1", "a")).await.code, 201);
    assert_eq!(a.post(EVENTS, scheduled("b.1", "b")).await.code, 201);
    assert_eq!(a.post(CORE_EVENTS, pulled("a.2", "a")).await.code, 201);
    assert_eq!(a.post(CORE_EVENTS, pulled("b.2", "b")).await.code, 201);

    let sel = |base: &str, s: &str| format!("{base}?fieldSelector={s}");
    for (uri, want) in [
        (
            sel(CORE_EVENTS, "involvedObject.name%3Da"),
            vec!["a.1", "a.2"],
        ),
        (
            sel(CORE_EVENTS, "involvedObject.name%3Da,reason%3DScheduled"),
            vec!["a.1"],
        ),
        (
            sel(CORE_EVENTS, "reportingComponent%3Ddefault-scheduler"),
            vec!["a.1", "b.1"],
        ),
        // `source` falls back to the reporting controller when there is no source.
        (
            sel(CORE_EVENTS, "source%3Ddefault-scheduler"),
            vec!["a.1", "b.1"],
        ),
        (sel(CORE_EVENTS, "source%3Dkubelet"), vec!["a.2", "b.2"]),
        (sel(EVENTS, "regarding.name%3Db"), vec!["b.1", "b.2"]),
        (
            sel(EVENTS, "regarding.kind%3DPod,reason%3DPulled"),
            vec!["a.2", "b.2"],
        ),
        (
            sel(EVENTS, "reportingController%3Ddefault-scheduler"),
            vec!["a.1", "b.1"],
        ),
        (
            sel(EVENTS, "regarding.fieldPath%3Dspec.containers%7Bweb%7D"),
            vec!["a.2", "b.2"],
        ),
        (
            sel(EVENTS, "regarding.name!%3Da&limit=10"),
            vec!["b.1", "b.2"],
        ),
    ] {
        let r = a.get(&uri).await;
        assert_eq!(r.code, 200, "{uri}: {}", r.body);
        assert_eq!(names(&r.body), want, "{uri}");
    }
    // Each version accepts only its own labels.
    for uri in [
        sel(EVENTS, "involvedObject.name%3Da"),
        sel(EVENTS, "source%3Dkubelet"),
        sel(CORE_EVENTS, "regarding.name%3Da"),
    ] {
        let r = a.get(&uri).await;
        assert_eq!(r.code, 400, "{uri}: {}", r.body);
        assert!(
            r.body["message"]
                .as_str()
                .unwrap()
                .starts_with("field label not supported: "),
            "{}",
            r.body
        );
    }
}

#[tokio::test]
async fn event_watches_and_patches_in_either_version() {
    let a = api().await;
    let first = a.post(CORE_EVENTS, pulled("w.1", "w")).await;
    let rv = first.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // A watch of events.k8s.io from before the second write sees both, in its version, and a
    // selected watch only what it selects.
    let watch = format!("{EVENTS}?watch=1&resourceVersion=0&fieldSelector=regarding.name%3Dw");
    let core_watch = format!("{CORE_EVENTS}?watch=1&resourceVersion={rv}");
    let (evs, core_evs, posted) =
        tokio::join!(a.watch(&watch, 2), a.watch(&core_watch, 1), async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            a.post(EVENTS, scheduled("w.2", "w")).await
        });
    assert_eq!(posted.code, 201);
    for ev in &evs {
        assert_eq!(ev["type"], "ADDED");
        assert_eq!(ev["object"]["apiVersion"], "events.k8s.io/v1", "{ev}");
        assert!(ev["object"]["note"].is_string(), "{ev}");
    }
    assert_eq!(evs[1]["object"]["metadata"]["name"], "w.2");
    assert_eq!(core_evs[0]["object"]["apiVersion"], "v1");
    assert_eq!(core_evs[0]["object"]["metadata"]["name"], "w.2");
    assert_eq!(core_evs[0]["object"]["involvedObject"]["name"], "w");

    // Patches apply to the object in the request's version.
    let merge = "application/merge-patch+json";
    let r = a
        .send(
            Method::PATCH,
            &format!("{EVENTS}/w.1"),
            merge,
            json!({"note": "patched through events.k8s.io", "deprecatedCount": 3}),
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["note"], "patched through events.k8s.io");
    let c = a.get(&format!("{CORE_EVENTS}/w.1")).await.body;
    assert_eq!(c["message"], "patched through events.k8s.io");
    assert_eq!(c["count"], 3);
    let r = a
        .send(
            Method::PATCH,
            &format!("{EVENTS}/w.2"),
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/note", "value": "json-patched"}]),
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    let c = a.get(&format!("{CORE_EVENTS}/w.2")).await.body;
    assert_eq!(c["message"], "json-patched");
    // What an event is about may not change through events.k8s.io (it may through core/v1).
    let r = a
        .send(
            Method::PATCH,
            &format!("{EVENTS}/w.2"),
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/regarding/name", "value": "w2"}]),
        )
        .await;
    assert_eq!(r.code, 422, "{}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("involvedObject: Invalid value"),
        "{}",
        r.body
    );
    let r = a
        .send(
            Method::PATCH,
            &format!("{CORE_EVENTS}/w.2"),
            merge,
            json!({"involvedObject": {"name": "w2"}}),
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    let e = a.get(&format!("{EVENTS}/w.2")).await.body;
    assert_eq!(e["regarding"]["name"], "w2");
    // A replace of what was read, in events.k8s.io.
    let mut e = a.get(&format!("{EVENTS}/w.2")).await.body;
    e["metadata"]["labels"] = json!({"replaced": "yes"});
    let r = a
        .send(Method::PUT, &format!("{EVENTS}/w.2"), "application/json", e)
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["reportingController"], "default-scheduler");
    assert_eq!(
        a.get(&format!("{CORE_EVENTS}/w.2")).await.body["metadata"]["labels"]["replaced"],
        "yes"
    );

    // events.k8s.io validates its own way (and names the internal fields, as Kubernetes does).
    let mut bad = scheduled("bad", "x");
    bad.as_object_mut().unwrap().remove("eventTime");
    bad["deprecatedCount"] = json!(2);
    let r = a.post(EVENTS, bad).await;
    assert_eq!(r.code, 422, "{}", r.body);
    let msg = r.body["message"].as_str().unwrap();
    assert!(msg.contains("eventTime: Required value"), "{msg}");
    assert!(msg.contains("count: Invalid value"), "{msg}");

    // Deletes answer in the request's version too.
    let r = a
        .call(Method::DELETE, &format!("{EVENTS}/w.1"), &[], "")
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(a.get(&format!("{CORE_EVENTS}/w.1")).await.code, 404);
}

fn hpa_v1(name: &str) -> Value {
    json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "maxReplicas": 4, "targetCPUUtilizationPercentage": 60}
    })
}

fn hpa_v2(name: &str) -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2, "maxReplicas": 10,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 50}}},
                {"type": "Resource", "resource": {"name": "memory",
                    "target": {"type": "AverageValue", "averageValue": "100Mi"}}}
            ],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}
        }
    })
}

#[tokio::test]
async fn autoscalers_written_in_v1_read_in_v2_and_back() {
    let a = api().await;
    let r = a.post(HPA_V1, hpa_v1("web")).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["apiVersion"], "autoscaling/v1");
    assert_eq!(r.body["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(r.body["spec"]["minReplicas"], 1);
    assert_eq!(
        r.body["status"],
        json!({"currentReplicas": 0, "desiredReplicas": 0})
    );
    assert!(
        r.body["metadata"].get("annotations").is_none(),
        "{}",
        r.body
    );

    // What kubectl describe reads: the v2 form.
    let v2 = a.get(&format!("{HPA_V2}/web")).await.body;
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(
        v2["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 60}}}])
    );
    assert_eq!(v2["spec"]["minReplicas"], 1);
    assert!(v2["spec"].get("targetCPUUtilizationPercentage").is_none());
    assert_eq!(
        v2["status"],
        json!({"currentMetrics": null, "desiredReplicas": 0})
    );

    // Written in v2 with more than v1 can say: v1 reads the rest in annotations.
    assert_eq!(a.post(HPA_V2, hpa_v2("api")).await.code, 201);
    let v1 = a.get(&format!("{HPA_V1}/api")).await.body;
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
    assert_eq!(v1["spec"]["minReplicas"], 2);
    let ann = &v1["metadata"]["annotations"];
    assert_eq!(
        ann["autoscaling.alpha.kubernetes.io/metrics"],
        r#"[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"100Mi"}}]"#
    );
    // The behavior as stored, defaults filled in, under the internal type's field names.
    assert_eq!(
        ann["autoscaling.alpha.kubernetes.io/behavior"],
        concat!(
            r#"{"ScaleUp":{"StabilizationWindowSeconds":0,"SelectPolicy":"Max","Policies":[{"Type":"Pods","Value":4,"PeriodSeconds":15},{"Type":"Percent","Value":100,"PeriodSeconds":15}]},"#,
            r#""ScaleDown":{"StabilizationWindowSeconds":60,"SelectPolicy":"Max","Policies":[{"Type":"Percent","Value":100,"PeriodSeconds":15}]}}"#
        )
    );

    // A strategic merge patch of the v1 form changes the CPU target; the memory metric and the
    // behavior survive through their annotations.
    let r = a
        .send(
            Method::PATCH,
            &format!("{HPA_V1}/api"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"targetCPUUtilizationPercentage": 75}}),
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["apiVersion"], "autoscaling/v1");
    assert_eq!(r.body["spec"]["targetCPUUtilizationPercentage"], 75);
    let v2 = a.get(&format!("{HPA_V2}/api")).await.body;
    assert_eq!(
        v2["spec"]["metrics"],
        json!([
            {"type": "Resource", "resource": {"name": "memory",
                "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
            {"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 75}}}
        ])
    );
    assert_eq!(
        v2["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"],
        60
    );
    assert!(v2["metadata"].get("annotations").is_none(), "{v2}");

    // A replace of what v1 read changes nothing it did not mean to change.
    let mut read = a.get(&format!("{HPA_V1}/api")).await.body;
    read["spec"]["maxReplicas"] = json!(12);
    let r = a
        .send(
            Method::PUT,
            &format!("{HPA_V1}/api"),
            "application/json",
            read,
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    let after = a.get(&format!("{HPA_V2}/api")).await.body;
    assert_eq!(after["spec"]["maxReplicas"], 12);
    assert_eq!(after["spec"]["metrics"], v2["spec"]["metrics"]);
    assert_eq!(after["spec"]["behavior"], v2["spec"]["behavior"]);

    // Status through v1: the CPU utilization becomes a current metric.
    let mut st = a.get(&format!("{HPA_V1}/web")).await.body;
    st["status"] =
        json!({"currentReplicas": 2, "desiredReplicas": 3, "currentCPUUtilizationPercentage": 90});
    let r = a
        .send(
            Method::PUT,
            &format!("{HPA_V1}/web/status"),
            "application/json",
            st,
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["status"]["currentCPUUtilizationPercentage"], 90);
    let v2 = a.get(&format!("{HPA_V2}/web")).await.body;
    assert_eq!(
        v2["status"],
        json!({"currentReplicas": 2, "desiredReplicas": 3, "currentMetrics": [
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 90}}}]})
    );

    // Validation sees the stored form: v1's CPU target is a metric there (as Kubernetes
    // reports it).
    let mut bad = hpa_v1("bad");
    bad["spec"]["maxReplicas"] = json!(0);
    bad["spec"]["targetCPUUtilizationPercentage"] = json!(0);
    let r = a.post(HPA_V1, bad).await;
    assert_eq!(r.code, 422, "{}", r.body);
    let msg = r.body["message"].as_str().unwrap();
    assert!(msg.contains("spec.maxReplicas: Invalid value: 0"), "{msg}");
    assert!(
        msg.contains(
            "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0"
        ),
        "{msg}"
    );

    // Round-trip annotations written through v2 are not kept.
    let mut h = hpa_v2("ann");
    h["metadata"]["annotations"] =
        json!({"autoscaling.alpha.kubernetes.io/metrics": "[]", "team": "a"});
    let r = a.post(HPA_V2, h).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["metadata"]["annotations"], json!({"team": "a"}));
}

#[tokio::test]
async fn autoscaler_lists_watches_and_tables_per_version() {
    let a = api().await;
    assert_eq!(a.post(HPA_V1, hpa_v1("one")).await.code, 201);
    assert_eq!(a.post(HPA_V2, hpa_v2("two")).await.code, 201);
    for (base, version) in [(HPA_V1, "autoscaling/v1"), (HPA_V2, "autoscaling/v2")] {
        for uri in [
            base.to_string(),
            format!("{base}?limit=1"),
            format!("{base}?limit=5"),
        ] {
            let l = a.get(&uri).await.body;
            assert_eq!(l["apiVersion"], version, "{uri}");
            for item in l["items"].as_array().unwrap() {
                assert_eq!(item["apiVersion"], version, "{uri}");
                let v1_only = item["spec"].get("targetCPUUtilizationPercentage").is_some();
                assert_eq!(v1_only, version == "autoscaling/v1", "{uri}: {item}");
            }
        }
        // The watch's initial events, in the version watched.
        let evs = a.watch(&format!("{base}?watch=1"), 2).await;
        for ev in evs {
            assert_eq!(ev["object"]["apiVersion"], version, "{ev}");
        }
        // Table rows come from the stored form: v1 sees the memory metric as well.
        let t = a.table(&format!("{base}/two"), "Metadata").await.body;
        let cells = t["rows"][0]["cells"].to_string();
        assert!(cells.contains("memory") && cells.contains("cpu"), "{cells}");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert!(t["rows"][0]["object"]["metadata"]
            .get("annotations")
            .is_none());
    }
    // A watch event for a write in the other version.
    let rv = a.get(HPA_V1).await.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let watch = format!("{HPA_V1}?watch=1&resourceVersion={rv}");
    let (evs, r) = tokio::join!(a.watch(&watch, 1), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        a.send(
            Method::PATCH,
            &format!("{HPA_V2}/two"),
            "application/merge-patch+json",
            json!({"spec": {"maxReplicas": 7}}),
        )
        .await
    });
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(evs[0]["type"], "MODIFIED");
    assert_eq!(evs[0]["object"]["apiVersion"], "autoscaling/v1");
    assert_eq!(evs[0]["object"]["spec"]["maxReplicas"], 7);
    assert!(
        evs[0]["object"]["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/metrics"]
            .is_string()
    );
    // Dry runs answer in the request's version and store nothing.
    let r = a.post(&format!("{HPA_V1}?dryRun=All"), hpa_v1("dry")).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["apiVersion"], "autoscaling/v1");
    assert_eq!(r.body["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(a.get(&format!("{HPA_V2}/dry")).await.code, 404);
}

/// Metadata-only lists and watches (what the garbage collector reads): each object's metadata
/// as stored, with its resourceVersion, and nothing else of it.
#[tokio::test]
async fn metadata_lists_and_watches_carry_only_metadata() {
    const CMS: &str = "/api/v1/namespaces/default/configmaps";
    let a = api().await;
    let cm = |n: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": n, "labels": {"app": "x"}}, "data": {"k": "v"}})
    };
    let one = a.post(CMS, cm("one")).await;
    assert_eq!(one.code, 201, "{}", one.body);
    let accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let l = a.call(Method::GET, CMS, &[("accept", accept)], "").await;
    assert_eq!(l.code, 200, "{}", l.body);
    assert_eq!(l.body["kind"], "PartialObjectMetadataList");
    assert_eq!(l.body["apiVersion"], "meta.k8s.io/v1");
    let items = l.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{}", l.body);
    assert_eq!(items[0]["kind"], "PartialObjectMetadata");
    assert_eq!(items[0]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(items[0]["metadata"], one.body["metadata"]);
    assert!(items[0].get("data").is_none(), "{}", items[0]);
    let rv = l.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let watch = format!("{CMS}?watch=1&resourceVersion={rv}");
    let (evs, two) = tokio::join!(a.watch_as(&watch, 2, accept), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let two = a.post(CMS, cm("two")).await;
        let patch = json!({"metadata": {"labels": {"app": "y"}}});
        let r = a
            .send(
                Method::PATCH,
                &format!("{CMS}/one"),
                "application/merge-patch+json",
                patch,
            )
            .await;
        assert_eq!(r.code, 200, "{}", r.body);
        two
    });
    assert_eq!(two.code, 201, "{}", two.body);
    assert_eq!(evs[0]["type"], "ADDED");
    assert_eq!(evs[0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(evs[0]["object"]["metadata"], two.body["metadata"]);
    assert!(evs[0]["object"].get("data").is_none(), "{}", evs[0]);
    assert_eq!(evs[1]["type"], "MODIFIED");
    assert_eq!(evs[1]["object"]["metadata"]["labels"], json!({"app": "y"}));
    assert_ne!(
        evs[1]["object"]["metadata"]["resourceVersion"],
        one.body["metadata"]["resourceVersion"]
    );
}
