//! `/openapi/v2` served as gnostic protobuf: kubectl's field-validation check falls back to it
//! for kinds the OpenAPI v3 documents give no PATCH operation (TokenReview), and then
//! validates such objects client-side against its definitions.

mod support;

use kube::api::ListParams;
use kube::client::Body;
use kube::{Client, Config};
use support::Server;

const PROTO_ACCEPT: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
const PROTO_CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

fn token_review(token: &str, extra: &str) -> String {
    format!(
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {token}\n{extra}"
    )
}

fn read_varint(buf: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = buf[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            break;
        }
    }
    v
}

/// The length-delimited fields of one protobuf message, as (number, payload); panics on
/// malformed input.
fn len_fields(buf: &[u8]) -> Vec<(u64, &[u8])> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = read_varint(buf, &mut pos);
        match key & 7 {
            0 => {
                read_varint(buf, &mut pos);
            }
            1 => pos += 8,
            2 => {
                let len = read_varint(buf, &mut pos) as usize;
                out.push((key >> 3, &buf[pos..pos + len]));
                pos += len;
            }
            w => panic!("wire type {w} at {pos}"),
        }
    }
    assert_eq!(pos, buf.len(), "message overruns its end");
    out
}

struct Fetched {
    status: u16,
    content_type: String,
    etag: String,
    vary: String,
    body: Vec<u8>,
}

async fn fetch(client: &Client, accept: &str, if_none_match: Option<&str>) -> Fetched {
    // Any GET request, pointed at /openapi/v2 (kube-rs builds no non-resource requests).
    let mut req = kube::core::Request::new("/api/v1/namespaces")
        .list(&ListParams::default())
        .unwrap();
    *req.uri_mut() = "/openapi/v2".parse().unwrap();
    req.headers_mut().insert("accept", accept.parse().unwrap());
    if let Some(tag) = if_none_match {
        req.headers_mut()
            .insert("if-none-match", tag.parse().unwrap());
    }
    let req = req.map(|b| Body::from(bytes::Bytes::from(b)));
    let resp = client.send(req).await.unwrap();
    let h = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (status, content_type, etag, vary) = (
        resp.status().as_u16(),
        h("content-type"),
        h("etag"),
        h("vary"),
    );
    let body = resp.into_body().collect_bytes().await.unwrap().to_vec();
    Fetched {
        status,
        content_type,
        etag,
        vary,
        body,
    }
}

#[test]
fn kubectl_validates_kinds_without_patch_through_openapi_v2_protobuf() {
    let s = Server::start();

    // 1. A TokenReview of a real token: created with validation on (the default), the
    //    verifier having fetched /openapi/v2 as protobuf.
    s.ok(&["create", "serviceaccount", "reviewer"]);
    let token = s.ok(&["create", "token", "reviewer"]);
    let token = token.trim();
    let out = s.kubectl_stdin(
        &[
            "create",
            "-f",
            "-",
            "-v=6",
            "-o",
            "jsonpath={.status.authenticated} {.status.user.username}",
        ],
        &token_review(token, ""),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubectl create failed:\n{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "true system:serviceaccount:default:reviewer"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("GET ") && l.contains("/openapi/v2") && l.contains(" 200 OK")),
        "kubectl did not read /openapi/v2:\n{stderr}"
    );
    // An invalid token is reviewed too: not authenticated (omitted), with an error.
    let review = s.ok_stdin(
        &[
            "create",
            "-f",
            "-",
            "-o",
            "jsonpath={.status.authenticated}|{.status.error}",
        ],
        &token_review("not-a-token", ""),
    );
    assert!(review.starts_with('|') && review.len() > 1, "{review}");

    // 2. Client-side validation against the protobuf definitions catches unknown fields of
    //    such kinds.
    let out = s.kubectl_stdin(&["create", "-f", "-"], &token_review(token, "  bogus: 1\n"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an unknown field was accepted");
    assert!(
        stderr.contains(r#"unknown field "bogus" in io.k8s.api.authentication.v1.TokenReviewSpec"#),
        "{stderr}"
    );

    // 3. Kinds with a PATCH operation still validate server-side, as before.
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n    bogus: true\n";
    let out = s.kubectl_stdin(&["create", "-f", "-"], pod);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a pod with an unknown field was created"
    );
    assert!(
        stderr.contains("unknown field") && stderr.contains("bogus"),
        "{stderr}"
    );
    assert!(s.kubectl(&["get", "pod", "p"]).status.code() != Some(0));

    // 4. The document itself, fetched by another client.
    let kubeconfig = kube::config::Kubeconfig::read_from(s.kubeconfig()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = Client::try_from(config).unwrap();

        let proto = fetch(&client, PROTO_ACCEPT, None).await;
        assert_eq!(proto.status, 200);
        assert_eq!(proto.content_type, PROTO_CONTENT_TYPE);
        assert_eq!(proto.vary, "Accept");
        assert!(
            proto.etag.starts_with('"') && proto.etag.len() > 2,
            "{}",
            proto.etag
        );
        // Document: swagger = 1 ("2.0"), info = 2, paths = 8, definitions = 9.
        let doc = len_fields(&proto.body);
        assert_eq!(doc[0], (1, &b"2.0"[..]));
        let info = len_fields(doc.iter().find(|(n, _)| *n == 2).unwrap().1);
        assert!(info.contains(&(1, &b"Kubernetes"[..])), "{info:?}");
        let defs = len_fields(doc.iter().find(|(n, _)| *n == 9).unwrap().1);
        let names: Vec<&[u8]> = defs
            .iter()
            .map(|(_, named)| len_fields(named)[0].1)
            .collect();
        assert!(names.len() > 300, "{} definitions", names.len());
        for want in [
            &b"io.k8s.api.authentication.v1.TokenReview"[..],
            b"io.k8s.api.core.v1.Pod",
        ] {
            assert!(
                names.contains(&want),
                "{} missing",
                String::from_utf8_lossy(want)
            );
        }

        // The newer media type name too; JSON by default; one ETag for both forms.
        let proto2 = fetch(&client, PROTO_CONTENT_TYPE, None).await;
        assert_eq!(proto2.status, 200);
        assert_eq!(proto2.body, proto.body);
        let json = fetch(&client, "application/json, */*", None).await;
        assert_eq!(json.status, 200);
        assert_eq!(json.content_type, "application/json");
        assert_eq!(json.etag, proto.etag);
        let doc: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
        assert_eq!(doc["swagger"], "2.0");
        assert!(doc["definitions"]["io.k8s.api.authentication.v1.TokenReview"].is_object());

        let cached = fetch(&client, PROTO_ACCEPT, Some(&proto.etag)).await;
        assert_eq!(cached.status, 304);
        assert!(cached.body.is_empty());
        assert_eq!(cached.etag, proto.etag);
        let refused = fetch(&client, "text/html", None).await;
        assert_eq!(refused.status, 406);
    });
}
