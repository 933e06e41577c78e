//! The data directory's version: DATA_DIR/VERSION says which layout of files the directory
//! holds and which capstan last wrote it, so that a capstan never starts on data it cannot
//! read (a directory of a newer capstan) or on a directory that is not capstan's at all.
//!
//! The file has two lines:
//!
//! ```text
//! capstan-data 1
//! capstan 0.1.0 (Kubernetes v1.32.0 API)
//! ```
//!
//! The rules, checked before anything in the directory is written:
//! - missing or empty directory: new; VERSION is written with the current layout;
//! - VERSION with a layout this capstan reads: used (the second line is brought up to date);
//! - VERSION with another layout, or not capstan's: refused, one line, nothing touched;
//! - no VERSION but capstan's own entries (`store/`, `pki/`, `kubelet.kubeconfig` …, from
//!   before VERSION existed): adopted, VERSION written;
//! - no VERSION, none of capstan's entries, but directories (or links, sockets …) of something
//!   else: refused. Loose regular files alone (a token file, a log) are not a reason to refuse:
//!   capstan only writes its own names and leaves them be; neither is `lost+found` (a data
//!   directory that is a file system of its own).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Context;

/// The layout of the files in a data directory that this capstan writes.
pub(crate) const LAYOUT: u32 = 1;

/// The oldest layout this capstan reads (layouts older than [`LAYOUT`] would be migrated when
/// there are any).
const OLDEST_READABLE: u32 = 1;

/// The name of the version file in a data directory.
pub(crate) const FILE: &str = "VERSION";

/// The first word of VERSION's first line.
const MAGIC: &str = "capstan-data";

/// What capstan writes in a data directory: the control plane's (`capstan server`, `up`) and a
/// node's (`capstan agent`, `up`). One of them is enough to know the directory as capstan's.
const CAPSTAN_ENTRIES: &[&str] = &[
    "store",
    "pki",
    "admin.kubeconfig",
    "components",
    "storage",
    "agent",
    "kubelet",
    "kubelet.kubeconfig",
    "containerd",
    "pod-logs",
];

/// `0.1.0 (Kubernetes v1.32.0 API)`: this binary's version and the Kubernetes API version it
/// serves (the one `/version` reports), as `capstan --version` prints it after `capstan `.
pub(crate) fn version_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{} (Kubernetes {} API)",
            env!("CARGO_PKG_VERSION"),
            capstan_apiserver::KUBERNETES_VERSION
        )
    })
}

/// What a data directory was found to be.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// Missing, or empty of anything but loose files: VERSION is to be written.
    New,
    /// capstan's, from before VERSION: VERSION is to be written.
    Adopt,
    /// VERSION of a readable layout; `writer` is its second line (empty when missing).
    Current { layout: u32, writer: String },
}

/// Check `dir` without writing anything: an error (one line) when capstan must not use it.
pub(crate) fn check(dir: &Path) -> anyhow::Result<Found> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Found::New),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    if !meta.is_dir() {
        anyhow::bail!(
            "{} is not a directory: give a directory with --data-dir",
            dir.display()
        );
    }
    let version_path = dir.join(FILE);
    match std::fs::read(&version_path) {
        Ok(bytes) => read_version(dir, &bytes),
        Err(e) if e.kind() == ErrorKind::NotFound => classify_unversioned(dir),
        Err(e) => Err(e).with_context(|| format!("reading {}", version_path.display())),
    }
}

/// Check `dir`, then create it when missing and write VERSION when it is new, adopted or was
/// last written by another capstan binary.
pub(crate) fn prepare(dir: &Path) -> anyhow::Result<()> {
    let found = check(dir)?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the data directory {}", dir.display()))?;
    let up_to_date = matches!(&found, Found::Current { layout, writer }
        if *layout == LAYOUT && writer == &writer_line());
    if up_to_date {
        return Ok(());
    }
    if found == Found::Adopt {
        tracing::info!(dir = %dir.display(), "adopting a data directory written before VERSION files");
    }
    write_version(dir)
}

/// VERSION's text for this capstan.
pub(crate) fn contents() -> String {
    format!("{MAGIC} {LAYOUT}\n{}\n", writer_line())
}

fn writer_line() -> String {
    format!("capstan {}", version_text())
}

/// Write VERSION whole or not at all (a temporary file renamed over it).
fn write_version(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(FILE);
    let tmp: PathBuf = dir.join(format!(".{FILE}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, contents()).with_context(|| format!("writing {}", tmp.display()))?;
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    Ok(())
}

fn read_version(dir: &Path, bytes: &[u8]) -> anyhow::Result<Found> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("").trim();
    let writer = lines.next().unwrap_or("").trim().to_string();
    let not_ours = || {
        anyhow::anyhow!(
            "{} holds a VERSION file that is not capstan's (it starts {:?}, not `{MAGIC} N`): \
             use another --data-dir",
            dir.display(),
            truncate(first, 40)
        )
    };
    let mut words = first.split_whitespace();
    if words.next() != Some(MAGIC) {
        return Err(not_ours());
    }
    let layout: u32 = match (words.next().map(str::parse), words.next()) {
        (Some(Ok(n)), None) => n,
        _ => return Err(not_ours()),
    };
    if !(OLDEST_READABLE..=LAYOUT).contains(&layout) {
        // "capstan 9.1.0 (Kubernetes …)" → "9.1.0"; an unknown writer is said so.
        let by = writer
            .strip_prefix("capstan ")
            .and_then(|rest| rest.split_whitespace().next())
            .map(|v| truncate(v, 40).to_string())
            .unwrap_or_else(|| "an unknown version".into());
        anyhow::bail!(
            "{} was written by capstan {by} with data layout {layout}; this capstan ({}) reads \
             layout {}: use a matching capstan or another --data-dir",
            dir.display(),
            env!("CARGO_PKG_VERSION"),
            readable_layouts(),
        );
    }
    Ok(Found::Current { layout, writer })
}

fn readable_layouts() -> String {
    if OLDEST_READABLE == LAYOUT {
        LAYOUT.to_string()
    } else {
        format!("{OLDEST_READABLE} to {LAYOUT}")
    }
}

/// A directory without VERSION: new, capstan's from before VERSION, or something else's.
fn classify_unversioned(dir: &Path) -> anyhow::Result<Found> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading the directory {}", dir.display()))?;
    let mut foreign: Option<String> = None;
    for entry in entries {
        let entry = entry.with_context(|| format!("reading the directory {}", dir.display()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if CAPSTAN_ENTRIES.contains(&name.as_ref()) {
            return Ok(Found::Adopt);
        }
        if name == "lost+found" || name.starts_with(&format!(".{FILE}.")) {
            continue;
        }
        // Not following links: a link is not a loose file of the user's.
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if !is_file && foreign.is_none() {
            foreign = Some(name.into_owned());
        }
    }
    match foreign {
        None => Ok(Found::New),
        Some(name) => anyhow::bail!(
            "{} is not a capstan data directory (it has no VERSION and holds {:?}, which capstan \
             did not write): use an empty directory or another --data-dir",
            dir.display(),
            truncate(&name, 60)
        ),
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let data = std::fs::read(e.path()).unwrap_or_default();
                (e.file_name().to_string_lossy().into_owned(), data)
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_missing_directory_is_created_with_its_version() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        assert_eq!(check(&dir).unwrap(), Found::New);
        assert!(!dir.exists(), "check wrote");
        prepare(&dir).unwrap();
        let text = std::fs::read_to_string(dir.join(FILE)).unwrap();
        assert_eq!(text, contents());
        assert!(text.starts_with("capstan-data 1\ncapstan "), "{text}");
        assert!(text.contains("(Kubernetes v1.32"), "{text}");
        assert_eq!(
            check(&dir).unwrap(),
            Found::Current {
                layout: LAYOUT,
                writer: writer_line()
            }
        );
        // Nothing else is left behind (the temporary file is renamed).
        assert_eq!(listing(&dir).len(), 1);
    }

    #[test]
    fn loose_files_and_lost_found_are_not_foreign() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("tokens.csv"), "t,u,1\n").unwrap();
        std::fs::write(tmp.path().join("server.log"), "").unwrap();
        std::fs::create_dir(tmp.path().join("lost+found")).unwrap();
        assert_eq!(check(tmp.path()).unwrap(), Found::New);
        prepare(tmp.path()).unwrap();
        assert!(tmp.path().join(FILE).exists());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("tokens.csv")).unwrap(),
            "t,u,1\n"
        );
    }

    #[test]
    fn capstan_files_without_version_are_adopted() {
        for marker in ["store", "pki", "kubelet"] {
            let tmp = tempfile::tempdir().unwrap();
            std::fs::create_dir(tmp.path().join(marker)).unwrap();
            std::fs::create_dir(tmp.path().join("other")).unwrap();
            assert_eq!(check(tmp.path()).unwrap(), Found::Adopt, "{marker}");
            prepare(tmp.path()).unwrap();
            assert_eq!(
                std::fs::read_to_string(tmp.path().join(FILE)).unwrap(),
                contents()
            );
        }
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("admin.kubeconfig"), "x").unwrap();
        assert_eq!(check(tmp.path()).unwrap(), Found::Adopt);
    }

    #[test]
    fn a_foreign_directory_is_refused_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("member")).unwrap();
        std::fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
        let before = listing(tmp.path());
        let err = format!("{:#}", prepare(tmp.path()).unwrap_err());
        assert!(err.contains("is not a capstan data directory"), "{err}");
        assert!(err.contains("\"member\""), "{err}");
        assert!(err.contains("--data-dir"), "{err}");
        assert!(!err.contains('\n'), "{err}");
        assert_eq!(listing(tmp.path()), before);
    }

    #[test]
    fn a_newer_layout_is_refused_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let newer = "capstan-data 7\ncapstan 9.1.0 (Kubernetes v1.40.0 API)\n";
        std::fs::write(tmp.path().join(FILE), newer).unwrap();
        std::fs::create_dir(tmp.path().join("store")).unwrap();
        let before = listing(tmp.path());
        let err = format!("{:#}", prepare(tmp.path()).unwrap_err());
        assert!(
            err.contains("was written by capstan 9.1.0 with data layout 7; this capstan"),
            "{err}"
        );
        assert!(err.contains("reads layout 1"), "{err}");
        assert!(
            err.ends_with("use a matching capstan or another --data-dir"),
            "{err}"
        );
        assert_eq!(listing(tmp.path()), before);
    }

    #[test]
    fn unreadable_versions_are_refused() {
        for bad in [
            "",
            "1.2.3\n",
            "capstan-data\n",
            "capstan-data one\n",
            "capstan-data 1 2\n",
            "\u{0}\u{ff}garbage",
            "capstan-data 99999999999999999999\n",
        ] {
            let tmp = tempfile::tempdir().unwrap();
            std::fs::write(tmp.path().join(FILE), bad).unwrap();
            let err = format!("{:#}", check(tmp.path()).unwrap_err());
            assert!(err.contains("not capstan's"), "{bad:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
        // Layout 0 never existed; an unknown writer is said so.
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(FILE), "capstan-data 0\n").unwrap();
        let err = format!("{:#}", check(tmp.path()).unwrap_err());
        assert!(
            err.contains("written by capstan an unknown version with data layout 0"),
            "{err}"
        );
    }

    #[test]
    fn another_binary_of_the_same_layout_is_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let older = "capstan-data 1\ncapstan 0.0.9 (Kubernetes v1.32.0 API)\n";
        std::fs::write(tmp.path().join(FILE), older).unwrap();
        prepare(tmp.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(FILE)).unwrap(),
            contents()
        );
    }

    #[test]
    fn a_file_is_not_a_data_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let err = format!("{:#}", prepare(&file).unwrap_err());
        assert!(err.contains("is not a directory"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    }

    #[test]
    fn version_text_names_the_kubernetes_api() {
        assert_eq!(
            version_text(),
            format!(
                "{} (Kubernetes {} API)",
                env!("CARGO_PKG_VERSION"),
                capstan_apiserver::KUBERNETES_VERSION
            )
        );
        assert!(version_text().contains("(Kubernetes v1.32."));
    }
}
