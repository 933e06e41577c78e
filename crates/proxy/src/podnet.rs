//! The pod network between nodes, as flannel's `host-gw` backend: every node's pod CIDR is
//! routed through that node's address, which works when the nodes share one L2 segment (their
//! InternalIPs are on a directly connected network). Nodes that aren't on a connected network
//! would need an overlay (VXLAN), which capstan does not build yet: they are logged and skipped.
//!
//! Routes are installed with `ip route replace ... proto 77` so capstan can tell its own routes
//! from others': on start the ones no longer wanted are removed, on a clean stop all of them.
//! With `--cluster-cidr`, traffic between pods also leaves without source NAT: one rule at the
//! top of nat POSTROUTING returns before the CNI bridge plugin's masquerade (which would
//! otherwise rewrite pod-to-pod traffic to other nodes), except for packets the service proxy
//! marked for masquerading.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use capstan_runtime::Informers;
use k8s_openapi::api::core::v1::Node;

/// The `proto` number of capstan's routes.
pub const ROUTE_PROTO: &str = "77";
const NO_NAT_COMMENT: &str = "capstan: pod to pod without NAT";

/// Options of the pod network.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// This node (its own pod CIDR is local, on the CNI bridge).
    pub node_name: String,
    /// The cluster's pod CIDR: pod-to-pod traffic within it is not masqueraded.
    pub cluster_cidr: Option<String>,
    /// Run `ip`/`iptables` inside this network namespace (tests).
    pub netns: Option<String>,
}

/// Routes wanted: pod CIDR → the node address it is reached through.
pub fn desired_routes(nodes: &[Arc<Node>], me: &str) -> BTreeMap<String, IpAddr> {
    let mut routes = BTreeMap::new();
    for node in nodes {
        if node.metadata.name.as_deref() == Some(me) {
            continue;
        }
        let Some(spec) = &node.spec else { continue };
        let Some(ip) = internal_ip(node) else {
            continue;
        };
        let mut cidrs: Vec<&String> = spec.pod_cidrs.iter().flatten().collect();
        if cidrs.is_empty() {
            cidrs.extend(spec.pod_cidr.iter());
        }
        for cidr in cidrs {
            // Only the family of the node's address can be routed through it.
            if cidr.contains(':') == ip.is_ipv6() {
                routes.insert(cidr.clone(), ip);
            }
        }
    }
    routes
}

fn internal_ip(node: &Node) -> Option<IpAddr> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .and_then(|a| a.address.parse().ok())
}

/// Keeps the routes to other nodes' pod CIDRs, until `shutdown`; then removes them.
pub async fn run(
    client: kube::Client,
    opts: Options,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let informers = Informers::new(client);
    let nodes = informers.get::<Node>();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    nodes.on_change(move |_| {
        let _ = tx.try_send(());
    });
    informers.start();
    nodes.wait_synced().await;
    let host = Host {
        netns: opts.netns.clone(),
    };
    if let Some(cidr) = &opts.cluster_cidr {
        host.ensure_no_nat(cidr)
            .context("installing the pod-to-pod no-NAT rule")?;
    }
    let mut applied: BTreeMap<String, IpAddr> = BTreeMap::new();
    let mut first = true;
    tokio::pin!(shutdown);
    loop {
        let wanted = desired_routes(&nodes.list(), &opts.node_name);
        if first || wanted != applied {
            match host.sync_routes(&wanted) {
                Ok(()) => {
                    applied = wanted;
                    first = false;
                }
                Err(e) => tracing::warn!("pod network routes: {e:#}"),
            }
        }
        tokio::select! {
            _ = &mut shutdown => break,
            _ = rx.recv() => {}
            // Retry failures and repair routes someone removed.
            _ = tokio::time::sleep(Duration::from_secs(30)) => { first = true; }
        }
    }
    host.cleanup(opts.cluster_cidr.as_deref());
    Ok(())
}

struct Host {
    netns: Option<String>,
}

impl Host {
    fn command(&self, program: &str) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .command(program)
            .args(args)
            .output()
            .with_context(|| format!("running {program}"))?;
        if !out.status.success() {
            anyhow::bail!(
                "{program} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Make capstan's routes exactly `wanted`, removing any other route of capstan's (also
    /// stale ones a previous run left).
    fn sync_routes(&self, wanted: &BTreeMap<String, IpAddr>) -> anyhow::Result<()> {
        let mut errors = Vec::new();
        for (cidr, via) in wanted {
            let family = if via.is_ipv6() { "-6" } else { "-4" };
            let via = via.to_string();
            if let Err(e) = self.run(
                "ip",
                &[
                    family,
                    "route",
                    "replace",
                    cidr,
                    "via",
                    &via,
                    "proto",
                    ROUTE_PROTO,
                ],
            ) {
                // A node that isn't on a connected network needs an overlay.
                errors.push(format!("{e:#}"));
            }
        }
        for family in ["-4", "-6"] {
            let listed = self.run("ip", &[family, "route", "show", "proto", ROUTE_PROTO])?;
            for line in listed.lines() {
                let Some(dst) = line.split_whitespace().next() else {
                    continue;
                };
                if !wanted.contains_key(dst) {
                    let _ = self.run("ip", &[family, "route", "del", dst, "proto", ROUTE_PROTO]);
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            anyhow::bail!("{}", errors.join("; "))
        }
    }

    fn no_nat_rule(cidr: &str) -> Vec<&str> {
        vec![
            "POSTROUTING",
            "-s",
            cidr,
            "-d",
            cidr,
            "-m",
            "mark",
            "!",
            "--mark",
            "0x4000/0x4000",
            "-m",
            "comment",
            "--comment",
            NO_NAT_COMMENT,
            "-j",
            "RETURN",
        ]
    }

    fn ensure_no_nat(&self, cidr: &str) -> anyhow::Result<()> {
        let rule = Self::no_nat_rule(cidr);
        let mut check = vec!["-w", "-t", "nat", "-C"];
        check.extend(&rule);
        if self.run("iptables", &check).is_ok() {
            return Ok(());
        }
        let mut insert = vec!["-w", "-t", "nat", "-I"];
        insert.push(rule[0]);
        insert.push("1");
        insert.extend(&rule[1..]);
        self.run("iptables", &insert).map(|_| ())
    }

    fn cleanup(&self, cluster_cidr: Option<&str>) {
        if let Err(e) = self.sync_routes(&BTreeMap::new()) {
            tracing::warn!("removing the pod network routes: {e:#}");
        }
        if let Some(cidr) = cluster_cidr {
            let mut delete = vec!["-w", "-t", "nat", "-D"];
            delete.extend(Self::no_nat_rule(cidr));
            let _ = self.run("iptables", &delete);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cidr: Option<&str>, ip: Option<&str>) -> Arc<Node> {
        let mut v = serde_json::json!({"metadata": {"name": name}, "spec": {}, "status": {}});
        if let Some(c) = cidr {
            v["spec"]["podCIDR"] = c.into();
            v["spec"]["podCIDRs"] = serde_json::json!([c]);
        }
        if let Some(ip) = ip {
            v["status"]["addresses"] = serde_json::json!([
                {"type": "Hostname", "address": name},
                {"type": "InternalIP", "address": ip},
            ]);
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn routes_go_to_every_other_node_with_a_cidr_and_an_address() {
        let nodes = vec![
            node("a", Some("10.244.0.0/24"), Some("10.0.0.1")),
            node("b", Some("10.244.1.0/24"), Some("10.0.0.2")),
            node("c", None, Some("10.0.0.3")),
            node("d", Some("10.244.3.0/24"), None),
            node("e", Some("fd00::/64"), Some("10.0.0.5")),
        ];
        let routes = desired_routes(&nodes, "a");
        assert_eq!(
            routes.into_iter().collect::<Vec<_>>(),
            vec![("10.244.1.0/24".to_string(), "10.0.0.2".parse().unwrap())]
        );
    }
}
