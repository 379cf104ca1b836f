#!/usr/bin/env python3
"""End-to-end tests of tandem_client against a real tandem cluster.

    python test_client.py --tandem-bin build/bin/tandem --model models/model.gguf

Starts ``tandem serve`` (one prefill worker, one decode worker) on a free gRPC port,
waits for it (its "ready" line, then the gRPC health service), runs the tests with
plain ``unittest``, and stops the cluster with SIGTERM (SIGKILL to its process group
after 30 s). Run it with the interpreter of the venv that generate_stubs.sh made.
Extra arguments go to unittest (e.g. ``-v``, or a test name). Exits non-zero when a
test fails or the cluster does not come up.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402

from tandem_client import Chunk, Completion, TandemClient, TandemError  # noqa: E402

PROMPT = "The capital of France is"
CALL_TIMEOUT = 120.0  # seconds; the deadline of every call in these tests
STOP_GRACE = 30.0  # seconds between SIGTERM and SIGKILL


class Cluster:
    """A ``tandem serve`` subprocess with its output kept for diagnostics."""

    def __init__(self, tandem_bin: str, model: str, startup_timeout: float) -> None:
        self.port = _free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.startup_timeout = startup_timeout
        self.command = [
            tandem_bin, "serve",
            "--model", model,
            "--prefill-workers", "1",
            "--decode-workers", "1",
            "--grpc-port", str(self.port),
            "--threads-per-worker", "1",
        ]
        self.output: collections.deque[str] = collections.deque(maxlen=400)
        self.ready_line = threading.Event()
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        """Starts the cluster and returns once it serves, or raises RuntimeError."""
        print(f"starting: {' '.join(self.command)}", file=sys.stderr, flush=True)
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,  # its own process group, so SIGKILL reaches workers
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

        deadline = time.monotonic() + self.startup_timeout
        with TandemClient(self.endpoint, timeout=5.0) as client:
            # Its "ready" line, or (should the line differ) a SERVING health check.
            next_probe = time.monotonic() + 1.0
            while not self.ready_line.is_set():
                if self.proc.poll() is not None:
                    raise RuntimeError(f"tandem exited with {self.proc.returncode} while starting")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tandem did not get ready in {self.startup_timeout:g} s")
                if time.monotonic() >= next_probe:
                    next_probe = time.monotonic() + 1.0
                    try:
                        if client.health(timeout=1.0) == "SERVING":
                            break
                    except TandemError:
                        pass  # not listening yet
                time.sleep(0.2)
            remaining = max(deadline - time.monotonic(), 10.0)
            client.wait_ready(timeout=remaining)
        print(f"cluster ready on {self.endpoint}", file=sys.stderr, flush=True)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL to the process group after STOP_GRACE; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                print(f"tandem still running {STOP_GRACE:g} s after SIGTERM; killing",
                      file=sys.stderr)
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=STOP_GRACE)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return self.proc.returncode

    def dump_output(self) -> None:
        print("---- last lines of tandem's output ----", file=sys.stderr)
        for line in list(self.output):
            print(line, file=sys.stderr)
        print("---- end ----", file=sys.stderr, flush=True)

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.output.append(line)
            if re.search(r"\bready\b", line, re.IGNORECASE):
                self.ready_line.set()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CLUSTER: Cluster | None = None


class TandemClientTest(unittest.TestCase):
    """The tests run in name order against the one cluster that main() started."""

    client: TandemClient

    @classmethod
    def setUpClass(cls) -> None:
        assert CLUSTER is not None, "run this file as a script"
        cls.client = TandemClient(CLUSTER.endpoint, timeout=CALL_TIMEOUT)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()

    def test_1_stream_matches_complete(self) -> None:
        """(a) Greedy streaming gives several chunks and the same output as complete()."""
        items = list(self.client.generate(PROMPT, max_tokens=12, temperature=0,
                                          timeout=CALL_TIMEOUT))
        self.assertGreaterEqual(len(items), 1)
        *chunks, completion = items
        self.assertIsInstance(completion, Completion)
        self.assertTrue(all(isinstance(c, Chunk) for c in chunks), items)
        self.assertGreaterEqual(len(chunks), 2, items)
        self.assertTrue(completion.completion_tokens == 12 or completion.finish_reason == "stop",
                        completion)
        self.assertIn(completion.finish_reason, ("stop", "length"))
        streamed_ids = [t for c in chunks for t in c.token_ids]
        streamed_text = "".join(c.text for c in chunks)
        self.assertEqual(len(streamed_ids), completion.completion_tokens)
        self.assertGreater(completion.prompt_tokens, 0)
        self.assertTrue(completion.request_id)

        result = self.client.complete(PROMPT, max_tokens=12, temperature=0, timeout=CALL_TIMEOUT)
        self.assertEqual(result.text, streamed_text)
        self.assertEqual(result.token_ids, streamed_ids)
        self.assertEqual(result.finish_reason, completion.finish_reason)
        self.assertEqual(result.usage["completion_tokens"], completion.completion_tokens)

    def test_2_invalid_arguments(self) -> None:
        """(b) Each bad input fails with INVALID_ARGUMENT naming the field."""
        cases: list[tuple[dict, tuple[str, ...]]] = [
            (dict(temperature=-1), ("temperature",)),
            (dict(top_p=0), ("top_p",)),
            (dict(top_p=1.5), ("top_p",)),
            (dict(max_tokens=0), ("max_tokens",)),
            (dict(min_p=2), ("min_p",)),
            (dict(presence_penalty=3), ("presence_penalty",)),
            (dict(stop=[""]), ("stop",)),
            (dict(stop=["x"] * 17), ("stop",)),
            (dict(prompt=None, token_ids=[10**9]), ("token_ids",)),
            (dict(prompt=""), ("text",)),
            (dict(prompt=b"caf\xc3"), ("text",)),
            (dict(prompt=None, messages=[{"role": "wizard", "content": "hi"}]),
             ("chat.messages[0].role",)),
            (dict(top_k=-2), ("top_k",)),
            (dict(frequency_penalty=-3), ("frequency_penalty",)),
            (dict(repetition_penalty=0), ("repetition_penalty",)),
            (dict(logprobs=21), ("logprobs",)),
            (dict(stop_token_ids=[49152]), ("stop_token_ids",)),
            (dict(max_tokens=10**7), ("max_tokens",)),
        ]
        for overrides, fields in cases:
            kwargs = {"prompt": "Hello", "max_tokens": 4, "timeout": CALL_TIMEOUT} | overrides
            with self.subTest(**{k: _short(v) for k, v in overrides.items()}):
                with self.assertRaises(TandemError) as ctx:
                    # Through the streaming iterator: the error is raised from it.
                    for _ in self.client.generate(**kwargs):
                        pass
                err = ctx.exception
                self.assertEqual(err.code, grpc.StatusCode.INVALID_ARGUMENT, err.details)
                self.assertTrue(any(f in err.details for f in fields),
                                f"{err.details!r} names none of {fields}")

    def test_3_serves_after_invalid_arguments(self) -> None:
        """(c) The cluster still serves after rejecting bad requests."""
        result = self.client.complete("Hello", max_tokens=4, temperature=0, timeout=CALL_TIMEOUT)
        self.assertIn(result.finish_reason, ("stop", "length"))
        self.assertGreaterEqual(len(result.token_ids), 1)
        self.assertEqual(len(result.token_ids), result.usage["completion_tokens"])

    def test_4_tokenize_and_model_info(self) -> None:
        """(d) Tokenize and GetModelInfo answer."""
        ids = self.client.tokenize("Hello", timeout=CALL_TIMEOUT)
        self.assertIsInstance(ids, list)
        self.assertGreater(len(ids), 0)
        info = self.client.model_info(timeout=CALL_TIMEOUT)
        self.assertEqual(info["vocab_size"], 49152, info)
        self.assertTrue(all(0 <= t < info["vocab_size"] for t in ids), ids)

    def test_5_server_info_and_abort(self) -> None:
        """GetServerInfo lists the workers; Abort of an unknown id finds nothing."""
        info = self.client.server_info(timeout=CALL_TIMEOUT)
        self.assertEqual(len(info["prefill_workers"]), 1, info)
        self.assertEqual(len(info["decode_workers"]), 1, info)
        self.assertFalse(self.client.abort("no-such-request", timeout=CALL_TIMEOUT))


def _short(value: object) -> object:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tandem-bin", required=True, help="path to the tandem binary")
    parser.add_argument("--model", required=True, help="path to a GGUF model")
    parser.add_argument("--startup-timeout", type=float, default=300.0,
                        help="seconds to wait for the cluster to serve (default: %(default)s)")
    args, unittest_args = parser.parse_known_args()

    # A SIGTERM to this script (a CI timeout, say) still stops the cluster.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    global CLUSTER
    CLUSTER = Cluster(args.tandem_bin, args.model, args.startup_timeout)
    try:
        CLUSTER.start()
    except (RuntimeError, TandemError) as err:
        print(f"test_client: cluster did not come up: {err}", file=sys.stderr)
        CLUSTER.stop()
        CLUSTER.dump_output()
        print("test_client: 0 passed, 1 failed")
        return 1
    except BaseException:
        CLUSTER.stop()
        raise

    ok = False
    try:
        program = unittest.main(argv=[sys.argv[0], *unittest_args], exit=False, verbosity=2)
        result = program.result
        ok = result.wasSuccessful() and result.testsRun > 0
        # Count tests, not subtests: a test with failing subtests fails once.
        failed_ids = {
            getattr(test, "test_case", test).id()
            for test, _ in result.failures + result.errors
        } | {test.id() for test in result.unexpectedSuccesses}
        failed = len(failed_ids)
        passed = max(result.testsRun - failed - len(result.skipped), 0)
        summary = f"test_client: {passed} passed, {failed} failed"
        if result.skipped:
            summary += f", {len(result.skipped)} skipped"
        print(summary, flush=True)
    finally:
        code = CLUSTER.stop()
        if code not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
            print(f"test_client: tandem exited with {code} after SIGTERM", file=sys.stderr)
            ok = False
        if not ok:
            CLUSTER.dump_output()
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
