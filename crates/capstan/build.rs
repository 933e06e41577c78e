//! Release builds are position-dependent executables and lay out the code start-up and an
//! idle cluster run together, so the kernel maps fewer pages of the binary (docs/install.md).
//! `link-order.fc` lists those functions, each line as `N SUFFIX`: the first N bytes of the
//! line before, then SUFFIX (the names share long prefixes; the plain list would be 5.6 MB).

use std::fmt::Write as _;

fn main() {
    println!("cargo:rerun-if-changed=link-order.fc");
    println!("cargo:rerun-if-env-changed=CAPSTAN_LINK_ORDER");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let gnu_x86_64 = std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu");
    if !(release && gnu_x86_64) {
        return;
    }
    // A position-dependent executable: the dynamic loader has no relocations to apply (a PIE
    // capstan has 78,000, and writing them made every page of .data.rel.ro, 1.4 MB, private
    // to each process, and read all of .rela.dyn, 1.9 MB, at each start), so a node's
    // kubelet maps only the read-only data it reads. Go builds Kubernetes' own binaries this
    // way.
    println!("cargo:rustc-link-arg-bins=-no-pie");
    if std::env::var("CAPSTAN_LINK_ORDER").as_deref() == Ok("0") {
        return;
    }
    let coded = std::fs::read_to_string("link-order.fc").expect("link-order.fc");
    let order = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("link-order.txt");
    std::fs::write(&order, decode(&coded)).expect("writing the link order");
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}

/// The plain list, one name per line.
fn decode(coded: &str) -> String {
    let mut out = String::with_capacity(coded.len() * 2);
    let mut prev = String::new();
    for (i, line) in coded.lines().enumerate() {
        let (shared, suffix) = line
            .split_once(' ')
            .and_then(|(n, s)| Some((n.parse::<usize>().ok()?, s)))
            .unwrap_or_else(|| panic!("link-order.fc line {}: not `N SUFFIX`", i + 1));
        prev.truncate(shared);
        prev.push_str(suffix);
        let _ = writeln!(out, "{prev}");
    }
    out
}
