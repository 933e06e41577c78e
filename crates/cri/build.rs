fn main() {
    println!("cargo:rerun-if-changed=proto/runtime_v1.proto");
    tonic_prost_build::configure()
        .build_server(false)
        .compile_protos(&["proto/runtime_v1.proto"], &["proto"])
        .expect("compile the CRI schema (needs protoc: apt install protobuf-compiler)");
}
