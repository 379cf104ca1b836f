"""The serving surface against a real local cluster (`tandem serve`).

What it checks (issue #7's acceptance):
  * the official `openai` package streams a chat completion and a completion from the HTTP
    front, and gets them whole with stream=False; text, finish_reason and usage equal the
    single-process engine's answer (`tandem generate --json`, greedy) — an independent
    reference; n, logprobs, the token-id prompt form; bad requests get the OpenAI error
    shape with the right HTTP status;
  * a client that disconnects mid-stream frees its sequence on the decode worker;
  * every process exports /metrics that `promtool check metrics` accepts, every metric
    docs/api.md's "Metrics" names is present, the Grafana dashboard refers only to exported
    metrics, and a real Prometheus server scraping the cluster under load answers a
    `histogram_quantile` over `tandem:time_to_first_token_seconds_bucket` with a number;
  * with --api-key, TLS and a client CA: requests without the key get 401 (HTTP) and
    UNAUTHENTICATED (gRPC), a TLS gRPC client streams, a client without a certificate is
    refused, and probes and /metrics need no key;
  * structured output (issue #20): response_format with 50 varied JSON Schemas returns
    JSON that the `jsonschema` package validates, formats checked (streaming and not), so do 24 random
    schemas and 24 random regular expressions sampled at temperature 1; vLLM's
    guided_regex / guided_choice / guided_grammar constrain the text; bad sources get 400
    naming the field;
  * tool calling (issue #20): tool_choice "required" and a named function return
    well-formed tool_calls (streaming and not) whose arguments validate against the
    tools' schemas; a conversation with the calls and a `tool` message continues;
  * nothing leaks: after the tests every worker holds no sequence and no KV block.

Run through run.sh (it provides the venv with `openai`):
    tests/serving/run.sh --tandem-bin build/bin/tandem [--model M]
"""

import argparse
import concurrent.futures
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import jsonschema
import openai

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = None  # set in main

# docs/api.md, "Metrics": every one of these is exported by some process of the cluster.
DESIGN_METRICS = [
    "num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "cache_config_info",
    "prefix_cache_queries_total", "prefix_cache_hits_total", "prompt_tokens_total",
    "generation_tokens_total", "num_preemptions_total", "request_success_total",
    "time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
    "request_queue_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds",
    "kv_transfer_latency_seconds", "kv_transfer_bytes_total", "kv_transfer_failures_total",
    "prefill_placement_total",
]
TIMEOUT = 120  # seconds, for every client call


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """`tandem serve` with 1 prefill + 1 decode worker on free ports."""

    def __init__(self, extra=(), env=None, drain_ms=3000):
        self.dir = tempfile.mkdtemp(prefix="tandem-serving-")
        self.endpoints_file = os.path.join(self.dir, "endpoints.json")
        self.log_path = os.path.join(self.dir, "serve.log")
        self.log = open(self.log_path, "w")
        cmd = [ARGS.tandem_bin, "serve", "--model", ARGS.model, "--grpc-port", "0",
               "--http-port", "0", "--threads-per-worker", "1", "--drain-timeout-ms", str(drain_ms),
               "--endpoints-file", self.endpoints_file, *extra]
        # The key the cluster's processes require of each other (`tandem serve` makes a
        # random one when none is set): known here, so a second router can join them.
        self.env = {**(env if env is not None else os.environ),
                    "TANDEM_INTERNAL_KEY": "internal-" + os.urandom(16).hex()}
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        deadline = time.time() + 180
        while not os.path.exists(self.endpoints_file):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError("tandem serve did not start:\n" + self.read_log())
            time.sleep(0.1)
        with open(self.endpoints_file) as f:
            self.endpoints = json.load(f)
        self.grpc = self.endpoints["grpc"]
        self.http = self.endpoints["http"]
        self.ports = {p["name"]: p for p in self.endpoints["processes"]}

    def metrics_url(self, name):
        port = self.ports[name]["http_port"]
        scheme = "https" if name == "router" and self.http.startswith("https") else "http"
        return f"{scheme}://127.0.0.1:{port}/metrics"

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def get(url, headers=None, context=None):
    """(status, body bytes) of a GET."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT, context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post(url, body, headers=None, context=None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT, context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# Formats checked, not only annotated (jsonschema's default): "date" by Python's
# date.fromisoformat, "uuid" by uuid.UUID. The checker must refuse what the calendar
# lacks, or the check would pass on anything.
FORMATS = jsonschema.FormatChecker()
assert not FORMATS.conforms("2024-02-30", "date") and FORMATS.conforms("2024-02-29", "date")
assert not FORMATS.conforms("123e4567e89b12d3a456426614174000", "uuid")


def structured_output_schemas():
    """50 JSON Schemas over every keyword tandem compiles; strings and arrays bounded
    so that a 135M model's answer ends within max_tokens."""
    leaves = [
        {"type": "string", "maxLength": 12},
        {"type": "string", "enum": ["red", "green", "blue"]},
        {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"},
        {"type": "string", "format": "date"},
        {"type": "string", "format": "uuid"},
        {"type": "string", "minLength": 2, "maxLength": 6},
        {"type": "integer"},
        {"type": "integer", "minimum": -50, "maximum": 50},
        {"type": "integer", "exclusiveMinimum": 0, "maximum": 1000},
        {"type": "number", "minimum": 0, "maximum": 1},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"const": "fixed"},
        {"enum": [1, "two", None, True]},
        {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "null"}]},
        {"type": ["string", "integer"], "maxLength": 5},
        {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
         "minItems": 1, "maxItems": 4},
        {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "string", "maxLength": 4}],
         "items": False},
    ]
    names = ["name", "id", "code", "when", "uid", "tag", "count", "score", "n", "ratio", "x",
             "ok", "gone", "kind", "mixed", "digit", "either", "ids", "words", "pair"]
    schemas = []
    for i, leaf in enumerate(leaves):  # each leaf alone as a property, required
        schemas.append({"type": "object", "properties": {names[i]: leaf}, "required": [names[i]]})
    for i in range(20):  # pairs and triples, some optional
        a, b, c = leaves[i], leaves[(i * 7 + 3) % 20], leaves[(i * 11 + 5) % 20]
        schemas.append({"type": "object",
                        "properties": {"first": a, "second": b, "third": c},
                        "required": ["first"] if i % 2 else ["first", "second", "third"],
                        "additionalProperties": False})
    schemas += [
        {"type": "object", "properties": {"person": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 10},
            "age": {"type": "integer", "minimum": 0, "maximum": 120}},
            "required": ["name", "age"]}}, "required": ["person"]},
        {"$defs": {"pt": {"type": "object", "properties": {
            "x": {"type": "integer", "minimum": -9, "maximum": 9},
            "y": {"type": "integer", "minimum": -9, "maximum": 9}}, "required": ["x", "y"]}},
         "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}},
         "required": ["a", "b"]},
        {"type": "array", "items": {"type": "object", "properties": {
            "k": {"type": "string", "maxLength": 4}}, "required": ["k"]}, "maxItems": 2},
        {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 9}},
         "required": ["id"], "additionalProperties": {"type": "boolean"}},
        {"type": "object", "properties": {"status": {"enum": ["ok", "error"]},
                                          "detail": {"anyOf": [{"type": "string", "maxLength": 8},
                                                               {"type": "null"}]}},
         "required": ["status", "detail"]},
        {"type": "integer", "minimum": 100, "maximum": 200},
        {"type": "string", "maxLength": 20},
        {"type": "boolean"},
        {"enum": ["alpha", "beta"]},
        {"type": "array", "items": {"type": "number", "minimum": -1, "maximum": 1}, "maxItems": 3},
    ]
    return schemas


def parse_metrics(text):
    """{(name, frozenset(labels)): value} of a text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, f"unparsable metrics line: {line!r}"
        labels = frozenset(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(samples, name, **labels):
    """The one sample of `name` whose labels include `labels`."""
    found = [v for (n, ls), v in samples.items()
             if n == name and set(labels.items()) <= set(ls)]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]


def reference(prompt, max_tokens, chat):
    """The single-process engine's greedy answer: an independent reference."""
    cmd = [ARGS.tandem_bin, "generate", "--model", ARGS.model, "--prompt", prompt,
           "--max-tokens", str(max_tokens), "--temperature", "0", "--threads", "1", "--json"]
    if chat:
        cmd.append("--chat")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300).stdout
    return json.loads(out)


def promtool(text):
    """(exit code, output) of `promtool check metrics` on `text`."""
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


class OpenAiApiTest(unittest.TestCase):
    """The HTTP front with the official client; metrics and Prometheus on the same cluster."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        cls.client = openai.OpenAI(base_url=cls.cluster.http + "/v1", api_key="unused",
                                   timeout=TIMEOUT, max_retries=0)
        cls.model = cls.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def test_01_models_and_health(self):
        status, body = get(self.cluster.http + "/v1/models")
        self.assertEqual(status, 200)
        data = json.loads(body)["data"]
        self.assertEqual([m["id"] for m in data], ["smollm2-135m-instruct-q4_1"]
                         if ARGS.model.endswith("smollm2-135m-instruct-q4_1.gguf") else [self.model])
        self.assertEqual(get(self.cluster.http + "/health")[0], 200)
        for name in ("prefill-0", "decode-0"):
            port = self.cluster.ports[name]["http_port"]
            self.assertEqual(get(f"http://127.0.0.1:{port}/health")[0], 200, name)
        # The advertised context is servable with default flags: each worker's KV pool
        # holds one request of max_model_len tokens (prompt, then the first token).
        max_model_len = data[0]["max_model_len"]
        self.assertGreater(max_model_len, 0)
        for name in ("prefill-0", "decode-0"):
            _, text = get(self.cluster.metrics_url(name))
            info = [labels for (metric, labels) in parse_metrics(text.decode())
                    if metric.endswith("cache_config_info")]
            self.assertEqual(len(info), 1, name)
            labels = dict(info[0])
            tokens = int(labels["num_gpu_blocks"]) * int(labels["block_size"])
            self.assertGreaterEqual(tokens, max_model_len + 1, (name, labels))

    def test_02_chat_streams_the_engines_answer(self):
        question = "What is the capital of France? Answer in one sentence."
        ref = reference(question, 24, chat=True)
        stream = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": question}], max_tokens=24,
            temperature=0, stream=True, stream_options={"include_usage": True})
        text, finish, usage, roles, chunks = "", None, None, [], 0
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                chunks += 1
                if choice.delta.role:
                    roles.append(choice.delta.role)
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        self.assertEqual(roles, ["assistant"])
        self.assertGreater(chunks, 3, "tokens arrive as separate chunks")
        self.assertEqual(text, ref["text"])
        self.assertEqual(finish, ref["finish_reason"])
        self.assertEqual(usage.completion_tokens, len(ref["token_ids"]))
        self.assertEqual(usage.prompt_tokens, ref["usage"]["prompt_tokens"])
        self.assertEqual(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens)

        # stream=False: the same answer in one response.
        whole = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": question}], max_tokens=24,
            temperature=0)
        self.assertEqual(whole.object, "chat.completion")
        self.assertEqual(whole.choices[0].message.role, "assistant")
        self.assertEqual(whole.choices[0].message.content, ref["text"])
        self.assertEqual(whole.choices[0].finish_reason, ref["finish_reason"])
        self.assertEqual(whole.usage.completion_tokens, len(ref["token_ids"]))
        # The second identical prompt found its prefix cached.
        self.assertGreater(whole.usage.prompt_tokens_details.cached_tokens, 0)

    def test_03_completion_streams_the_engines_answer(self):
        prompt = "The three primary colors are"
        ref = reference(prompt, 12, chat=False)
        text, finish, usage = "", None, None
        for chunk in self.client.completions.create(
                model=self.model, prompt=prompt, max_tokens=12, temperature=0, stream=True,
                stream_options={"include_usage": True}):
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.text
                finish = choice.finish_reason or finish
        self.assertEqual(text, ref["text"])
        self.assertEqual(finish, ref["finish_reason"])
        self.assertEqual(usage.completion_tokens, len(ref["token_ids"]))
        self.assertEqual(usage.prompt_tokens, ref["usage"]["prompt_tokens"])

        whole = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=12,
                                               temperature=0, logprobs=2)
        self.assertEqual(whole.choices[0].text, ref["text"])
        lp = whole.choices[0].logprobs
        self.assertEqual(len(lp.tokens), len(ref["token_ids"]))
        self.assertEqual("".join(lp.tokens), ref["text"])
        for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(chosen, 0.0)
            self.assertEqual(len(top), 2)
            # Greedy: the chosen token is the most likely one.
            self.assertAlmostEqual(max(top.values()), chosen, places=4)

        # A prompt of token ids is the same prompt.
        status, body = post(self.cluster.http + "/tokenize", {"prompt": prompt})
        self.assertEqual(status, 200)
        ids = json.loads(body)["tokens"]
        by_ids = self.client.completions.create(model=self.model, prompt=ids, max_tokens=12,
                                                temperature=0)
        self.assertEqual(by_ids.choices[0].text, ref["text"])

    def test_04_n_choices_and_stop(self):
        r = self.client.completions.create(model=self.model, prompt="Once upon a time",
                                           max_tokens=8, temperature=0.9, seed=7, n=3)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1, 2])
        self.assertGreater(r.usage.completion_tokens, 0)
        self.assertLessEqual(r.usage.completion_tokens, 3 * 8)
        again = self.client.completions.create(model=self.model, prompt="Once upon a time",
                                               max_tokens=8, temperature=0.9, seed=7, n=3)
        self.assertEqual([c.text for c in r.choices], [c.text for c in again.choices],
                         "a seed makes n choices reproducible")
        self.assertEqual(r.usage.prompt_tokens, again.usage.prompt_tokens)
        ref = reference("The three primary colors are", 12, chat=False)["text"]
        stop = ref.strip().split()[1]
        s = self.client.completions.create(model=self.model, prompt="The three primary colors are",
                                           max_tokens=12, temperature=0, stop=[stop])
        self.assertEqual(s.choices[0].finish_reason, "stop")
        self.assertNotIn(stop, s.choices[0].text)
        self.assertTrue(ref.startswith(s.choices[0].text))

    def test_05_bad_requests_get_openai_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": "hi"}], temperature=5)
        err = e.exception.response.json()["error"]
        self.assertEqual(set(err), {"message", "type", "param", "code"})
        self.assertEqual(err["param"], "temperature")
        self.assertEqual(err["code"], 400)
        self.assertEqual(err["type"], "invalid_request_error")

        url = self.cluster.http
        cases = [
            ("/v1/completions", b"{not json", 400, "body"),
            ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
            ("/v1/completions", {"prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),
            ("/v1/completions", {"prompt": [10 ** 6]}, 400, "prompt"),
            ("/v1/completions", {"prompt": ""}, 400, "prompt"),
            ("/v1/completions", {"prompt": "x", "n": 99}, 400, "n"),
            ("/v1/completions", {"prompt": "x", "model": "no-such-model"}, 404, "model"),
            ("/v1/chat/completions", {"messages": [{"role": "function", "content": "x"}]}, 400,
             "messages[0].role"),
            ("/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}, 400,
             "messages[0].tool_call_id"),
            ("/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
            ("/v1/completions", b'{"prompt": "\xff\xfe"}', 400, None),
        ]
        for path, body, status, param in cases:
            got, raw = post(url + path, body)
            self.assertEqual(got, status, (path, body, raw))
            err = json.loads(raw)["error"]
            self.assertTrue(err["message"], raw)
            if param is not None:
                self.assertEqual(err["param"], param, raw)
        self.assertEqual(get(url + "/v1/nothing")[0], 404)
        # Over the body limit: 413, and the server keeps serving.
        got, raw = post(url + "/v1/completions", b"{" + b" " * (9 << 20) + b"}")
        self.assertEqual(got, 413)
        self.assertEqual(self.client.completions.create(model=self.model, prompt="Hi",
                                                        max_tokens=2).usage.completion_tokens, 2)

    def test_11_structured_output(self):
        schemas = structured_output_schemas()
        self.assertGreaterEqual(len(schemas), 50)
        for i, schema in enumerate(schemas):
            with self.subTest(schema=json.dumps(schema)):
                kwargs = dict(model=self.model, max_tokens=400, temperature=0.8, seed=i,
                              messages=[{"role": "user", "content": "Reply with JSON."}],
                              response_format={"type": "json_schema", "json_schema": {
                                  "name": f"s{i}", "schema": schema}})
                if i % 5 == 0:
                    text = "".join(c.choices[0].delta.content or ""
                                   for c in self.client.chat.completions.create(stream=True,
                                                                                **kwargs))
                else:
                    r = self.client.chat.completions.create(**kwargs)
                    self.assertEqual(r.choices[0].finish_reason, "stop")
                    text = r.choices[0].message.content
                jsonschema.validate(json.loads(text), schema, format_checker=FORMATS)
        # Any JSON object: unbounded, so an answer may run out of tokens (finish_reason
        # "length"); every one that stops parses as an object.
        stopped = 0
        for seed in range(6):
            r = self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": "A small JSON object."}],
                max_tokens=300, temperature=0.9, seed=seed, response_format={"type": "json_object"})
            text = r.choices[0].message.content
            self.assertTrue(text.startswith("{"), text)
            if r.choices[0].finish_reason == "stop":
                stopped += 1
                self.assertIsInstance(json.loads(text), dict)
        self.assertGreater(stopped, 0)
        r = self.client.completions.create(model=self.model, prompt="A date:", max_tokens=30,
                                           temperature=0.7, seed=3,
                                           extra_body={"guided_regex": r"20[0-9]{2}-[01][0-9]"})
        self.assertRegex(r.choices[0].text, r"^20[0-9]{2}-[01][0-9]$")
        r = self.client.completions.create(model=self.model, prompt="Is it red?", max_tokens=8,
                                           temperature=1.0, seed=4,
                                           extra_body={"guided_choice": ["yes", "no", "unsure"]})
        self.assertIn(r.choices[0].text, ["yes", "no", "unsure"])
        r = self.client.completions.create(
            model=self.model, prompt="Count:", max_tokens=30, temperature=0,
            extra_body={"guided_grammar": 'root ::= "one" (", " ("two" | "three")){0,3}'})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertRegex(r.choices[0].text, r"^one(, (two|three)){0,3}$")
        for body, param in [
                ({"prompt": "x", "guided_regex": "(?=a)b"}, "regex"),
                ({"prompt": "x", "guided_grammar": "root ::= root"}, "grammar"),
                ({"prompt": "x", "guided_json": {"type": "object", "not": {}}}, "json_schema"),
                ({"prompt": "x", "response_format": {"type": "xml"}}, "response_format")]:
            got, raw = post(self.cluster.http + "/v1/completions", body)
            self.assertEqual(got, 400, raw)
            self.assertEqual(json.loads(raw)["error"]["param"], param, raw)

    def test_12_tool_calls(self):
        """tools with tool_choice required and a named function give well-formed tool_calls
        whose arguments the `jsonschema` package validates (streaming and not); a
        conversation carrying the calls and a tool result continues."""
        weather = {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 40},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}
        tools = [{"type": "function", "function": {
                     "name": "get_weather", "description": "Current weather in a city.",
                     "parameters": weather}},
                 {"type": "function", "function": {
                     "name": "add", "description": "Add two integers.",
                     "parameters": {"type": "object", "properties": {
                         "a": {"type": "integer"}, "b": {"type": "integer"}},
                         "required": ["a", "b"]}}}]
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        question = [{"role": "user", "content": "What is the weather in Paris?"}]

        def check(calls, only=None):
            self.assertGreater(len(calls), 0)
            for c in calls:
                self.assertEqual(c.type, "function")
                self.assertRegex(c.id, r"^call_[A-Za-z0-9]{24}$")
                self.assertIn(c.function.name, schemas if only is None else [only])
                jsonschema.validate(json.loads(c.function.arguments), schemas[c.function.name],
                                    format_checker=FORMATS)

        for seed in range(4):  # required, whole
            r = self.client.chat.completions.create(
                model=self.model, messages=question, tools=tools, tool_choice="required",
                max_tokens=200, temperature=0.8, seed=seed)
            self.assertEqual(r.choices[0].finish_reason, "tool_calls", r)
            check(r.choices[0].message.tool_calls)
        first = r.choices[0].message

        # A named function, streamed: calls arrive as delta.tool_calls chunks.
        for parallel in (True, False):
            calls, finish = {}, None
            for chunk in self.client.chat.completions.create(
                    model=self.model, messages=question, tools=tools, stream=True,
                    tool_choice={"type": "function", "function": {"name": "get_weather"}},
                    parallel_tool_calls=parallel, max_tokens=200, temperature=0.8, seed=11):
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                for d in delta.tool_calls or []:
                    c = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                    c["id"] = d.id or c["id"]
                    c["name"] += d.function.name or ""
                    c["arguments"] += d.function.arguments or ""
                finish = chunk.choices[0].finish_reason or finish
            self.assertEqual(finish, "tool_calls")
            self.assertEqual(sorted(calls), list(range(len(calls))))
            if not parallel:
                self.assertEqual(len(calls), 1)
            check([openai.types.chat.ChatCompletionMessageToolCall(
                id=c["id"], type="function",
                function={"name": c["name"], "arguments": c["arguments"]})
                for c in calls.values()], only="get_weather")

        # The conversation goes on with the calls and a result.
        history = question + [
            {"role": "assistant", "content": None,
             "tool_calls": [c.model_dump() for c in first.tool_calls]}]
        history += [{"role": "tool", "tool_call_id": c.id, "content": "18 C, sunny"}
                    for c in first.tool_calls]
        r = self.client.chat.completions.create(model=self.model, messages=history, tools=tools,
                                                max_tokens=40, temperature=0)
        self.assertIn(r.choices[0].finish_reason, ["stop", "length", "tool_calls"])
        if r.choices[0].finish_reason != "tool_calls":
            self.assertTrue(r.choices[0].message.content)
        r = self.client.chat.completions.create(model=self.model, messages=history, tools=tools,
                                                tool_choice="none", max_tokens=20, temperature=0)
        self.assertIsNone(r.choices[0].message.tool_calls)
        self.assertTrue(r.choices[0].message.content)

        for body, param in [
                ({"tool_choice": {"type": "function", "function": {"name": "nope"}}},
                 "tool_choice"),
                ({"tool_choice": "required", "tools": [{"type": "function", "function": {
                    "name": "f", "parameters": {"type": "object", "not": {}}}}]},
                 "tools[0].function.parameters"),
                ({"tools": [{"type": "function", "function": {"name": "a b"}}]},
                 "chat.tools[0].name"),
                ({"tool_choice": "required", "tools": None}, "tool_choice")]:
            req = {"messages": question, "tools": tools, **body}
            got, raw = post(self.cluster.http + "/v1/chat/completions", req)
            self.assertEqual(got, 400, raw)
            self.assertEqual(json.loads(raw)["error"]["param"], param, raw)

    def test_13_logit_bias_echo_best_of(self):
        url = self.cluster.http
        tok = json.loads(post(url + "/tokenize", {"prompt": " hello"})[1])["tokens"]
        self.assertEqual(len(tok), 1, tok)
        # A +100 bias makes the token all there is, at any temperature.
        r = self.client.completions.create(model=self.model, prompt="Once upon a time",
                                           max_tokens=6, temperature=0.9, seed=1,
                                           logit_bias={str(tok[0]): 100})
        self.assertEqual(r.choices[0].text, " hello" * 6)
        # -100 on the greedy answer's first token moves greedy elsewhere.
        plain = self.client.completions.create(model=self.model, prompt="The capital of France is",
                                               max_tokens=4, temperature=0, logprobs=0)
        first = json.loads(post(url + "/tokenize", {"prompt": plain.choices[0].logprobs.tokens[0]})[1])
        banned = self.client.completions.create(
            model=self.model, prompt="The capital of France is", max_tokens=4, temperature=0,
            logprobs=0, logit_bias={str(first["tokens"][0]): -100})
        self.assertNotEqual(banned.choices[0].logprobs.tokens[0], plain.choices[0].logprobs.tokens[0])
        got, raw = post(url + "/v1/completions", {"prompt": "x", "logit_bias": {"abc": 1}})
        self.assertEqual((got, json.loads(raw)["error"]["param"]), (400, "logit_bias"), raw)
        got, raw = post(url + "/v1/completions", {"prompt": "x", "logit_bias": {"99999999": 1}})
        self.assertEqual((got, json.loads(raw)["error"]["param"]), (400, "logit_bias"), raw)

        # echo: the prompt, then exactly what the same request gives without it.
        prompt = "The capital of France is"
        base = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=5,
                                              temperature=0)
        echoed = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=5,
                                                temperature=0, echo=True)
        self.assertEqual(echoed.choices[0].text, prompt + base.choices[0].text)
        streamed = "".join(c.choices[0].text for c in self.client.completions.create(
            model=self.model, prompt=prompt, max_tokens=5, temperature=0, echo=True, stream=True)
            if c.choices)
        self.assertEqual(streamed, prompt + base.choices[0].text)
        ids = json.loads(post(url + "/tokenize", {"prompt": prompt})[1])["tokens"]
        by_ids = self.client.completions.create(model=self.model, prompt=ids, max_tokens=5,
                                                temperature=0, echo=True)
        self.assertTrue(by_ids.choices[0].text.startswith(prompt), by_ids.choices[0].text)

        # best_of: the n of the best_of candidates with the highest total log-probability.
        # The candidates are run here separately (choice i samples with seed + i), and
        # their totals summed from the logprobs the server reports.
        kwargs = dict(model=self.model, prompt="Name a colour:", max_tokens=8, temperature=1.0,
                      seed=21)
        every = self.client.completions.create(n=5, logprobs=0, **kwargs)
        totals = [(sum(c.logprobs.token_logprobs), c.index, c.text) for c in every.choices]
        ranked = [t for _, _, t in sorted(totals, key=lambda x: (-x[0], x[1]))]
        best = self.client.completions.create(n=2, best_of=5, **kwargs)
        self.assertEqual([c.text for c in best.choices], ranked[:2])
        self.assertEqual([c.index for c in best.choices], [0, 1])
        self.assertIsNone(best.choices[0].logprobs)
        self.assertEqual(best.usage.completion_tokens, every.usage.completion_tokens)
        for body in [{"prompt": "x", "best_of": 2, "n": 3}, {"prompt": "x", "best_of": 3, "stream": True},
                     {"prompt": "x", "echo": True, "logprobs": 1}]:
            got, raw = post(url + "/v1/completions", body)
            self.assertEqual(got, 400, raw)

    def test_14_random_constraints_at_temperature_one(self):
        """Random schemas (tests/reference/make_schema_golden.py's generator) and random
        regular expressions, sampled at temperature 1 with several seeds: every answer that
        ends with "stop" validates (jsonschema, under tandem's documented reading) or
        matches in full (Python's re); answers cut by max_tokens are counted, not judged."""
        sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
        import make_schema_golden as gen
        import random
        rng = random.Random(7)
        judged = cut = 0
        for i in range(24):
            schema = gen.gen_schema(rng, 1)
            for seed in (i, 100 + i):
                r = self.client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": "JSON, please."}],
                    max_tokens=200, temperature=1.0, seed=seed,
                    response_format={"type": "json_schema",
                                     "json_schema": {"name": "s", "schema": schema}})
                if r.choices[0].finish_reason == "length":
                    cut += 1
                    continue
                self.assertEqual(r.choices[0].finish_reason, "stop")
                with self.subTest(schema=json.dumps(schema), seed=seed):
                    jsonschema.validate(json.loads(r.choices[0].message.content),
                                        gen.strict(schema), format_checker=FORMATS)
                judged += 1

        def regex(depth=0):
            atoms = ["a", "b", "[a-c]", "[0-9]", "\\d", "x", "[^a-z\\n]", "é", "\\.", "-"]
            if depth < 2:
                atoms += ["(" + regex(depth + 1) + "|" + regex(depth + 1) + ")"] * 2
            out = ""
            for _ in range(rng.randint(1, 4)):
                out += rng.choice(atoms) + rng.choice(["", "", "?", "{1,3}", "{2}", "*", "+"])
            return out
        for i in range(24):
            pattern = regex()
            for seed in (i, 100 + i):
                r = self.client.completions.create(model=self.model, prompt="Text:", max_tokens=60,
                                                   temperature=1.0, seed=seed,
                                                   extra_body={"guided_regex": pattern})
                if r.choices[0].finish_reason == "length":
                    cut += 1
                    continue
                self.assertIsNotNone(re.fullmatch(pattern, r.choices[0].text),
                                     (pattern, r.choices[0].text))
                judged += 1
        print(f"random constraints: {judged} answers judged, {cut} cut by max_tokens",
              file=sys.stderr)
        self.assertGreater(judged, 3 * cut, (judged, cut))

    def decode_metrics(self):
        text = get(self.cluster.metrics_url("decode-0"))[1].decode()
        return parse_metrics(text)

    def test_06_disconnect_frees_the_sequence(self):
        host, port = urllib.parse.urlsplit(self.cluster.http).netloc.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
        conn.request("POST", "/v1/completions", json.dumps(
            {"prompt": "Count to a thousand:", "max_tokens": 4000, "ignore_eos": True,
             "stream": True, "temperature": 0}), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        events = 0
        while events < 3:
            line = resp.fp.readline()
            if line.startswith(b"data: "):
                events += 1
        m = self.decode_metrics()
        self.assertEqual(value(m, "tandem:num_requests_running"), 1)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        deadline = time.time() + 10
        while time.time() < deadline:
            m = self.decode_metrics()
            if value(m, "tandem:num_requests_running") == 0 and \
                    value(m, "tandem:kv_cache_usage_perc") == 0:
                break
            time.sleep(0.05)
        self.assertEqual(value(m, "tandem:num_requests_running"), 0, "sequence still running")
        self.assertEqual(value(m, "tandem:kv_cache_usage_perc"), 0, "KV blocks still held")
        router = parse_metrics(get(self.cluster.metrics_url("router"))[1].decode())
        self.assertGreaterEqual(value(router, "tandem:request_errors_total", code="CANCELLED"), 1)

    def test_07_metrics_pass_promtool_and_cover_the_design(self):
        # The tests before sent short prompts, which `tandem serve` prefills where they
        # decode (--disagg-min-tokens, 1,024 by default); one past that goes through the
        # prefill worker and a KV transfer, so every metric of the design has samples.
        long_prompt = " ".join(f"item{i}" for i in range(600))
        r = self.client.completions.create(model=self.model, prompt=long_prompt, max_tokens=2)
        self.assertGreater(r.usage.prompt_tokens, 1024)
        router = parse_metrics(get(self.cluster.metrics_url("router"))[1].decode())
        self.assertGreaterEqual(value(router, "tandem:prefill_placement_total", where="remote"), 1)
        self.assertGreaterEqual(value(router, "tandem:prefill_placement_total", where="local"), 1)
        names = set()
        scrapes = []
        for name in self.cluster.ports:
            status, body = get(self.cluster.metrics_url(name))
            self.assertEqual(status, 200, name)
            text = body.decode()
            scrapes.append(text)
            code, out = promtool(text)
            # The only lint allowed is the one the `tandem:` prefix (vLLM's naming) draws;
            # test_10 runs promtool on the `tandem_` prefix with no lint at all.
            lints = [l for l in out.splitlines() if l.strip()]
            self.assertIn(code, (0, 3), out)
            for l in lints:
                self.assertTrue(l.endswith("metric names should not contain ':'"), l)
            for (n, labels) in parse_metrics(text):
                names.add(re.sub(r"_(bucket|sum|count)$", "", n) if "_seconds" in n else n)
                self.assertIn(("role", name.split("-")[0]), labels, n)
        for metric in DESIGN_METRICS:
            self.assertIn("tandem:" + metric, names, metric)
        # The Grafana dashboard uses only metrics the processes export.
        paths = []
        for i, text in enumerate(scrapes):
            p = os.path.join(self.cluster.dir, f"scrape{i}.txt")
            with open(p, "w") as f:
                f.write(text)
            paths.append(p)
        r = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "grafana",
                                                         "check_dashboard.py"),
                            os.path.join(ROOT, "deploy", "grafana", "tandem.json"), *paths],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_08_prometheus_scrapes_the_cluster_under_load(self):
        if shutil.which("prometheus") is None:
            self.fail("prometheus is not installed (scripts/setup.sh installs it)")
        port = free_port()
        data = os.path.join(self.cluster.dir, "prometheus")
        targets = [f"127.0.0.1:{p['http_port']}" for p in self.cluster.endpoints["processes"]]
        config = os.path.join(self.cluster.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: tandem\n    static_configs:\n"
                    f"      - targets: {json.dumps(targets)}\n")
        prom = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            api = f"http://127.0.0.1:{port}/api/v1"
            deadline = time.time() + 60
            while time.time() < deadline:
                try:
                    status, body = get(api + "/targets")
                    active = json.loads(body)["data"]["activeTargets"]
                    if len(active) == 3 and all(t["health"] == "up" for t in active):
                        break
                except (urllib.error.URLError, ConnectionError, KeyError, ValueError):
                    pass
                time.sleep(0.5)
            self.assertEqual(sorted(t["health"] for t in active), ["up"] * 3)

            # Load: 6 requests at once, while Prometheus scrapes every second.
            def one(i):
                self.client.completions.create(model=self.model, prompt=f"Load {i}:",
                                               max_tokens=16, temperature=0)
            threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(TIMEOUT)
            query = ('histogram_quantile(0.5, sum by (le) '
                     '(rate(tandem:time_to_first_token_seconds_bucket[1m])))')
            result = None
            deadline = time.time() + 30
            while time.time() < deadline:
                status, body = get(api + "/query?" + urllib.parse.urlencode({"query": query}))
                r = json.loads(body)
                if r["status"] == "success" and r["data"]["result"]:
                    v = float(r["data"]["result"][0]["value"][1])
                    if math.isfinite(v):
                        result = v
                        break
                time.sleep(1)
            self.assertIsNotNone(result, "histogram_quantile returned no number")
            self.assertGreater(result, 0)
            print(f"  Prometheus: p50 TTFT over the last minute = {result:.3f} s", flush=True)
        finally:
            prom.terminate()
            prom.wait(30)

    def test_09_router_finds_workers_by_dns_name(self):
        """A second router given the workers as `localhost:PORT` (a DNS name, resolved and
        re-resolved by the router) becomes ready and serves."""
        router_bin = os.path.join(os.path.dirname(ARGS.tandem_bin), "tandem-router")
        port_file = os.path.join(self.cluster.dir, "dns-router.port")
        p, d = self.cluster.ports["prefill-0"], self.cluster.ports["decode-0"]
        proc = subprocess.Popen(
            [router_bin, "--model", ARGS.model, "--port", "0", "--http-port", "0",
             "--port-file", port_file, "--prefill", f"localhost:{p['grpc_port']}",
             "--decode", f"localhost:{d['grpc_port']}", "--discovery-interval-ms", "200"],
            env=self.cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 60
            http_port = 0
            while time.time() < deadline and not http_port:
                if os.path.exists(port_file):
                    http_port = int(open(port_file).read().split()[1])
                time.sleep(0.05)
            url = f"http://127.0.0.1:{http_port}"
            while time.time() < deadline and get(url + "/health")[0] != 200:
                time.sleep(0.1)
            self.assertEqual(get(url + "/health")[0], 200)
            status, body = post(url + "/v1/completions",
                                {"prompt": "Hello", "max_tokens": 3, "temperature": 0})
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["usage"]["completion_tokens"], 3)
        finally:
            proc.terminate()
            proc.wait(30)

    def test_10_bench_tools_drive_both_apis(self):
        """`tandem bench serve` through HTTP and gRPC, and `bench prefill-sweep`, on this
        cluster: every request completes and the token counts are the ones asked for."""
        for backend, endpoint in (("openai", self.cluster.http), ("grpc", self.cluster.grpc)):
            r = subprocess.run(
                [ARGS.tandem_bin, "bench", "serve", "--backend", backend, "--endpoint", endpoint,
                 "--tokenizer", ARGS.model, "--num-prompts", "3", "--max-concurrency", "2",
                 "--random-input-len", "24", "--random-output-len", "5", "--ignore-eos",
                 "--num-warmups", "1", "--goodput", "ttft:600000", "--json"],
                capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.loads(r.stdout)
            self.assertEqual((j["completed"], j["failed"]), (3, 0), backend)
            self.assertEqual(j["total_output_tokens"], 15, backend)
            self.assertEqual(j["total_input_tokens"], 72, backend)
            self.assertGreater(j["ttft_ms"]["p50"], 0)
            self.assertGreater(j["tpot_ms"]["p50"], 0)
            self.assertAlmostEqual(j["goodput"], j["request_throughput"], places=6)
        r = subprocess.run(
            [ARGS.tandem_bin, "bench", "prefill-sweep", "--endpoint", self.cluster.grpc,
             "--model", ARGS.model, "--lengths", "16,64,128", "--repeats", "1", "--json"],
            capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(len(j["points"]), 3)
        self.assertGreater(j["fit"]["slope_s_per_token"], 0, "longer prompts take longer")

    def test_99_nothing_leaks(self):
        deadline = time.time() + 10
        while time.time() < deadline:
            m = self.decode_metrics()
            if value(m, "tandem:num_requests_running") == 0 and \
                    value(m, "tandem:kv_cache_usage_perc") == 0:
                break
            time.sleep(0.1)
        self.assertEqual(value(m, "tandem:kv_cache_usage_perc"), 0)
        p = parse_metrics(get(self.cluster.metrics_url("prefill-0"))[1].decode())
        self.assertEqual(value(p, "tandem:kv_cache_usage_perc"), 0)
        self.assertEqual(value(p, "tandem:num_requests_running"), 0)


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    def run(*cmd):
        subprocess.run(cmd, check=True, capture_output=True, cwd=d, timeout=60)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
        "-out", "ca.pem", "-days", "2", "-subj", "/CN=tandem-test-ca")
    for name, usage, san in (("server", "serverAuth", "IP:127.0.0.1,DNS:localhost"),
                             ("client", "clientAuth", "DNS:tandem-test-client")):
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", f"/CN={name}")
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(f"subjectAltName={san}\nextendedKeyUsage={usage}\n")
        run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return {n: os.path.join(d, n) for n in
            ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


def thread_count(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


class BurstTest(unittest.TestCase):
    """Far more concurrent streams than the router's HTTP front keeps open: every
    connection gets a complete answer or a clean 503, none is reset, and the router's
    threads stay fixed in number (the front holds no thread per connection)."""

    MAX_CONNECTIONS = 16
    STREAMS = 300

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster(extra=["--http-max-connections", str(cls.MAX_CONNECTIONS)])
        router = [p for p in json.load(open(cls.cluster.endpoints_file))["processes"]
                  if p["name"] == "router"][0]
        cls.router_pid = router["pid"]

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def test_a_burst_is_answered_not_reset(self):
        host, port = urllib.parse.urlparse(self.cluster.http).netloc.rsplit(":", 1)
        before = thread_count(self.router_pid)
        results, lock = [], threading.Lock()
        barrier = threading.Barrier(self.STREAMS)
        body = json.dumps({"prompt": "Count to ten:", "max_tokens": 6, "stream": True,
                           "ignore_eos": True})

        def one():
            barrier.wait()
            try:
                c = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
                c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read().decode()
                out = (r.status, data, r.getheader("Retry-After"))
                c.close()
            except Exception as e:  # a reset connection lands here
                out = (type(e).__name__, str(e), None)
            with lock:
                results.append(out)

        threads = [threading.Thread(target=one) for _ in range(self.STREAMS)]
        most = before
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            most = max(most, thread_count(self.router_pid))
            time.sleep(0.02)
        for t in threads:
            t.join()
        done = [r for r in results if r[0] == 200]
        busy = [r for r in results if r[0] == 503]
        self.assertEqual(len(done) + len(busy), self.STREAMS,
                         sorted({str(r[0]) + " " + r[1][:80] for r in results
                                 if r[0] not in (200, 503)}))
        for status, data, _ in done:
            self.assertTrue(data.rstrip().endswith("data: [DONE]"), data[-200:])
            self.assertNotIn('"error"', data)
        for status, data, retry_after in busy:
            err = json.loads(data)["error"]
            self.assertEqual(err["type"], "service_unavailable")
            self.assertEqual(retry_after, "1")
        # At least the bound is served; the burst exceeds it.
        self.assertGreaterEqual(len(done), self.MAX_CONNECTIONS)
        self.assertGreater(len(busy), 0)
        self.assertLessEqual(most, before + 4, (before, most))
        # And it keeps serving.
        status, raw = post(self.cluster.http + "/v1/completions",
                           {"prompt": "Hi", "max_tokens": 2})
        self.assertEqual(status, 200, raw)


class DrainTest(unittest.TestCase):
    """SIGTERM: the router takes no new HTTP request (503, as gRPC refuses) while a
    stream that was running finishes."""

    def test_new_requests_get_503_while_a_running_stream_finishes(self):
        cluster = Cluster(drain_ms=120000)
        try:
            host, port = urllib.parse.urlparse(cluster.http).netloc.rsplit(":", 1)
            c = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
            c.request("POST", "/v1/completions",
                      json.dumps({"prompt": "Count slowly:", "max_tokens": 400, "stream": True,
                                  "ignore_eos": True}),
                      {"Content-Type": "application/json"})
            running = c.getresponse()
            self.assertEqual(running.status, 200)
            self.assertTrue(running.readline().startswith(b"data: "))  # it is decoding
            os.kill(cluster.proc.pid, signal.SIGTERM)  # tandem serve drains the router
            deadline = time.time() + 20
            while True:
                status, raw = post(cluster.http + "/v1/completions",
                                   {"prompt": "Hi", "max_tokens": 2})
                if status == 503:
                    break
                self.assertEqual(status, 200, raw)  # before the router saw the signal
                self.assertLess(time.time(), deadline, "new requests were still taken")
                time.sleep(0.05)
            err = json.loads(raw)["error"]
            self.assertEqual(err["type"], "service_unavailable")
            self.assertIn("draining", err["message"])
            status, _ = get(cluster.http + "/health")
            self.assertEqual(status, 503)
            rest = running.read().decode()
            self.assertTrue(rest.rstrip().endswith("data: [DONE]"), rest[-300:])
            self.assertIn('"finish_reason":"length"', rest.replace(" ", ""))
            c.close()
        finally:
            cluster.stop()


class GatewayMetricsTest(unittest.TestCase):
    """The router's /metrics carries the Gateway API Inference Extension's three signals
    for the pool it fronts — num_requests_waiting, num_requests_running and
    kv_cache_usage_perc (decode pool, 0-1) — and cache_config_info; they rise while a
    load runs and fall back to 0 when it ends (issue #22). The decode pool is small and
    the prompts long (the router reserves a prompt's blocks before it leaves the queue),
    so part of the load waits in the router's queue."""

    def test_gateway_gauges_follow_a_load(self):
        cluster = Cluster(extra=["--kv-cache-bytes", str(24 << 20), "--max-model-len", "256"])
        try:
            def gauges():
                m = parse_metrics(get(cluster.metrics_url("router"))[1].decode())
                one = {n: v for (n, _), v in m.items()}
                info = [dict(l) for (n, l), v in m.items() if n == "tandem:cache_config_info"]
                return (one["tandem:num_requests_waiting"], one["tandem:num_requests_running"],
                        one["tandem:kv_cache_usage_perc"], info)
            deadline = time.time() + 10
            while gauges()[3] == [] and time.time() < deadline:
                time.sleep(0.2)  # the first poll of the workers
            waiting, running, usage, info = gauges()
            self.assertEqual((waiting, running, usage), (0, 0, 0))
            decode = parse_metrics(get(cluster.metrics_url("decode-0"))[1].decode())
            worker_info = [dict(l) for (n, l), v in decode.items()
                           if n == "tandem:cache_config_info"]
            self.assertEqual(len(info), 1)
            self.assertEqual(info[0]["num_gpu_blocks"], worker_info[0]["num_gpu_blocks"])
            self.assertEqual(info[0]["block_size"], worker_info[0]["block_size"])
            code, out = promtool(get(cluster.metrics_url("router"))[1].decode())
            self.assertIn(code, (0, 3), out)

            words = " ".join(["apple", "river", "stone", "cloud", "maple"] * 28)

            def one_request(i):
                # ~150 prompt tokens: 10 of the pool's ~34 blocks each.
                body = {"prompt": f"Request {i}: {words}", "max_tokens": 60,
                        "temperature": 0, "ignore_eos": True}
                status, _ = post(cluster.http + "/v1/completions", body)
                return status
            seen = {"waiting": 0, "running": 0, "usage": 0.0}
            with concurrent.futures.ThreadPoolExecutor(12) as ex:
                futures = [ex.submit(one_request, i) for i in range(12)]
                while not all(f.done() for f in futures):
                    waiting, running, usage, _ = gauges()
                    seen["waiting"] = max(seen["waiting"], waiting)
                    seen["running"] = max(seen["running"], running)
                    seen["usage"] = max(seen["usage"], usage)
                    time.sleep(0.1)
                self.assertEqual([f.result() for f in futures], [200] * 12)
            self.assertGreater(seen["running"], 0, seen)
            self.assertGreater(seen["waiting"], 0, seen)
            self.assertGreater(seen["usage"], 0.5, seen)
            self.assertLessEqual(seen["usage"], 1.0, seen)
            deadline = time.time() + 10
            while gauges()[:3] != (0, 0, 0) and time.time() < deadline:
                time.sleep(0.2)  # the next poll of the decode worker
            self.assertEqual(gauges()[:3], (0, 0, 0))
        finally:
            cluster.stop()


def test_output_dir():
    """Where tests leave files for people to look at (screenshots): $TANDEM_TEST_OUTPUT,
    else test-output/ beside the binaries' bin/."""
    out = os.environ.get("TANDEM_TEST_OUTPUT") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(ARGS.tandem_bin))), "test-output")
    os.makedirs(out, exist_ok=True)
    return out


class WebPageTest(unittest.TestCase):
    """The router's page at / in headless Chromium (issue #22): every worker listed
    healthy, a chat message sent through the playground, the streamed answer equal to
    the engine's greedy one, TTFT and tokens/s shown, the request shown as curl, a
    screenshot saved; the same behind --api-key (the page asks for the key, which never
    reaches a URL)."""

    PROMPT = "What is the capital of France?"

    def drive(self, cluster, key, screenshot):
        import browser  # tests/serving/browser.py (websocket-client from requirements.txt)
        workers = [n for n in cluster.ports if n != "router"]
        b = browser.Browser()
        try:
            b.navigate(cluster.http + "/")
            if key:
                b.wait_for("!document.getElementById('key-panel').hidden")
                self.assertEqual(b.eval("document.querySelectorAll('#workers tbody tr').length"), 0)
                b.eval(f"document.getElementById('api-key').value = {json.dumps(key)}")
                b.eval("document.getElementById('api-key-save').click()")
            b.wait_for("document.querySelectorAll('#workers tbody tr[data-healthy=true]').length"
                       f" === {len(workers)}")
            self.assertTrue(b.eval("document.getElementById('key-panel').hidden"))
            roles = b.eval("[...document.querySelectorAll('#workers tbody tr')]"
                           ".map(r => r.dataset.role).sort().join(',')")
            self.assertEqual(roles, ",".join(sorted(n.split("-")[0] for n in workers)))
            # Each worker's KV transports (a CPU cluster: the gRPC stream, "host").
            self.assertEqual(b.eval("[...document.querySelectorAll('#workers tbody tr')]"
                                    ".map(r => r.children[3].textContent)"), ["host"] * len(workers))
            b.eval("document.getElementById('temperature').value = '0'")
            b.eval("document.getElementById('max_tokens').value = '64'")
            b.eval(f"document.getElementById('prompt').value = {json.dumps(self.PROMPT)}")
            b.eval("document.getElementById('send').click()")
            state = b.wait_for("['done', 'error'].includes(document.getElementById('status')"
                               ".dataset.state) && document.getElementById('status').dataset.state")
            answer = b.eval("[...document.querySelectorAll('.msg')].map(m => m.className + ': ' +"
                            " m.textContent).join(' | ')")
            self.assertEqual(state, "done", answer)
            self.assertEqual(b.eval("document.querySelector('.msg.assistant').textContent"),
                             reference(self.PROMPT, 64, chat=True)["text"])
            ttft = float(b.eval("document.getElementById('ttft').textContent"))
            self.assertGreater(ttft, 0)
            self.assertLess(ttft, 60000)
            self.assertGreater(float(b.eval("document.getElementById('tps').textContent")), 0)
            curl = b.eval("document.getElementById('curl').textContent")
            self.assertIn("/v1/chat/completions", curl)
            self.assertIn(json.dumps(self.PROMPT)[1:-1], curl)
            if key:
                self.assertNotIn(key, curl)
                self.assertIn("$TANDEM_API_KEY", curl)
                self.assertNotIn(key, b.eval("location.href"))
            time.sleep(1.2)  # a refresh with the request's counters
            b.screenshot(os.path.join(test_output_dir(), screenshot))
        finally:
            b.close()

    def test_page_lists_the_workers_and_streams_a_chat(self):
        cluster = Cluster()
        try:
            status, body = get(cluster.http + "/")
            self.assertEqual(status, 200)
            self.assertIn(b"<title>tandem</title>", body)
            status, body = get(cluster.http + "/v1/cluster")
            self.assertEqual(status, 200)
            c = json.loads(body)
            self.assertEqual({w["role"] for w in c["workers"]}, {"prefill", "decode"})
            for w in c["workers"]:
                self.assertTrue(w["healthy"], w)
                self.assertEqual(w["kv_transports"], ["host"], w)
                self.assertGreater(w["num_blocks"], 0, w)
            self.assertTrue(c["router"]["ready"])
            self.drive(cluster, None, "web_page.png")
        finally:
            cluster.stop()

    def test_page_asks_for_the_api_key(self):
        key = "page-key-0123"
        cluster = Cluster(env=dict(os.environ, TANDEM_API_KEY=key))
        try:
            self.assertEqual(get(cluster.http + "/")[0], 200)  # the page itself is public
            self.assertEqual(get(cluster.http + "/v1/cluster")[0], 401)
            status, _ = get(cluster.http + "/v1/cluster",
                            headers={"Authorization": "Bearer " + key})
            self.assertEqual(status, 200)
            self.drive(cluster, key, "web_page_api_key.png")
        finally:
            cluster.stop()


class SpeculativeClusterTest(unittest.TestCase):
    """`tandem serve --speculative ngram` and `--draft-model` (the model as its own draft):
    greedy answers equal the single-process engine's without speculation (issue #21);
    `disable_speculation` keeps a request from drafting and is validated; the decode
    worker exports vLLM's spec_decode_* counters, which promtool accepts."""

    PROMPTS = ["Copy this exactly: the red fox, the red fox, the red fox ran home.",
               "Write the numbers from 1 to 20, separated by commas."]

    def check(self, extra, all_accepted):
        cluster = Cluster(extra=extra + ["--num-speculative-tokens", "4"])
        try:
            client = openai.OpenAI(base_url=cluster.http + "/v1", api_key="x", timeout=TIMEOUT)
            model = client.models.list().data[0].id

            def total(name):
                m = parse_metrics(get(cluster.metrics_url("decode-0"))[1].decode())
                return sum(v for (n, _), v in m.items() if n == "tandem:" + name)
            # Opted out: the same answer, and no draft.
            ref = reference(self.PROMPTS[0], 40, chat=True)
            r = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": self.PROMPTS[0]}],
                max_tokens=40, temperature=0, extra_body={"disable_speculation": True})
            self.assertEqual(r.choices[0].message.content, ref["text"])
            self.assertEqual(total("spec_decode_num_drafts_total"), 0)
            with self.assertRaises(openai.BadRequestError) as bad:
                client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                    extra_body={"disable_speculation": "yes"})
            self.assertIn("disable_speculation", str(bad.exception))
            for prompt in self.PROMPTS:
                ref = reference(prompt, 40, chat=True)
                r = client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": prompt}], max_tokens=40,
                    temperature=0)
                self.assertEqual(r.choices[0].message.content, ref["text"])
                streamed = "".join(c.choices[0].delta.content or "" for c in
                                   client.chat.completions.create(
                                       model=model, max_tokens=40, temperature=0, stream=True,
                                       messages=[{"role": "user", "content": prompt}])
                                   if c.choices)
                self.assertEqual(streamed, ref["text"])
            text = get(cluster.metrics_url("decode-0"))[1].decode()
            code, out = promtool(text)
            self.assertIn(code, (0, 3), out)  # only the `tandem:` prefix's lint (see test_07)
            for line in filter(str.strip, out.splitlines()):
                self.assertTrue(line.endswith("metric names should not contain ':'"), line)
            self.assertGreater(total("spec_decode_num_drafts_total"), 0)
            proposed = total("spec_decode_num_draft_tokens_total")
            self.assertGreater(proposed, 0)
            accepted = total("spec_decode_num_accepted_tokens_total")
            self.assertGreater(accepted, 0)
            if all_accepted:  # greedy drafts of the target itself: every one holds
                self.assertEqual(accepted, proposed)
            self.assertEqual(total("spec_decode_num_accepted_tokens_per_pos_total"), accepted)
        finally:
            cluster.stop()

    def test_ngram_greedy_answers_equal_plain_decoding(self):
        self.check(["--speculative", "ngram"], all_accepted=False)

    def test_draft_model_greedy_answers_equal_plain_decoding(self):
        self.check(["--speculative", "draft", "--draft-model", ARGS.model], all_accepted=True)


class SecurityTest(unittest.TestCase):
    """--api-key, TLS and mTLS on the router; key forwarded to the workers."""

    KEY = "s3cret-key"

    @classmethod
    def setUpClass(cls):
        cls.certdir = tempfile.mkdtemp(prefix="tandem-certs-")
        cls.certs = make_certs(cls.certdir)
        env = dict(os.environ, TANDEM_API_KEY=cls.KEY)
        cls.cluster = Cluster(extra=["--tls-cert", cls.certs["server.pem"], "--tls-key",
                                     cls.certs["server.key"], "--tls-client-ca",
                                     cls.certs["ca.pem"], "--metrics-prefix", "tandem_"],
                              env=env)
        cls.ctx = ssl.create_default_context(cafile=cls.certs["ca.pem"])
        cls.ctx.load_cert_chain(cls.certs["client.pem"], cls.certs["client.key"])

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        shutil.rmtree(cls.certdir, ignore_errors=True)

    def test_http_needs_the_key_but_probes_and_metrics_do_not(self):
        url = self.cluster.http
        self.assertTrue(url.startswith("https://"))
        status, body = post(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 2},
                            context=self.ctx)
        self.assertEqual(status, 401)
        self.assertEqual(json.loads(body)["error"]["type"], "authentication_error")
        status, _ = post(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 2},
                         headers={"Authorization": "Bearer wrong"}, context=self.ctx)
        self.assertEqual(status, 401)
        self.assertEqual(get(url + "/v1/models", context=self.ctx)[0], 401)
        self.assertEqual(get(url + "/health", context=self.ctx)[0], 200)
        self.assertEqual(get(url + "/metrics", context=self.ctx)[0], 200)

        client = openai.OpenAI(
            base_url=url + "/v1", api_key=self.KEY, timeout=TIMEOUT, max_retries=0,
            http_client=openai.DefaultHttpxClient(verify=self.ctx))
        model = client.models.list().data[0].id
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say hi"}], max_tokens=8,
            temperature=0, stream=True) if c.choices)
        self.assertTrue(text)

    def test_https_without_a_client_certificate_is_refused(self):
        ctx = ssl.create_default_context(cafile=self.certs["ca.pem"])
        with self.assertRaises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(self.cluster.http + "/health", timeout=TIMEOUT, context=ctx).read()

    def client(self, *extra):
        return subprocess.run(
            [ARGS.tandem_bin, "client", "--endpoint", self.cluster.grpc, "--prompt", "Hello",
             "--max-tokens", "6", "--temperature", "0", "--timeout", "60", *extra],
            capture_output=True, text=True, timeout=120, env={"PATH": os.environ["PATH"]})

    def test_grpc_with_tls_and_key_streams(self):
        tls = ["--tls-ca", self.certs["ca.pem"], "--tls-cert", self.certs["client.pem"],
               "--tls-key", self.certs["client.key"]]
        ok = self.client(*tls, "--api-key", self.KEY, "--json")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertEqual(len(json.loads(ok.stdout)["token_ids"]), 6)
        no_key = self.client(*tls)
        self.assertNotEqual(no_key.returncode, 0)
        self.assertIn("UNAUTHENTICATED", no_key.stderr)
        wrong_key = self.client(*tls, "--api-key", "nope")
        self.assertIn("UNAUTHENTICATED", wrong_key.stderr)
        no_cert = self.client("--tls-ca", self.certs["ca.pem"], "--api-key", self.KEY)
        self.assertNotEqual(no_cert.returncode, 0)
        self.assertIn("UNAVAILABLE", no_cert.stderr)
        plaintext = self.client("--api-key", self.KEY)
        self.assertNotEqual(plaintext.returncode, 0)

    def test_metrics_with_underscore_prefix_are_lint_clean(self):
        for name in self.cluster.ports:
            ctx = self.ctx if name == "router" else None
            status, body = get(self.cluster.metrics_url(name), context=ctx)
            self.assertEqual(status, 200, name)
            text = body.decode()
            self.assertIn("tandem_num_requests_running", text)
            code, out = promtool(text)
            self.assertEqual(code, 0, f"{name}: {out}")


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--tandem-bin", required=True)
    parser.add_argument("--model", default=os.environ.get(
        "TANDEM_MODEL", os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf")))
    parser.add_argument("--exclude", action="append", default=[],
                        help="a test class to leave out (CTest runs the API class beside the rest)")
    ARGS, rest = parser.parse_known_args()
    if ARGS.exclude:
        module = sys.modules[__name__]
        names = [name for name, value in vars(module).items()
                 if isinstance(value, type) and issubclass(value, unittest.TestCase)
                 and name not in ARGS.exclude]
        rest = [*rest, *names]
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
