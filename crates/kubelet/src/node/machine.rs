//! What the node is made of, read from the host: CPUs, memory, huge pages, the filesystem
//! under the kubelet's root directory, identity files, the kernel and OS release, and the
//! address to report (cAdvisor's job in Kubernetes).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

/// The host facts node status is computed from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineInfo {
    pub num_cpus: u64,
    /// MemTotal, bytes.
    pub memory_capacity: u64,
    /// Huge page size in bytes → pages configured.
    pub huge_pages: BTreeMap<u64, u64>,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
}

/// Space and inodes of one filesystem.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FsStats {
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// Read the machine's facts now (small files under /proc, /sys and /etc).
pub fn read_machine_info() -> MachineInfo {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    MachineInfo {
        num_cpus: online_cpus(),
        memory_capacity: meminfo_bytes(&meminfo, "MemTotal").unwrap_or(0),
        huge_pages: huge_pages(Path::new("/sys/kernel/mm/hugepages")),
        machine_id: first_line(&["/etc/machine-id", "/var/lib/dbus/machine-id"]),
        system_uuid: first_line(&[
            "/sys/class/dmi/id/product_uuid",
            "/proc/device-tree/system-id",
            "/proc/device-tree/vm,uuid",
        ]),
        boot_id: first_line(&["/proc/sys/kernel/random/boot_id"]),
        kernel_version: kernel_release(),
        os_image: std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|s| os_release_pretty_name(&s))
            .unwrap_or_else(|| "Linux".into()),
    }
}

fn first_line(paths: &[&str]) -> String {
    paths
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| {
            s.trim_matches(|c: char| c.is_whitespace() || c == '\0')
                .to_string()
        })
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

/// A `/proc/meminfo` field in bytes (the file gives kB).
pub fn meminfo_bytes(meminfo: &str, field: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != field {
            return None;
        }
        let mut parts = rest.split_whitespace();
        let n: u64 = parts.next()?.parse().ok()?;
        match parts.next() {
            Some("kB") => n.checked_mul(1024),
            None => Some(n),
            Some(_) => None,
        }
    })
}

/// `PRETTY_NAME` of an os-release file, unquoted.
pub fn os_release_pretty_name(content: &str) -> Option<String> {
    content.lines().find_map(|line| {
        let value = line.trim().strip_prefix("PRETTY_NAME=")?;
        let value = value.trim();
        let unquoted = if value.len() >= 2
            && ((value.starts_with('"') && value.ends_with('"'))
                || (value.starts_with('\'') && value.ends_with('\'')))
        {
            &value[1..value.len() - 1]
        } else {
            value
        };
        let unescaped = unquoted
            .replace("\\\"", "\"")
            .replace("\\$", "$")
            .replace("\\`", "`")
            .replace("\\\\", "\\");
        (!unescaped.is_empty()).then_some(unescaped)
    })
}

/// Count the CPUs of a list such as `0-3,6,8-9` (/sys/devices/system/cpu/online).
pub fn count_cpu_list(list: &str) -> Option<u64> {
    let mut n = 0u64;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                n += b.checked_sub(a)? + 1;
            }
            None => {
                part.trim().parse::<u64>().ok()?;
                n += 1;
            }
        }
    }
    (n > 0).then_some(n)
}

fn online_cpus() -> u64 {
    if let Some(n) = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| count_cpu_list(&s))
    {
        return n;
    }
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as u64
    } else {
        1
    }
}

/// Huge page sizes (bytes) and configured pages, from `hugepages-<size>kB/nr_hugepages`.
pub fn huge_pages(dir: &Path) -> BTreeMap<u64, u64> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(kb) = name
            .strip_prefix("hugepages-")
            .and_then(|s| s.strip_suffix("kB"))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        let pages = std::fs::read_to_string(e.path().join("nr_hugepages"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        out.insert(kb * 1024, pages);
    }
    out
}

fn kernel_release() -> String {
    // SAFETY: uname fills the zeroed struct; its fields are NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return String::new();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

/// Space and inodes of the filesystem holding `path`, as an unprivileged user sees them
/// (blocks reserved for root do not count as available, as in cAdvisor).
pub fn fs_stats(path: &Path) -> Option<FsStats> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct and reads the NUL-terminated path.
    let s = unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return None;
        }
        s
    };
    let frsize = if s.f_frsize > 0 {
        s.f_frsize as u64
    } else {
        s.f_bsize as u64
    };
    Some(FsStats {
        capacity_bytes: (s.f_blocks as u64).saturating_mul(frsize),
        available_bytes: (s.f_bavail as u64).saturating_mul(frsize),
        inodes: s.f_files as u64,
        inodes_free: s.f_ffree as u64,
    })
}

/// MemAvailable in bytes, now.
pub fn memory_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_bytes(&meminfo, "MemAvailable")
}

/// Every address assigned to a local interface, with the interface's name.
pub fn interface_addrs() -> Vec<(String, IpAddr)> {
    let mut out = Vec::new();
    // SAFETY: getifaddrs allocates a list we walk read-only and then free; every pointer is
    // checked for null and the sockaddr is read as the family it declares.
    unsafe {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut cur = head;
        while !cur.is_null() {
            let ifa = &*cur;
            cur = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
                continue;
            }
            let name = std::ffi::CStr::from_ptr(ifa.ifa_name)
                .to_string_lossy()
                .into_owned();
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                    out.push((name, IpAddr::V4(ip)));
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                    out.push((name, IpAddr::V6(ip)));
                }
                _ => {}
            }
        }
        libc::freeifaddrs(head);
    }
    out
}

/// The interfaces of the default routes in a `/proc/net/route` table, in table order.
pub fn default_route_interfaces(route_table: &str) -> Vec<String> {
    const RTF_UP: u32 = 0x1;
    route_table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let flags = u32::from_str_radix(f[3], 16).ok()?;
            let mask = f[7];
            (f[1] == "00000000" && mask == "00000000" && flags & RTF_UP != 0)
                .then(|| f[0].to_string())
        })
        .collect()
}

/// Whether `ip` could identify a node to the cluster (Kubernetes refuses loopback,
/// link-local, multicast and unspecified addresses).
pub fn is_usable_node_ip(ip: &IpAddr) -> bool {
    if ip.is_loopback() || ip.is_multicast() || ip.is_unspecified() {
        return false;
    }
    match ip {
        IpAddr::V4(v4) => !v4.is_link_local() && !v4.is_broadcast(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
    }
}

/// The address of the interface the default route goes through: IPv4 first, then IPv6
/// (Kubernetes' ChooseHostInterface).
pub fn default_route_ip(addrs: &[(String, IpAddr)]) -> Option<IpAddr> {
    let table = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let mut ifaces = default_route_interfaces(&table);
    if ifaces.is_empty() {
        ifaces = ipv6_default_route_interfaces(
            &std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default(),
        );
    }
    for iface in &ifaces {
        let mine = || addrs.iter().filter(|(n, _)| n == iface).map(|(_, ip)| *ip);
        if let Some(ip) = mine().find(|ip| ip.is_ipv4() && is_usable_node_ip(ip)) {
            return Some(ip);
        }
        if let Some(ip) = mine().find(is_usable_node_ip) {
            return Some(ip);
        }
    }
    // No default route: any usable address, IPv4 first.
    let usable = || addrs.iter().map(|(_, ip)| *ip).filter(is_usable_node_ip);
    usable().find(IpAddr::is_ipv4).or_else(|| usable().next())
}

fn ipv6_default_route_interfaces(table: &str) -> Vec<String> {
    table
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 10 && f[0] == "0".repeat(32) && f[1] == "00" && f[9] != "lo")
                .then(|| f[9].to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_are_bytes() {
        let m = "MemTotal:       24683656 kB\nMemFree:        18032620 kB\nMemAvailable:   23770340 kB\nHugePages_Total:       0\n";
        assert_eq!(meminfo_bytes(m, "MemTotal"), Some(24683656 * 1024));
        assert_eq!(meminfo_bytes(m, "MemAvailable"), Some(23770340 * 1024));
        assert_eq!(meminfo_bytes(m, "HugePages_Total"), Some(0));
        assert_eq!(meminfo_bytes(m, "Mem"), None);
        assert_eq!(meminfo_bytes("MemTotal: lots kB\n", "MemTotal"), None);
        assert_eq!(meminfo_bytes("", "MemTotal"), None);
    }

    #[test]
    fn os_release_pretty_name_is_unquoted() {
        let debian = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\n";
        assert_eq!(
            os_release_pretty_name(debian).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            os_release_pretty_name("NAME=x\nPRETTY_NAME='Alpine Linux v3.19'\n").as_deref(),
            Some("Alpine Linux v3.19")
        );
        assert_eq!(
            os_release_pretty_name("PRETTY_NAME=Plain\n").as_deref(),
            Some("Plain")
        );
        assert_eq!(
            os_release_pretty_name("PRETTY_NAME=\"say \\\"hi\\\"\"\n").as_deref(),
            Some("say \"hi\"")
        );
        assert_eq!(os_release_pretty_name("NAME=x\n"), None);
        assert_eq!(os_release_pretty_name("PRETTY_NAME=\"\"\n"), None);
        assert_eq!(
            os_release_pretty_name("PRETTY_NAME=\"\n"),
            Some("\"".into())
        );
    }

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(count_cpu_list("0-1\n"), Some(2));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
    }

    #[test]
    fn huge_page_sizes_come_from_sysfs_names() {
        let dir = tempfile::tempdir().unwrap();
        for (name, n) in [("hugepages-2048kB", "4\n"), ("hugepages-1048576kB", "0\n")] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            std::fs::write(dir.path().join(name).join("nr_hugepages"), n).unwrap();
        }
        std::fs::create_dir(dir.path().join("other")).unwrap();
        let hp = huge_pages(dir.path());
        assert_eq!(hp.len(), 2);
        assert_eq!(hp[&(2 * 1024 * 1024)], 4);
        assert_eq!(hp[&(1024 * 1024 * 1024)], 0);
        assert!(huge_pages(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn default_route_interface_is_found() {
        let table =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(default_route_interfaces(table), vec!["eth0".to_string()]);
        assert!(default_route_interfaces("Iface\n").is_empty());
    }

    #[test]
    fn node_ips_exclude_loopback_and_link_local() {
        let ok = |s: &str| is_usable_node_ip(&s.parse().unwrap());
        assert!(ok("192.0.2.2"));
        assert!(ok("10.0.0.1"));
        assert!(ok("2001:db8::1"));
        assert!(!ok("127.0.0.1"));
        assert!(!ok("169.254.1.1"));
        assert!(!ok("0.0.0.0"));
        assert!(!ok("224.0.0.1"));
        assert!(!ok("::1"));
        assert!(!ok("fe80::1"));
    }

    #[test]
    fn this_machine_is_readable() {
        let m = read_machine_info();
        assert!(m.num_cpus >= 1);
        assert!(m.memory_capacity > 0);
        assert!(!m.kernel_version.is_empty());
        assert!(!m.boot_id.is_empty());
        let fs = fs_stats(Path::new("/")).unwrap();
        assert!(fs.capacity_bytes >= fs.available_bytes && fs.capacity_bytes > 0);
        assert!(fs_stats(Path::new("/no/such/dir")).is_none());
        assert!(interface_addrs().iter().any(|(_, ip)| ip.is_loopback()));
    }
}
