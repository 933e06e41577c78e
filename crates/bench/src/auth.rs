//! `capstan bench auth`: what authentication and authorization add to each request, in
//! process, with the server's real chain (x509 client certificates, bearer tokens, the Node
//! authorizer, RBAC) over a real store holding `--bindings` RoleBindings besides Kubernetes'
//! default policy.
//!
//! Cases, each timed over `--duration` on one thread:
//! - `x509-allowed`: a certificate user whose one RoleBinding (among all the others) allows
//!   the request;
//! - `x509-denied`: a certificate user nothing allows (every authorizer is asked);
//! - `token-allowed`: a service account's bound token (`kubectl create token`), seen before;
//! - `token-first-use`: bound tokens presented for the first time (signature verified).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, Context, Result};
use capstan_apiserver::access::{access, AccessOptions};
use capstan_apiserver::auth::{ConnInfo, User};
use capstan_apiserver::registry::WriteOptions;
use capstan_apiserver::request::{Query, RequestInfo};
use capstan_apiserver::{ApiServer, Config};
use http::{HeaderMap, HeaderValue, Method};
use serde_json::json;

use crate::duration::parse_duration;

#[derive(clap::Args, Debug)]
pub struct AuthArgs {
    /// RoleBindings in the cluster besides the default policy.
    #[arg(long, default_value_t = 1000)]
    bindings: usize,
    /// How long each case runs.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    duration: Duration,
}

/// One case's figure.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AuthMeasurement {
    pub case: &'static str,
    pub bindings: usize,
    pub ops: u64,
    pub ns_per_op: f64,
}

pub async fn run(args: AuthArgs) -> Result<()> {
    println!(
        "{:<18} {:>9} {:>12} {:>10}",
        "case", "bindings", "ops", "µs/op"
    );
    for m in measure(args.bindings, args.duration).await? {
        println!(
            "{:<18} {:>9} {:>12} {:>10.2}",
            m.case,
            m.bindings,
            m.ops,
            m.ns_per_op / 1000.0
        );
    }
    Ok(())
}

/// Build a server with `bindings` RoleBindings and time each case for `duration`.
pub async fn measure(bindings: usize, duration: Duration) -> Result<Vec<AuthMeasurement>> {
    let dir = tempfile::tempdir()?;
    let pki = capstan_pki::Pki::load_or_create(&dir.path().join("pki"), Default::default())
        .map_err(|e| anyhow!("{e}"))?;
    let store = capstan_store::embedded::EmbeddedStore::open(dir.path().join("store"))
        .context("opening the store")?;
    let parts = access(AccessOptions {
        key: Arc::new(pki),
        token_file: None,
        jwks_uri: None,
        allow_anonymous: false,
        client_certs: None,
    })
    .map_err(|e| anyhow!("{e}"))?;
    let (auth, enable) = parts.into_parts();
    let api = ApiServer::new(Arc::new(store), auth, Config::default())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    enable.enable(&api).await;

    // The cluster: namespaces, `bindings` RoleBindings of users to `view`, one service
    // account allowed to read pods.
    let namespaces = 10;
    let opts = WriteOptions::default();
    let reg = |g: &str, r: &str| {
        api.registry(g, "v1", r)
            .ok_or_else(|| anyhow!("no registry for {r}"))
    };
    for i in 0..namespaces {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{i}")}});
        reg("", "namespaces")?
            .create("", ns, &opts)
            .await
            .map_err(|e| anyhow!(e.message))?;
    }
    let rb = reg("rbac.authorization.k8s.io", "rolebindings")?;
    for i in 0..bindings {
        let ns = format!("ns-{}", i % namespaces);
        let b = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("user-{i}-view"), "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": format!("user-{i}")}]});
        rb.create(&ns, b, &opts)
            .await
            .map_err(|e| anyhow!(e.message))?;
    }
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": "ns-0"}});
    let sa = reg("", "serviceaccounts")?
        .create("ns-0", sa, &opts)
        .await
        .map_err(|e| anyhow!(e.message))?;
    let b = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "reader-view", "namespace": "ns-0"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "ns-0"}]});
    rb.create("ns-0", b, &opts)
        .await
        .map_err(|e| anyhow!(e.message))?;

    // Wait until the caches (and so RBAC) hold every binding.
    let probe = User {
        name: format!("user-{}", bindings - 1),
        groups: vec!["system:authenticated".into()],
        ..Default::default()
    };
    let last_ns = format!("ns-{}", (bindings - 1) % namespaces);
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.auth.authorize(&probe, &pods_request(&last_ns)).is_err() {
        if Instant::now() > deadline {
            return Err(anyhow!("the RBAC policy did not load the bindings"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sa_tokens = api
        .auth
        .service_accounts
        .clone()
        .ok_or_else(|| anyhow!("no service account tokens"))?;
    let token_for = |i: usize| -> Result<String> {
        let req = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600 + i as i64}});
        let answer = sa_tokens
            .token_request("ns-0", &sa.value, &req, SystemTime::now())
            .map_err(|e| anyhow!(e.message))?;
        answer["status"]["token"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("no token"))
    };
    // Let the cache see the service account.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mid = bindings / 2;
    let x509 = |name: String| ConnInfo {
        client_cert: Some((name, vec!["devs".into()])),
        ..Default::default()
    };
    let allowed_conn = x509(format!("user-{mid}"));
    let allowed_req = pods_request(&format!("ns-{}", mid % namespaces));
    let denied_conn = x509("mallory".into());
    let no_headers = HeaderMap::new();
    let token = token_for(0)?;
    let mut token_headers = HeaderMap::new();
    token_headers.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}"))?,
    );
    let plain = ConnInfo::default();
    let sa_req = pods_request("ns-0");

    let chain = &api.auth;
    let once = |headers: &HeaderMap, conn: &ConnInfo, req: &RequestInfo| -> bool {
        match chain.authenticate(headers, conn) {
            Ok(user) => chain.authorize(&user, req).is_ok(),
            Err(_) => false,
        }
    };
    if !once(&no_headers, &allowed_conn, &allowed_req) {
        return Err(anyhow!("the x509 user should be allowed"));
    }
    if once(&no_headers, &denied_conn, &allowed_req) {
        return Err(anyhow!("the unbound user should be denied"));
    }
    if !once(&token_headers, &plain, &sa_req) {
        return Err(anyhow!("the service account token should be allowed"));
    }
    let mut out = Vec::new();
    for (case, headers, conn, req) in [
        ("x509-allowed", &no_headers, &allowed_conn, &allowed_req),
        ("x509-denied", &no_headers, &denied_conn, &allowed_req),
        ("token-allowed", &token_headers, &plain, &sa_req),
    ] {
        let (ops, elapsed) = time(duration, || {
            std::hint::black_box(once(headers, conn, req));
        });
        out.push(AuthMeasurement {
            case,
            bindings,
            ops,
            ns_per_op: elapsed.as_nanos() as f64 / ops as f64,
        });
    }
    // First uses: fresh tokens, each presented once.
    let fresh: Vec<HeaderMap> = (1..=200)
        .map(|i| {
            let mut h = HeaderMap::new();
            h.insert(
                http::header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {}", token_for(i)?))?,
            );
            Ok(h)
        })
        .collect::<Result<_>>()?;
    let started = Instant::now();
    for h in &fresh {
        if !once(h, &plain, &sa_req) {
            return Err(anyhow!("a fresh token should be allowed"));
        }
    }
    let elapsed = started.elapsed();
    out.push(AuthMeasurement {
        case: "token-first-use",
        bindings,
        ops: fresh.len() as u64,
        ns_per_op: elapsed.as_nanos() as f64 / fresh.len() as f64,
    });
    Ok(out)
}

fn pods_request(ns: &str) -> RequestInfo {
    RequestInfo::parse(
        &Method::GET,
        &format!("/api/v1/namespaces/{ns}/pods"),
        &Query::parse(None),
    )
}

/// Run `f` repeatedly for `duration`, in batches: (calls, time taken).
fn time(duration: Duration, mut f: impl FnMut()) -> (u64, Duration) {
    let started = Instant::now();
    let mut ops = 0u64;
    while started.elapsed() < duration {
        for _ in 0..256 {
            f();
        }
        ops += 256;
    }
    (ops, started.elapsed())
}
