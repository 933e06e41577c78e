//! The node's pod network: once the Node has pod CIDRs, a bridge network for them is
//! written to the runtime's CNI configuration directory (the runtime picks it up and reports
//! NetworkReady), and the runtime is told the CIDRs (CRI UpdateRuntimeConfig).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The file the kubelet owns in the CNI configuration directory.
pub const CONFLIST_NAME: &str = "10-capstan.conflist";
/// The network's name.
pub const NETWORK_NAME: &str = "capstan";
/// The CNI spec version: one both containerd 1.6 (libcni 1.1) and the 1.x plugins speak,
/// with CHECK and the portmap capability.
pub const CNI_VERSION: &str = "0.4.0";

/// The network configuration list for these pod CIDRs (one or, dual-stack, two).
pub fn conflist(pod_cidrs: &[String], bridge: &str, data_dir: &Path) -> Value {
    let ranges: Vec<Value> = pod_cidrs
        .iter()
        .map(|cidr| json!([{ "subnet": cidr }]))
        .collect();
    let mut routes = Vec::new();
    if pod_cidrs.iter().any(|c| !c.contains(':')) {
        routes.push(json!({"dst": "0.0.0.0/0"}));
    }
    if pod_cidrs.iter().any(|c| c.contains(':')) {
        routes.push(json!({"dst": "::/0"}));
    }
    json!({
        "cniVersion": CNI_VERSION,
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": ranges,
                    "routes": routes,
                    "dataDir": data_dir.to_string_lossy(),
                },
            },
            {
                "type": "portmap",
                "capabilities": {"portMappings": true},
                "snat": true,
            },
        ],
    })
}

/// Where host-local keeps its allocations: under the kubelet's root directory.
pub fn ipam_data_dir(root_dir: &Path) -> PathBuf {
    root_dir.join("cni").join("networks")
}

/// Write `<dir>/10-capstan.conflist` when its content differs from `content`: through a
/// temporary file renamed into place, so the runtime never reads half a file. Returns
/// whether the file was (re)written.
pub fn write_if_changed(dir: &Path, content: &Value) -> std::io::Result<bool> {
    let mut text = serde_json::to_string_pretty(content).map_err(std::io::Error::other)?;
    text.push('\n');
    let path = dir.join(CONFLIST_NAME);
    if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    std::fs::create_dir_all(dir)?;
    // Not a .conf/.conflist/.json name: the runtime ignores it until it is renamed.
    let tmp = dir.join(format!(".{CONFLIST_NAME}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_network_for_the_pod_cidr() {
        let c = conflist(
            &["10.244.1.0/24".to_string()],
            "cni-x",
            Path::new("/var/lib/k/cni/networks"),
        );
        assert_eq!(c["cniVersion"], "0.4.0");
        assert_eq!(c["name"], "capstan");
        let bridge = &c["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], "cni-x");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["ipMasq"], true);
        assert_eq!(bridge["hairpinMode"], true);
        assert_eq!(bridge["ipam"]["type"], "host-local");
        assert_eq!(
            bridge["ipam"]["ranges"],
            json!([[{"subnet": "10.244.1.0/24"}]])
        );
        assert_eq!(bridge["ipam"]["routes"], json!([{"dst": "0.0.0.0/0"}]));
        assert_eq!(bridge["ipam"]["dataDir"], "/var/lib/k/cni/networks");
        let portmap = &c["plugins"][1];
        assert_eq!(portmap["type"], "portmap");
        assert_eq!(portmap["capabilities"], json!({"portMappings": true}));
        assert_eq!(portmap["snat"], true);
        assert_eq!(c["plugins"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn dual_stack_has_a_range_and_route_per_family() {
        let c = conflist(
            &[
                "10.244.1.0/24".to_string(),
                "fd00:10:244:1::/64".to_string(),
            ],
            "cni0",
            Path::new("/d"),
        );
        assert_eq!(
            c["plugins"][0]["ipam"]["ranges"],
            json!([[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:10:244:1::/64"}]])
        );
        assert_eq!(
            c["plugins"][0]["ipam"]["routes"],
            json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}])
        );
    }

    #[test]
    fn the_file_is_written_only_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let conf_dir = dir.path().join("net.d");
        let a = conflist(&["10.0.0.0/24".into()], "cni0", Path::new("/d"));
        let b = conflist(&["10.0.1.0/24".into()], "cni0", Path::new("/d"));
        assert!(write_if_changed(&conf_dir, &a).unwrap());
        let path = conf_dir.join(CONFLIST_NAME);
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written, a);
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert!(!write_if_changed(&conf_dir, &a).unwrap());
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
        assert!(write_if_changed(&conf_dir, &b).unwrap());
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written, b);
        // Only the one file is left behind.
        let names: Vec<_> = std::fs::read_dir(&conf_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [CONFLIST_NAME]);
        assert_eq!(
            ipam_data_dir(Path::new("/r")),
            PathBuf::from("/r/cni/networks")
        );
    }
}
