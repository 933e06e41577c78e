//! Operating capstan: `capstan kubectl`, the data directory's VERSION rules, `--version`, the
//! systemd units of packaging/systemd and docs/flags.md against `capstan help`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::Server;

fn capstan() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_capstan"));
    cmd.env_remove("KUBECONFIG")
        .env_remove("CAPSTAN_LOG")
        .env_remove("CAPSTAN_TOKEN")
        .stdin(Stdio::null());
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines of `s` that aren't blank.
fn lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.trim().is_empty()).collect()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A child process killed when dropped (a test that fails midway leaves nothing running).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run `cmd` to its end within `timeout` (killed and failed otherwise); its output.
fn run_within(cmd: &mut Command, timeout: Duration) -> Output {
    use std::io::Read;
    let mut running = Running(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the command starts"),
    );
    // Read both pipes while waiting, so that a talkative child never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(running.0.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(running.0.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match running.0.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() > deadline => {
                panic!("{cmd:?} still runs after {timeout:?}")
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("waiting for {cmd:?}: {e}"),
        }
    };
    Output {
        status,
        stdout: stdout.join().expect("stdout"),
        stderr: stderr.join().expect("stderr"),
    }
}

// ---- capstan kubectl ----------------------------------------------------------------------

/// `capstan kubectl` with a home of its own (kubectl's cache; capstan's default data directory
/// is HOME/.local/share/capstan for a user who isn't root).
fn capstan_kubectl(home: &Path, args: &[&str]) -> Command {
    let mut cmd = capstan();
    cmd.arg("kubectl")
        .args(args)
        .env("HOME", home)
        .env("USER", "capstan-test");
    cmd
}

fn output(cmd: &mut Command) -> Output {
    run_within(cmd, Duration::from_secs(60))
}

/// A kubectl plugin (`kubectl opprobe`) that prints KUBECONFIG and its arguments, and exits 7.
fn probe_plugin(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("kubectl-opprobe");
    std::fs::write(
        &path,
        "#!/bin/sh\nprintf 'KUBECONFIG=%s\\n' \"$KUBECONFIG\"\n\
         for a in \"$@\"; do printf 'ARG=%s\\n' \"$a\"; done\nexit 7\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn capstan_kubectl_passes_arguments_and_exit_codes() {
    let server = Server::start();
    let data_dir = server.dir.path().to_str().unwrap().to_string();
    let admin = server.kubeconfig();
    let admin = admin.to_str().unwrap();
    let home = tempfile::tempdir().unwrap();
    let home = home.path();

    // The cluster of --data-dir, kubectl's output and exit code 0.
    let out = output(&mut capstan_kubectl(
        home,
        &[
            "--data-dir",
            &data_dir,
            "get",
            "namespace",
            "default",
            "-o",
            "name",
        ],
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "namespace/default\n");

    // kubectl's failure is capstan's, with kubectl's own message.
    let out = output(&mut capstan_kubectl(
        home,
        &["--data-dir", &data_dir, "get", "configmap", "nope"],
    ));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(r#"configmaps "nope" not found"#),
        "{}",
        text(&out.stderr)
    );

    // Every argument verbatim (hyphen values, spaces, `--`, empty), KUBECONFIG naming the
    // cluster, and the exit code of what kubectl ran (a plugin exiting 7).
    let plugins = tempfile::tempdir().unwrap();
    probe_plugin(plugins.path());
    let path = std::env::join_paths(
        std::iter::once(plugins.path().to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let args = ["-n", "two words", "--flag=-x", "--", "-v", ""];
    let mut cmd = capstan_kubectl(home, &["--data-dir", &data_dir, "opprobe"]);
    cmd.args(args).env("PATH", &path);
    let out = output(&mut cmd);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    let mut expected = format!("KUBECONFIG={admin}\n");
    for a in args {
        expected += &format!("ARG={a}\n");
    }
    assert_eq!(text(&out.stdout), expected);

    // A relative --data-dir names the same cluster (KUBECONFIG is made absolute).
    let parent = server.dir.path().parent().unwrap();
    let relative = server.dir.path().file_name().unwrap().to_str().unwrap();
    let mut cmd = capstan_kubectl(home, &["--data-dir", relative, "opprobe"]);
    cmd.env("PATH", &path).current_dir(parent);
    let out = output(&mut cmd);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("KUBECONFIG={admin}\n"));

    // kubectl's own --kubeconfig wins over --data-dir (which then needn't be a cluster).
    let out = output(&mut capstan_kubectl(
        home,
        &[
            "--data-dir",
            "/nonexistent",
            "get",
            "namespace",
            "kube-system",
            "-o",
            "name",
            "--kubeconfig",
            admin,
        ],
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "namespace/kube-system\n");

    // A first argument that is a flag (-h is kubectl's help, not capstan's).
    let out = output(&mut capstan_kubectl(home, &["--data-dir", &data_dir, "-h"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("kubectl controls the Kubernetes cluster manager"),
        "{}",
        text(&out.stdout)
    );

    // Without --data-dir: the user's KUBECONFIG…
    let mut cmd = capstan_kubectl(home, &["get", "namespace", "default", "-o", "name"]);
    cmd.env("KUBECONFIG", admin);
    let out = output(&mut cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "namespace/default\n");

    // …else the default data directory: one clear line while it holds no cluster…
    let default_dir = home.join(".local/share/capstan");
    let out = output(&mut capstan_kubectl(home, &["get", "namespaces"]));
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(lines(&stderr).len(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "capstan: no cluster in {}: {}/admin.kubeconfig is missing",
            default_dir.display(),
            default_dir.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("capstan up"), "{stderr}");
    // …and its cluster once it has one.
    std::fs::create_dir_all(&default_dir).unwrap();
    std::fs::copy(admin, default_dir.join("admin.kubeconfig")).unwrap();
    let out = output(&mut capstan_kubectl(
        home,
        &["get", "namespace", "kube-public", "-o", "name"],
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "namespace/kube-public\n");

    // Without kubectl: one line saying so and how to install it.
    let empty = tempfile::tempdir().unwrap();
    let mut cmd = capstan_kubectl(home, &["--data-dir", &data_dir, "get", "pods"]);
    cmd.env("PATH", empty.path());
    let out = output(&mut cmd);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(lines(&stderr).len(), 1, "{stderr}");
    assert!(
        stderr.starts_with("capstan: kubectl is not installed (not found on PATH): install"),
        "{stderr}"
    );
    assert!(
        stderr.contains("https://kubernetes.io/docs/tasks/tools/"),
        "{stderr}"
    );
}

// ---- the data directory's VERSION ---------------------------------------------------------

/// Every file under `dir` with its contents (directories as names ending in `/`).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            if entry.file_type().unwrap().is_dir() {
                out.insert(format!("{name}/"), Vec::new());
                walk(root, &path, out);
            } else {
                out.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// `capstan server`, `up` and `agent` on `dir`, each expected to refuse it with one line
/// containing `expected` (and `{dir}`), exit 1, and leave the directory as it was.
fn refused_by_every_command(dir: &Path, expected: &str) {
    let before = snapshot(dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let home = tempfile::tempdir().unwrap();
    let commands: [&[&str]; 3] = [
        &[
            "server",
            "--secure-port",
            &port,
            "--bind-address",
            "127.0.0.1",
        ],
        &["up", "--secure-port", &port, "--bind-address", "127.0.0.1"],
        &["agent", "--server", "https://127.0.0.1:1"],
    ];
    for args in commands {
        let mut cmd = capstan();
        cmd.args(args)
            .arg("--data-dir")
            .arg(dir)
            .env("HOME", home.path());
        let out = run_within(&mut cmd, Duration::from_secs(30));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "capstan {args:?}: {stderr}");
        assert_eq!(lines(&stderr).len(), 1, "capstan {args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("capstan: {}", dir.display())),
            "capstan {args:?}: {stderr}"
        );
        assert!(stderr.contains(expected), "capstan {args:?}: {stderr}");
        assert_eq!(snapshot(dir), before, "capstan {args:?} touched {dir:?}");
    }
}

#[test]
fn data_directory_versions() {
    // A new data directory gets VERSION: the layout, and the capstan and Kubernetes versions
    // (the one the API server reports), as --version says them.
    let server = Server::start();
    let served: serde_json::Value =
        serde_json::from_str(&server.ok(&["get", "--raw", "/version"])).unwrap();
    let kubernetes = served["gitVersion"].as_str().unwrap().to_string();
    assert!(kubernetes.starts_with("v1.32."), "{kubernetes}");
    let ours = format!(
        "capstan {} (Kubernetes {kubernetes} API)",
        env!("CARGO_PKG_VERSION")
    );
    let version_file = server.dir.path().join("VERSION");
    let written = format!("capstan-data 1\n{ours}\n");
    assert_eq!(std::fs::read_to_string(&version_file).unwrap(), written);
    for flag in ["--version", "-V"] {
        let out = output(capstan().arg(flag));
        assert!(out.status.success());
        assert_eq!(text(&out.stdout), format!("{ours}\n"), "capstan {flag}");
    }

    // A data directory of capstan's from before VERSION is adopted with its data.
    server.ok(&["create", "configmap", "kept", "--from-literal=k=v"]);
    let dir = server.stop();
    std::fs::remove_file(dir.path().join("VERSION")).unwrap();
    assert!(dir.path().join("store").is_dir());
    let server = Server::start_in(dir, &[]);
    assert_eq!(
        std::fs::read_to_string(server.dir.path().join("VERSION")).unwrap(),
        written
    );
    assert_eq!(
        server.ok(&["get", "configmap", "kept", "-o", "jsonpath={.data.k}"]),
        "v"
    );
    drop(server);

    // A newer layout: one line, exit 1, the directory untouched, by every command.
    let newer = tempfile::tempdir().unwrap();
    std::fs::write(
        newer.path().join("VERSION"),
        "capstan-data 2\ncapstan 9.9.9 (Kubernetes v1.40.0 API)\n",
    )
    .unwrap();
    std::fs::create_dir(newer.path().join("store")).unwrap();
    std::fs::write(newer.path().join("store/data"), "newer format").unwrap();
    refused_by_every_command(
        newer.path(),
        &format!(
            "{} was written by capstan 9.9.9 with data layout 2; this capstan ({}) reads \
             layout 1: use a matching capstan or another --data-dir",
            newer.path().display(),
            env!("CARGO_PKG_VERSION")
        ),
    );

    // Something else's directory (here: like etcd's), not empty: refused the same way.
    let foreign = tempfile::tempdir().unwrap();
    std::fs::create_dir(foreign.path().join("member")).unwrap();
    std::fs::write(foreign.path().join("member/wal"), "not capstan's").unwrap();
    refused_by_every_command(
        foreign.path(),
        "is not a capstan data directory (it has no VERSION and holds \"member\"",
    );

    // A VERSION file of another program.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("VERSION"), "3.5.0\n").unwrap();
    refused_by_every_command(other.path(), "holds a VERSION file that is not capstan's");
}

// ---- packaging ----------------------------------------------------------------------------

const UNITS: &[&str] = &[
    "capstan-server.service",
    "capstan-agent.service",
    "capstan-up.service",
];

/// `key=value` settings of a unit file's [Service] section.
fn service_settings(unit: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut in_service = false;
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            in_service = line == "[Service]";
        } else if in_service && !line.starts_with('#') {
            if let Some((k, v)) = line.split_once('=') {
                out.entry(k.to_string()).or_default().push(v.to_string());
            }
        }
    }
    out
}

#[test]
fn systemd_units_are_valid_and_stop_cleanly() {
    let systemd = repo_root().join("packaging/systemd");
    let work = tempfile::tempdir().unwrap();
    for name in UNITS {
        let unit = std::fs::read_to_string(systemd.join(name)).unwrap();
        let s = service_settings(&unit);
        let one = |k: &str| s.get(k).map(|v| v.join(" ")).unwrap_or_default();
        assert_eq!(one("Type"), "simple", "{name}");
        assert_eq!(one("KillMode"), "mixed", "{name}");
        assert_eq!(one("Restart"), "on-failure", "{name}");
        assert!(!one("TimeoutStopSec").is_empty(), "{name}");
        assert!(
            one("LimitNOFILE").parse::<u64>().unwrap() >= 65536,
            "{name}"
        );
        let exec = one("ExecStart");
        assert!(
            exec.starts_with("/usr/local/bin/capstan "),
            "{name}: {exec}"
        );
        assert!(
            exec.contains("--data-dir /var/lib/capstan"),
            "{name}: {exec}"
        );
        if *name != "capstan-server.service" {
            // The kubelet makes the pods' cgroups under the unit's.
            assert_eq!(one("Delegate"), "yes", "{name}");
        }
        // The same unit, running the capstan under test, checked by systemd itself.
        let copy = unit.replace("/usr/local/bin/capstan", env!("CARGO_BIN_EXE_capstan"));
        std::fs::write(work.path().join(name), copy).unwrap();
    }
    // The agent's unit reads its environment file; the example names what it needs.
    let env = std::fs::read_to_string(systemd.join("capstan-agent.env")).unwrap();
    let agent = std::fs::read_to_string(systemd.join("capstan-agent.service")).unwrap();
    for var in ["CAPSTAN_SERVER", "CAPSTAN_CA_CERT_HASH"] {
        assert!(env.contains(&format!("\n{var}=")), "{var}");
        assert!(agent.contains(&format!("${{{var}}}")), "{var}");
    }
    assert!(env.contains("\nCAPSTAN_TOKEN="));

    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(UNITS.iter().map(|u| work.path().join(u)))
        .output()
        .expect("systemd-analyze runs (Debian: apt-get install systemd)");
    assert!(
        out.status.success() && text(&out.stderr).trim().is_empty(),
        "systemd-analyze verify:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // The static build script is at least well-formed shell.
    let script = repo_root().join("packaging/build-static.sh");
    let out = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

// ---- docs/flags.md ------------------------------------------------------------------------

/// `capstan help PATH...` as root sees it (the defaults don't matter here).
fn help(path: &[&str]) -> String {
    let out = output(capstan().arg("help").args(path));
    assert!(out.status.success(), "capstan help {path:?}");
    text(&out.stdout)
}

/// The long flags of a help text's Options.
fn help_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| *l != "Options:")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter_map(|l| {
            // Flags are indented by 2 to 6 spaces, their descriptions further.
            let indent = l.len() - l.trim_start().len();
            if !(2..=6).contains(&indent) {
                return None;
            }
            let l = l.trim_start();
            let l = l
                .strip_prefix('-')
                .filter(|rest| !rest.starts_with('-'))
                .map(|rest| rest.get(3..).unwrap_or(""))
                .unwrap_or(l);
            let flag = l.strip_prefix("--")?;
            let end = flag
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(flag.len());
            Some(flag[..end].to_string())
        })
        .filter(|f| f != "help" && f != "version")
        .collect()
}

/// The subcommands a help text lists.
fn help_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

/// GitHub's anchor of a heading: lower case, spaces as hyphens, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The doc's `## ` sections by anchor: their text, and the anchors their "Also takes" names.
fn doc_sections(doc: &str) -> BTreeMap<String, (String, Vec<String>)> {
    let mut out = BTreeMap::new();
    for part in doc.split("\n## ").skip(1) {
        let (heading, body) = part.split_once('\n').unwrap_or((part, ""));
        let links = body
            .lines()
            .filter(|l| l.starts_with("Also takes:"))
            .flat_map(|l| l.split("](#").skip(1))
            .filter_map(|rest| rest.split(')').next())
            .map(str::to_string)
            .collect();
        out.insert(anchor(heading.trim()), (body.to_string(), links));
    }
    out
}

/// Whether a section, or one it (transitively) says it also takes, documents `--flag`.
fn documented(sections: &BTreeMap<String, (String, Vec<String>)>, start: &str, flag: &str) -> bool {
    let mut todo = vec![start.to_string(), "global-flags".to_string()];
    let mut seen = BTreeSet::new();
    while let Some(a) = todo.pop() {
        if !seen.insert(a.clone()) {
            continue;
        }
        if let Some((body, links)) = sections.get(&a) {
            if body.contains(&format!("`--{flag}`")) || body.contains(&format!("`--{flag} ")) {
                return true;
            }
            todo.extend(links.iter().cloned());
        }
    }
    false
}

#[test]
fn flags_doc_lists_every_flag_of_every_command() {
    let doc = std::fs::read_to_string(repo_root().join("docs/flags.md")).unwrap();
    let sections = doc_sections(&doc);
    // Every "Also takes" link leads somewhere.
    for (a, (_, links)) in &sections {
        for l in links {
            assert!(
                sections.contains_key(l),
                "section {a} links to #{l}, which isn't there"
            );
        }
    }
    let top = help(&[]);
    let mut missing = Vec::new();
    for flag in help_flags(&top) {
        if !documented(&sections, "global-flags", &flag) {
            missing.push(format!("capstan --{flag}"));
        }
    }
    // Every command, and the commands of commands; `bench` has its own help.
    let mut todo: Vec<Vec<String>> = help_commands(&top)
        .into_iter()
        .filter(|c| c != "bench")
        .map(|c| vec![c])
        .collect();
    assert!(todo.len() >= 12, "{todo:?}");
    let mut checked = 0;
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        // The command's own section, else its parent's (`store get` → `capstan store`).
        let section = (1..=path.len())
            .rev()
            .map(|n| anchor(&format!("capstan {}", path[..n].join(" "))))
            .find(|a| sections.contains_key(a));
        // A command with flags of its own needs a section (the global flags' is checked
        // for all).
        let section = section.unwrap_or_else(|| "global-flags".into());
        for flag in help_flags(&text) {
            if !documented(&sections, &section, &flag) {
                missing.push(format!("capstan {} --{flag}", path.join(" ")));
            }
            checked += 1;
        }
        for sub in help_commands(&text) {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/flags.md lacks (regenerate it: python3 packaging/flags-doc.py \
         target/debug/capstan > docs/flags.md):\n{}",
        missing.join("\n")
    );
    // The parser found the flags (a help format it no longer reads would find none).
    assert!(checked > 150, "only {checked} flags read from the help");
    for flag in [
        "data-dir",
        "proxy-mode",
        "token",
        "cluster-dns-port",
        "kubeconfig",
    ] {
        assert!(
            doc.contains(&format!("`--{flag}")),
            "docs/flags.md lacks --{flag}"
        );
    }
}

/// The `VmFlags` lines of a process's mappings that ask for transparent huge pages.
fn huge_page_mappings(pid: u32) -> usize {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    smaps
        .lines()
        .filter(|l| l.starts_with("VmFlags:") && l.split_whitespace().any(|f| f == "hg"))
        .count()
}

/// mimalloc would ask for transparent huge pages for its heap, where one small allocation
/// then keeps 2 MiB resident; capstan turns that off before its first allocation, and the
/// environment still decides when it says otherwise.
#[test]
fn the_heap_asks_for_no_huge_pages() {
    // Eager commit alone would bring huge pages back (mimalloc asks for them for arenas it
    // commits up front); both options are set.
    for (env, want_huge) in [
        (&[][..], false),
        (&[("MIMALLOC_ARENA_EAGER_COMMIT", "1")][..], false),
        (
            &[
                ("MIMALLOC_ARENA_EAGER_COMMIT", "1"),
                ("MIMALLOC_ALLOW_THP", "1"),
            ][..],
            true,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = capstan();
        cmd.args(["server", "--bind-address", "127.0.0.1"])
            .args(["--disable-scheduler", "--disable-controller-manager"])
            .args(["--secure-port", &port.to_string(), "--data-dir"])
            .arg(dir.path())
            .env_remove("MIMALLOC_ALLOW_THP")
            .env_remove("MIMALLOC_ARENA_EAGER_COMMIT")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let huge = huge_page_mappings(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(huge > 0, want_huge, "{env:?}: {huge} mappings");
    }
}
