//! Running iptables: the few operations the proxier needs, behind a trait so that tests can
//! record them instead.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Output, Stdio};

use anyhow::{anyhow, bail, Context, Result};

/// How long iptables waits for the xtables lock (`-w`).
const LOCK_WAIT_SECONDS: &str = "5";

/// The iptables operations the proxier uses.
pub(crate) trait Iptables: Send {
    /// Apply `input` with `iptables-restore --noflush --counters`.
    fn restore(&mut self, input: &str) -> Result<()>;
    /// `iptables-save -t <table>`.
    fn save(&mut self, table: &str) -> Result<String>;
    /// Whether the rule exists (`iptables -C`).
    fn check(&mut self, table: &str, chain: &str, args: &[String]) -> Result<bool>;
    /// Whether `chain` exists in `table`.
    fn chain_exists(&mut self, table: &str, chain: &str) -> Result<bool>;
    /// `iptables -I <chain>` (prepend).
    fn insert(&mut self, table: &str, chain: &str, args: &[String]) -> Result<()>;
    /// Read a sysctl (`net.ipv4.conf.all.route_localnet`); None if it does not exist.
    fn sysctl_get(&mut self, key: &str) -> Option<String>;
    /// Set a sysctl.
    fn sysctl_set(&mut self, key: &str, value: &str) -> Result<()>;
}

/// The real thing: iptables commands, on the host or (`netns`) through `ip netns exec`.
pub(crate) struct Commands {
    pub netns: Option<String>,
}

impl Commands {
    fn command(&self, program: &str) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<Output> {
        self.command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {program}"))
    }

    fn rule(&self, op: &str, table: &str, chain: &str, args: &[String]) -> Result<Output> {
        let mut all: Vec<&str> = vec!["-w", LOCK_WAIT_SECONDS, "-t", table, op, chain];
        all.extend(args.iter().map(String::as_str));
        self.run("iptables", &all)
    }
}

impl Iptables for Commands {
    fn restore(&mut self, input: &str) -> Result<()> {
        let mut child = self
            .command("iptables-restore")
            .args(["-w", LOCK_WAIT_SECONDS, "--noflush", "--counters"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting iptables-restore")?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("iptables-restore has no stdin"))?;
        // Feed it from another thread, so that a restore that fails early and fills its
        // stderr cannot deadlock against our write.
        let out = std::thread::scope(|s| {
            let writer = s.spawn(move || {
                let r = stdin.write_all(input.as_bytes());
                drop(stdin);
                r
            });
            let out = child.wait_with_output();
            let written = writer.join();
            (out, written)
        });
        let (out, written) = out;
        let out = out.context("waiting for iptables-restore")?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            bail!(
                "iptables-restore failed ({}): {}{}",
                out.status,
                stderr.trim(),
                failed_line(&stderr, input)
            );
        }
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e).context("writing to iptables-restore"),
            Err(_) => bail!("writing to iptables-restore panicked"),
        }
    }

    fn save(&mut self, table: &str) -> Result<String> {
        let out = self.run("iptables-save", &["-t", table])?;
        if !out.status.success() {
            bail!(
                "iptables-save -t {table} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn check(&mut self, table: &str, chain: &str, args: &[String]) -> Result<bool> {
        let out = self.rule("-C", table, chain, args)?;
        match out.status.code() {
            Some(0) => Ok(true),
            // 1: no such rule; 2: also what iptables-nft says when a chain is missing.
            Some(1) | Some(2) => Ok(false),
            _ => bail!(
                "iptables -t {table} -C {chain} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }
    }

    fn chain_exists(&mut self, table: &str, chain: &str) -> Result<bool> {
        let out = self.run(
            "iptables",
            &["-w", LOCK_WAIT_SECONDS, "-t", table, "-S", chain],
        )?;
        match out.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => bail!(
                "iptables -t {table} -S {chain} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }
    }

    fn insert(&mut self, table: &str, chain: &str, args: &[String]) -> Result<()> {
        let out = self.rule("-I", table, chain, args)?;
        if !out.status.success() {
            bail!(
                "iptables -t {table} -I {chain} {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    fn sysctl_get(&mut self, key: &str) -> Option<String> {
        let out = self.run("sysctl", &["-n", key]).ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn sysctl_set(&mut self, key: &str, value: &str) -> Result<()> {
        let out = self.run("sysctl", &["-q", "-w", &format!("{key}={value}")])?;
        if !out.status.success() {
            bail!(
                "sysctl -w {key}={value} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

/// The input line iptables-restore complained about ("line N failed", "Error occurred at
/// line: N"), to show with its error.
fn failed_line(stderr: &str, input: &str) -> String {
    let number = stderr.lines().find_map(|l| {
        let rest = l
            .split_once("Error occurred at line: ")
            .map(|(_, r)| r)
            .or_else(|| l.split_once(": line ").map(|(_, r)| r))?;
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse::<usize>()
            .ok()
    });
    match number.and_then(|n| input.lines().nth(n.checked_sub(1)?)) {
        Some(line) => format!(" (input line: {line})"),
        None => String::new(),
    }
}

/// The chain names an `iptables-save` of one table declares (`:NAME POLICY [p:b]`).
pub(crate) fn chains_in_save(save: &str) -> BTreeSet<String> {
    save.lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The built-in chains of the filter and nat tables.
const BUILTIN_CHAINS: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

/// `-D` lines (iptables-restore input) removing every rule of a built-in chain in an
/// `iptables-save` of one table that jumps to a chain `owned` says is ours, whatever its
/// matches: duplicates, and variants an older version may have written, included.
pub(crate) fn unlink_lines(save: &str, owned: impl Fn(&str) -> bool) -> Vec<String> {
    save.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("-A ")?;
            let (chain, _) = rest.split_once(' ')?;
            if !BUILTIN_CHAINS.contains(&chain) {
                return None;
            }
            let (_, target) = l.rsplit_once(" -j ")?;
            let target = target.split_whitespace().next()?;
            owned(target).then(|| format!("-D {rest}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_failed_line() {
        let input = "*nat\n:A - [0:0]\n-A A -j BOGUS\nCOMMIT\n";
        let stderr = "iptables-restore v1.8.9 (nf_tables): Chain 'BOGUS' does not exist\nError occurred at line: 3\nTry `iptables-restore -h' for more information.";
        assert_eq!(failed_line(stderr, input), " (input line: -A A -j BOGUS)");
        assert_eq!(
            failed_line("iptables-restore: line 2 failed", input),
            " (input line: :A - [0:0])"
        );
        assert_eq!(failed_line("something else", input), "");
        assert_eq!(failed_line("Error occurred at line: 99", input), "");
        assert_eq!(failed_line("Error occurred at line: 0", input), "");
    }

    #[test]
    fn unlinks_jumps_into_our_chains_only() {
        let save = "*nat\n:OUTPUT ACCEPT [0:0]\n\
            -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
            -A OUTPUT -j KUBE-SERVICES\n\
            -A OUTPUT -j DOCKER\n\
            -A POSTROUTING -s 10.0.0.0/8 -j MASQUERADE --random-fully\n\
            -A KUBE-SERVICES -j KUBE-SVC-X\n\
            -A CUSTOM -j KUBE-SERVICES\nCOMMIT\n";
        let lines = unlink_lines(save, |c| c.starts_with("KUBE-"));
        assert_eq!(
            lines,
            vec![
                "-D PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
                "-D OUTPUT -j KUBE-SERVICES",
            ]
        );
    }

    #[test]
    fn chain_names_from_save() {
        let save = "# Generated\n*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SVC-X - [0:0]\n-A KUBE-SVC-X -j KUBE-SEP-Y\nCOMMIT\n";
        let chains = chains_in_save(save);
        assert!(chains.contains("PREROUTING"));
        assert!(chains.contains("KUBE-SVC-X"));
        assert_eq!(chains.len(), 2);
    }
}
