//! The sandbox (pause) image, made by capstan itself and served to the runtime on loopback.
//!
//! Every pod sandbox needs an image whose only job is to hold the pod's namespaces open. capstan
//! does not fetch one from a registry: it builds it in memory. The program is a static ELF64
//! executable of a few dozen bytes of machine code that sleeps forever (x86_64: `pause(2)` in a
//! loop; aarch64: `ppoll(2)` with no descriptors and no timeout, in a loop). It is the single
//! file `/pause` of an uncompressed tar layer; an OCI image configuration (entrypoint
//! `["/pause"]`, user 65535) and an OCI manifest complete the image, every blob named by its
//! sha256 digest.
//!
//! [`Registry`] serves the image read-only over the OCI distribution API on
//! `127.0.0.1:<port>`: `GET`/`HEAD` of `/v2/`, `/v2/pause/manifests/<tag or digest>` and
//! `/v2/pause/blobs/<digest>`. Anything else is a 404 with the registry error document, so a
//! runtime configured with this endpoint as a mirror of `registry.k8s.io` falls back to the
//! real registry for every other image.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;

/// The image reference the runtime is told to use for sandboxes.
pub const IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The repository and tag of [`IMAGE`] inside its registry.
pub const REPOSITORY: &str = "pause";
pub const TAG: &str = "3.10";

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";

/// The user the pause process runs as (as in Kubernetes' own pause image).
const PAUSE_USER: &str = "65535:65535";

/// Where the program is loaded (the usual base address of a static non-PIE executable).
const LOAD_ADDRESS: u64 = 0x40_0000;
const ELF_HEADER_SIZE: usize = 64;
const PROGRAM_HEADER_SIZE: usize = 56;

/// A CPU architecture the pause program can be made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// The architecture this capstan was built for (None: no pause program for it).
    pub fn host() -> Option<Arch> {
        match std::env::consts::ARCH {
            "x86_64" => Some(Arch::X86_64),
            "aarch64" => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// The OCI (Go) name of the architecture.
    pub fn oci_name(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// ELF e_machine.
    fn elf_machine(self) -> u16 {
        match self {
            Arch::X86_64 => 62,
            Arch::Aarch64 => 183,
        }
    }

    /// The program: block in a system call that only a signal ends, forever.
    fn code(self) -> Vec<u8> {
        match self {
            // again: mov eax, 34 (pause) ; syscall ; jmp again
            Arch::X86_64 => vec![0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7],
            // again: x0..x3 = 0 (no fds, no timeout, no mask) ; x8 = 73 (ppoll) ; svc #0 ;
            // b again
            Arch::Aarch64 => [
                0xd280_0000u32, // mov x0, #0
                0xd280_0001,    // mov x1, #0
                0xd280_0002,    // mov x2, #0
                0xd280_0003,    // mov x3, #0
                0xd280_0928,    // mov x8, #73
                0xd400_0001,    // svc #0
                0x17ff_fffa,    // b -24
            ]
            .iter()
            .flat_map(|i| i.to_le_bytes())
            .collect(),
        }
    }
}

/// A static ELF64 executable for `arch`: the ELF header, one PT_LOAD program header mapping
/// the whole file read+execute at [`LOAD_ADDRESS`], then the code (the entry point).
pub fn elf(arch: Arch) -> Vec<u8> {
    let code = arch.code();
    let code_offset = ELF_HEADER_SIZE + PROGRAM_HEADER_SIZE;
    let file_size = (code_offset + code.len()) as u64;
    let mut out = Vec::with_capacity(file_size as usize);
    // e_ident: magic, 64-bit, little-endian, version 1, System V ABI, padding.
    out.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&2u16.to_le_bytes()); // e_type: ET_EXEC
    out.extend_from_slice(&arch.elf_machine().to_le_bytes()); // e_machine
    out.extend_from_slice(&1u32.to_le_bytes()); // e_version
    out.extend_from_slice(&(LOAD_ADDRESS + code_offset as u64).to_le_bytes()); // e_entry
    out.extend_from_slice(&(ELF_HEADER_SIZE as u64).to_le_bytes()); // e_phoff
    out.extend_from_slice(&0u64.to_le_bytes()); // e_shoff: no sections
    out.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    out.extend_from_slice(&(ELF_HEADER_SIZE as u16).to_le_bytes()); // e_ehsize
    out.extend_from_slice(&(PROGRAM_HEADER_SIZE as u16).to_le_bytes()); // e_phentsize
    out.extend_from_slice(&1u16.to_le_bytes()); // e_phnum
    out.extend_from_slice(&64u16.to_le_bytes()); // e_shentsize
    out.extend_from_slice(&0u16.to_le_bytes()); // e_shnum
    out.extend_from_slice(&0u16.to_le_bytes()); // e_shstrndx
    debug_assert_eq!(out.len(), ELF_HEADER_SIZE);
    out.extend_from_slice(&1u32.to_le_bytes()); // p_type: PT_LOAD
    out.extend_from_slice(&5u32.to_le_bytes()); // p_flags: R + X
    out.extend_from_slice(&0u64.to_le_bytes()); // p_offset
    out.extend_from_slice(&LOAD_ADDRESS.to_le_bytes()); // p_vaddr
    out.extend_from_slice(&LOAD_ADDRESS.to_le_bytes()); // p_paddr
    out.extend_from_slice(&file_size.to_le_bytes()); // p_filesz
    out.extend_from_slice(&file_size.to_le_bytes()); // p_memsz
    out.extend_from_slice(&0x1000u64.to_le_bytes()); // p_align
    debug_assert_eq!(out.len(), code_offset);
    out.extend_from_slice(&code);
    out
}

/// An uncompressed tar archive holding one regular file `name` (mode 0755, owner root).
pub fn tar_layer(name: &str, content: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    let put = |header: &mut [u8; 512], at: usize, bytes: &[u8]| {
        header[at..at + bytes.len()].copy_from_slice(bytes);
    };
    let name = name.as_bytes();
    put(&mut header, 0, &name[..name.len().min(100)]);
    put(&mut header, 100, b"0000755\0"); // mode
    put(&mut header, 108, b"0000000\0"); // uid
    put(&mut header, 116, b"0000000\0"); // gid
    put(
        &mut header,
        124,
        format!("{:011o}\0", content.len()).as_bytes(),
    ); // size
    put(&mut header, 136, b"00000000000\0"); // mtime: the epoch, for a stable digest
    put(&mut header, 148, b"        "); // checksum, counted as spaces
    header[156] = b'0'; // typeflag: regular file
    put(&mut header, 257, b"ustar\0"); // magic
    put(&mut header, 263, b"00"); // version
    put(&mut header, 265, b"root"); // uname
    put(&mut header, 297, b"root"); // gname
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    put(&mut header, 148, format!("{sum:06o}\0 ").as_bytes());

    let padded = content.len().div_ceil(512) * 512;
    let mut out = Vec::with_capacity(512 + padded + 1024);
    out.extend_from_slice(&header);
    out.extend_from_slice(content);
    out.resize(512 + padded, 0);
    // The end of the archive: two zero blocks.
    out.resize(out.len() + 1024, 0);
    out
}

/// `sha256:<hex>` of `data`.
pub fn digest(data: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The pause image: its three blobs and their digests.
#[derive(Clone, Debug)]
pub struct Image {
    pub manifest: Bytes,
    pub manifest_digest: String,
    pub config: Bytes,
    pub config_digest: String,
    pub layer: Bytes,
    pub layer_digest: String,
}

impl Image {
    /// Build the image for `arch`.
    pub fn build(arch: Arch) -> Image {
        let layer = tar_layer("pause", &elf(arch));
        let layer_digest = digest(&layer);
        let config = serde_json::json!({
            "created": "1970-01-01T00:00:00Z",
            "architecture": arch.oci_name(),
            "os": "linux",
            "config": {
                "User": PAUSE_USER,
                "Entrypoint": ["/pause"],
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{
                "created": "1970-01-01T00:00:00Z",
                "created_by": "capstan: a static pause program",
            }],
        });
        let config = serde_json::to_vec(&config).unwrap_or_default();
        let config_digest = digest(&config);
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {
                "mediaType": CONFIG_MEDIA_TYPE,
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": LAYER_MEDIA_TYPE,
                "digest": layer_digest,
                "size": layer.len(),
            }],
        });
        let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
        Image {
            manifest_digest: digest(&manifest),
            manifest: manifest.into(),
            config_digest,
            config: config.into(),
            layer_digest,
            layer: layer.into(),
        }
    }

    /// The blob with this digest (config or layer; the manifest too, as registries do).
    fn blob(&self, digest: &str) -> Option<&Bytes> {
        if digest == self.config_digest {
            Some(&self.config)
        } else if digest == self.layer_digest {
            Some(&self.layer)
        } else if digest == self.manifest_digest {
            Some(&self.manifest)
        } else {
            None
        }
    }
}

/// The read-only registry serving the pause image on loopback. Dropping it stops serving.
pub struct Registry {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Registry {
    /// Serve the image on 127.0.0.1 at a free port.
    pub async fn start(image: Image) -> std::io::Result<Registry> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let image = Arc::new(image);
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let image = image.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let image = image.clone();
                        async move { Ok::<_, Infallible>(answer(&image, &req)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        Ok(Registry { addr, task })
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`: the endpoint to give the runtime as a mirror.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The registry's answer to one request.
fn answer<B>(image: &Image, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return error(
            StatusCode::METHOD_NOT_ALLOWED,
            "UNSUPPORTED",
            "this registry is read-only",
        );
    }
    let head = req.method() == Method::HEAD;
    let path = req.uri().path();
    if path == "/v2/" || path == "/v2" {
        return content(head, "application/json", None, Bytes::from_static(b"{}"));
    }
    let Some(rest) = path.strip_prefix("/v2/") else {
        return error(StatusCode::NOT_FOUND, "NOT_FOUND", "not found");
    };
    if let Some((name, reference)) = rest.rsplit_once("/manifests/") {
        if name != REPOSITORY {
            return error(
                StatusCode::NOT_FOUND,
                "NAME_UNKNOWN",
                "repository name not known to registry",
            );
        }
        if reference != TAG && reference != image.manifest_digest {
            return error(
                StatusCode::NOT_FOUND,
                "MANIFEST_UNKNOWN",
                "manifest unknown",
            );
        }
        return content(
            head,
            MANIFEST_MEDIA_TYPE,
            Some(&image.manifest_digest),
            image.manifest.clone(),
        );
    }
    if let Some((name, digest)) = rest.rsplit_once("/blobs/") {
        if name != REPOSITORY {
            return error(
                StatusCode::NOT_FOUND,
                "NAME_UNKNOWN",
                "repository name not known to registry",
            );
        }
        return match image.blob(digest) {
            Some(blob) => content(head, "application/octet-stream", Some(digest), blob.clone()),
            None => error(
                StatusCode::NOT_FOUND,
                "BLOB_UNKNOWN",
                "blob unknown to registry",
            ),
        };
    }
    error(StatusCode::NOT_FOUND, "NOT_FOUND", "not found")
}

fn content(
    head: bool,
    media_type: &str,
    digest: Option<&str>,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", media_type)
        .header("Content-Length", body.len())
        .header("Docker-Distribution-API-Version", "registry/2.0");
    if let Some(d) = digest {
        builder = builder.header("Docker-Content-Digest", d);
    }
    let body = if head { Bytes::new() } else { body };
    builder
        .body(Full::new(body))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

/// The distribution API's error document.
fn error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({"errors": [{"code": code, "message": message, "detail": null}]});
    let body = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str("application/json") {
        response.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    response.headers_mut().insert(
        "Docker-Distribution-API-Version",
        http::HeaderValue::from_static("registry/2.0"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([b[at], b[at + 1]])
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(a)
    }

    #[test]
    fn elf_headers_describe_one_loadable_segment() {
        for (arch, machine) in [(Arch::X86_64, 62), (Arch::Aarch64, 183)] {
            let elf = elf(arch);
            assert_eq!(&elf[..4], b"\x7fELF");
            assert_eq!(elf[4], 2, "64-bit");
            assert_eq!(elf[5], 1, "little-endian");
            assert_eq!(u16_at(&elf, 16), 2, "ET_EXEC");
            assert_eq!(u16_at(&elf, 18), machine);
            let entry = u64_at(&elf, 24);
            assert_eq!(entry, LOAD_ADDRESS + 120);
            assert_eq!(u64_at(&elf, 32), 64, "program headers right after");
            assert_eq!(u16_at(&elf, 54), 56);
            assert_eq!(u16_at(&elf, 56), 1);
            // The program header: PT_LOAD, R+X, the whole file.
            assert_eq!(&elf[64..68], &1u32.to_le_bytes());
            assert_eq!(&elf[68..72], &5u32.to_le_bytes());
            assert_eq!(u64_at(&elf, 72), 0);
            assert_eq!(u64_at(&elf, 80), LOAD_ADDRESS);
            assert_eq!(u64_at(&elf, 96), elf.len() as u64);
            assert_eq!(u64_at(&elf, 104), elf.len() as u64);
            assert!(elf.len() < 160, "a tiny program: {} bytes", elf.len());
        }
        // x86_64: the code is `mov eax, 34; syscall; jmp back to the mov`.
        let x = elf(Arch::X86_64);
        assert_eq!(&x[120..], &[0xb8, 34, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7]);
        assert_eq!(x[128] as i8 as isize, -(x[120..].len() as isize));
        // aarch64: seven instructions, the last branching back to the first.
        let a = elf(Arch::Aarch64);
        assert_eq!(a.len(), 120 + 7 * 4);
        assert_eq!(&a[144..148], &0x17ff_fffau32.to_le_bytes());
    }

    #[test]
    fn the_host_program_runs_and_sleeps() {
        // Run the program for real where it is ours: it must start and not exit by itself.
        let Some(arch) = Arch::host() else { return };
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pause");
        std::fs::write(&path, elf(arch)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut child = std::process::Command::new(&path).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the pause program exited"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn tar_layer_has_one_executable_file() {
        let content = elf(Arch::X86_64);
        let tar = tar_layer("pause", &content);
        assert_eq!(tar.len() % 512, 0);
        assert_eq!(tar.len(), 512 + 512 + 1024);
        assert_eq!(&tar[..6], b"pause\0");
        assert_eq!(&tar[100..107], b"0000755");
        assert_eq!(
            usize::from_str_radix(std::str::from_utf8(&tar[124..135]).unwrap(), 8).unwrap(),
            content.len()
        );
        assert_eq!(tar[156], b'0');
        assert_eq!(&tar[257..263], b"ustar\0");
        // The checksum: the header's byte sum with the checksum field as spaces.
        let mut h = tar[..512].to_vec();
        let stored = u32::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        h[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, h.iter().map(|b| u32::from(*b)).sum::<u32>());
        assert_eq!(&tar[512..512 + content.len()], &content[..]);
        assert!(tar[512 + content.len()..].iter().all(|b| *b == 0));

        // The system's tar reads it back.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("layer.tar"), &tar).unwrap();
        let out = std::process::Command::new("tar")
            .args(["-tvf", "layer.tar"])
            .current_dir(dir.path())
            .output();
        if let Ok(out) = out {
            let listing = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{out:?}");
            assert!(listing.contains("-rwxr-xr-x"), "{listing}");
            assert!(listing.trim_end().ends_with("pause"), "{listing}");
        }
    }

    #[test]
    fn digests_name_the_blobs() {
        assert_eq!(
            digest(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let image = Image::build(Arch::X86_64);
        assert_eq!(image.layer_digest, digest(&image.layer));
        assert_eq!(image.config_digest, digest(&image.config));
        assert_eq!(image.manifest_digest, digest(&image.manifest));
        let manifest: serde_json::Value = serde_json::from_slice(&image.manifest).unwrap();
        assert_eq!(manifest["schemaVersion"], 2);
        assert_eq!(manifest["config"]["digest"], image.config_digest.as_str());
        assert_eq!(manifest["config"]["size"], image.config.len());
        assert_eq!(manifest["layers"][0]["mediaType"], LAYER_MEDIA_TYPE);
        assert_eq!(manifest["layers"][0]["digest"], image.layer_digest.as_str());
        let config: serde_json::Value = serde_json::from_slice(&image.config).unwrap();
        assert_eq!(config["architecture"], "amd64");
        assert_eq!(config["config"]["Entrypoint"][0], "/pause");
        // Uncompressed: the layer's diff ID is its digest.
        assert_eq!(config["rootfs"]["diff_ids"][0], image.layer_digest.as_str());
        // Stable: the same image every time.
        assert_eq!(
            Image::build(Arch::X86_64).manifest_digest,
            image.manifest_digest
        );
        assert_ne!(
            Image::build(Arch::Aarch64).manifest_digest,
            image.manifest_digest
        );
    }

    #[tokio::test]
    async fn registry_serves_the_image_and_404s_the_rest() {
        let image = Image::build(Arch::X86_64);
        let registry = Registry::start(image.clone()).await.unwrap();
        let get = |method: &'static str, path: String| {
            let addr = registry.addr();
            async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                s.write_all(
                    format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .await
                .unwrap();
                let mut out = Vec::new();
                s.read_to_end(&mut out).await.unwrap();
                let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                let head = String::from_utf8_lossy(&out[..split]).to_lowercase();
                (head, out[split + 4..].to_vec())
            }
        };
        let (head, _) = get("GET", "/v2/".into()).await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        let (head, body) = get("GET", "/v2/pause/manifests/3.10".into()).await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains(&format!("docker-content-digest: {}", image.manifest_digest)));
        assert!(head.contains(MANIFEST_MEDIA_TYPE));
        assert_eq!(body, image.manifest.to_vec());
        let (head, body) = get(
            "HEAD",
            format!("/v2/pause/manifests/{}", image.manifest_digest),
        )
        .await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains(&format!("content-length: {}", image.manifest.len())));
        assert!(body.is_empty());
        let (head, body) = get("GET", format!("/v2/pause/blobs/{}", image.layer_digest)).await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert_eq!(digest(&body), image.layer_digest);
        for path in [
            "/v2/pause/manifests/3.9",
            "/v2/coredns/manifests/1.0",
            "/v2/pause/blobs/sha256:00",
            "/other",
        ] {
            let (head, body) = get("GET", path.into()).await;
            assert!(head.starts_with("http/1.1 404"), "{path}: {head}");
            let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert!(doc["errors"][0]["code"].is_string(), "{path}: {doc}");
        }
        let (head, _) = get("DELETE", "/v2/pause/manifests/3.10".into()).await;
        assert!(head.starts_with("http/1.1 405"), "{head}");
    }
}
