//! Release builds lay out the code start-up and an idle cluster run together
//! (`link-order.txt`), so the kernel maps fewer pages of the binary (docs/install.md).

fn main() {
    println!("cargo:rerun-if-changed=link-order.txt");
    println!("cargo:rerun-if-env-changed=CAPSTAN_LINK_ORDER");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let gnu_x86_64 = std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu");
    let wanted = std::env::var("CAPSTAN_LINK_ORDER").as_deref() != Ok("0");
    if release && gnu_x86_64 && wanted {
        let order = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
            .join("link-order.txt");
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
