#!/usr/bin/env python3
"""Write crates/capstan/link-order.fc: the functions a `capstan up` cluster runs while it
starts, runs a pod and then idles, for release builds to lay out together
(crates/capstan/build.rs). The functions a `capstan kubelet` of its own runs (registering,
running and removing pods, idling) come first, so that a node's kubelet maps a short stretch of
code; the rest of `capstan up`'s follow.

    sudo packaging/link-order.py target/release/capstan [--idle 60] [--out FILE] [-- UP ARGS]

Needs root (it reads /proc/PID/pagemap and the disk's read-ahead setting), containerd and
runc as `capstan up` does. It copies the binary, drops the copy from the page cache and sets
the disk's read-ahead to 0 for the run (restored after), so each page of code the process
touches is read, and mapped, alone; the pages present at the end name the functions. Page
granularity: a function that shares a page with one that ran is listed too.
"""
import argparse, os, shutil, signal, struct, subprocess, sys, tempfile, time


def device_read_ahead(path):
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    sysfs = os.path.realpath(f"/sys/dev/block/{major}:{minor}")
    # A partition's queue is its disk's.
    for d in (sysfs, os.path.dirname(sysfs)):
        f = os.path.join(d, "queue", "read_ahead_kb")
        if os.path.exists(f):
            return f
    sys.exit(f"no read_ahead_kb for the device of {path}")


def present_text_functions(pid, binary):
    maps = open(f"/proc/{pid}/maps").read().splitlines()
    text = [l for l in maps if " r-xp " in l and l.endswith(binary)]
    if not text:
        sys.exit(f"{binary} has no executable mapping in process {pid}")
    lo, hi = (int(x, 16) for x in text[0].split()[0].split("-"))
    off = int(text[0].split()[2], 16)
    seg = None
    for l in subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True,
                            check=True).stdout.splitlines():
        f = l.split()
        if f and f[0] == "LOAD" and "E" in f[6:8]:
            seg = (int(f[1], 16), int(f[2], 16))
    seg_off, seg_vaddr = seg
    map_vaddr = seg_vaddr - (seg_off - off)
    npages = (hi - lo) // 4096
    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        pm.seek((lo // 4096) * 8)
        data = pm.read(npages * 8)
    present = {map_vaddr // 4096 + i for i in range(npages)
               if struct.unpack_from("<Q", data, i * 8)[0] >> 63}
    names = []
    for l in subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True,
                            text=True, check=True).stdout.splitlines():
        f = l.split(" ", 3)
        if len(f) < 4 or f[2] not in "tT":
            continue
        a, s = int(f[0], 16), int(f[1], 16)
        if any(p in present for p in range(a // 4096, (a + max(s, 1) - 1) // 4096 + 1)):
            names.append((a, f[3]))
    names.sort()
    return len(present), [n for _, n in names]


def wait_for(what, check, timeout=120):
    deadline = time.time() + timeout
    while not check():
        if time.time() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.5)


def ready_node(kubeconfig):
    out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "nodes", "--no-headers"],
                         capture_output=True, text=True).stdout
    names = [l.split()[0] for l in out.splitlines() if len(l.split()) > 1 and l.split()[1] == "Ready"]
    return names[0] if names else None


def run_pods(original, kubeconfig, node, pods, work):
    """Pods created, run and removed through the cluster (`capstan bench podstartup`)."""
    subprocess.run([original, "bench", "podstartup", "--kubeconfig", kubeconfig, "--node", node,
                    "--pods", str(pods)], check=True, stdout=subprocess.DEVNULL,
                   stderr=open(os.path.join(work, "bench.log"), "a"))


def kubelet_functions(original, binary, work, data, idle):
    """The functions a `capstan kubelet` process (run from `binary`, whose pages nothing else
    maps) runs: against a `capstan server` of the original binary and the containerd that
    `capstan up` configured under `data`, it registers its node, runs and removes 20 pods and
    idles."""
    config = os.path.join(data, "containerd", "config.toml")
    text = open(config).read()
    grpc = text[text.index("[grpc]"):]
    sock = grpc.split('address = "', 1)[1].split('"', 1)[0]
    procs = []
    try:
        procs.append(subprocess.Popen(["containerd", "-c", config],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        srv = os.path.join(work, "srv")
        procs.append(subprocess.Popen([original, "server", "--data-dir", srv, "--secure-port",
                                       "6461"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, env={**os.environ, "HOME": work}))
        kubeconfig = os.path.join(srv, "admin.kubeconfig")
        wait_for("the server", lambda: os.path.exists(kubeconfig) and subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "get", "ns"],
            capture_output=True).returncode == 0)
        kubelet = subprocess.Popen(
            [binary, "kubelet", "--kubeconfig", kubeconfig, "--container-runtime-endpoint",
             "unix://" + sock, "--hostname-override", "link-order", "--root-dir",
             os.path.join(work, "kubelet"), "--pod-logs-dir", os.path.join(work, "logs"),
             "--port", "10261"], stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(work, "kubelet.log"), "w"))
        procs.append(kubelet)
        wait_for("the kubelet's Ready node", lambda: ready_node(kubeconfig))
        run_pods(original, kubeconfig, "link-order", 20, work)
        time.sleep(idle)
        return present_text_functions(kubelet.pid, binary)
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


def drop_from_page_cache(binary):
    os.sync()
    fd = os.open(binary, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--idle", type=int, default=60, help="seconds to idle after Ready")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "crates",
                                                  "capstan", "link-order.fc"))
    argv = sys.argv[1:]
    up_args = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    work = tempfile.mkdtemp(prefix="capstan-link-order-")
    binary = os.path.join(work, "capstan")
    shutil.copy(a.binary, binary)
    original = os.path.abspath(a.binary)
    drop_from_page_cache(binary)
    ra_file = device_read_ahead(binary)
    ra = open(ra_file).read().strip()
    open(ra_file, "w").write("0")
    try:
        data = os.path.join(work, "data")
        log = open(os.path.join(work, "up.log"), "w")
        p = subprocess.Popen([binary, "up", "--data-dir", data, *up_args],
                             stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, "HOME": work})
        deadline = time.time() + 120
        while "node Ready" not in open(os.path.join(work, "up.log")).read():
            if p.poll() is not None or time.time() > deadline:
                sys.exit("capstan up did not reach a Ready node:\n"
                         + open(os.path.join(work, "up.log")).read()[-3000:])
            time.sleep(0.5)
        node = ready_node(os.path.join(data, "admin.kubeconfig"))
        run_pods(original, os.path.join(data, "admin.kubeconfig"), node, 2, work)
        time.sleep(a.idle)
        pages, names = present_text_functions(p.pid, binary)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        drop_from_page_cache(binary)
        kubelet_pages, kubelet_names = kubelet_functions(original, binary, work, data,
                                                         min(a.idle, 30))
    finally:
        open(ra_file, "w").write(ra)
    # Front-coded (crates/capstan/build.rs decodes it): the bytes shared with the line
    # before, then the rest.
    first = set(kubelet_names)
    order = kubelet_names + [n for n in names if n not in first]
    with open(a.out, "w") as f:
        prev = ""
        for n in order:
            k = len(os.path.commonprefix([prev, n]))
            f.write(f"{k} {n[k:]}\n")
            prev = n
    print(f"capstan up: {pages} pages of code ran ({pages * 4} kB), {len(names)} functions; "
          f"capstan kubelet: {kubelet_pages} pages ({kubelet_pages * 4} kB), "
          f"{len(kubelet_names)} functions; {len(order)} -> {a.out}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
