//! The audit log (`--audit-log-path`): one JSON line per request, an `audit.k8s.io/v1`
//! `Event` at level Metadata and stage ResponseComplete, as Kubernetes' log backend writes
//! them. Long-running requests (watches) are logged when their response starts.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use capstan_api::meta::format_micro_time;
use http::HeaderMap;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use crate::auth::{ConnInfo, User};
use crate::request::RequestInfo;

/// An audit log file. Lines are buffered and flushed at least every second.
pub struct AuditLog {
    out: Mutex<BufWriter<File>>,
    dirty: AtomicBool,
}

/// What the log records of one request.
pub struct Entry<'a> {
    pub info: &'a RequestInfo,
    pub uri: &'a str,
    pub user: Option<&'a User>,
    /// Who the user acted as (impersonation).
    pub impersonated: Option<&'a User>,
    pub conn: &'a ConnInfo,
    pub headers: &'a HeaderMap,
    pub code: u16,
    pub received: SystemTime,
}

impl AuditLog {
    /// Open (append to) the log at `path`, creating it and its directory.
    pub fn open(path: &Path) -> std::io::Result<Arc<AuditLog>> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let log = Arc::new(AuditLog {
            out: Mutex::new(BufWriter::new(file)),
            dirty: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&log);
        std::thread::Builder::new()
            .name("audit-flush".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(500));
                let Some(log) = weak.upgrade() else { return };
                log.flush();
            })?;
        Ok(log)
    }

    pub fn flush(&self) {
        if self.dirty.swap(false, Ordering::AcqRel) {
            let _ = self.out.lock().flush();
        }
    }

    /// Append one request's event.
    pub fn record(&self, e: &Entry<'_>) {
        let mut line = serde_json::to_vec(&event(e)).unwrap_or_default();
        line.push(b'\n');
        let _ = self.out.lock().write_all(&line);
        self.dirty.store(true, Ordering::Release);
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        let _ = self.out.get_mut().flush();
    }
}

/// An authentication.k8s.io/v1 UserInfo.
fn user_info(u: &User) -> Value {
    let mut m = Map::new();
    m.insert("username".into(), json!(u.name));
    if !u.uid.is_empty() {
        m.insert("uid".into(), json!(u.uid));
    }
    m.insert("groups".into(), json!(u.groups));
    if !u.extra.is_empty() {
        m.insert("extra".into(), json!(u.extra));
    }
    Value::Object(m)
}

/// The `audit.k8s.io/v1` Event of a request.
pub fn event(e: &Entry<'_>) -> Value {
    let info = e.info;
    let mut ev = Map::new();
    ev.insert("kind".into(), json!("Event"));
    ev.insert("apiVersion".into(), json!("audit.k8s.io/v1"));
    ev.insert("level".into(), json!("Metadata"));
    ev.insert("auditID".into(), json!(uuid::Uuid::new_v4().to_string()));
    ev.insert("stage".into(), json!("ResponseComplete"));
    ev.insert("requestURI".into(), json!(e.uri));
    ev.insert("verb".into(), json!(info.verb));
    ev.insert("user".into(), e.user.map_or_else(|| json!({}), user_info));
    if let Some(u) = e.impersonated {
        ev.insert("impersonatedUser".into(), user_info(u));
    }
    if let Some(peer) = e.conn.peer {
        ev.insert("sourceIPs".into(), json!([peer.ip().to_string()]));
    }
    if let Some(ua) = e
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
    {
        ev.insert("userAgent".into(), json!(ua));
    }
    if info.is_resource {
        let mut r = Map::new();
        r.insert("resource".into(), json!(info.resource));
        if !info.namespace.is_empty() {
            r.insert("namespace".into(), json!(info.namespace));
        }
        if !info.name.is_empty() {
            r.insert("name".into(), json!(info.name));
        }
        if !info.group.is_empty() {
            r.insert("apiGroup".into(), json!(info.group));
        }
        r.insert("apiVersion".into(), json!(info.version));
        if !info.subresource.is_empty() {
            r.insert("subresource".into(), json!(info.subresource));
        }
        ev.insert("objectRef".into(), Value::Object(r));
    }
    ev.insert(
        "responseStatus".into(),
        json!({"metadata": {}, "code": e.code}),
    );
    ev.insert(
        "requestReceivedTimestamp".into(),
        json!(format_micro_time(e.received)),
    );
    ev.insert(
        "stageTimestamp".into(),
        json!(format_micro_time(SystemTime::now())),
    );
    Value::Object(ev)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Query;

    #[test]
    fn lines_carry_who_did_what_and_the_code() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/audit.log");
        let log = AuditLog::open(&path).unwrap();
        let info = RequestInfo::parse(
            &http::Method::DELETE,
            "/api/v1/namespaces/team/configmaps/cm1",
            &Query::parse(None),
        );
        let user = User {
            name: "alice".into(),
            groups: vec!["devs".into(), "system:authenticated".into()],
            ..Default::default()
        };
        let bob = User {
            name: "bob".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        };
        let conn = ConnInfo {
            peer: Some("10.1.2.3:5555".parse().unwrap()),
            ..Default::default()
        };
        log.record(&Entry {
            info: &info,
            uri: "/api/v1/namespaces/team/configmaps/cm1",
            user: Some(&user),
            impersonated: Some(&bob),
            conn: &conn,
            headers: &HeaderMap::new(),
            code: 403,
            received: SystemTime::now(),
        });
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1);
        let v: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["verb"], "delete");
        assert_eq!(v["user"]["username"], "alice");
        assert_eq!(v["user"]["groups"][0], "devs");
        assert_eq!(v["impersonatedUser"]["username"], "bob");
        assert_eq!(v["impersonatedUser"]["groups"][0], "system:authenticated");
        assert_eq!(v["objectRef"]["resource"], "configmaps");
        assert_eq!(v["objectRef"]["namespace"], "team");
        assert_eq!(v["objectRef"]["name"], "cm1");
        assert_eq!(v["responseStatus"]["code"], 403);
        assert_eq!(v["sourceIPs"][0], "10.1.2.3");
    }
}
