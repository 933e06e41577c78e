//! The atomic writer of configMap, secret, downwardAPI and projected volumes: the files
//! live in a timestamped directory (`..2024_05_01_10_00_00.123456`), `..data` is a symlink
//! to it, and every user-visible top-level name is a symlink through `..data`. An update
//! writes a new timestamped directory and swaps `..data` with one rename, so a reader sees
//! either the old or the new set of files, never a mix. Nothing is written when the
//! content is unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

const DATA_DIR: &str = "..data";
const NEW_DATA_DIR: &str = "..data_tmp";
const MAX_PATH_LENGTH: usize = 4096;
const MAX_FILE_NAME_LENGTH: usize = 255;

/// One file of a volume's payload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    /// Permission bits (the item's mode or the volume's defaultMode).
    pub mode: u32,
    /// Owner of the file (projected service account tokens when the pod runs as one user).
    pub fs_user: Option<u32>,
}

/// Relative path → file.
pub type Payload = BTreeMap<String, FileProjection>;

/// Runs on the volume directory once new files are written (fsGroup ownership).
pub type SetPerms<'a> = &'a dyn Fn(&Path) -> io::Result<()>;

/// Check one payload path: relative, no `..` element, not starting with `..`, within the
/// length limits.
pub fn validate_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err(format!("invalid path: must not be empty: {path:?}"));
    }
    if path.starts_with('/') {
        return Err(format!("invalid path: must be relative path: {path}"));
    }
    if path.len() > MAX_PATH_LENGTH {
        return Err(format!(
            "invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters"
        ));
    }
    let items: Vec<&str> = path.split('/').collect();
    for item in &items {
        if *item == ".." {
            return Err(format!("invalid path: must not contain '..': {path}"));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return Err(format!(
                "invalid path: filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"
            ));
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return Err(format!("invalid path: must not start with '..': {path}"));
    }
    Ok(())
}

/// `filepath.Clean` of a relative path.
pub fn clean(path: &str) -> String {
    let parts: Vec<&str> = Path::new(path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

fn io_err(op: &str, path: &Path, e: io::Error) -> String {
    format!("{op} {}: {}", path.display(), strip_os_error(&e))
}

/// An io::Error's text without Rust's " (os error N)" tail, as Go prints errno texts.
fn strip_os_error(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => {
            let mut t = s[..i].to_string();
            if let Some(first) = t.get(0..1) {
                let lower = first.to_lowercase();
                t.replace_range(0..1, &lower);
            }
            t
        }
        None => s,
    }
}

/// Write `payload` into `target` atomically. `set_perms` runs after the new files are in
/// place and before they become visible (fsGroup ownership). Returns whether anything was
/// written.
pub fn write(
    target: &Path,
    payload: &Payload,
    set_perms: Option<SetPerms<'_>>,
) -> Result<bool, String> {
    let mut clean_payload: Payload = BTreeMap::new();
    for (path, file) in payload {
        validate_path(path)?;
        clean_payload.insert(clean(path), file.clone());
    }

    let data_dir = target.join(DATA_DIR);
    let old_ts = match fs::read_link(&data_dir) {
        Ok(p) => Some(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err("readlink", &data_dir, e)),
    };
    let old_ts_path = old_ts.as_ref().map(|p| target.join(p));

    let mut to_remove = BTreeSet::new();
    if let Some(old) = &old_ts_path {
        to_remove = paths_to_remove(&clean_payload, old)?;
        if !should_write(&clean_payload, old)? && to_remove.is_empty() {
            return Ok(false);
        }
    }

    let ts_dir = new_timestamp_dir(target)?;
    let ts_name = ts_dir
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    let result = (|| {
        write_payload(&clean_payload, &ts_dir)?;
        if let Some(f) = set_perms {
            f(target).map_err(|e| io_err("set permissions of", target, e))?;
        }
        create_user_visible(target, &clean_payload)?;
        let tmp_link = target.join(NEW_DATA_DIR);
        let _ = fs::remove_file(&tmp_link);
        std::os::unix::fs::symlink(&ts_name, &tmp_link)
            .map_err(|e| io_err("symlink", &tmp_link, e))?;
        if let Err(e) = fs::rename(&tmp_link, &data_dir) {
            let _ = fs::remove_file(&tmp_link);
            return Err(io_err("rename", &tmp_link, e));
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&ts_dir);
        return Err(e);
    }

    // Only top-level names are links of their own; deeper ones go away with the old
    // timestamped directory.
    for p in &to_remove {
        if p.contains('/') {
            continue;
        }
        let visible = target.join(p);
        if let Err(e) = fs::remove_file(&visible) {
            if e.kind() != io::ErrorKind::NotFound {
                return Err(io_err("remove", &visible, e));
            }
        }
    }
    if let Some(old) = &old_ts_path {
        if old != &ts_dir {
            if let Err(e) = fs::remove_dir_all(old) {
                if e.kind() != io::ErrorKind::NotFound {
                    return Err(io_err("remove", old, e));
                }
            }
        }
    }
    Ok(true)
}

fn should_write(payload: &Payload, old_ts: &Path) -> Result<bool, String> {
    for (path, file) in payload {
        let full = old_ts.join(path);
        match fs::symlink_metadata(&full) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(io_err("lstat", &full, e)),
            Ok(m) if !m.is_file() => return Ok(true),
            Ok(_) => {}
        }
        let on_disk = fs::read(&full).map_err(|e| io_err("read", &full, e))?;
        if on_disk != file.data {
            return Ok(true);
        }
    }
    Ok(false)
}

fn walk(dir: &Path, base: &Path, out: &mut BTreeSet<String>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if let Ok(rel) = path.strip_prefix(base) {
            out.insert(rel.to_string_lossy().into_owned());
        }
        if entry.file_type()?.is_dir() {
            walk(&path, base, out)?;
        }
    }
    Ok(())
}

fn paths_to_remove(payload: &Payload, old_ts: &Path) -> Result<BTreeSet<String>, String> {
    let mut existing = BTreeSet::new();
    match walk(old_ts, old_ts, &mut existing) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(io_err("walk", old_ts, e)),
    }
    let mut new_paths = BTreeSet::new();
    for file in payload.keys() {
        let mut p = file.as_str();
        loop {
            new_paths.insert(p.to_string());
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => break,
            }
        }
    }
    Ok(existing.difference(&new_paths).cloned().collect())
}

fn new_timestamp_dir(target: &Path) -> Result<PathBuf, String> {
    let stamp = k8s_openapi::jiff::Timestamp::now()
        .strftime("..%Y_%m_%d_%H_%M_%S.")
        .to_string();
    for _ in 0..100 {
        let suffix: u32 = rand::random();
        let dir = target.join(format!("{stamp}{suffix}"));
        match fs::create_dir(&dir) {
            Ok(()) => {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
                    .map_err(|e| io_err("chmod", &dir, e))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err("mkdir", &dir, e)),
        }
    }
    Err(format!(
        "mkdir {}: could not find a free name",
        target.display()
    ))
}

fn write_payload(payload: &Payload, dir: &Path) -> Result<(), String> {
    for (path, file) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err("mkdir", parent, e))?;
        }
        fs::write(&full, &file.data).map_err(|e| io_err("open", &full, e))?;
        fs::set_permissions(&full, fs::Permissions::from_mode(file.mode & 0o7777))
            .map_err(|e| io_err("chmod", &full, e))?;
        if let Some(uid) = file.fs_user {
            std::os::unix::fs::chown(&full, Some(uid), None)
                .map_err(|e| io_err("chown", &full, e))?;
        }
    }
    Ok(())
}

fn create_user_visible(target: &Path, payload: &Payload) -> Result<(), String> {
    for path in payload.keys() {
        let first = path.split('/').next().unwrap_or(path);
        let visible = target.join(first);
        if fs::symlink_metadata(&visible).is_ok() {
            continue;
        }
        let dest = Path::new(DATA_DIR).join(first);
        std::os::unix::fs::symlink(&dest, &visible).map_err(|e| io_err("symlink", &visible, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
            fs_user: None,
        }
    }

    fn read(dir: &Path, p: &str) -> String {
        fs::read_to_string(dir.join(p)).unwrap()
    }

    #[test]
    fn update_swaps_data_and_removed_keys_disappear() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut payload = Payload::new();
        payload.insert("a".into(), file("one", 0o644));
        payload.insert("sub/b".into(), file("two", 0o400));
        payload.insert("gone".into(), file("x", 0o644));
        assert!(write(dir, &payload, None).unwrap());

        let first = fs::read_link(dir.join("..data")).unwrap();
        assert!(first.to_string_lossy().starts_with(".."));
        assert_eq!(fs::read_link(dir.join("a")).unwrap(), Path::new("..data/a"));
        assert_eq!(
            fs::read_link(dir.join("sub")).unwrap(),
            Path::new("..data/sub")
        );
        assert_eq!(read(dir, "a"), "one");
        assert_eq!(read(dir, "sub/b"), "two");
        let mode = |p: &str| fs::metadata(dir.join(p)).unwrap().mode() & 0o7777;
        assert_eq!(mode("a"), 0o644);
        assert_eq!(mode("sub/b"), 0o400);

        // Same content: nothing is written, ..data stays.
        assert!(!write(dir, &payload, None).unwrap());
        assert_eq!(fs::read_link(dir.join("..data")).unwrap(), first);

        // New content and a removed key.
        payload.insert("a".into(), file("uno", 0o644));
        payload.remove("gone");
        assert!(write(dir, &payload, None).unwrap());
        let second = fs::read_link(dir.join("..data")).unwrap();
        assert_ne!(first, second);
        assert_eq!(read(dir, "a"), "uno");
        assert!(fs::symlink_metadata(dir.join("gone")).is_err());
        assert!(!dir.join(&first).exists(), "old timestamped dir removed");
        assert!(!dir.join("..data_tmp").exists());

        // Only a removal still rewrites.
        payload.remove("sub/b");
        assert!(write(dir, &payload, None).unwrap());
        assert!(fs::symlink_metadata(dir.join("sub")).is_err());
        let names: BTreeSet<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}"); // a, ..data, one timestamped dir
    }

    #[test]
    fn empty_payload_and_bad_paths() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(write(tmp.path(), &Payload::new(), None).unwrap());
        assert!(tmp.path().join("..data").exists());
        assert!(!write(tmp.path(), &Payload::new(), None).unwrap());

        let mut bad = Payload::new();
        bad.insert("../escape".into(), file("x", 0o644));
        assert_eq!(
            write(tmp.path(), &bad, None).unwrap_err(),
            "invalid path: must not contain '..': ../escape"
        );
        assert_eq!(
            validate_path("/abs").unwrap_err(),
            "invalid path: must be relative path: /abs"
        );
        assert_eq!(
            validate_path("..data/x").unwrap_err(),
            "invalid path: must not start with '..': ..data/x"
        );
        assert!(validate_path("a/../b").is_err());
        assert!(validate_path("..").is_err());
        assert!(validate_path("a..b").is_ok());
        assert_eq!(clean("./a//b/"), "a/b");
    }

    #[test]
    fn set_perms_runs_before_the_swap() {
        let tmp = tempfile::tempdir().unwrap();
        let mut payload = Payload::new();
        payload.insert("k".into(), file("v", 0o600));
        let seen = std::cell::Cell::new(false);
        let f = |dir: &Path| -> io::Result<()> {
            // The new files exist, ..data does not yet point at them.
            assert!(fs::read_link(dir.join("..data")).is_err());
            seen.set(true);
            Ok(())
        };
        write(tmp.path(), &payload, Some(&f)).unwrap();
        assert!(seen.get());
    }
}
