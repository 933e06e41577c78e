#!/usr/bin/env python3
"""Write docs/flags.md from capstan's own help (`capstan help <command>`).

    cargo build -p capstan && python3 packaging/flags-doc.py target/debug/capstan > docs/flags.md

Flags shared by several commands are listed once: the global flags, the controller manager's
(also `capstan server`'s and `up`'s) and the node flags (`capstan up`'s and `agent`'s); a
command's section says which other sections it also takes. crates/capstan/tests/operate.rs
fails when a flag that the help lists is missing here.
"""

import os
import re
import subprocess
import sys

FLAG = re.compile(
    r"^ {2,6}(?:-(?P<short>\w), )?--(?P<long>[\w-]+)(?:[ =](?P<value><[^>]+>|\[[^\]]+\]))?(?:\.\.\.)?"
    r"(?:\s{2,}(?P<desc>.*))?$"
)


def help_text(binary, path):
    # As root: the defaults shown are root's (/var/lib/capstan).
    env = dict(os.environ, USER="root", HOME="/root", COLUMNS="200")
    env.pop("CAPSTAN_LOG", None)
    env.pop("NODE_NAME", None)
    env.pop("CAPSTAN_TOKEN", None)
    out = subprocess.run(
        [binary, "help", *path], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout


def parse_flags(text):
    """[(long, short, value, description)] of the Options section, in order."""
    flags = []
    in_options = False
    current = None
    for line in text.splitlines():
        if line == "Options:":
            in_options = True
            continue
        if not in_options:
            continue
        if line and not line.startswith(" "):
            break
        m = FLAG.match(line)
        if m:
            current = [m["long"], m["short"], m["value"], (m["desc"] or "").strip(), []]
            flags.append(current)
        elif current is not None and line.strip():
            part = line.strip()
            item = re.match(r"^- ([\w-]+):\s*(.*)$", part)
            if part == "Possible values:":
                continue
            if item:
                # The long help's list of values with their meanings.
                current[4].append(f"`{item.group(1)}` ({item.group(2).rstrip('.')})")
            else:
                current[3] = (current[3] + " " + part).strip()
    out = []
    for long, short, value, desc, values in flags:
        if long in ("help", "version"):
            continue
        if values:
            desc += " [possible values: " + ", ".join(values) + "]"
        out.append((long, short, value, desc))
    return out


def commands(text):
    """The subcommands a help text lists."""
    out = []
    in_commands = False
    for line in text.splitlines():
        if line == "Commands:":
            in_commands = True
        elif in_commands and line.startswith("  "):
            name = line.split()[0]
            if name != "help":
                out.append(name)
        elif in_commands:
            break
    return out


def split_annotations(desc):
    """The description without clap's [default: ...], [env: ...], [possible values: ...]."""
    notes = {}
    for key in ("default", "env", "possible values"):
        m = re.search(r"\[" + key + r": ([^\]]*)\]", desc)
        if m:
            notes[key] = m.group(1)
            desc = desc.replace(m.group(0), "")
    return desc.strip(), notes


def cell(text):
    return text.replace("|", "\\|")


def table(flags):
    rows = ["| Flag | Default | Description |", "| --- | --- | --- |"]
    for long, short, value, desc in flags:
        name = f"--{long}"
        if value:
            name += " " + value.strip("<>[]")
        if short:
            name = f"-{short}, {name}"
        desc, notes = split_annotations(desc)
        default = notes.get("default", "")
        if default.startswith("/var/lib/capstan"):
            default = f"`{default}` (root), else under `~/.local/share/capstan`"
        elif default:
            default = f"`{default}`"
        extra = []
        if "possible values" in notes:
            extra.append(f"One of: {notes['possible values']}.")
        if "env" in notes:
            extra.append(f"Environment: `{notes['env'].rstrip('=')}`.")
        if desc and not desc.endswith("."):
            desc += "."
        desc = " ".join([desc, *extra]).strip()
        rows.append(f"| `{cell(name)}` | {cell(default)} | {cell(desc)} |")
    return "\n".join(rows)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/debug/capstan"
    top = help_text(binary, [])
    glob = parse_flags(top)
    global_names = {f[0] for f in glob}

    def own(path):
        return [f for f in parse_flags(help_text(binary, path)) if f[0] not in global_names]

    cm = own(["controller-manager"])
    server_all = own(["server"])
    agent_all = own(["agent"])
    up_all = own(["up"])
    cm_names = {f[0] for f in cm}
    server_names = {f[0] for f in server_all}
    server = [f for f in server_all if f[0] not in cm_names]
    node_names = ({f[0] for f in agent_all} & {f[0] for f in up_all}) - server_names
    node = [f for f in agent_all if f[0] in node_names]
    agent = [f for f in agent_all if f[0] not in node_names]
    up = [f for f in up_all if f[0] not in server_names and f[0] not in node_names]
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()

    g = "[global flags](#global-flags)"
    sections = [
        (
            "Global flags",
            "Every command takes these, before or after its name.",
            None,
            glob,
        ),
        (
            "capstan server",
            "The control plane: the API server over the store, in the data directory, with the "
            "controllers and the scheduler in the same process (unless disabled).",
            f"{g}, [the controller manager's flags](#capstan-controller-manager) but "
            "`--kubeconfig` and `--leader-elect`.",
            server,
        ),
        (
            "capstan controller-manager",
            "The controllers alone against an API server (kube-controller-manager's job).",
            g + ".",
            cm,
        ),
        (
            "capstan scheduler",
            "The scheduler alone against an API server (kube-scheduler's job).",
            g + ".",
            own(["scheduler"]),
        ),
        (
            "capstan kubelet",
            "The node agent alone against an API server and a CRI runtime (the kubelet's job). "
            "`capstan agent` and `capstan up` run it with the [node flags](#node-flags) instead.",
            g + ".",
            own(["kubelet"]),
        ),
        (
            "Node flags",
            "The node's kubelet and container runtime, as `capstan up` and `capstan agent` run "
            "them.",
            None,
            node,
        ),
        (
            "capstan agent",
            "Joins this machine to a cluster as a node: kubelet, managed containerd, service proxy "
            "and pod network routes, after a TLS bootstrap with a bootstrap token.",
            f"{g}, [node flags](#node-flags).",
            agent,
        ),
        (
            "capstan up",
            "A whole single-node cluster in one process; its add-ons (service proxy, cluster DNS, "
            "dashboard) are set here.",
            f"{g}, [capstan server](#capstan-server)'s flags (and through them the controller "
            "manager's), [node flags](#node-flags).",
            up,
        ),
        (
            "capstan proxy",
            "Services to their endpoints on this node (kube-proxy's job).",
            g + ".",
            own(["proxy"]),
        ),
        (
            "capstan dns",
            "Cluster DNS (CoreDNS's job).",
            g + ".",
            own(["dns"]),
        ),
        (
            "capstan ingress",
            "An ingress controller (ingress-nginx's job).",
            g + ".",
            own(["ingress"]),
        ),
        (
            "capstan dashboard",
            "The web dashboard.",
            g + ".",
            own(["dashboard"]),
        ),
        (
            "capstan token create",
            "A bootstrap token for `capstan agent` (kubeadm token create).",
            g + ".",
            own(["token", "create"]),
        ),
        (
            "capstan kubectl",
            "The installed kubectl against this machine's cluster: `capstan kubectl [--data-dir "
            "DIR] KUBECTL_ARGS...`; every argument after `--data-dir` is kubectl's.",
            g + ".",
            own(["kubectl"]),
        ),
        (
            "capstan store",
            "The embedded store, read and written directly (like etcdctl): `capstan store "
            "--store-dir DIR COMMAND`.",
            g + ".",
            own(["store"]),
        ),
    ]
    # The store's commands that have flags of their own.
    store_names = {f[0] for f in own(["store"])}
    for sub in commands(help_text(binary, ["store"])):
        flags = [f for f in own(["store", sub]) if f[0] not in store_names]
        if flags:
            sections.append(
                (
                    f"capstan store {sub}",
                    f"`capstan store --store-dir DIR {sub}`.",
                    "[global flags](#global-flags), [capstan store](#capstan-store).",
                    flags,
                )
            )

    out = [
        "# capstan's flags",
        "",
        f"Generated from `capstan help <command>` of {version} by "
        "`python3 packaging/flags-doc.py target/debug/capstan > docs/flags.md`; "
        "`crates/capstan/tests/operate.rs` fails when a flag the help lists is missing here. "
        "Flags shared by several commands are listed once, in the section a command's "
        '"Also takes" names. `capstan bench` has its own help (`capstan help bench '
        "<benchmark>`).",
        "",
        "Log levels per component: `--log-level` (or `CAPSTAN_LOG`) takes RUST_LOG filters, "
        "e.g. `info,capstan_kubelet=debug`; see [install.md](install.md#logs).",
    ]
    for title, intro, also, flags in sections:
        out += ["", f"## {title}", "", intro]
        if also:
            out += ["", f"Also takes: {also}"]
        out += ["", table(flags) if flags else "No flags of its own."]
    print("\n".join(out))


if __name__ == "__main__":
    main()
