#!/usr/bin/env python3
"""Unit tests of tandem_client that need no tandem server.

    python test_unit.py [-v] [unittest arguments]

They check the parameter -> protobuf conversion, the API-key metadata, certificate
loading and the client's checks, and run the client against an in-process fake
``tandem.v1.Generation`` server (plaintext, and TLS / mutual TLS with certificates
that ``openssl`` makes; those tests are skipped without ``openssl``). They import
``tandem_client`` as installed (``pip install ./clients/python``); from a checkout,
put ``clients/python`` on ``PYTHONPATH`` after ``generate_stubs.sh``. Prints
``test_unit: N passed, N failed`` and exits non-zero on any failure.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import sys
import tempfile
import threading
import unittest
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import grpc
from _certs import HAVE_OPENSSL, make_certificates  # beside this file
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

import tandem_client
from tandem_client import (
    Chunk,
    Completion,
    GenerationStream,
    ModelInfo,
    ServerInfo,
    TandemClient,
    TandemError,
    Timings,
    Usage,
    _convert,
)
from tandem_client import generation_pb2 as pb
from tandem_client import generation_pb2_grpc as pb_grpc


class GenerateRequestTest(unittest.TestCase):
    """Parameters -> GenerateRequest."""

    def test_text_prompt_defaults(self) -> None:
        req = _convert.build_generate_request("Hello")
        self.assertEqual(req.WhichOneof("input"), "text")
        self.assertEqual(req.text, b"Hello")
        self.assertTrue(req.stream)
        self.assertEqual(req.request_id, "")
        self.assertEqual(req.cache_salt, b"")
        params = req.sampling_params
        for name in ("max_tokens", "temperature", "top_k", "top_p", "min_p", "seed",
                     "repetition_penalty", "presence_penalty", "frequency_penalty", "logprobs"):
            self.assertFalse(params.HasField(name), name)  # unset: the server's default
        self.assertFalse(params.ignore_eos)
        self.assertEqual(params.priority, 0)
        self.assertFalse(params.disable_speculation)
        self.assertEqual(list(params.stop), [])
        self.assertEqual(list(params.stop_token_ids), [])

    def test_every_option(self) -> None:
        req = _convert.build_generate_request(
            "Hi",
            max_tokens=7, temperature=0.0, top_p=0.5, top_k=3, min_p=0.25, seed=2**40,
            stop=["a", b"b"], stop_token_ids=[1, 2], repetition_penalty=1.5,
            presence_penalty=-1.0, frequency_penalty=0.5, logprobs=4, ignore_eos=True,
            priority=-3, disable_speculation=True,
            request_id="r-1", cache_salt="tenant", stream=False,
        )
        p = req.sampling_params
        self.assertEqual(p.max_tokens, 7)
        self.assertTrue(p.HasField("temperature"))  # 0 is set, not left to the default
        self.assertEqual(p.temperature, 0.0)
        self.assertAlmostEqual(p.top_p, 0.5)
        self.assertEqual(p.top_k, 3)
        self.assertAlmostEqual(p.min_p, 0.25)
        self.assertEqual(p.seed, 2**40)
        self.assertEqual(list(p.stop), [b"a", b"b"])
        self.assertEqual(list(p.stop_token_ids), [1, 2])
        self.assertAlmostEqual(p.repetition_penalty, 1.5)
        self.assertAlmostEqual(p.presence_penalty, -1.0)
        self.assertAlmostEqual(p.frequency_penalty, 0.5)
        self.assertEqual(p.logprobs, 4)
        self.assertTrue(p.ignore_eos)
        self.assertEqual(p.priority, -3)
        self.assertTrue(p.disable_speculation)
        self.assertEqual(req.request_id, "r-1")
        self.assertEqual(req.cache_salt, b"tenant")
        self.assertFalse(req.stream)

    def test_single_stop_string(self) -> None:
        req = _convert.build_generate_request("Hi", stop="\n\n")
        self.assertEqual(list(req.sampling_params.stop), [b"\n\n"])

    def test_unicode_and_bytes_prompts(self) -> None:
        self.assertEqual(_convert.build_generate_request("café").text, "café".encode())
        # Bytes pass through untouched (even invalid UTF-8: the server names the field).
        self.assertEqual(_convert.build_generate_request(b"caf\xc3").text, b"caf\xc3")

    def test_empty_prompts_still_pick_the_oneof(self) -> None:
        self.assertEqual(_convert.build_generate_request("").WhichOneof("input"), "text")
        req = _convert.build_generate_request(token_ids=[])
        self.assertEqual(req.WhichOneof("input"), "token_ids")
        req = _convert.build_generate_request(messages=[])
        self.assertEqual(req.WhichOneof("input"), "chat")

    def test_token_ids(self) -> None:
        req = _convert.build_generate_request(token_ids=(5, 6, 7))
        self.assertEqual(list(req.token_ids.ids), [5, 6, 7])

    def test_chat(self) -> None:
        req = _convert.build_generate_request(
            messages=[{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Hi ✓"}])
        self.assertEqual(req.WhichOneof("input"), "chat")
        self.assertEqual([(m.role, m.content) for m in req.chat.messages],
                         [("system", b"Be brief."), ("user", "Hi ✓".encode())])

    def test_prompt_count_checked(self) -> None:
        with self.assertRaisesRegex(ValueError, "exactly one"):
            _convert.build_generate_request()
        with self.assertRaisesRegex(ValueError, "got prompt, token_ids"):
            _convert.build_generate_request("a", token_ids=[1])

    def test_malformed_chat(self) -> None:
        for messages, pattern in (
            ([{"role": "user"}], r"messages\[0\]"),
            ([{"role": "user", "content": "a"}, "hello"], r"messages\[1\]"),
            ([{"role": 1, "content": "a"}], "role"),
            ([{"role": "user", "content": 5}], "content"),
            ("hello", "not a string"),
        ):
            with self.subTest(messages=messages):
                with self.assertRaisesRegex(ValueError, pattern):
                    _convert.build_generate_request(messages=messages)  # type: ignore[arg-type]

    def test_tokenize_request(self) -> None:
        self.assertEqual(_convert.build_tokenize_request("Hi").text, b"Hi")
        req = _convert.build_tokenize_request(messages=[{"role": "user", "content": "Hi"}])
        self.assertEqual(req.WhichOneof("input"), "chat")
        self.assertEqual(
            _convert.build_tokenize_request(messages=[]).WhichOneof("input"), "chat")
        with self.assertRaises(ValueError):
            _convert.build_tokenize_request()
        with self.assertRaises(ValueError):
            _convert.build_tokenize_request("a", [{"role": "user", "content": "b"}])


class ResponseConversionTest(unittest.TestCase):
    """Protobuf responses -> dataclasses."""

    def test_chunk_with_logprobs(self) -> None:
        msg = pb.GenerateChunk(token_ids=[4, 5], text="ab")
        lp = msg.logprobs.add(token_id=4, logprob=-0.5)
        lp.top_logprobs.add(token_id=4, logprob=-0.5)
        lp.top_logprobs.add(token_id=9, logprob=-1.5)
        msg.logprobs.add(token_id=5, logprob=-0.25)
        chunk = _convert.chunk_from_proto(msg)
        self.assertEqual(chunk.text, "ab")
        self.assertEqual(chunk.token_ids, [4, 5])
        self.assertEqual(len(chunk.logprobs), 2)
        self.assertEqual(chunk.logprobs[0].token_id, 4)
        self.assertEqual([t.token_id for t in chunk.logprobs[0].top_logprobs], [4, 9])
        self.assertAlmostEqual(chunk.logprobs[0].top_logprobs[1].logprob, -1.5)
        self.assertEqual(chunk.logprobs[1].top_logprobs, [])

    def test_finish_reasons(self) -> None:
        self.assertEqual(_convert.finish_reason_from_proto(pb.FINISH_REASON_STOP), "stop")
        self.assertEqual(_convert.finish_reason_from_proto(pb.FINISH_REASON_LENGTH), "length")
        self.assertEqual(_convert.finish_reason_from_proto(0), "unspecified")

    def test_usage_and_timings(self) -> None:
        usage = _convert.usage_from_proto(
            pb.Usage(prompt_tokens=3, completion_tokens=4, cached_tokens=2))
        self.assertEqual(usage, Usage(3, 4, 2))
        self.assertEqual(usage.total_tokens, 7)
        t = _convert.timings_from_proto(pb.Timings(queue_ms=1.5, e2e_ms=9.0, prefill_queue_ms=0.5))
        self.assertEqual(t, Timings(queue_ms=1.5, e2e_ms=9.0, prefill_queue_ms=0.5))

    def test_model_and_server_info(self) -> None:
        info = _convert.model_info_from_proto(pb.GetModelInfoResponse(
            model_name="m", architecture="llama", vocab_size=10, max_context_length=20,
            eos_token_id=2, num_layers=3, hidden_size=4, kv_bytes_per_token=2**33))
        self.assertEqual(info, ModelInfo("m", "llama", 10, 20, 2, 3, 4, 2**33))
        resp = pb.GetServerInfoResponse(version="0.1.0", queued_requests=1, queued_tokens=2**35,
                                        running_requests=3)
        resp.prefill_workers.add(address="a:1", healthy=True, in_flight=2, free_blocks=0)
        resp.decode_workers.add(address="b:2", healthy=False, in_flight=0, free_blocks=7)
        server = _convert.server_info_from_proto(resp)
        self.assertIsInstance(server, ServerInfo)
        self.assertEqual(server.queued_tokens, 2**35)
        self.assertEqual(server.prefill_workers[0].address, "a:1")
        self.assertTrue(server.prefill_workers[0].healthy)
        self.assertEqual(server.decode_workers[0].free_blocks, 7)


class CredentialsTest(unittest.TestCase):
    """API-key metadata, PEM loading and the client's argument checks."""

    def test_auth_metadata(self) -> None:
        self.assertEqual(_convert.auth_metadata(None), ())
        self.assertEqual(_convert.auth_metadata("s3cret-KEY_1"),
                         (("authorization", "Bearer s3cret-KEY_1"),))
        for bad in ("", " key", "key\n", "kéy", "a\x00b"):
            with self.subTest(key=bad), self.assertRaises(ValueError):
                _convert.auth_metadata(bad)
        with self.assertRaises(TypeError):
            _convert.auth_metadata(b"key")  # type: ignore[arg-type]

    def test_load_pem(self) -> None:
        pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
        self.assertIsNone(_convert.load_pem(None, "x"))
        self.assertEqual(_convert.load_pem(pem, "x"), pem)
        self.assertEqual(_convert.load_pem(pem.decode(), "x"), pem)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "ca.pem"
            path.write_bytes(pem)
            self.assertEqual(_convert.load_pem(path, "x"), pem)
            self.assertEqual(_convert.load_pem(str(path), "x"), pem)
            self.assertEqual(_convert.load_pem(os.fsencode(path), "x"), pem)
            (Path(tmp) / "junk").write_bytes(b"not a pem")
            with self.assertRaisesRegex(ValueError, "no PEM"):
                _convert.load_pem(Path(tmp) / "junk", "root_certificates")
            with self.assertRaisesRegex(ValueError, "root_certificates"):
                _convert.load_pem(Path(tmp) / "missing.pem", "root_certificates")

    def test_client_argument_checks(self) -> None:
        pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
        with self.assertRaisesRegex(ValueError, "together"):
            TandemClient("h:1", root_certificates=pem, certificate_chain=pem)
        with self.assertRaisesRegex(ValueError, "root_certificates"):
            TandemClient("h:1", certificate_chain=pem, private_key=pem)
        with self.assertRaisesRegex(ValueError, "not both"):
            TandemClient("h:1", root_certificates=pem,
                         credentials=grpc.ssl_channel_credentials())
        with self.assertRaises(ValueError):
            TandemClient("h:1", timeout=0)
        with self.assertRaises(ValueError):
            TandemClient("h:1", api_key="")

    def test_repr_hides_the_key(self) -> None:
        with TandemClient("h:1", api_key="top-secret", credentials=grpc.ssl_channel_credentials(),
                          timeout=5) as c:
            self.assertTrue(c.tls)
            self.assertNotIn("top-secret", repr(c))
            self.assertIn("api_key=***", repr(c))
        with TandemClient("h:1") as c:
            self.assertFalse(c.tls)

    def test_error(self) -> None:
        err = TandemError(grpc.StatusCode.INVALID_ARGUMENT, "top_p must be in (0, 1]")
        self.assertEqual(err.code_name, "INVALID_ARGUMENT")
        self.assertEqual(err.message, "top_p must be in (0, 1]")
        self.assertEqual(err.details, err.message)
        self.assertEqual(str(err), "INVALID_ARGUMENT: top_p must be in (0, 1]")
        copy = pickle.loads(pickle.dumps(err))
        self.assertEqual((copy.code, copy.message), (err.code, err.message))


# -- an in-process fake server ------------------------------------------------------


class FakeGeneration(pb_grpc.GenerationServicer):  # type: ignore[misc]
    """Answers like tandem does, from canned data; records what it received."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.metadata: list[tuple[str, dict[str, str | bytes]]] = []
        self.running: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

    def _record(self, method: str, request: Any, context: grpc.ServicerContext) -> None:
        with self.lock:
            self.requests.append(request)
            self.metadata.append((method, dict(context.invocation_metadata())))

    def Generate(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self._record("Generate", request, context)
        if request.HasField("text") and request.text == b"":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "text: the prompt is empty")
        if request.text == b"truncated":
            yield pb.GenerateResponse(chunk=pb.GenerateChunk(token_ids=[1], text="x"))
            return  # no complete message
        if request.text == b"forever":
            stop = threading.Event()
            with self.lock:
                self.running[request.request_id] = stop
            yield pb.GenerateResponse(chunk=pb.GenerateChunk(token_ids=[1], text="x"))
            stop.wait(10)
            context.abort(grpc.StatusCode.CANCELLED, "aborted")
        pieces = [([10, 11], "Hel"), ([12], "lo")]
        if not request.stream:
            pieces = [([10, 11, 12], "Hello")]
        for ids, text in pieces:
            chunk = pb.GenerateChunk(token_ids=ids, text=text)
            if request.sampling_params.HasField("logprobs"):
                for t in ids:
                    chunk.logprobs.add(token_id=t, logprob=-1.0)
            yield pb.GenerateResponse(chunk=chunk)
        yield pb.GenerateResponse(complete=pb.GenerateComplete(
            finish_reason=pb.FINISH_REASON_LENGTH,
            usage=pb.Usage(prompt_tokens=2, completion_tokens=3, cached_tokens=1),
            timings=pb.Timings(e2e_ms=12.5, time_to_first_token_ms=2.0),
            request_id=request.request_id or "router-1"))

    def Abort(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("Abort", request, context)
        with self.lock:
            stop = self.running.pop(request.request_id, None)
        if stop is not None:
            stop.set()
        return pb.AbortResponse(found=stop is not None)

    def Tokenize(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("Tokenize", request, context)
        if request.WhichOneof("input") == "chat":
            return pb.TokenizeResponse(token_ids=[100 + len(request.chat.messages)])
        return pb.TokenizeResponse(token_ids=list(request.text))

    def GetModelInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("GetModelInfo", request, context)
        return pb.GetModelInfoResponse(model_name="fake", architecture="llama", vocab_size=256,
                                       max_context_length=64, eos_token_id=2, num_layers=1,
                                       hidden_size=8, kv_bytes_per_token=16)

    def GetServerInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("GetServerInfo", request, context)
        resp = pb.GetServerInfoResponse(version="fake")
        resp.prefill_workers.add(address="p:1", healthy=True)
        resp.decode_workers.add(address="d:1", healthy=True)
        return resp


class MetadataRecorder(grpc.ServerInterceptor):
    """Records the metadata of every call, health checks included."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []

    def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        self.calls.append((details.method, dict(details.invocation_metadata)))
        return continuation(details)


class FakeServer:
    def __init__(self, server_credentials: grpc.ServerCredentials | None = None) -> None:
        self.servicer = FakeGeneration()
        self.recorder = MetadataRecorder()
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8),
                                  interceptors=[self.recorder])
        pb_grpc.add_GenerationServicer_to_server(self.servicer, self.server)
        health_servicer = health.HealthServicer()
        health_servicer.set(tandem_client.SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, self.server)
        if server_credentials is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = self.server.add_secure_port("127.0.0.1:0", server_credentials)
        self.endpoint = f"127.0.0.1:{self.port}"
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)


class FakeServerTest(unittest.TestCase):
    """The client against the fake server, in plaintext."""

    server: FakeServer

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = FakeServer()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def client(self, **kwargs: Any) -> TandemClient:
        return TandemClient(self.server.endpoint, timeout=10, **kwargs)

    def test_stream_then_completion(self) -> None:
        with self.client() as client:
            stream = client.generate_stream("Hi", max_tokens=3, logprobs=0)
            self.assertIsInstance(stream, GenerationStream)
            chunks = list(stream)
            self.assertTrue(stream.done)
            self.assertEqual([c.text for c in chunks], ["Hel", "lo"])
            self.assertTrue(all(isinstance(c, Chunk) for c in chunks))
            self.assertEqual(chunks[0].token_ids, [10, 11])
            self.assertEqual(len(chunks[0].logprobs), 2)
            completion = stream.completion
            self.assertIsInstance(completion, Completion)
            self.assertEqual(completion.text, "Hello")
            self.assertEqual(completion.token_ids, [10, 11, 12])
            self.assertEqual(len(completion.logprobs), 3)
            self.assertEqual(completion.finish_reason, "length")
            self.assertEqual(completion.usage, Usage(2, 3, 1))
            self.assertEqual(completion.timings.e2e_ms, 12.5)
            self.assertEqual(completion.request_id, "router-1")
            self.assertEqual(stream.request_id, "router-1")
            self.assertEqual(list(stream), [])  # exhausted
        self.assertTrue(self.server.servicer.requests[-1].stream)

    def test_completion_reads_the_rest(self) -> None:
        with self.client() as client:
            stream = client.generate_stream("Hi", request_id="mine")
            self.assertEqual(stream.request_id, "mine")
            first = next(stream)
            self.assertEqual(first.text, "Hel")
            self.assertEqual(stream.text, "Hel")
            completion = stream.completion  # without iterating the rest
            self.assertEqual(completion.text, "Hello")
            self.assertEqual(completion.request_id, "mine")

    def test_generate_is_not_streamed(self) -> None:
        with self.client() as client:
            completion = client.generate(messages=[{"role": "user", "content": "Hi"}],
                                         temperature=0)
        self.assertEqual(completion.text, "Hello")
        self.assertEqual(completion.token_ids, [10, 11, 12])
        self.assertEqual(completion.finish_reason, "length")
        request = self.server.servicer.requests[-1]
        self.assertFalse(request.stream)
        self.assertEqual(request.WhichOneof("input"), "chat")

    def test_errors(self) -> None:
        with self.client() as client:
            stream = client.generate_stream("")
            with self.assertRaises(TandemError) as ctx:
                list(stream)
            self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertEqual(ctx.exception.code_name, "INVALID_ARGUMENT")
            self.assertIn("text", ctx.exception.message)
            with self.assertRaises(TandemError):
                stream.completion  # noqa: B018  (the same error again)
            with self.assertRaises(TandemError) as ctx:
                client.generate("")
            self.assertEqual(ctx.exception.code_name, "INVALID_ARGUMENT")
            with self.assertRaises(TandemError) as ctx:
                client.generate("truncated")
            self.assertEqual(ctx.exception.code_name, "INTERNAL")
            with self.assertRaises(ValueError):
                client.generate_stream()

    def test_unavailable(self) -> None:
        with TandemClient("127.0.0.1:1", timeout=5) as client:
            with self.assertRaises(TandemError) as ctx:
                client.model_info()
            self.assertEqual(ctx.exception.code_name, "UNAVAILABLE")
            with self.assertRaises(TandemError) as ctx:
                client.wait_ready(timeout=0.5)
            self.assertEqual(ctx.exception.code_name, "DEADLINE_EXCEEDED")

    def test_abort_from_another_thread(self) -> None:
        with self.client() as client:
            with client.generate_stream("forever", request_id="long-1") as stream:
                self.assertEqual(next(stream).text, "x")
                found: list[bool] = []
                thread = threading.Thread(target=lambda: found.append(client.abort("long-1")))
                thread.start()
                with self.assertRaises(TandemError) as ctx:
                    for _ in stream:
                        pass
                thread.join()
            self.assertEqual(found, [True])
            self.assertEqual(ctx.exception.code_name, "CANCELLED")
            self.assertFalse(client.abort("long-1"))

    def test_cancel(self) -> None:
        with self.client() as client:
            stream = client.generate_stream("forever", request_id="long-2")
            next(stream)
            stream.cancel()
            with self.assertRaises(TandemError) as ctx:
                next(stream)
            self.assertEqual(ctx.exception.code_name, "CANCELLED")
            client.abort("long-2")  # let the fake server's handler go

    def test_other_rpcs(self) -> None:
        with self.client() as client:
            self.assertEqual(client.tokenize("AB"), [65, 66])
            self.assertEqual(client.tokenize(messages=[{"role": "user", "content": "a"}]), [101])
            info = client.model_info()
            self.assertIsInstance(info, ModelInfo)
            self.assertEqual(info.vocab_size, 256)
            server = client.server_info()
            self.assertEqual(server.version, "fake")
            self.assertEqual([w.address for w in server.decode_workers], ["d:1"])
            self.assertEqual(client.health(), "SERVING")
            client.wait_ready(timeout=5)

    def test_api_key_on_every_call(self) -> None:
        self.server.recorder.calls.clear()
        with self.client(api_key="k-123") as client:
            list(client.generate_stream("Hi"))
            client.generate("Hi")
            client.tokenize("Hi")
            client.model_info()
            client.server_info()
            client.abort("none")
            client.health()
        methods = [m for m, _ in self.server.recorder.calls]
        self.assertEqual(len(methods), 7, methods)
        for method, metadata in self.server.recorder.calls:
            self.assertEqual(metadata.get("authorization"), "Bearer k-123", method)
        # ... and none without a key.
        self.server.recorder.calls.clear()
        with self.client() as client:
            client.model_info()
        self.assertNotIn("authorization", self.server.recorder.calls[-1][1])


@unittest.skipUnless(HAVE_OPENSSL, "needs the openssl command")
class TlsTest(unittest.TestCase):
    """TLS and mutual TLS against the fake server, with openssl-made certificates."""

    tmp: tempfile.TemporaryDirectory[str]

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        make_certificates(cls.tmp.name)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def path(self, name: str) -> Path:
        return Path(self.tmp.name, name)

    def server(self, require_client_auth: bool) -> FakeServer:
        creds = grpc.ssl_server_credentials(
            [(self.path("server.key").read_bytes(), self.path("server.pem").read_bytes())],
            root_certificates=self.path("ca.pem").read_bytes() if require_client_auth else None,
            require_client_auth=require_client_auth)
        server = FakeServer(creds)
        self.addCleanup(server.stop)
        return server

    def test_tls_with_api_key(self) -> None:
        server = self.server(require_client_auth=False)
        # The CA as a path; the certificate names 127.0.0.1 too.
        with TandemClient(server.endpoint, root_certificates=self.path("ca.pem"),
                          api_key="tls-key", timeout=10) as client:
            self.assertTrue(client.tls)
            self.assertEqual(client.generate("Hi").text, "Hello")
        self.assertEqual(server.recorder.calls[-1][1].get("authorization"), "Bearer tls-key")
        # A plaintext client cannot talk to it.
        with TandemClient(server.endpoint, timeout=5) as client:
            with self.assertRaises(TandemError) as ctx:
                client.model_info()
            self.assertEqual(ctx.exception.code_name, "UNAVAILABLE")

    def test_server_name_override(self) -> None:
        server = self.server(require_client_auth=False)
        with TandemClient(f"localhost:{server.port}",
                          root_certificates=self.path("ca.pem").read_bytes(),
                          options=[("grpc.ssl_target_name_override", "localhost")],
                          timeout=10) as client:
            self.assertEqual(client.model_info().model_name, "fake")

    def test_mutual_tls(self) -> None:
        server = self.server(require_client_auth=True)
        with TandemClient(server.endpoint, root_certificates=self.path("ca.pem"),
                          certificate_chain=self.path("client.pem"),
                          private_key=str(self.path("client.key")), timeout=10) as client:
            self.assertEqual([c.text for c in client.generate_stream("Hi")], ["Hel", "lo"])
        # Without a client certificate the handshake fails.
        with TandemClient(server.endpoint, root_certificates=self.path("ca.pem"),
                          timeout=5) as client:
            with self.assertRaises(TandemError) as ctx:
                client.model_info()
            self.assertEqual(ctx.exception.code_name, "UNAVAILABLE")


def main() -> int:
    print(f"tandem_client from {os.path.dirname(tandem_client.__file__)}", file=sys.stderr)
    program = unittest.main(argv=[sys.argv[0], *sys.argv[1:]], exit=False, verbosity=2)
    result = program.result
    failed_ids = {
        getattr(test, "test_case", test).id() for test, _ in result.failures + result.errors
    } | {test.id() for test in result.unexpectedSuccesses}
    failed = len(failed_ids)
    passed = max(result.testsRun - failed - len(result.skipped), 0)
    summary = f"test_unit: {passed} passed, {failed} failed"
    if result.skipped:
        summary += f", {len(result.skipped)} skipped"
    print(summary, flush=True)
    return 0 if result.wasSuccessful() and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
