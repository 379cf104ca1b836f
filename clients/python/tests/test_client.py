#!/usr/bin/env python3
"""End-to-end tests of the installed tandem_client against a real tandem cluster.

    python test_client.py --tandem-bin build/bin/tandem --model models/model.gguf

Starts ``tandem serve`` (one prefill worker, one decode worker) on a free gRPC port,
waits for it (its "ready" line, then the gRPC health service), runs the tests with
plain ``unittest``, and stops the cluster with SIGTERM (SIGKILL to its process group
after 30 s). When ``tandem serve --help`` offers ``--api-key``, the cluster is started
with a random key and the tests authenticate with it (and check that a call without
it is refused). When the ``tandem-router`` beside ``tandem`` serves TLS (``--tls-cert``,
``--tls-key``, ``--tls-client-ca``, ``--api-key``) and ``openssl`` is there, one test
puts a second router with mutual TLS and an API key in front of the same workers
and talks to it through the client's TLS options.

It imports ``tandem_client`` as installed (``pip install ./clients/python``; this is
what ctest's python_client_test does, through run_tests.sh); ``--require-installed``
fails when the import resolves to the source tree instead. From a checkout, run
``generate_stubs.sh`` and put ``clients/python`` on ``PYTHONPATH``. Extra arguments go
to unittest (e.g. ``-v``, or a test name). Prints ``test_client: N passed, N failed``
and exits non-zero when a test fails or the cluster does not come up.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
from pathlib import Path
from typing import Any

import grpc
from _certs import HAVE_OPENSSL, make_certificates  # beside this file

import tandem_client
from tandem_client import (
    Chunk,
    Completion,
    GenerationStream,
    ModelInfo,
    ServerInfo,
    TandemClient,
    TandemError,
    Usage,
)

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "Name three colors."}]
CALL_TIMEOUT = 120.0  # seconds; the deadline of every call in these tests
STOP_GRACE = 30.0  # seconds between SIGTERM and SIGKILL
SOURCE_PACKAGE = Path(__file__).resolve().parents[1] / "tandem_client"


class Cluster:
    """A ``tandem serve`` subprocess with its output kept for diagnostics."""

    def __init__(self, tandem_bin: str, model: str, startup_timeout: float) -> None:
        self.port = _free_port()
        # A key when this tandem can check one (--api-key); None otherwise.
        self.api_key: str | None = (
            f"test-{secrets.token_hex(8)}" if _serve_has_flag(tandem_bin, "--api-key") else None
        )
        self.endpoint = f"127.0.0.1:{self.port}"
        self.tandem_bin = tandem_bin
        self.model = model
        self.startup_timeout = startup_timeout
        self.command = [
            tandem_bin, "serve",
            "--model", model,
            "--prefill-workers", "1",
            "--decode-workers", "1",
            "--grpc-port", str(self.port),
            "--http-port", "0",  # other tests may run beside this one: no fixed port
            "--threads-per-worker", "1",
        ]
        if self.api_key is not None:
            self.command += ["--api-key", self.api_key]
        # The key the cluster's processes require of each other (`tandem serve` makes a
        # random one when none is set): known here, so a second router can join them.
        self.internal_key = f"internal-{secrets.token_hex(16)}"
        self.env = {**os.environ, "TANDEM_INTERNAL_KEY": self.internal_key}
        self.output: collections.deque[str] = collections.deque(maxlen=400)
        self.ready_line = threading.Event()
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        """Starts the cluster and returns once it serves, or raises RuntimeError."""
        shown = [("<key>" if a == self.api_key else a) for a in self.command]
        print(f"starting: {' '.join(shown)}", file=sys.stderr, flush=True)
        self.proc = subprocess.Popen(
            self.command,
            env=self.env,
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
        with TandemClient(self.endpoint, api_key=self.api_key, timeout=5.0) as client:
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


def _serve_has_flag(tandem_bin: str, flag: str) -> bool:
    """Whether ``tandem serve --help`` lists ``flag``."""
    return _has_flag([tandem_bin, "serve"], flag)


def _has_flag(command: list[str], flag: str) -> bool:
    """Whether ``<command> --help`` lists ``flag``."""
    try:
        out = subprocess.run([*command, "--help"], capture_output=True, text=True,
                             errors="replace", timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return re.search(rf"(^|\s){re.escape(flag)}(?![\w-])", out.stdout + out.stderr) is not None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CLUSTER: Cluster | None = None


class TandemClientTest(unittest.TestCase):
    """The tests run in name order against the one cluster that main() started."""

    client: TandemClient

    @classmethod
    def setUpClass(cls) -> None:
        assert CLUSTER is not None, "run this file as a script"
        cls.client = TandemClient(CLUSTER.endpoint, api_key=CLUSTER.api_key, timeout=CALL_TIMEOUT)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()

    def check_completion(self, completion: Completion, chunks: list[Chunk]) -> None:
        """A completion agrees with the chunks it was streamed as."""
        self.assertIsInstance(completion, Completion)
        self.assertIn(completion.finish_reason, ("stop", "length"))
        self.assertIsInstance(completion.usage, Usage)
        self.assertGreater(completion.usage.prompt_tokens, 0)
        self.assertEqual(completion.token_ids, [t for c in chunks for t in c.token_ids])
        self.assertEqual(completion.text, "".join(c.text for c in chunks))
        self.assertEqual(len(completion.token_ids), completion.usage.completion_tokens)
        self.assertGreaterEqual(completion.usage.cached_tokens, 0)
        self.assertLessEqual(completion.usage.cached_tokens, completion.usage.prompt_tokens)
        self.assertTrue(completion.request_id)
        self.assertGreater(completion.timings.e2e_ms, 0.0)
        self.assertGreaterEqual(completion.timings.e2e_ms, completion.timings.decode_ms)

    def test_01_stream_plain_completion(self) -> None:
        """Streaming a plain prompt: several chunks, then the completion (length)."""
        stream = self.client.generate_stream(PROMPT, max_tokens=12, temperature=0,
                                             ignore_eos=True)
        self.assertIsInstance(stream, GenerationStream)
        chunks = []
        for chunk in stream:
            self.assertIsInstance(chunk, Chunk)
            chunks.append(chunk)
        self.assertGreaterEqual(len(chunks), 2, chunks)
        completion = stream.completion
        self.check_completion(completion, chunks)
        self.assertEqual(completion.finish_reason, "length")
        self.assertEqual(completion.stop_reason, "")
        self.assertEqual(completion.usage.completion_tokens, 12)
        self.assertEqual(completion.usage.total_tokens, completion.usage.prompt_tokens + 12)
        self.assertEqual(completion.usage.prompt_tokens,
                         len(self.client.tokenize(PROMPT)))
        self.assertTrue(stream.done)

    def test_02_stream_chat(self) -> None:
        """Streaming a chat: the chat template's tokens are the prompt."""
        with self.client.generate_stream(messages=CHAT, max_tokens=24, temperature=0) as stream:
            chunks = list(stream)
        completion = stream.completion
        self.check_completion(completion, chunks)
        self.assertTrue(completion.finish_reason == "stop"
                        or completion.usage.completion_tokens == 24, completion)
        self.assertEqual(completion.usage.prompt_tokens,
                         len(self.client.tokenize(messages=CHAT)))
        self.assertTrue(completion.text.strip(), completion)

    def test_03_generate_matches_stream(self) -> None:
        """Non-streaming generate() gives the greedy stream's output token for token."""
        stream = self.client.generate_stream(PROMPT, max_tokens=12, temperature=0)
        chunks = list(stream)
        streamed = stream.completion
        result = self.client.generate(PROMPT, max_tokens=12, temperature=0)
        self.assertIsInstance(result, Completion)
        self.assertEqual(result.token_ids, streamed.token_ids)
        self.assertEqual(result.text, streamed.text)
        self.assertEqual(result.text, "".join(c.text for c in chunks))
        self.assertEqual(result.finish_reason, streamed.finish_reason)
        self.assertEqual(result.usage.completion_tokens, streamed.usage.completion_tokens)
        self.assertEqual(result.usage.prompt_tokens, streamed.usage.prompt_tokens)
        # The same chat, whole.
        chat = self.client.generate(messages=CHAT, max_tokens=24, temperature=0)
        self.assertEqual(len(chat.token_ids), chat.usage.completion_tokens)

    def test_04_stop_string(self) -> None:
        """A stop string ends the output before it: finish_reason stop, stop_reason set."""
        full = self.client.generate(PROMPT, max_tokens=24, temperature=0, ignore_eos=True).text
        words = [w for w in re.findall(r"[A-Za-z]{3,}", full) if full.index(w) > 0]
        if not words:
            self.skipTest(f"no word to stop on in {full!r}")
        stop = words[0]
        result = self.client.generate(PROMPT, max_tokens=24, temperature=0, ignore_eos=True,
                                      stop=[stop, "\x00never"])
        self.assertEqual(result.finish_reason, "stop", result)
        self.assertEqual(result.stop_reason, stop)
        self.assertEqual(result.text, full[: full.index(stop)])

    def test_05_logprobs(self) -> None:
        """logprobs=2: one entry per token, greedy picks the most likely."""
        result = self.client.generate(PROMPT, max_tokens=4, temperature=0, logprobs=2)
        self.assertEqual(len(result.logprobs), len(result.token_ids))
        for token, lp in zip(result.token_ids, result.logprobs):
            self.assertEqual(lp.token_id, token)
            self.assertEqual(len(lp.top_logprobs), 2, lp)
            self.assertEqual(lp.top_logprobs[0].token_id, token, lp)
            self.assertGreaterEqual(lp.top_logprobs[0].logprob, lp.top_logprobs[1].logprob)
            self.assertLessEqual(lp.logprob, 0.0)

    def test_06_invalid_arguments(self) -> None:
        """Each bad input fails with INVALID_ARGUMENT naming the field."""
        cases: list[tuple[dict[str, Any], tuple[str, ...]]] = [
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
            kwargs: dict[str, Any] = {"prompt": "Hello", "max_tokens": 4} | overrides
            with self.subTest(**{k: _short(v) for k, v in overrides.items()}):
                # Through the stream's iteration: the error is raised from it ...
                with self.assertRaises(TandemError) as ctx:
                    for _ in self.client.generate_stream(**kwargs):
                        pass
                err = ctx.exception
                self.assertEqual(err.code, grpc.StatusCode.INVALID_ARGUMENT, err.message)
                self.assertEqual(err.code_name, "INVALID_ARGUMENT")
                self.assertTrue(any(f in err.message for f in fields),
                                f"{err.message!r} names none of {fields}")
        # ... and from generate(), and from stream.completion.
        with self.assertRaises(TandemError) as ctx:
            self.client.generate("Hello", temperature=-1)
        self.assertEqual(ctx.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn("temperature", str(ctx.exception))
        stream = self.client.generate_stream("Hello", top_p=0)
        with self.assertRaises(TandemError) as ctx:
            stream.completion  # noqa: B018
        self.assertEqual(ctx.exception.code_name, "INVALID_ARGUMENT")

    def test_07_serves_after_invalid_arguments(self) -> None:
        """The cluster still serves after rejecting bad requests."""
        result = self.client.generate("Hello", max_tokens=4, temperature=0)
        self.assertIn(result.finish_reason, ("stop", "length"))
        self.assertGreaterEqual(len(result.token_ids), 1)
        self.assertEqual(len(result.token_ids), result.usage.completion_tokens)

    def test_08_tokenize_and_model_info(self) -> None:
        """Tokenize (text and chat) and GetModelInfo answer, typed."""
        ids = self.client.tokenize("Hello")
        self.assertIsInstance(ids, list)
        self.assertGreater(len(ids), 0)
        chat_ids = self.client.tokenize(messages=CHAT)
        self.assertGreater(len(chat_ids), len(self.client.tokenize(CHAT[0]["content"])) - 1)
        info = self.client.model_info()
        self.assertIsInstance(info, ModelInfo)
        self.assertEqual(info.vocab_size, 49152, info)
        self.assertGreater(info.max_context_length, 0)
        self.assertGreater(info.num_layers, 0)
        self.assertTrue(info.architecture)
        self.assertTrue(all(0 <= t < info.vocab_size for t in ids + chat_ids), ids)
        with self.assertRaises(ValueError):
            self.client.tokenize()

    def test_09_server_info_and_abort_unknown(self) -> None:
        """GetServerInfo lists the workers; Abort of an unknown id finds nothing."""
        info = self.client.server_info()
        self.assertIsInstance(info, ServerInfo)
        self.assertTrue(info.version)
        self.assertEqual(len(info.prefill_workers), 1, info)
        self.assertEqual(len(info.decode_workers), 1, info)
        self.assertTrue(all(w.healthy for w in info.prefill_workers + info.decode_workers), info)
        self.assertFalse(self.client.abort("no-such-request"))

    def test_10_abort_from_another_thread(self) -> None:
        """A long request aborted by id from another thread ends CANCELLED, early."""
        request_id = f"abort-{uuid.uuid4().hex}"
        budget = self.client.model_info().max_context_length - 64
        max_tokens = max(16, min(1024, budget))
        first_chunk = threading.Event()
        found: list[bool] = []

        def aborter() -> None:
            if first_chunk.wait(CALL_TIMEOUT):
                found.append(self.client.abort(request_id))

        thread = threading.Thread(target=aborter, daemon=True)
        thread.start()
        received = 0
        stream = self.client.generate_stream(PROMPT, max_tokens=max_tokens, ignore_eos=True,
                                             temperature=0, request_id=request_id)
        self.assertEqual(stream.request_id, request_id)
        with self.assertRaises(TandemError) as ctx:
            for chunk in stream:
                received += len(chunk.token_ids)
                first_chunk.set()
        first_chunk.set()
        thread.join(CALL_TIMEOUT)
        self.assertEqual(ctx.exception.code_name, "CANCELLED", ctx.exception)
        self.assertEqual(found, [True])
        self.assertLess(received, max_tokens)
        self.assertTrue(stream.done)
        self.assertFalse(self.client.abort(request_id))  # gone
        # The router forgets it, and the cluster serves on.
        deadline = time.monotonic() + 30
        while self.client.server_info().running_requests and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(self.client.server_info().running_requests, 0)
        self.assertGreaterEqual(len(self.client.generate("Hi", max_tokens=2).token_ids), 1)

    def test_11_api_key(self) -> None:
        """With --api-key: calls without the key (or with a wrong one) are refused."""
        assert CLUSTER is not None
        if CLUSTER.api_key is None:
            self.skipTest("this tandem serve has no --api-key")
        for key in (None, "wrong-key"):
            with self.subTest(key=key), TandemClient(CLUSTER.endpoint, api_key=key,
                                                     timeout=CALL_TIMEOUT) as client:
                with self.assertRaises(TandemError) as ctx:
                    client.model_info()
                self.assertEqual(ctx.exception.code_name, "UNAUTHENTICATED")
                with self.assertRaises(TandemError) as ctx:
                    client.generate("Hi", max_tokens=2)
                self.assertEqual(ctx.exception.code_name, "UNAUTHENTICATED")


    def test_12_tls_router_with_api_key(self) -> None:
        """Through a second tandem-router in front of the same workers, serving mutual
        TLS and requiring an API key: the client's TLS, mTLS and key paths end to end."""
        assert CLUSTER is not None
        router_bin = Path(CLUSTER.tandem_bin).with_name("tandem-router")
        flags = ("--tls-cert", "--tls-key", "--tls-client-ca", "--api-key")
        if not router_bin.is_file() or not all(_has_flag([str(router_bin)], f) for f in flags):
            self.skipTest(f"{router_bin} lacks one of {', '.join(flags)}")
        if not HAVE_OPENSSL:
            self.skipTest("needs the openssl command")
        info = self.client.server_info()
        key = CLUSTER.api_key or f"test-{secrets.token_hex(8)}"
        with tempfile.TemporaryDirectory() as tmp:
            make_certificates(tmp)
            cert = {name: Path(tmp, name) for name in
                    ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}
            port = _free_port()
            command = [
                str(router_bin), "--model", CLUSTER.model, "--port", str(port),
                "--prefill", ",".join(w.address for w in info.prefill_workers),
                "--decode", ",".join(w.address for w in info.decode_workers),
                "--tls-cert", str(cert["server.pem"]), "--tls-key", str(cert["server.key"]),
                "--tls-client-ca", str(cert["ca.pem"]), "--api-key", key,
            ]
            log = Path(tmp, "router.log")
            with open(log, "w") as out:
                router = subprocess.Popen(command, env=CLUSTER.env, stdin=subprocess.DEVNULL,
                                          stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)
            try:
                endpoint = f"localhost:{port}"

                def connect(api_key: str | None, tls: bool = True,
                            client_cert: bool = True) -> TandemClient:
                    mtls = tls and client_cert
                    return TandemClient(
                        endpoint, api_key=api_key, timeout=CALL_TIMEOUT,
                        root_certificates=cert["ca.pem"] if tls else None,
                        certificate_chain=cert["client.pem"] if mtls else None,
                        private_key=cert["client.key"] if mtls else None)

                with connect(key) as client:
                    try:
                        client.wait_ready(timeout=60)
                    except TandemError:
                        print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
                        raise
                    self.assertTrue(client.tls)
                    result = client.generate(PROMPT, max_tokens=4, temperature=0)
                    self.assertEqual(result.usage.completion_tokens, len(result.token_ids))
                    stream = client.generate_stream(messages=CHAT, max_tokens=4)
                    chunks = list(stream)
                    self.check_completion(stream.completion, chunks)
                    self.assertEqual(client.model_info().vocab_size, 49152)
                # Without the key, or with a wrong one: UNAUTHENTICATED.
                for wrong in (None, key + "x"):
                    with self.subTest(key=wrong), connect(wrong) as client:
                        with self.assertRaises(TandemError) as ctx:
                            client.tokenize("Hi")
                        self.assertEqual(ctx.exception.code_name, "UNAUTHENTICATED")
                        with self.assertRaises(TandemError) as ctx:
                            client.generate("Hi", max_tokens=2)
                        self.assertEqual(ctx.exception.code_name, "UNAUTHENTICATED")
                # Without a client certificate, or in plaintext: no connection.
                for tls in (True, False):
                    with self.subTest(tls=tls), connect(key, tls=tls, client_cert=False) as client:
                        with self.assertRaises(TandemError) as ctx:
                            client.model_info()
                        self.assertEqual(ctx.exception.code_name, "UNAVAILABLE")
            finally:
                router.terminate()
                try:
                    router.wait(timeout=STOP_GRACE)
                except subprocess.TimeoutExpired:
                    os.killpg(router.pid, signal.SIGKILL)
                    router.wait()


def _short(value: object) -> object:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tandem-bin", required=True, help="path to the tandem binary")
    parser.add_argument("--model", required=True, help="path to a GGUF model")
    parser.add_argument("--startup-timeout", type=float, default=300.0,
                        help="seconds to wait for the cluster to serve (default: %(default)s)")
    parser.add_argument("--require-installed", action="store_true",
                        help="fail unless tandem_client is imported from outside the source tree")
    args, unittest_args = parser.parse_known_args()

    package_dir = Path(tandem_client.__file__).resolve().parent
    print(f"tandem_client {tandem_client.__version__} from {package_dir}", file=sys.stderr)
    if args.require_installed and package_dir == SOURCE_PACKAGE:
        print(f"test_client: tandem_client was imported from the source tree ({package_dir}), "
              "not from an installed package", file=sys.stderr)
        print("test_client: 0 passed, 1 failed")
        return 1

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
