"""What the chaos tests share (netfault.py, soak.py): where the binaries and the model
are, a worker process started with a ready file and a log, and a worker's load read from
its /metrics. Python's standard library only."""
import os
import re
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"), "bin")
MODEL = os.environ.get("TANDEM_MODEL",
                       os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf"))
BINARIES = ("tandem-router", "tandem-prefill-worker", "tandem-decode-worker")
LOAD_METRICS = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")


def missing_binaries():
    return [b for b in BINARIES if not os.path.exists(os.path.join(BIN, b))]


class Process:
    """One tandem process: `prefix` (e.g. ["ip", "netns", "exec", ns]) + binary + args,
    its output in WORKDIR/<name>.log, ready once it creates WORKDIR/<name>.ready."""

    def __init__(self, workdir, name, binary, args, prefix=()):
        self.workdir, self.name, self.binary, self.args, self.prefix = (
            workdir, name, binary, list(args), list(prefix))
        self.proc = None

    @property
    def ready_file(self):
        return os.path.join(self.workdir, f"{self.name}.ready")

    @property
    def log_file(self):
        return os.path.join(self.workdir, f"{self.name}.log")

    def start(self):
        if os.path.exists(self.ready_file):
            os.remove(self.ready_file)
        log = open(self.log_file, "a")
        self.proc = subprocess.Popen(
            self.prefix + [os.path.join(BIN, self.binary), "--model", MODEL,
                           "--ready-file", self.ready_file] + self.args,
            stdout=log, stderr=subprocess.STDOUT)

    def ready(self):
        return os.path.exists(self.ready_file)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n=20):
        try:
            with open(self.log_file, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout=20):
        """SIGTERM, then SIGKILL after `timeout`; the exit status (None if killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def wait_ready(processes, timeout=300):
    deadline = time.time() + timeout
    while not all(p.ready() for p in processes):
        for p in processes:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited with {p.proc.returncode}: {p.tail()}")
        if time.time() > deadline:
            raise RuntimeError(f"not ready in {timeout} s: "
                               f"{[p.name for p in processes if not p.ready()]}")
        time.sleep(0.2)


def load_from_metrics(text, where, names=LOAD_METRICS):
    """{name: value} of `names` in a /metrics page; an absent one is an error."""
    values = {}
    for name in names:
        m = re.search(rf"^[\w:]*{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        if m is None:
            raise RuntimeError(f"{where}: /metrics has no {name}")
        values[name] = float(m.group(1))
    return values


def at_rest(load):
    return all(value == 0 for value in load.values())


SANITIZER_REPORT = re.compile(
    r"ERROR: (AddressSanitizer|LeakSanitizer|ThreadSanitizer)|runtime error:|WARNING: ThreadSanitizer")


def sanitizer_reports(processes):
    """Names of the processes whose logs hold a sanitizer report."""
    found = []
    for p in processes:
        try:
            with open(p.log_file, errors="replace") as f:
                if SANITIZER_REPORT.search(f.read()):
                    found.append(p.name)
        except OSError:
            pass
    return found
