//! Kubeconfig files: writing a fresh one, and merging an entry into an
//! existing one (e.g. `~/.kube/config`) without disturbing anything else.
//!
//! Credentials are embedded (`certificate-authority-data`,
//! `client-certificate-data`, `client-key-data`, base64 of the PEM), so the
//! file stands alone. Files are written with mode 0600 through a temporary
//! file and a rename.

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_yaml::{Mapping, Value};

use crate::{fsutil, Error, Result};

/// One cluster + user pair to put in a kubeconfig.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    /// Name of the `clusters[]` entry.
    pub cluster_name: &'a str,
    /// API server URL, e.g. `https://127.0.0.1:6443`.
    pub server_url: &'a str,
    /// PEM of the CA that signed the API server certificate.
    pub ca_pem: &'a str,
    /// Name of the `users[]` entry.
    pub user_name: &'a str,
    /// Client certificate PEM.
    pub cert_pem: &'a str,
    /// Client key PEM.
    pub key_pem: &'a str,
}

/// The YAML of a kubeconfig holding just `entry`, with a context named
/// after the cluster that is also the current context.
pub fn render(entry: &Entry<'_>) -> String {
    let mut doc = empty_config();
    upsert_entry(&mut doc, entry.cluster_name, entry);
    set(&mut doc, "current-context", entry.cluster_name.into());
    serde_yaml::to_string(&Value::Mapping(doc)).expect("a mapping of strings serializes")
}

/// Writes a kubeconfig with one cluster, one user and one context (named
/// like the cluster, and current) to `path` (mode 0600, atomically),
/// creating missing parent directories.
pub fn write(
    path: &Path,
    cluster_name: &str,
    server_url: &str,
    ca_pem: &str,
    user_name: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<()> {
    let entry = Entry {
        cluster_name,
        server_url,
        ca_pem,
        user_name,
        cert_pem,
        key_pem,
    };
    ensure_parent(path)?;
    fsutil::write_atomic(path, render(&entry).as_bytes(), 0o600)
}

/// Merges `entry` into the kubeconfig at `existing_path` (created if
/// missing): the cluster and user are added or replaced by name, a
/// context `context_name` pointing at them is added or replaced, and with
/// `set_current` it becomes the current context. Every other entry, key
/// and setting of the file is kept. An existing file that is not a
/// kubeconfig is an error and is left alone. A symlinked file is updated
/// at its target.
pub fn merge_into(
    existing_path: &Path,
    context_name: &str,
    entry: &Entry<'_>,
    set_current: bool,
) -> Result<()> {
    let path = resolve_symlink(existing_path);
    let mut doc = match fsutil::read_optional(&path)? {
        None => empty_config(),
        Some(bytes) => parse_config(&path, &bytes)?,
    };
    upsert_entry(&mut doc, context_name, entry);
    if set_current {
        set(&mut doc, "current-context", context_name.into());
    }
    let yaml = serde_yaml::to_string(&Value::Mapping(doc)).expect("YAML values serialize");
    ensure_parent(&path)?;
    fsutil::write_atomic(&path, yaml.as_bytes(), 0o600)
}

fn resolve_symlink(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => path.canonicalize().unwrap_or(path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

fn ensure_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => fsutil::ensure_dir(p),
        _ => Ok(()),
    }
}

fn parse_config(path: &Path, bytes: &[u8]) -> Result<Mapping> {
    let bad = |reason: String| Error::File {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(empty_config());
    }
    let value: Value = serde_yaml::from_slice(bytes)
        .map_err(|e| bad(format!("not a valid kubeconfig YAML ({e})")))?;
    let mut doc = match value {
        Value::Mapping(m) => m,
        Value::Null => return Ok(empty_config()),
        _ => return Err(bad("not a kubeconfig (top level is not a mapping)".into())),
    };
    for list in ["clusters", "users", "contexts"] {
        match doc.get(list) {
            None | Some(Value::Null) => {
                doc.insert(list.into(), Value::Sequence(Vec::new()));
            }
            Some(Value::Sequence(_)) => {}
            Some(_) => return Err(bad(format!("not a kubeconfig ({list} is not a list)"))),
        }
    }
    Ok(doc)
}

fn empty_config() -> Mapping {
    let mut m = Mapping::new();
    m.insert("apiVersion".into(), "v1".into());
    m.insert("kind".into(), "Config".into());
    m.insert("preferences".into(), Value::Mapping(Mapping::new()));
    m.insert("clusters".into(), Value::Sequence(Vec::new()));
    m.insert("users".into(), Value::Sequence(Vec::new()));
    m.insert("contexts".into(), Value::Sequence(Vec::new()));
    m.insert("current-context".into(), "".into());
    m
}

fn set(doc: &mut Mapping, key: &str, value: Value) {
    doc.insert(key.into(), value);
}

fn mapping(pairs: &[(&str, Value)]) -> Value {
    Value::Mapping(
        pairs
            .iter()
            .map(|(k, v)| (Value::from(*k), v.clone()))
            .collect(),
    )
}

fn b64(s: &str) -> Value {
    STANDARD.encode(s.as_bytes()).into()
}

fn upsert_entry(doc: &mut Mapping, context_name: &str, e: &Entry<'_>) {
    upsert_named(
        doc,
        "clusters",
        e.cluster_name,
        "cluster",
        mapping(&[
            ("certificate-authority-data", b64(e.ca_pem)),
            ("server", e.server_url.into()),
        ]),
    );
    upsert_named(
        doc,
        "users",
        e.user_name,
        "user",
        mapping(&[
            ("client-certificate-data", b64(e.cert_pem)),
            ("client-key-data", b64(e.key_pem)),
        ]),
    );
    upsert_named(
        doc,
        "contexts",
        context_name,
        "context",
        mapping(&[
            ("cluster", e.cluster_name.into()),
            ("user", e.user_name.into()),
        ]),
    );
}

/// Replaces the item named `name` in the list `list` (or appends one),
/// as `{name: <name>, <field>: <body>}`.
fn upsert_named(doc: &mut Mapping, list: &str, name: &str, field: &str, body: Value) {
    let item = mapping(&[("name", name.into()), (field, body)]);
    let seq = match doc.get_mut(list) {
        Some(Value::Sequence(s)) => s,
        _ => {
            doc.insert(list.into(), Value::Sequence(Vec::new()));
            match doc.get_mut(list) {
                Some(Value::Sequence(s)) => s,
                _ => unreachable!("just inserted"),
            }
        }
    };
    match seq
        .iter_mut()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(name))
    {
        Some(slot) => *slot = item,
        None => seq.push(item),
    }
}
