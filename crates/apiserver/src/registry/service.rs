//! Services: ClusterIP allocation from `--service-cluster-ip-range` and NodePort allocation
//! from `--service-node-port-range` (Kubernetes' `pkg/registry/core/service/ipallocator` and
//! `portallocator`), as a strategy with allocation hooks.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use capstan_api::catalogue::ResourceInfo;
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::strategy::Strategy;
use crate::error::{ApiError, ApiResult, FieldError};
use capstan_api::meta::At as _;

/// An IPv4 range like 10.43.0.0/16.
#[derive(Debug, Clone, Copy)]
pub struct Cidr {
    pub base: u32,
    pub bits: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (ip, bits) = s
            .split_once('/')
            .ok_or_else(|| format!("invalid CIDR {s:?}"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| format!("invalid CIDR {s:?}"))?;
        let bits: u8 = bits.parse().map_err(|_| format!("invalid CIDR {s:?}"))?;
        if !(8..=30).contains(&bits) {
            return Err(format!("CIDR {s:?} must have a prefix between /8 and /30"));
        }
        let mask = u32::MAX << (32 - bits);
        Ok(Cidr {
            base: u32::from(ip) & mask,
            bits,
        })
    }

    fn size(&self) -> u32 {
        1 << (32 - self.bits)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX << (32 - self.bits);
        u32::from(ip) & mask == self.base
    }

    /// The first usable address (the `kubernetes` service's).
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }
}

struct Pools {
    ips: HashSet<u32>,
    ports: HashSet<u16>,
}

/// The Service strategy with its allocators.
pub struct ServiceStrategy {
    info: &'static ResourceInfo,
    range: Cidr,
    ports: (u16, u16),
    pools: Mutex<Pools>,
}

impl ServiceStrategy {
    pub fn new(info: &'static ResourceInfo, range: Cidr, ports: (u16, u16)) -> Self {
        ServiceStrategy {
            info,
            range,
            ports,
            pools: Mutex::new(Pools {
                ips: HashSet::new(),
                ports: HashSet::new(),
            }),
        }
    }

    /// Mark what an existing service holds (at start-up).
    pub fn mark_used(&self, svc: &Value) {
        let mut p = self.pools.lock();
        for ip in cluster_ips(svc) {
            if let Ok(ip) = ip.parse::<Ipv4Addr>() {
                p.ips.insert(u32::from(ip));
            }
        }
        for port in node_ports(svc) {
            p.ports.insert(port);
        }
    }

    fn allocate_ip(&self, p: &mut Pools) -> ApiResult<Ipv4Addr> {
        let size = self.range.size();
        // Skip the network address, the first address (reserved for `kubernetes` unless asked
        // for) and the broadcast address; start at a random offset to spread allocations.
        let start = rand::random::<u32>() % (size - 3);
        for i in 0..size - 3 {
            let off = 2 + (start + i) % (size - 3);
            let ip = self.range.base + off;
            if p.ips.insert(ip) {
                return Ok(Ipv4Addr::from(ip));
            }
        }
        Err(ApiError::internal(
            "failed to allocate a serviceIP: range is full",
        ))
    }

    fn allocate_port(&self, p: &mut Pools) -> ApiResult<u16> {
        let (lo, hi) = self.ports;
        let span = (hi - lo + 1) as u32;
        let start = rand::random::<u32>() % span;
        for i in 0..span {
            let port = lo + ((start + i) % span) as u16;
            if p.ports.insert(port) {
                return Ok(port);
            }
        }
        Err(ApiError::internal(
            "failed to allocate a nodePort: range is full",
        ))
    }

    fn invalid(&self, obj: &Value, errs: Vec<FieldError>) -> ApiError {
        ApiError::invalid(self.info, capstan_api::meta::name(obj), errs)
    }
}

fn cluster_ips(svc: &Value) -> Vec<String> {
    let mut out: Vec<String> = svc
        .at("/spec/clusterIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    if let Some(ip) = svc.at("/spec/clusterIP").and_then(Value::as_str) {
        if !out.iter().any(|x| x == ip) {
            out.push(ip.to_string());
        }
    }
    out.retain(|ip| !ip.is_empty() && ip != "None");
    out
}

fn node_ports(svc: &Value) -> Vec<u16> {
    svc.at("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .map(|p| p as u16)
        .collect()
}

fn svc_type(svc: &Value) -> &str {
    svc.at("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

impl Strategy for ServiceStrategy {
    fn info(&self) -> &'static ResourceInfo {
        self.info
    }

    fn allocate(&self, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
        let ty = svc_type(obj).to_string();
        let mut p = self.pools.lock();
        if ty != "ExternalName" {
            let requested = obj
                .at("/spec/clusterIP")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let old_ip = old
                .and_then(|o| o.at("/spec/clusterIP"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let ip = if requested == "None" {
                "None".to_string()
            } else if !old_ip.is_empty() && (requested.is_empty() || requested == old_ip) {
                old_ip.to_string()
            } else if !old_ip.is_empty() {
                return Err(self.invalid(obj, vec![FieldError::immutable("spec.clusterIPs[0]")]));
            } else if requested.is_empty() {
                self.allocate_ip(&mut p)?.to_string()
            } else {
                let parsed: Ipv4Addr = requested.parse().map_err(|_| {
                    self.invalid(
                        obj,
                        vec![FieldError::invalid(
                            "spec.clusterIPs[0]",
                            &json!(requested),
                            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                        )],
                    )
                })?;
                if !self.range.contains(parsed) {
                    return Err(self.invalid(obj, vec![FieldError::invalid("spec.clusterIPs", &json!([requested]), &format!("failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {}/{}", Ipv4Addr::from(self.range.base), self.range.bits))]));
                }
                if !p.ips.insert(u32::from(parsed)) {
                    return Err(self.invalid(obj, vec![FieldError::invalid("spec.clusterIPs", &json!([requested]), &format!("failed to allocate IP {requested}: provided IP is already allocated"))]));
                }
                requested
            };
            let spec = obj.get_mut("spec").and_then(Value::as_object_mut);
            if let Some(spec) = spec {
                spec.insert("clusterIP".into(), json!(ip));
                spec.insert("clusterIPs".into(), json!([ip]));
                if ip != "None" || !spec.contains_key("ipFamilies") {
                    spec.insert("ipFamilies".into(), json!(["IPv4"]));
                }
                spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
            }
        }
        if ty == "NodePort" || ty == "LoadBalancer" {
            let old_ports: Vec<u16> = old.map(node_ports).unwrap_or_default();
            let ports = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut);
            for (i, port) in ports.into_iter().flatten().enumerate() {
                match port.get("nodePort").and_then(Value::as_u64) {
                    Some(n) if old_ports.contains(&(n as u16)) => {}
                    Some(n) => {
                        let n16 = n as u16;
                        if n16 < self.ports.0 || n16 > self.ports.1 {
                            return Err(ApiError::invalid(self.info, "", vec![FieldError::invalid(format!("spec.ports[{i}].nodePort"), &json!(n), &format!("provided port is not in the valid range. The range of valid ports is {}-{}", self.ports.0, self.ports.1))]));
                        }
                        if !p.ports.insert(n16) {
                            return Err(ApiError::invalid(
                                self.info,
                                "",
                                vec![FieldError::invalid(
                                    format!("spec.ports[{i}].nodePort"),
                                    &json!(n),
                                    "provided port is already allocated",
                                )],
                            ));
                        }
                    }
                    None => {
                        let n = self.allocate_port(&mut p)?;
                        port["nodePort"] = json!(n);
                    }
                }
            }
        }
        Ok(())
    }

    fn release(&self, obj: &Value) {
        let mut p = self.pools.lock();
        for ip in cluster_ips(obj) {
            if let Ok(ip) = ip.parse::<Ipv4Addr>() {
                p.ips.remove(&u32::from(ip));
            }
        }
        for port in node_ports(obj) {
            p.ports.remove(&port);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strategy() -> ServiceStrategy {
        let info = capstan_api::catalogue::find("", "v1", "services").unwrap();
        ServiceStrategy::new(info, Cidr::parse("10.43.0.0/24").unwrap(), (30000, 30010))
    }

    #[test]
    fn cluster_ips_are_unique_and_in_range() {
        let s = strategy();
        let mut seen = HashSet::new();
        for _ in 0..100 {
            let mut svc = json!({"spec": {"ports": [{"port": 80}]}});
            s.allocate(&mut svc, None).unwrap();
            let ip: Ipv4Addr = svc["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
            assert!(s.range.contains(ip) && ip != s.range.first());
            assert!(seen.insert(ip));
        }
        let mut taken = json!({"spec": {"clusterIP": seen.iter().next().unwrap().to_string()}});
        let err = s.allocate(&mut taken, None).unwrap_err();
        assert!(err.message.contains("already allocated"), "{}", err.message);
    }

    #[test]
    fn node_ports_come_from_the_range_and_are_released() {
        let s = strategy();
        let mut svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81}]}});
        s.allocate(&mut svc, None).unwrap();
        let a = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
        assert!((30000..=30010).contains(&a));
        s.release(&svc);
        let mut again =
            json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": a}]}});
        s.allocate(&mut again, None).unwrap();
        let mut out =
            json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 40000}]}});
        assert_eq!(s.allocate(&mut out, None).unwrap_err().code, 422);
    }

    #[test]
    fn headless_services_get_no_ip() {
        let s = strategy();
        let mut svc = json!({"spec": {"clusterIP": "None"}});
        s.allocate(&mut svc, None).unwrap();
        assert_eq!(svc["spec"]["clusterIPs"], json!(["None"]));
    }
}
