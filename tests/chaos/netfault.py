#!/usr/bin/env python3
"""Faults between hosts: a router, two prefill and two decode workers, each in its own
network namespace with its own address on one bridge, and the links between them cut,
slowed and made lossy while requests run.

Needs root (network namespaces, veth, a bridge, tc) and the Release build (build/bin)
and the default model (scripts/fetch-model.sh). Only namespaces and addresses this
script made are touched (tnf-*, 10.213.7.0/24); they are removed at the end, also
after a failure.

Each fault runs against 8 concurrent requests of a ~300-token prompt (KV transfers of
about 14 MB each), from a client in the router's namespace with a 60 s deadline:

  cut-decode     a decode worker's link goes down 0.3 s into the batch, up 8 s later
  cut-prefill    a prefill worker's link likewise (its requests retry on the other)
  slow-links     every worker's link limited to 100 Mbit/s (tbf; netem delay where the
                 kernel has it)
  loss           5 % of a decode worker's packets dropped, both ways (tc netem, or an
                 nftables random-drop rule where the kernel lacks sch_netem; reported as
                 not run where it has neither)

Checked for each: every request reaches a terminal HTTP status before its deadline
(200, or 503 / 504 that a client retries; never a hang, never a 4xx or 500); after the
link is back, 8 new requests all succeed; and within 30 s every worker is back at its
baseline (no sequence running or waiting, no KV block held). Prints one line per fault
with the observed bounds (slowest terminal status, statuses seen, recovery time).

Exit status: 0 all passed, 1 a check failed, 77 the machine cannot run it (not root,
no network namespaces), with the reason.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from cluster import BIN, Process, at_rest, load_from_metrics, missing_binaries, wait_ready

NET = "10.213.7."
HOSTS = {"router": 1, "p1": 11, "p2": 12, "d1": 21, "d2": 22}
GRPC_PORT, HTTP_PORT = 50051, 8080
KEY = "netfault-internal-key"
DEADLINE_S = 60
PROMPT = " ".join(f"Item {i} of the list is the word number {i}." for i in range(30))


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def ns(role):
    return f"tnf-{role}"


def addr(role):
    return NET + str(HOSTS[role])


def cleanup():
    for role in list(HOSTS) + ["hub"]:
        pids = ip("netns", "pids", ns(role), check=False).stdout.split()
        for p in pids:
            try:
                os.kill(int(p), 9)
            except (ProcessLookupError, ValueError):
                pass
        ip("netns", "del", ns(role), check=False)


def setup_network():
    cleanup()
    ip("netns", "add", ns("hub"))
    ip("-n", ns("hub"), "link", "add", "br0", "type", "bridge")
    ip("-n", ns("hub"), "link", "set", "br0", "up")
    for role in HOSTS:
        ip("netns", "add", ns(role))
        ip("-n", ns("hub"), "link", "add", f"h-{role}", "type", "veth", "peer", "name", "eth0",
           "netns", ns(role))
        ip("-n", ns("hub"), "link", "set", f"h-{role}", "master", "br0", "up")
        ip("-n", ns(role), "link", "set", "lo", "up")
        ip("-n", ns(role), "addr", "add", addr(role) + "/24", "dev", "eth0")
        ip("-n", ns(role), "link", "set", "eth0", "up")


def link(role, up):
    ip("-n", ns(role), "link", "set", "eth0", "up" if up else "down")
    ip("-n", ns("hub"), "link", "set", f"h-{role}", "up" if up else "down")


def tc(role, *qdisc):
    """Shapes both directions of `role`'s link (its own egress and the hub's towards it)."""
    for where, dev in ((ns(role), "eth0"), (ns("hub"), f"h-{role}")):
        subprocess.run(["ip", "netns", "exec", where, "tc", "qdisc", "del", "dev", dev, "root"],
                       capture_output=True)
        if qdisc:
            subprocess.run(["ip", "netns", "exec", where, "tc", "qdisc", "add", "dev", dev,
                            "root", *qdisc], check=True, capture_output=True)


def have_netem():
    ip("link", "add", "tnf-probe", "type", "dummy", check=False)
    r = subprocess.run(["tc", "qdisc", "add", "dev", "tnf-probe", "root", "netem", "delay", "1ms"],
                       capture_output=True)
    ip("link", "del", "tnf-probe", check=False)
    return r.returncode == 0


class Cluster:
    def __init__(self, workdir):
        self.procs = []
        common = ["--port", str(GRPC_PORT), "--internal-key", KEY, "--http-port", str(HTTP_PORT)]
        workers = lambda ps: ",".join(f"{addr(p)}:{GRPC_PORT}" for p in ps)
        for role, binary, extra in (
                ("p1", "tandem-prefill-worker", ["--threads", "1"]),
                ("p2", "tandem-prefill-worker", ["--threads", "1"]),
                ("d1", "tandem-decode-worker", ["--threads", "1"]),
                ("d2", "tandem-decode-worker", ["--threads", "1"]),
                ("router", "tandem-router", ["--prefill", workers(("p1", "p2")),
                                             "--decode", workers(("d1", "d2")),
                                             "--health-poll-ms", "200"])):
            self.procs.append(Process(workdir, role, binary,
                                      ["--host", addr(role)] + common + extra,
                                      prefix=["ip", "netns", "exec", ns(role)]))

    def up(self):
        for p in self.procs:
            p.start()
        wait_ready(self.procs)

    def tail(self, role, n=20):
        return next(p for p in self.procs if p.name == role).tail(n)

    def alive(self):
        for p in self.procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} died ({p.proc.returncode}): " + p.tail())

    def down(self):
        for p in self.procs:
            p.stop(timeout=15)


CLIENT = r"""
import concurrent.futures, json, sys, time, urllib.error, urllib.request
url, n, deadline, prompt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def one(i):
    body = json.dumps({"prompt": prompt + f" Request {i}.", "max_tokens": 16,
                       "temperature": 0}).encode()
    t0 = time.time()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type":
                "application/json"}), timeout=deadline) as r:
            r.read()
            return r.status, time.time() - t0
    except urllib.error.HTTPError as e:
        return e.code, time.time() - t0
    except Exception as e:
        return "no answer: " + type(e).__name__, time.time() - t0
with concurrent.futures.ThreadPoolExecutor(n) as ex:
    print(json.dumps(list(ex.map(one, range(n)))))
"""


def batch_async(n=8):
    url = f"http://{addr('router')}:{HTTP_PORT}/v1/completions"
    return subprocess.Popen(["ip", "netns", "exec", ns("router"), sys.executable, "-c", CLIENT,
                             url, str(n), str(DEADLINE_S), PROMPT],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def batch_result(p):
    out, err = p.communicate(timeout=DEADLINE_S + 30)
    if p.returncode != 0:
        raise RuntimeError(err)
    return json.loads(out)


METRICS = r"""
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
"""


def worker_load(role):
    """Running, waiting and KV usage from a worker's /metrics, read inside the router's
    namespace (over the bridge, as the router sees it)."""
    text = subprocess.run(["ip", "netns", "exec", ns("router"), sys.executable, "-c", METRICS,
                           f"http://{addr(role)}:{HTTP_PORT}/metrics"],
                          capture_output=True, text=True, timeout=15).stdout
    return load_from_metrics(text, role)


def wait_baseline(timeout=30):
    t0 = time.time()
    while True:
        loads = {r: worker_load(r) for r in ("p1", "p2", "d1", "d2")}
        if all(at_rest(v) for v in loads.values()):
            return time.time() - t0
        if time.time() - t0 > timeout:
            raise RuntimeError(f"not back at baseline after {timeout} s: {loads}")
        time.sleep(0.5)


def check_terminal(name, results, allowed):
    slowest = max(t for _, t in results)
    statuses = {}
    for s, _ in results:
        statuses[str(s)] = statuses.get(str(s), 0) + 1
    bad = [s for s, _ in results if s not in allowed]
    if bad:
        raise RuntimeError(f"{name}: statuses {statuses}; {bad} not among {sorted(allowed)}")
    if slowest >= DEADLINE_S:
        raise RuntimeError(f"{name}: a request took {slowest:.1f} s, past its deadline")
    return slowest, statuses


def recovered(name):
    results = batch_result(batch_async())
    if any(s != 200 for s, _ in results):
        raise RuntimeError(f"{name}: after the fault {[s for s, _ in results]}, expected all 200")


def fault_cut(cluster, name, role, down_s=8):
    p = batch_async()
    time.sleep(0.3)
    link(role, False)
    time.sleep(down_s)
    link(role, True)
    slowest, statuses = check_terminal(name, batch_result(p), {200, 503, 504})
    cluster.alive()
    recovered(name)
    back = wait_baseline()
    return f"slowest terminal status {slowest:.1f} s, statuses {statuses}, baseline {back:.1f} s after"


def have_nft():
    ip("netns", "add", "tnf-probe", check=False)
    r = subprocess.run(["ip", "netns", "exec", "tnf-probe", "nft", "add", "table", "inet", "t"],
                       capture_output=True)
    ip("netns", "del", "tnf-probe", check=False)
    return r.returncode == 0


def nft_loss(role, percent):
    """Drops `percent` % of `role`'s packets, in and out (nftables numgen)."""
    rules = "table inet tnf {\n"
    for chain, hook in (("in", "input"), ("out", "output")):
        rules += (f"  chain {chain} {{\n    type filter hook {hook} priority 0;\n"
                  f"    numgen random mod 100 < {percent} drop\n  }}\n")
    rules += "}\n"
    subprocess.run(["ip", "netns", "exec", ns(role), "nft", "-f", "-"], input=rules, text=True,
                   check=True, capture_output=True)


def nft_clear(role):
    subprocess.run(["ip", "netns", "exec", ns(role), "nft", "delete", "table", "inet", "tnf"],
                   capture_output=True)


def fault_shape(cluster, name, roles, qdisc=None, loss_percent=0):
    for r in roles:
        if qdisc:
            tc(r, *qdisc)
        if loss_percent:
            nft_loss(r, loss_percent)
    try:
        t0 = time.time()
        slowest, statuses = check_terminal(name, batch_result(batch_async()), {200})
        took = time.time() - t0
    finally:
        for r in roles:
            tc(r)
            nft_clear(r)
    cluster.alive()
    back = wait_baseline()
    return f"batch {took:.1f} s (slowest {slowest:.1f} s), statuses {statuses}, baseline {back:.1f} s"


def main():
    if os.geteuid() != 0:
        print("netfault: not run: needs root (network namespaces)")
        return 77
    if ip("netns", "add", "tnf-probe", check=False).returncode != 0:
        print("netfault: not run: this machine cannot create network namespaces")
        return 77
    ip("netns", "del", "tnf-probe", check=False)
    if missing_binaries():
        print(f"netfault: {missing_binaries()} missing in {BIN} (scripts/build.sh)")
        return 1
    netem = have_netem()
    workdir = tempfile.mkdtemp(prefix="netfault-")
    cluster = Cluster(workdir)
    failed = False
    try:
        setup_network()
        cluster.up()
        recovered("warm-up")
        wait_baseline()
        faults = [
            ("cut-decode", lambda: fault_cut(cluster, "cut-decode", "d1")),
            ("cut-prefill", lambda: fault_cut(cluster, "cut-prefill", "p1")),
            ("slow-links", lambda: fault_shape(
                cluster, "slow-links", ("p1", "p2", "d1", "d2"),
                ("netem", "delay", "20ms", "rate", "100mbit") if netem else
                ("tbf", "rate", "100mbit", "burst", "256kb", "latency", "200ms"))),
        ]
        if netem:
            faults.append(("loss", lambda: fault_shape(cluster, "loss", ("d1",),
                                                       ("netem", "loss", "5%"))))
        elif have_nft():
            faults.append(("loss", lambda: fault_shape(cluster, "loss (nftables)", ("d1",),
                                                       loss_percent=5)))
        for name, run in faults:
            t0 = time.time()
            try:
                outcome = run()
                print(f"netfault: {name}: passed in {time.time() - t0:.0f} s: {outcome}", flush=True)
            except Exception as e:  # noqa: BLE001 - every fault is reported
                failed = True
                print(f"netfault: {name}: FAILED: {e}", flush=True)
                # Later faults start from a healed network.
                for r in HOSTS:
                    link(r, True)
                    tc(r)
                    nft_clear(r)
        if not netem and not have_nft():
            print("netfault: loss: not run: this kernel has neither sch_netem nor nftables")
    except Exception as e:  # noqa: BLE001
        failed = True
        print(f"netfault: FAILED: {e}")
    finally:
        cluster.down()
        cleanup()
        if failed:
            for role in HOSTS:
                print(f"--- {role} log (last lines) ---")
                try:
                    print(cluster.tail(role))
                except OSError:
                    pass
        if os.environ.get("NETFAULT_KEEP"):
            print(f"netfault: logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
