//! End-to-end: the PersistentVolume binder with the local-path provisioner, and the
//! CertificateSigningRequest approving and signing controllers, driven with kubectl.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{wait_until, Server};

const WAIT: Duration = Duration::from_secs(60);

fn get(s: &Server, args: &[&str]) -> Option<Value> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    let out = s.kubectl(&a);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

fn must_get(s: &Server, args: &[&str]) -> Value {
    get(s, args).unwrap_or_else(|| panic!("kubectl get {args:?} failed:\n{}", s.log()))
}

fn phase(s: &Server, args: &[&str]) -> String {
    get(s, args)
        .and_then(|v| v["status"]["phase"].as_str().map(str::to_string))
        .unwrap_or_default()
}

fn wait_phase(s: &Server, args: &[&str], want: &str) {
    wait_until(&format!("{args:?} to be {want}"), WAIT, || {
        phase(s, args) == want
    });
}

/// The events about an object: (reason, message).
fn events(s: &Server, ns: &str, name: &str) -> Vec<(String, String)> {
    let v = must_get(s, &["events", "-n", ns]);
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn wait_event(s: &Server, ns: &str, name: &str, reason: &str, message: &str) {
    wait_until(
        &format!("event {reason} {message:?} about {name}"),
        WAIT,
        || {
            events(s, ns, name)
                .iter()
                .any(|(r, m)| r == reason && m.contains(message))
        },
    );
}

fn pvc(name: &str, class: Option<&str>, size: &str, extra: &str) -> String {
    let class = class
        .map(|c| format!("  storageClassName: \"{c}\"\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {name}
  namespace: default
spec:
  accessModes: [ReadWriteOnce]
{class}{extra}  resources:
    requests:
      storage: {size}
"
    )
}

fn pv(name: &str, class: &str, size: &str, path: &str, policy: &str) -> String {
    format!(
        "apiVersion: v1
kind: PersistentVolume
metadata:
  name: {name}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: {class}
  persistentVolumeReclaimPolicy: {policy}
  capacity:
    storage: {size}
  hostPath:
    path: {path}
"
    )
}

fn class(name: &str, policy: &str, mode: &str, default: bool) -> String {
    format!(
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {name}
  annotations:
    storageclass.kubernetes.io/is-default-class: \"{default}\"
provisioner: capstan.dev/local-path
reclaimPolicy: {policy}
volumeBindingMode: {mode}
"
    )
}

#[test]
fn volumes_bind_provision_and_reclaim() {
    let storage = tempfile::tempdir().unwrap();
    let s = Server::start_cluster(&["--local-storage-dir", storage.path().to_str().unwrap()]);
    // The server makes its own default class, local-path, at start; this test's default must be
    // the only default one (with two, the newest wins, and they may be born in the same second).
    support::wait_until(
        "the server's local-path class",
        Duration::from_secs(60),
        || {
            s.kubectl(&["get", "storageclass", "local-path"])
                .status
                .success()
        },
    );
    s.ok(&["delete", "storageclass", "local-path"]);
    let classes = [
        class("lp-delete", "Delete", "Immediate", true),
        class("lp-retain", "Retain", "Immediate", false),
        class("lp-wait", "Delete", "WaitForFirstConsumer", false),
    ]
    .join("---\n");
    s.ok_stdin(&["apply", "-f", "-"], &classes);
    // Kubernetes' hostPath deleter only removes paths under /tmp/.
    let statics = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let tmp_vol = statics.path().join("tmp-delete");
    std::fs::create_dir_all(&tmp_vol).unwrap();
    std::fs::write(tmp_vol.join("data"), "x").unwrap();
    let objects = [
        pvc("dyn-delete", Some("lp-delete"), "1Gi", ""),
        pvc("dyn-retain", Some("lp-retain"), "2Gi", ""),
        pvc("defaulted", None, "100Mi", ""),
        pvc("wait", Some("lp-wait"), "1Gi", ""),
        pv("static-small", "manual", "1Gi", "/srv/small", "Retain"),
        pv("static-big", "manual", "5Gi", "/srv/big", "Retain"),
        pvc("static-claim", Some("manual"), "500Mi", ""),
        pvc(
            "by-name",
            Some("manual"),
            "1Gi",
            "  volumeName: static-big\n",
        ),
        pv(
            "tmp-delete",
            "tmpdel",
            "1Gi",
            tmp_vol.to_str().unwrap(),
            "Delete",
        ),
        pvc("tmp-claim", Some("tmpdel"), "1Gi", ""),
        pvc("nothing", Some(""), "1Gi", ""),
        pv("named-small", "named", "1Gi", "/srv/named", "Retain"),
        pvc(
            "wants-more",
            Some("named"),
            "2Gi",
            "  volumeName: named-small\n",
        ),
        pv("recycled", "recycle", "1Gi", "/srv/recycled", "Recycle"),
        pvc("recycle-claim", Some("recycle"), "1Gi", ""),
    ]
    .join("---\n");
    s.ok_stdin(&["apply", "-f", "-"], &objects);

    // Dynamic provisioning by the local-path provisioner.
    for name in ["dyn-delete", "dyn-retain", "defaulted"] {
        wait_phase(&s, &["pvc", name], "Bound");
    }
    let claim = must_get(&s, &["pvc", "dyn-delete"]);
    let uid = claim["metadata"]["uid"].as_str().unwrap().to_string();
    let pv_name = format!("pvc-{uid}");
    assert_eq!(claim["spec"]["volumeName"], pv_name.as_str());
    let ann = &claim["metadata"]["annotations"];
    assert_eq!(ann["pv.kubernetes.io/bind-completed"], "yes");
    assert_eq!(ann["pv.kubernetes.io/bound-by-controller"], "yes");
    assert_eq!(
        ann["volume.kubernetes.io/storage-provisioner"],
        "capstan.dev/local-path"
    );
    assert_eq!(
        ann["volume.beta.kubernetes.io/storage-provisioner"],
        "capstan.dev/local-path"
    );
    assert_eq!(claim["status"]["capacity"]["storage"], "1Gi");
    assert_eq!(claim["status"]["accessModes"][0], "ReadWriteOnce");
    wait_phase(&s, &["pv", &pv_name], "Bound");
    let volume = must_get(&s, &["pv", &pv_name]);
    assert_eq!(
        volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
        "capstan.dev/local-path"
    );
    assert_eq!(volume["spec"]["claimRef"]["uid"], uid.as_str());
    assert_eq!(volume["spec"]["capacity"]["storage"], "1Gi");
    assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    assert_eq!(volume["spec"]["storageClassName"], "lp-delete");
    let dir = storage.path().join(format!("{pv_name}_default_dyn-delete"));
    assert_eq!(volume["spec"]["hostPath"]["path"], dir.to_str().unwrap());
    assert!(dir.is_dir(), "{} was not created", dir.display());
    let table = s.ok(&["get", "pv", &pv_name]);
    assert!(
        table.contains("Bound") && table.contains("default/dyn-delete"),
        "{table}"
    );
    wait_event(
        &s,
        "default",
        "dyn-delete",
        "ProvisioningSucceeded",
        &pv_name,
    );
    wait_event(
        &s,
        "default",
        "dyn-delete",
        "ExternalProvisioning",
        "Waiting for a volume to be created either by the external provisioner 'capstan.dev/local-path' or manually by the system administrator.",
    );
    // A claim without a class gets the default class.
    let defaulted = must_get(&s, &["pvc", "defaulted"]);
    assert_eq!(defaulted["spec"]["storageClassName"], "lp-delete");

    // Static volumes: the smallest that fits, or the one asked for by name.
    wait_phase(&s, &["pvc", "static-claim"], "Bound");
    wait_phase(&s, &["pvc", "by-name"], "Bound");
    assert_eq!(
        must_get(&s, &["pvc", "static-claim"])["spec"]["volumeName"],
        "static-small"
    );
    wait_phase(&s, &["pv", "static-small"], "Bound");
    let small = must_get(&s, &["pv", "static-small"]);
    assert_eq!(
        small["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"],
        "yes"
    );
    assert_eq!(small["spec"]["claimRef"]["name"], "static-claim");
    assert_eq!(
        must_get(&s, &["pvc", "static-claim"])["status"]["capacity"]["storage"],
        "1Gi"
    );
    let by_name = must_get(&s, &["pvc", "by-name"]);
    assert_eq!(by_name["spec"]["volumeName"], "static-big");
    assert!(
        by_name["metadata"]["annotations"]
            .get("pv.kubernetes.io/bound-by-controller")
            .is_none(),
        "the user bound it: {by_name}"
    );
    let table = s.ok(&["get", "pvc"]);
    assert!(
        table.lines().any(|l| l.starts_with("static-claim")
            && l.contains("Bound")
            && l.contains("static-small")),
        "{table}"
    );

    // No volume and no class: Pending, with Kubernetes' event.
    wait_event(
        &s,
        "default",
        "nothing",
        "FailedBinding",
        "no persistent volumes available for this claim and no storage class is set",
    );
    assert_eq!(phase(&s, &["pvc", "nothing"]), "Pending");

    // A volume asked for by name that does not fit is refused.
    wait_event(
        &s,
        "default",
        "wants-more",
        "VolumeMismatch",
        "Cannot bind to requested volume \"named-small\": requested PV is too small",
    );
    assert_eq!(phase(&s, &["pvc", "wants-more"]), "Pending");
    assert_eq!(phase(&s, &["pv", "named-small"]), "Available");

    // WaitForFirstConsumer: nothing until a node is selected, then a volume on that node.
    wait_event(
        &s,
        "default",
        "wait",
        "WaitForFirstConsumer",
        "waiting for first consumer to be created before binding",
    );
    assert_eq!(phase(&s, &["pvc", "wait"]), "Pending");
    s.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels:\n    kubernetes.io/hostname: n1-host\n",
    );
    s.ok(&[
        "annotate",
        "pvc",
        "wait",
        "volume.kubernetes.io/selected-node=n1",
    ]);
    wait_phase(&s, &["pvc", "wait"], "Bound");
    let wait_pv = must_get(&s, &["pvc", "wait"])["spec"]["volumeName"]
        .as_str()
        .unwrap()
        .to_string();
    let affinity = &must_get(&s, &["pv", &wait_pv])["spec"]["nodeAffinity"]["required"]
        ["nodeSelectorTerms"][0]["matchExpressions"][0];
    assert_eq!(affinity["key"], "kubernetes.io/hostname");
    assert_eq!(affinity["values"][0], "n1-host");

    // Reclaiming: Delete removes the volume and its directory, Retain leaves it Released.
    let retain_pv = must_get(&s, &["pvc", "dyn-retain"])["spec"]["volumeName"]
        .as_str()
        .unwrap()
        .to_string();
    wait_phase(&s, &["pvc", "tmp-claim"], "Bound");
    wait_phase(&s, &["pvc", "recycle-claim"], "Bound");
    s.ok(&[
        "delete",
        "pvc",
        "dyn-delete",
        "dyn-retain",
        "static-claim",
        "tmp-claim",
        "recycle-claim",
    ]);
    wait_until("the Delete volume to be deleted", WAIT, || {
        get(&s, &["pv", &pv_name]).is_none()
    });
    wait_until("its directory to be removed", WAIT, || !dir.exists());
    wait_phase(&s, &["pv", &retain_pv], "Released");
    wait_phase(&s, &["pv", "static-small"], "Released");
    let retained_dir = storage
        .path()
        .join(format!("{retain_pv}_default_dyn-retain"));
    assert!(retained_dir.is_dir());
    // A static hostPath volume under /tmp with Delete is removed as Kubernetes' hostPath
    // deleter removes it.
    wait_until("the static Delete volume to be deleted", WAIT, || {
        get(&s, &["pv", "tmp-delete"]).is_none()
    });
    assert!(!tmp_vol.exists());
    // Recycling is not done here: the volume fails, as without a recycler in Kubernetes.
    wait_phase(&s, &["pv", "recycled"], "Failed");
    let recycled = must_get(&s, &["pv", "recycled"]);
    assert_eq!(
        recycled["status"]["message"],
        "No recycler plugin found for the volume!"
    );
    wait_event(
        &s,
        "default",
        "recycled",
        "VolumeFailedRecycle",
        "No recycler plugin found for the volume!",
    );
    // The claim bound by name keeps its volume.
    assert_eq!(phase(&s, &["pv", "static-big"]), "Bound");
    let table = s.ok(&["get", "pv", &retain_pv]);
    assert!(table.contains("Released"), "{table}");
    // A Bound claim whose volume is deleted is Lost.
    s.ok(&["delete", "pv", "static-big", "--wait=false"]);
    let _ = s.kubectl(&[
        "patch",
        "pv",
        "static-big",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    wait_phase(&s, &["pvc", "by-name"], "Lost");
    wait_event(
        &s,
        "default",
        "by-name",
        "ClaimLost",
        "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
    );
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A key and a PEM request for `subject` in `dir`; returns the request base64-encoded.
fn make_csr(dir: &Path, name: &str, subject: &str) -> String {
    openssl(
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            &format!("{name}.key"),
        ],
        dir,
    );
    openssl(
        &[
            "req",
            "-new",
            "-key",
            &format!("{name}.key"),
            "-subj",
            subject,
            "-out",
            &format!("{name}.csr"),
        ],
        dir,
    );
    openssl(
        &[
            "base64",
            "-A",
            "-in",
            &format!("{name}.csr"),
            "-out",
            &format!("{name}.b64"),
        ],
        dir,
    );
    std::fs::read_to_string(dir.join(format!("{name}.b64")))
        .unwrap()
        .trim()
        .to_string()
}

fn csr_yaml(name: &str, request: &str, signer: &str, usages: &[&str]) -> String {
    format!(
        "apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: {name}
spec:
  request: {request}
  signerName: {signer}
  expirationSeconds: 3600
  usages: [{}]
",
        usages
            .iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn condition(csr: &Value, type_: &str) -> Option<Value> {
    csr["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Wait for the CSR's certificate and write it to `<dir>/<name>.crt`.
fn wait_certificate(s: &Server, dir: &Path, name: &str) -> std::path::PathBuf {
    let mut cert = String::new();
    wait_until(&format!("certificate of {name}"), WAIT, || {
        cert = get(s, &["csr", name])
            .and_then(|v| v["status"]["certificate"].as_str().map(str::to_string))
            .unwrap_or_default();
        !cert.is_empty()
    });
    std::fs::write(dir.join(format!("{name}.crt.b64")), &cert).unwrap();
    openssl(
        &[
            "base64",
            "-d",
            "-A",
            "-in",
            &format!("{name}.crt.b64"),
            "-out",
            &format!("{name}.crt"),
        ],
        dir,
    );
    dir.join(format!("{name}.crt"))
}

/// A kubeconfig of node `node` (system:node:<node> in system:nodes): a client certificate
/// signed with the cluster CA's key.
fn node_identity(s: &Server, dir: &Path, node: &str) -> PathBuf {
    let pki = s.dir.path().join("pki");
    let id = format!("{node}-id");
    make_csr(dir, &id, &format!("/O=system:nodes/CN=system:node:{node}"));
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &format!("{id}.csr"),
            "-CA",
            pki.join("ca.crt").to_str().unwrap(),
            "-CAkey",
            pki.join("ca.key").to_str().unwrap(),
            "-CAserial",
            "ca.srl",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "client.ext",
            "-out",
            &format!("{id}.crt"),
        ],
        dir,
    );
    let kc = user_kubeconfig(
        s,
        dir,
        &id,
        &dir.join(format!("{id}.crt")),
        &dir.join(format!("{id}.key")),
    );
    let who = as_user(
        &kc,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    );
    assert_eq!(who, format!("system:node:{node}"));
    kc
}

/// A kubeconfig for the user of a client certificate.
fn user_kubeconfig(s: &Server, dir: &Path, name: &str, cert: &Path, key: &Path) -> PathBuf {
    let home = dir.join(format!("{name}-home"));
    std::fs::create_dir_all(&home).unwrap();
    let path = home.join("kubeconfig");
    let ca = s.dir.path().join("pki/ca.crt");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:{}
    certificate-authority: {}
users:
- name: u
  user:
    client-certificate: {}
    client-key: {}
contexts:
- name: c
  context: {{cluster: c, user: u}}
current-context: c
",
            s.port,
            ca.display(),
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    path
}

/// Run kubectl with another user's kubeconfig; its stdout.
fn as_user(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = support::kubectl(kubeconfig, args, stdin);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn openssl_out(args: &[&str], dir: &Path) -> String {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn certificate_requests_are_approved_and_signed() {
    let s = Server::start_cluster(&[]);
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let ca = s.dir.path().join("pki/ca.crt");
    let ca = ca.to_str().unwrap();

    // A client certificate approved with kubectl and signed by the cluster CA.
    let req = make_csr(dir, "jane", "/O=devs/CN=jane");
    s.ok_stdin(
        &["create", "-f", "-"],
        &csr_yaml(
            "jane",
            &req,
            "kubernetes.io/kube-apiserver-client",
            &["client auth", "digital signature"],
        ),
    );
    // Requests for client usages the signer refuses fail instead.
    let bad = make_csr(dir, "bad", "/CN=bad");
    s.ok_stdin(
        &["create", "-f", "-"],
        &csr_yaml(
            "bad",
            &bad,
            "kubernetes.io/kube-apiserver-client",
            &["server auth", "client auth"],
        ),
    );
    let csr = must_get(&s, &["csr", "jane"]);
    assert!(condition(&csr, "Approved").is_none(), "not auto-approved");
    s.ok(&["certificate", "approve", "jane", "bad"]);
    let cert = wait_certificate(&s, dir, "jane");
    let cert = cert.to_str().unwrap();
    let verify = openssl_out(&["verify", "-CAfile", ca, cert], dir);
    assert!(verify.contains("OK"), "{verify}");
    let subject = openssl_out(&["x509", "-in", cert, "-noout", "-subject"], dir);
    assert!(
        subject.contains("O = devs") && subject.contains("CN = jane"),
        "{subject}"
    );
    let text = openssl_out(&["x509", "-in", cert, "-noout", "-text"], dir);
    assert!(text.contains("TLS Web Client Authentication"), "{text}");
    assert!(!text.contains("TLS Web Server Authentication"), "{text}");
    // expirationSeconds 3600: valid for about an hour, not for the default year.
    openssl(&["x509", "-in", cert, "-noout", "-checkend", "3000"], dir);
    let out = Command::new("openssl")
        .args(["x509", "-in", cert, "-noout", "-checkend", "4000"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the certificate outlives its expirationSeconds"
    );
    // The certificate authenticates jane.
    let jane = user_kubeconfig(&s, dir, "jane", Path::new(cert), &dir.join("jane.key"));
    let who = as_user(&jane, &["auth", "whoami", "-o", "json"], None);
    let who: Value = serde_json::from_str(&who).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], "jane");
    assert_eq!(who["status"]["userInfo"]["groups"][0], "devs");

    wait_until("the bad request to fail", WAIT, || {
        get(&s, &["csr", "bad"])
            .and_then(|v| condition(&v, "Failed"))
            .is_some()
    });
    let bad = must_get(&s, &["csr", "bad"]);
    let failed = condition(&bad, "Failed").unwrap();
    assert_eq!(failed["reason"], "SignerValidationFailure");
    assert_eq!(
        failed["message"],
        "invalid usage for client certificate: server auth"
    );
    assert!(bad["status"].get("certificate").is_none());

    // Kubelet client certificates: a node renewing its own is approved once nodes may
    // (kubeadm's binding of the selfnodeclient role), then signed. The nodes authenticate
    // with client certificates of the cluster CA.
    s.ok(&[
        "create",
        "clusterrolebinding",
        "node-autoapprove-certificate-rotation",
        "--clusterrole",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        "--group",
        "system:nodes",
    ]);
    let kubelet = make_csr(dir, "n1", "/O=system:nodes/CN=system:node:n1");
    as_user(
        &node_identity(&s, dir, "n1"),
        &["create", "-f", "-"],
        Some(&csr_yaml(
            "node-n1",
            &kubelet,
            "kubernetes.io/kube-apiserver-client-kubelet",
            &["digital signature", "client auth"],
        )),
    );
    // Another node asking for n3's certificate is not self, and nodeclient is not granted.
    let other = make_csr(dir, "n3", "/O=system:nodes/CN=system:node:n3");
    as_user(
        &node_identity(&s, dir, "n2"),
        &["create", "-f", "-"],
        Some(&csr_yaml(
            "node-n3-by-n2",
            &other,
            "kubernetes.io/kube-apiserver-client-kubelet",
            &["digital signature", "client auth"],
        )),
    );
    let cert = wait_certificate(&s, dir, "node-n1");
    let csr = must_get(&s, &["csr", "node-n1"]);
    assert_eq!(csr["spec"]["username"], "system:node:n1");
    let approved = condition(&csr, "Approved").unwrap();
    assert_eq!(approved["reason"], "AutoApproved");
    assert_eq!(
        approved["message"],
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    );
    let verify = openssl_out(&["verify", "-CAfile", ca, cert.to_str().unwrap()], dir);
    assert!(verify.contains("OK"), "{verify}");
    let table = s.ok(&["get", "csr", "node-n1"]);
    assert!(table.contains("Approved,Issued"), "{table}");
    // By now the other request has been tried (and refused) many times.
    let other = must_get(&s, &["csr", "node-n3-by-n2"]);
    assert!(
        other["status"].get("conditions").is_none(),
        "node-n3-by-n2 must stay pending: {other}"
    );
    let table = s.ok(&["get", "csr", "node-n3-by-n2"]);
    assert!(table.contains("Pending"), "{table}");
}
