#!/usr/bin/env python3
"""A bounded chaos soak: a router, two prefill and two decode workers on loopback under
mixed load while workers are killed and paused at random. Run by scripts/soak.sh (which
builds the ASan+UBSan binaries into build-san/ and sets BUILD_DIR); not part of CI.

Load (CLIENTS threads, each one request at a time, until the time is up): completions and
chat completions, streamed or not, prompts of 5 to ~600 tokens, max_tokens 4 to 64,
temperature 0 or 0.8 with a seed; one request in five is cancelled by its client (the
connection closed) at a random moment.

Chaos (one event every 10-25 s, a random worker each time): SIGKILL and a restart 2 s
later, or SIGSTOP for 2-6 s then SIGCONT.

Checked at the end: every request reached a terminal state before its 120 s deadline
(an HTTP status, a finished stream, or the client's own cancel — never a hang); the only
failure statuses are the retryable 503 / 504 (and 429 when the queue is full); after the
load stops, every worker is back at its baseline (nothing running or waiting, no KV block
held) and the router has nothing queued or running, within 60 s; and no process logged a
sanitizer report, including the leak check each runs as it exits on SIGTERM.

Prints the figures docs/reliability.md records: requests by outcome, latency p50/p99 of
the completed ones, the longest time to a terminal state, events injected, the time back
to baseline. Exit 0 when every check holds, 1 otherwise.

    python3 tests/chaos/soak.py [--seconds 600] [--clients 6] [--seed N] [--deadline 120]
                                [--max-words 450]
"""
import argparse
import http.client
import json
import random
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.request

from cluster import (BIN, LOAD_METRICS, Process, at_rest, load_from_metrics,
                     missing_binaries, sanitizer_reports, wait_ready)

DEADLINE_S = 120  # --deadline
MAX_WORDS = 450  # --max-words
WORDS = ("the model reads tokens and writes more of them while the cache keeps every key and "
         "value it has seen so that the next step costs one row").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, workdir):
        key = ["--internal-key", "soak-internal-key", "--host", "127.0.0.1"]
        self.ports = {}
        self.workers = []
        for name, binary in (("p1", "tandem-prefill-worker"), ("p2", "tandem-prefill-worker"),
                             ("d1", "tandem-decode-worker"), ("d2", "tandem-decode-worker")):
            grpc, http = free_port(), free_port()
            self.ports[name] = (grpc, http)
            self.workers.append(Process(workdir, name, binary, key + [
                "--port", str(grpc), "--http-port", str(http), "--threads", "1"]))
        addrs = lambda names: ",".join(f"127.0.0.1:{self.ports[n][0]}" for n in names)
        self.http_port = free_port()
        self.router = Process(workdir, "router", "tandem-router", key + [
            "--port", str(free_port()), "--http-port", str(self.http_port),
            "--prefill", addrs(("p1", "p2")), "--decode", addrs(("d1", "d2")),
            "--health-poll-ms", "250"])

    def all(self):
        return self.workers + [self.router]

    def up(self):
        for p in self.all():
            p.start()
        wait_ready(self.all(), timeout=600)

    def metrics(self, port, where, names=LOAD_METRICS):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            return load_from_metrics(r.read().decode(), where, names)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.outcomes = {}
        self.latencies = []
        self.longest = 0.0
        self.problems = []

    def record(self, outcome, seconds, ok_latency=False):
        with self.lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            self.longest = max(self.longest, seconds)
            if ok_latency:
                self.latencies.append(seconds)
            if seconds >= DEADLINE_S:
                self.problems.append(f"a request took {seconds:.0f} s ({outcome})")


def one_request(port, rng, stats):
    chat = rng.random() < 0.4
    stream = rng.random() < 0.5
    sizes = [n for n in (4, 30, 120, 450) if n <= MAX_WORDS]
    text = " ".join(rng.choice(WORDS) for _ in range(rng.choice(sizes)))
    body = {"max_tokens": rng.randint(4, 64), "stream": stream,
            "temperature": rng.choice((0, 0.8)), "seed": rng.randrange(1 << 31)}
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = text
        path = "/v1/completions"
    cancel_after = rng.uniform(0.05, 3.0) if rng.random() < 0.2 else None
    t0 = time.time()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        if cancel_after is not None:
            conn.sock.settimeout(cancel_after)
        resp = conn.getresponse()
        status = resp.status
        while True:
            chunk = resp.read(4096)  # a streamed answer to its end, or the whole body
            if not chunk:
                break
            if cancel_after is not None and time.time() - t0 >= cancel_after:
                raise socket.timeout()
        took = time.time() - t0
        if status == 200:
            stats.record("200", took, ok_latency=True)
        elif status in (429, 503, 504):
            stats.record(str(status), took)
        else:
            stats.record(str(status), took)
            with stats.lock:
                stats.problems.append(f"HTTP {status} for {path}")
    except socket.timeout:
        took = time.time() - t0
        if cancel_after is not None and took < cancel_after + 5:
            stats.record("cancelled by client", took)
        else:
            stats.record("no answer", took)
            with stats.lock:
                stats.problems.append(f"no answer after {took:.0f} s")
    except (ConnectionError, http.client.HTTPException) as e:
        stats.record(f"connection error {type(e).__name__}", time.time() - t0)
        with stats.lock:
            stats.problems.append(f"the router dropped a connection: {e!r}")
    finally:
        conn.close()


def chaos(cluster, rng, stop, events):
    while not stop.wait(rng.uniform(10, 25)):
        w = rng.choice(cluster.workers)
        if not w.alive():
            continue
        if rng.random() < 0.5:
            w.proc.send_signal(signal.SIGKILL)
            w.proc.wait()
            events.append(f"kill {w.name}")
            time.sleep(2)
            w.start()
        else:
            pause = rng.uniform(2, 6)
            w.proc.send_signal(signal.SIGSTOP)
            time.sleep(pause)
            w.proc.send_signal(signal.SIGCONT)
            events.append(f"stop {w.name} {pause:.1f}s")


def main():
    global DEADLINE_S, MAX_WORDS
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--deadline", type=int, default=DEADLINE_S,
                    help="seconds a request may take before it counts as a hang")
    ap.add_argument("--max-words", type=int, default=MAX_WORDS, help="longest prompt (words)")
    args = ap.parse_args()
    DEADLINE_S, MAX_WORDS = args.deadline, args.max_words
    if missing_binaries():
        print(f"soak: {missing_binaries()} missing in {BIN}")
        return 1
    print(f"soak: {args.seconds} s, {args.clients} clients, seed {args.seed}, binaries {BIN}")
    workdir = tempfile.mkdtemp(prefix="soak-")
    cluster = Cluster(workdir)
    stats, events, problems = Stats(), [], []
    try:
        cluster.up()
        stop = threading.Event()
        end = time.time() + args.seconds

        def client(i):
            rng = random.Random(args.seed * 100 + i)
            while time.time() < end:
                one_request(cluster.http_port, rng, stats)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        chaos_thread = threading.Thread(target=chaos,
                                        args=(cluster, random.Random(args.seed), stop, events))
        for t in threads + [chaos_thread]:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        chaos_thread.join()
        # Every worker up again (a kill's restart may be under way), then at rest.
        for w in cluster.workers:
            if not w.alive():
                w.start()
        wait_ready(cluster.workers, timeout=300)
        t0 = time.time()
        while True:
            loads = {w.name: cluster.metrics(cluster.ports[w.name][1], w.name)
                     for w in cluster.workers}
            loads["router"] = cluster.metrics(cluster.http_port, "router", LOAD_METRICS[:2])
            if all(at_rest(v) for v in loads.values()):
                back = time.time() - t0
                break
            if time.time() - t0 > 60:
                problems.append(f"not at baseline 60 s after the load: {loads}")
                back = None
                break
            time.sleep(0.5)
    except Exception as e:  # noqa: BLE001
        problems.append(f"soak: {e}")
        back = None
    finally:
        codes = {p.name: p.stop(timeout=30) for p in cluster.all()}
    problems += stats.problems
    reports = sanitizer_reports(cluster.all())
    if reports:
        problems.append(f"sanitizer reports in {reports} (logs in {workdir})")
    for name, code in codes.items():
        if code not in (0, None):
            problems.append(f"{name} exited {code} on SIGTERM")
    lat = sorted(stats.latencies)
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")
    total = sum(stats.outcomes.values())
    print(f"soak: {total} requests: {json.dumps(stats.outcomes, sort_keys=True)}")
    print(f"soak: completed latency p50 {pct(0.5):.2f} s, p99 {pct(0.99):.2f} s; longest to a "
          f"terminal state {stats.longest:.1f} s")
    print(f"soak: {len(events)} chaos events: {', '.join(events)}")
    print(f"soak: back at baseline {back:.1f} s after the load" if back is not None else
          "soak: NOT back at baseline")
    for p in problems[:20]:
        print(f"soak: PROBLEM: {p}")
    print(f"soak: logs in {workdir}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
