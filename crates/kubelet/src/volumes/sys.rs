//! Host-side helpers: tmpfs mounts, the mount table, unmounting everything under a pod's
//! directory, and fsGroup ownership.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Undo the octal escapes (`\040` for a space) of a /proc/self/mountinfo field.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = oct
                    .iter()
                    .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount points of this process's mount namespace.
pub fn mount_points() -> io::Result<Vec<PathBuf>> {
    let text = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|f| PathBuf::from(unescape(f)))
        .collect())
}

/// Whether `path` is a mount point. Asked of the kernel for the one path (statx's
/// mount-root attribute): reading the whole mount table instead costs every pod sync time
/// in proportion to the number of pods on the node. Kernels before 5.8 fall back to it.
pub fn is_mount_point(path: &Path) -> bool {
    if let Some(root) = statx_mount_root(path) {
        return root;
    }
    let Ok(real) = fs::canonicalize(path) else {
        return false;
    };
    mount_points()
        .map(|m| m.iter().any(|p| p == &real))
        .unwrap_or(false)
}

/// Some(whether `path` is the root of a mount), or None when the kernel does not say.
fn statx_mount_root(path: &Path) -> Option<bool> {
    let target = cstring(path).ok()?;
    // SAFETY: statx is plain data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `target` is NUL-terminated and `stx` is writable for the call's duration.
    let rc = unsafe { libc::statx(libc::AT_FDCWD, target.as_ptr(), 0, 0, &mut stx) };
    let bit = libc::STATX_ATTR_MOUNT_ROOT as u64;
    if rc != 0 {
        // A path that does not exist is no mount point; other errors: ask the table.
        let e = io::Error::last_os_error();
        return (e.raw_os_error() == Some(libc::ENOENT)).then_some(false);
    }
    (stx.stx_attributes_mask & bit != 0).then_some(stx.stx_attributes & bit != 0)
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path has a NUL byte"))
}

/// Mount a tmpfs at `path` (size in bytes when given).
pub fn mount_tmpfs(path: &Path, size: Option<i64>) -> io::Result<()> {
    let target = cstring(path)?;
    let fstype = CString::new("tmpfs").map_err(io::Error::other)?;
    let data = match size {
        Some(s) if s > 0 => format!("size={s}"),
        _ => String::new(),
    };
    let data = CString::new(data).map_err(io::Error::other)?;
    // SAFETY: every pointer is a valid NUL-terminated string for the call's duration.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr() as *const libc::c_void,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Unmount `path` (lazily if it is busy).
pub fn unmount(path: &Path) -> io::Result<()> {
    let target = cstring(path)?;
    // SAFETY: target is a valid NUL-terminated string.
    if unsafe { libc::umount2(target.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    // SAFETY: as above.
    if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    Err(io::Error::last_os_error())
}

/// Unmount every mount at or below `dir`, deepest first.
pub fn unmount_all_under(dir: &Path) -> io::Result<()> {
    let Ok(real) = fs::canonicalize(dir) else {
        return Ok(());
    };
    let mut under: Vec<PathBuf> = mount_points()?
        .into_iter()
        .filter(|p| p.starts_with(&real))
        .collect();
    under.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    under.dedup();
    let mut last = Ok(());
    for p in under {
        if let Err(e) = unmount(&p) {
            if e.raw_os_error() != Some(libc::EINVAL) && e.raw_os_error() != Some(libc::ENOENT) {
                tracing::warn!(path = %p.display(), error = %e, "unmount failed");
                last = Err(e);
            }
        }
    }
    last
}

/// fsGroup ownership (`SetVolumeOwnership`): every file under `dir` gets group `gid`;
/// files get group read (and write unless `read_only`), directories also setgid and group
/// search. Symlinks only change group.
pub fn set_ownership(dir: &Path, gid: u32, read_only: bool) -> io::Result<()> {
    fn visit(p: &Path, gid: u32, read_only: bool) -> io::Result<()> {
        let meta = fs::symlink_metadata(p)?;
        let _ = std::os::unix::fs::lchown(p, None, Some(gid));
        if meta.file_type().is_symlink() {
            return Ok(());
        }
        let mut mask = if read_only { 0o440 } else { 0o660 };
        if meta.is_dir() {
            mask |= libc::S_ISGID | 0o110;
        }
        let mode = (meta.mode() & 0o7777) | mask;
        let _ = fs::set_permissions(p, fs::Permissions::from_mode(mode));
        if meta.is_dir() {
            for entry in fs::read_dir(p)? {
                visit(&entry?.path(), gid, read_only)?;
            }
        }
        Ok(())
    }
    visit(dir, gid, read_only)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/x\\"), "/x\\");
        assert_eq!(unescape("/x\\04"), "/x\\04");
    }

    #[test]
    fn mount_points_by_statx_agree_with_the_mount_table() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("m");
        fs::create_dir(&d).unwrap();
        assert!(!is_mount_point(&d));
        assert!(!is_mount_point(&tmp.path().join("missing")));
        assert!(is_mount_point(Path::new("/")));
        assert_eq!(statx_mount_root(Path::new("/proc")), Some(true));
        mount_tmpfs(&d, Some(1 << 20)).unwrap();
        let mounted = is_mount_point(&d);
        let listed = mount_points()
            .unwrap()
            .contains(&fs::canonicalize(&d).unwrap());
        unmount(&d).unwrap();
        assert!(mounted && listed);
        assert!(!is_mount_point(&d));
    }

    #[test]
    fn ownership_masks() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("v");
        fs::create_dir(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(d.join("f"), "x").unwrap();
        fs::set_permissions(d.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
        let gid = fs::metadata(&d).unwrap().gid();
        set_ownership(&d, gid, true).unwrap();
        assert_eq!(fs::metadata(d.join("f")).unwrap().mode() & 0o7777, 0o640);
        assert_eq!(
            fs::metadata(&d).unwrap().mode() & 0o7777,
            0o700 | 0o440 | 0o110 | libc::S_ISGID
        );
        set_ownership(&d, gid, false).unwrap();
        assert_eq!(fs::metadata(d.join("f")).unwrap().mode() & 0o7777, 0o660);
    }
}
