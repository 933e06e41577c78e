//! `capstan kubectl ARGS...`: the installed kubectl, pointed at this machine's cluster.
//!
//! kubectl replaces this process (exec), so its output, terminal, signals and exit code are
//! kubectl's own. The cluster is named with the KUBECONFIG variable rather than a
//! `--kubeconfig` flag: a flag before the command would stop kubectl from finding plugins
//! (`kubectl foo` → kubectl-foo, which reads KUBECONFIG too), and one after it would land
//! behind a `--` (`kubectl exec pod -- sh`). kubectl's own `--kubeconfig`, when given, still
//! wins over the variable.
//!
//! Which kubeconfig: DATA_DIR/admin.kubeconfig when `--data-dir` is given; otherwise the
//! user's KUBECONFIG when set; otherwise the default data directory's admin.kubeconfig.

use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// How to get kubectl, said when it is missing.
const INSTALL_HINT: &str = "install kubectl 1.32 (https://kubernetes.io/docs/tasks/tools/, or \
     `apt-get install kubectl` from the Kubernetes apt repository) and put it on PATH";

#[derive(clap::Args, Debug)]
#[command(
    // `capstan kubectl --help` and `-h` are kubectl's (`capstan help kubectl` is this help).
    disable_help_flag = true,
    after_help = "Every argument after --data-dir goes to kubectl unchanged, e.g. \
                  `capstan kubectl get pods -A`; kubectl's exit code is capstan's."
)]
pub struct KubectlArgs {
    /// The cluster's data directory, whose admin.kubeconfig kubectl uses (default: $KUBECONFIG
    /// when set, else the default data directory). Must come before kubectl's arguments.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// kubectl's arguments, passed through verbatim.
    #[arg(
        value_name = "KUBECTL_ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    args: Vec<OsString>,
}

pub async fn run(args: KubectlArgs) -> anyhow::Result<()> {
    let kubeconfig = choose_kubeconfig(
        args.data_dir.as_deref(),
        std::env::var_os("KUBECONFIG").as_deref(),
        &args.args,
        &crate::default_data_dir(),
    );
    // Found first: without kubectl, the cluster's kubeconfig is beside the point.
    let kubectl = find_on_path("kubectl", std::env::var_os("PATH").as_deref())
        .with_context(|| format!("kubectl is not installed (not found on PATH): {INSTALL_HINT}"))?;
    let mut cmd = std::process::Command::new(kubectl);
    cmd.args(&args.args);
    if let Some(path) = kubeconfig {
        usable(&path)?;
        cmd.env("KUBECONFIG", absolute(&path));
    }
    exec(cmd)
}

/// The kubeconfig to set KUBECONFIG to, if any: none when the arguments name one with
/// `--kubeconfig`, or when the user's KUBECONFIG is set and no --data-dir was given.
fn choose_kubeconfig(
    data_dir: Option<&Path>,
    env: Option<&OsStr>,
    args: &[OsString],
    default_dir: &Path,
) -> Option<PathBuf> {
    if names_kubeconfig(args) {
        return None;
    }
    match (data_dir, env) {
        (Some(dir), _) => Some(dir.join("admin.kubeconfig")),
        (None, Some(v)) if !v.is_empty() => None,
        (None, _) => Some(default_dir.join("admin.kubeconfig")),
    }
}

/// Whether kubectl's arguments (before a `--`) hold `--kubeconfig PATH` or `--kubeconfig=PATH`.
fn names_kubeconfig(args: &[OsString]) -> bool {
    args.iter()
        .map(|a| a.to_string_lossy())
        .take_while(|a| a != "--")
        .any(|a| a == "--kubeconfig" || a.starts_with("--kubeconfig="))
}

/// The admin kubeconfig must be there and readable; said in one line otherwise.
fn usable(path: &Path) -> anyhow::Result<()> {
    match std::fs::File::open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let dir = path.parent().unwrap_or(Path::new("."));
            anyhow::bail!(
                "no cluster in {}: {} is missing (start one with `capstan up` or `capstan \
                 server`, name its data directory with `capstan kubectl --data-dir DIR`, or give \
                 kubectl --kubeconfig)",
                dir.display(),
                path.display()
            )
        }
        Err(e) if e.kind() == ErrorKind::PermissionDenied => anyhow::bail!(
            "cannot read {} (permission denied): run as the user that started the cluster \
             (root for /var/lib/capstan), or give kubectl --kubeconfig",
            path.display()
        ),
        Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The first executable file `name` in the directories of `path` (as a shell finds it).
fn find_on_path(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path?)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Replace this process with kubectl; returns only when kubectl cannot be started.
fn exec(mut cmd: std::process::Command) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let e = cmd.exec();
    match e.kind() {
        ErrorKind::NotFound => {
            anyhow::bail!("kubectl is not installed (not found on PATH): {INSTALL_HINT}")
        }
        ErrorKind::PermissionDenied => {
            anyhow::bail!("cannot run kubectl (permission denied): {INSTALL_HINT}")
        }
        _ => anyhow::bail!("cannot run kubectl: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_kubeconfig_is_chosen_as_documented() {
        let default = Path::new("/var/lib/capstan");
        let admin = |d: &str| Some(PathBuf::from(d).join("admin.kubeconfig"));
        let get = os(&["get", "pods"]);
        // Default data directory.
        assert_eq!(
            choose_kubeconfig(None, None, &get, default),
            admin("/var/lib/capstan")
        );
        assert_eq!(
            choose_kubeconfig(None, Some(OsStr::new("")), &get, default),
            admin("/var/lib/capstan")
        );
        // The user's KUBECONFIG, unless --data-dir names a cluster.
        let env = Some(OsStr::new("/home/u/.kube/config"));
        assert_eq!(choose_kubeconfig(None, env, &get, default), None);
        assert_eq!(
            choose_kubeconfig(Some(Path::new("/d")), env, &get, default),
            admin("/d")
        );
        // kubectl's own --kubeconfig wins, in both spellings.
        for args in [
            os(&["--kubeconfig", "/k", "get", "pods"]),
            os(&["get", "pods", "--kubeconfig=/k"]),
        ] {
            assert_eq!(
                choose_kubeconfig(Some(Path::new("/d")), None, &args, default),
                None
            );
        }
        // …but not when it is an argument of a command run by kubectl (after `--`).
        let exec = os(&["exec", "p", "--", "tool", "--kubeconfig", "/x"]);
        assert_eq!(
            choose_kubeconfig(None, None, &exec, default),
            admin("/var/lib/capstan")
        );
    }

    #[test]
    fn kubectl_is_found_on_path_as_a_shell_would() {
        use std::os::unix::fs::PermissionsExt;
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        // Not executable in the first directory: skipped, as a shell skips it.
        std::fs::write(a.path().join("kubectl"), "").unwrap();
        let exe = b.path().join("kubectl");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([a.path(), b.path()]).unwrap();
        assert_eq!(find_on_path("kubectl", Some(&path)), Some(exe));
        let only_a = std::env::join_paths([a.path()]).unwrap();
        assert_eq!(find_on_path("kubectl", Some(&only_a)), None);
        assert_eq!(find_on_path("kubectl", None), None);
        // A directory named kubectl is not kubectl.
        let c = tempfile::tempdir().unwrap();
        std::fs::create_dir(c.path().join("kubectl")).unwrap();
        let only_c = std::env::join_paths([c.path()]).unwrap();
        assert_eq!(find_on_path("kubectl", Some(&only_c)), None);
    }

    #[test]
    fn a_missing_admin_kubeconfig_is_one_line() {
        let tmp = tempfile::tempdir().unwrap();
        let err = format!(
            "{:#}",
            usable(&tmp.path().join("admin.kubeconfig")).unwrap_err()
        );
        assert!(err.starts_with("no cluster in "), "{err}");
        assert!(err.contains("--data-dir"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}
