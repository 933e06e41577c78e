//! Fixtures shared by the authentication tests: two fixed RSA keys (loaded through the PKI,
//! the only way to build a [`ServiceAccountKey`]), a fixed clock, and objects.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use capstan_pki::{Pki, PkiOptions, ServiceAccountKey};
use serde_json::{json, Value};

use super::Clock;
use crate::objects::MemoryObjects;

/// Throwaway test-only key (never used outside these tests).
const TEST_KEY_PEM: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIIEvwIBADANBgkqhkiG9w0BAQEFAASCBKkwggSlAgEAAoIBAQDDrddYpQ07HUsC\n\
9f5N4dMGx93Z7FbIcUfVFiTYkBE+p4jIjVSm34A0pM3SBJK2dhmIkbTVCRr/jBon\n\
E4xuZY9Xwq8eyDWb2b3eWUsrgxMSnwnbgfvBpFxWDYpFLj3wq0WZHPpBaJTA2/70\n\
cPE3PsIvVP7KbeoGeVWUcxooBFOVMNzlo1tQ9gV10Zw53qbGc5AZIx297/s9tM5C\n\
PrNnxOht184KnfU6snerYq1PRTgEH44gAClZpEbNDZ7uEvoelVip+L+qEKX8t7q2\n\
cIhI1p0VdgDyPS6/b8SxKNvZr1mZyJqqDBJnOwOxpYuIDlpN+ZDGD/+QdN/yC6bJ\n\
+vMZgTEPAgMBAAECggEABoxeQllU/dnx79mYluBMRhP723ZFGd8Z8XUUwD84py6c\n\
bWMMEVY1vaKYQAN8KhP+BcEj2o878o+siQs77gPYY1j2BaMwkWnHfgCMpe+fJ0aK\n\
4hLRqyjGGEZ1Y/GeDAbx73j18lNpdaIcau9j+x55XskgNQOu9bmAwNTbQWSSVtHl\n\
TzCQN63Bt6bPZdNzJhNgyj+JV/lEmBuNYht/hXROo2lW8YDdg40Qy0iw3k2kHxF8\n\
ZrUuAskoj0B9w5izPOKtrKM/HP5baGRwAeKxLe34F5Ji0N6JHd7CYzZworwjbiXF\n\
8iG2e0VGSdBW0ax9s1p0DiLgbsU9AEoAq78D71GEuQKBgQDjSV2w/hG+wf8rJFLb\n\
khmZcc/WkXhb3Cpn6sOvsJkJvQNaiK+vy1iZkiW1ykzBrRjw9XrrwEhwgz6jRVxS\n\
AXWTHlU/1E5arYB/rThmZU1n0nPThlEp03fz0m3fTH4pcSYuepuSI9HAmPZNt6ED\n\
jLw2Lgde+LCorJV/w10bpJ0sFwKBgQDcZkMgrOP/GgM6PvF8FKM+is5V6z5DYFs0\n\
XUC70VaKvTSXmCGNCWuby9S7Z/aGj1VtWBe027yaB3aUnlQ8qEWBkuyAcu8q3o3a\n\
aEn25mDgap7CX5D5dGWCKTPQ2ycXaxYWXR6GzUsU3M7+s+PokGQoFHPLGlf6oP5v\n\
WPvr2D/lyQKBgQCC0L80F4dvG4kZ85Yc+kHxpyfQf3mepWFi3iQzApmSmU9M1E8K\n\
Bye/e/ZoYz86Wb55MVDGT61h1KhAoLM6H8zkGBlI25Edb679zV0g0j1y/BXeMPiV\n\
8jigBQVn+EbE43LuXXMc8bDQAToCESaDPIU3SdbEOq6y5mJFXtRADMbJkQKBgQC/\n\
WME64x9m4Oygavk44qn/qH8PNRdvY36LbdK/vTVHapD4dAnc6qrULhjZQ59Sn6pp\n\
LiwWxxdtGsGmsfcsWmNN5YMS2bYvH91EG3rrsoO1EpwW4OV6zcU7Rg5Ia5v6xuv8\n\
KohQPHfM+w9zLjbWOFXcPjVxxcNQQunjPfwpfCutkQKBgQCnCpkxZQo9ZpfOhFpr\n\
PD0M63lA7VLHZyow2Og8AXvHGtMIo6vR1AIB85H3ueSXmH7SDMSGpxSfDMX09xyS\n\
bYZTpAUYAxavRp8qISqrNyNQE2hzjnUWodF9HmB/EhAc2J6q1Zl2jd0dryEtF1w8\n\
91AdGazIN/rgvNGCLw4j+hkkyA==\n\
-----END PRIVATE KEY-----\n\
";

/// A second throwaway test-only key, for "signed by someone else".
const OTHER_KEY_PEM: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC0nkuFLBqSna2e\n\
PMyyb6BKAei8+6l8oP0+WdzTCCSPF6fnqBI0QFHJeH52Mf1YxQRiOM64Xo7RKmiM\n\
OqLkk8ES90BFk0lt1CimCd5Ik2hXxtEkvmXQx9RwbGzL/Eg/sTEK+eYiEhzc8WZI\n\
3yP6MoNgMhl1HZrYAm9pCSwdFpIproaEIeeT1zr+XkVYJJZfe3mqmNEUJK0ScZgv\n\
SI/5PcCDw4ZB5EslmjXxdjypHMg+C9jXLzX/mpeOPR3Ljt1wuNpV6deMnC4BqoJ9\n\
n2SFBUXPJp5bTDPsQPjg5at3uGfcQL/sshLDZ66cUQOswRBBzVp6y89PVMOKfVxD\n\
E6Ulc+aZAgMBAAECggEAJNqx5TQJHgaPgRy91eECD2fRUhJ11GjTE7BpZyQftZTp\n\
nVLFmCTRq27rOvnbTIwy50nZIHSm5pYlLAvg5gwiFtkdo7S4hHEIdEzKLvvpDBQU\n\
48733oCP3/q3vm21Xk2tCKTSKPySKCEXsmHZqPk6plvCpwuJ526jxgZpmmvbGiba\n\
Kk9UrQNszfznrn89tAOacy6T+khhd4BZjcklM+Q3zbfgmW6hNpBbte5Wnkrt5GUK\n\
uPr+vLVlQVge+AgXVmA5x3zlQNAO9lpumDtcJM70kH+cWiYTaeLrbFwKou/QDz6y\n\
FDapqjEtG11ZKjQgrxXeITb4MBJBFVhmD2izBBTvCwKBgQD6AhN0EOfHUyaRxHD9\n\
btOJj/RK35bJ3O6aLIgXgLK1yni4YQwG9GmvkRZE7CIEBeheOezaxAsrfmrbQIIv\n\
Xl0rY5pU+FdxOaYd0B3Qk/E6SUOtObtsIhvIkSvV/vZ+QDQNa1JUn3DWwYgargSg\n\
KK1CTLMEn0Apgzx6qNAonxZ7FwKBgQC48npxBCTu9NJD1jB35xGVXeJ1+VrYcWMn\n\
tAnW28a/YApeqo7qDM4ygIkT+QXnlMk+GbVqcrOJmwmDLd25Cq4m2XL1r8gdpoSB\n\
HNjgN4Gd5ajOHyyIbKthbdIR6LOcuiOCrSklpN8vcjZ9DUyEGWvNzhHfhmfV9y6+\n\
jdWX0/v5zwKBgQC7lFssNpLxBv5lWFK+lCy7hfrxQplMlCuiGc9ycumjZGr3TDlN\n\
7oxtYhqnU9Sh2Bzktel0qqsG0y8xmlETYWXebDkbj8lr9qkgrUnxeU8BQH86tZpe\n\
I6lc7y9IvKgNSfbEKsX3IDn1p/eKrQ5jbKGyoQGgciwd+Y2jKo4kLFkduQKBgFSC\n\
J8SgeifeIn3wzzDamsQ/pAz4JbSlCwPHVn+g6Q3lWperI6Z6t3WIGhrQPQx2hgYk\n\
RSsgwjzsZMpWGOxGnxENZ2QwMCasQfulLMw3ULjPifS1denYje70+XpJdFj3DObX\n\
LOgQkBLkA1Xcz8vEuefOc4hJqASy798OfDzmFkstAoGAUJvpP2Qg7K/XetOiPTvS\n\
YTh2yQyD3AaHDoBs86tFzFtTlSO5MFXJS66YdWrqf/lUv46skmI59S3s5Gou3tPl\n\
U5ZoXE+VfGLaBHDJmjn9i0oFwUcYSnH8oaIAGF4KkdwX8XYsIkjjRuDFvSUCUdAz\n\
zpt3XVoaqTfrBLlkhkRBtHI=\n\
-----END PRIVATE KEY-----\n\
";

fn load(pem: &str) -> Arc<Pki> {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join(capstan_pki::SA_KEY_FILE), pem).expect("writing sa.key");
    let options = PkiOptions {
        hostname: Some("test".into()),
        ..Default::default()
    };
    let pki = Pki::load_or_create(dir.path(), options).expect("test PKI");
    Arc::new(pki)
}

/// The PKI whose service-account key signs in tests.
pub fn test_pki() -> Arc<Pki> {
    static PKI: OnceLock<Arc<Pki>> = OnceLock::new();
    PKI.get_or_init(|| load(TEST_KEY_PEM)).clone()
}

pub fn test_key() -> &'static ServiceAccountKey {
    static PKI: OnceLock<Arc<Pki>> = OnceLock::new();
    PKI.get_or_init(test_pki).service_account_key()
}

/// A key the test issuer does not trust.
pub fn other_pki() -> Arc<Pki> {
    static PKI: OnceLock<Arc<Pki>> = OnceLock::new();
    PKI.get_or_init(|| load(OTHER_KEY_PEM)).clone()
}

pub fn other_key() -> &'static ServiceAccountKey {
    static PKI: OnceLock<Arc<Pki>> = OnceLock::new();
    PKI.get_or_init(other_pki).service_account_key()
}

/// 2024-05-01T00:00:00Z, "now" in tests.
pub fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_714_521_600)
}

/// A clock that reads `at`.
pub fn fixed_clock(at: SystemTime) -> Clock {
    Arc::new(move || at)
}

/// A clock whose time tests can move.
pub fn settable_clock(at: SystemTime) -> (Clock, Arc<parking_lot::Mutex<SystemTime>>) {
    let now = Arc::new(parking_lot::Mutex::new(at));
    let read = now.clone();
    (Arc::new(move || *read.lock()), now)
}

pub fn objects() -> Arc<MemoryObjects> {
    Arc::new(MemoryObjects::default())
}

pub fn service_account(ns: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"namespace": ns, "name": name, "uid": uid}})
}

pub fn pod(ns: &str, name: &str, uid: &str, sa: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "uid": uid},
        "spec": {"serviceAccountName": sa, "nodeName": node, "containers": [{"name": "c", "image": "i"}]}})
}

pub fn node(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": uid}})
}

pub fn secret(ns: &str, name: &str, uid: &str, type_: &str, data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                Value::String(crate::registry::base64_encode(v.as_bytes())),
            )
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "type": type_,
        "metadata": {"namespace": ns, "name": name, "uid": uid}, "data": data})
}
