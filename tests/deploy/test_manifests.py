#!/usr/bin/env python3
"""Checks the deployment surface under deploy/.

1. Renders the Kubernetes overlays (cpu, gpu, router-tls, inference-gateway) with
   `kubectl kustomize`.
2. Validates every rendered object: built-in kinds with kubernetes-validate against the
   newest Kubernetes schema it ships (strict: unknown fields fail); PodMonitor,
   ScaledObject, InferencePool and HTTPRoute (CRDs, no schema there) with structural
   checks below.
3. Asserts what tandem needs of them: gRPC probes on the `grpc` port with the named
   readiness service, ports named grpc/http, the process flags, resources, GPU requests
   only on GPU workers, a grace period above the drain timeout, a locked-down security
   context, headless worker Services the router's --prefill/--decode resolve, a
   PodMonitor over all three roles, and KEDA triggers that query exported metrics.
4. Checks the Dockerfiles: multi-stage, non-root final stage, no registry host names,
   the four binaries copied, and (where this machine can tell) runtime packages that
   exist in Debian 12 and cover what the built binaries link.

Exit status: 0 all passed; 1 a check failed; 77 the kubectl-based checks were skipped
because kubectl is missing (everything else passed) — CTest reports that as skipped.

    test_manifests.py [--kubectl PATH] [--bin-dir DIR] [-v]

Needs PyYAML and kubernetes-validate (tests/deploy/requirements.txt; run.sh sets up a
venv with them).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

import kubernetes_validate

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEPLOY = os.path.join(REPO, "deploy")
K8S = os.path.join(DEPLOY, "k8s")
sys.path.insert(0, os.path.join(DEPLOY, "grafana"))
import check_dashboard  # noqa: E402  (deploy/grafana/check_dashboard.py)

KUBECTL = os.environ.get("TANDEM_KUBECTL") or shutil.which("kubectl")
BIN_DIR = os.environ.get("TANDEM_BIN_DIR") or os.path.join(REPO, "build", "bin")

ROLES = {
    # Deployment name: (component label, container name, readiness gRPC service, binary)
    "tandem-router": ("router", "router", "tandem.v1.Generation", "tandem-router"),
    "tandem-prefill": ("prefill", "prefill", "tandem.v1.PrefillWorker", "tandem-prefill-worker"),
    "tandem-decode": ("decode", "decode", "tandem.v1.DecodeWorker", "tandem-decode-worker"),
}
WORKER_SERVICES = {"tandem-prefill", "tandem-decode"}
BINARIES = ["tandem", "tandem-router", "tandem-prefill-worker", "tandem-decode-worker"]
MODEL_PATH = "/models/smollm2-135m-instruct-q4_1.gguf"


def exported_metrics() -> set[str]:
    with open(os.path.join(HERE, "exported_metrics.txt"), encoding="utf-8") as f:
        return check_dashboard.names_file(f.read())


def render(overlay_dir: str) -> list[dict]:
    proc = subprocess.run([KUBECTL, "kustomize", overlay_dir], capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {overlay_dir} failed:\n{proc.stderr}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def parse_flags(args: list[str]) -> dict[str, str]:
    """--flag value pairs (and --flag=value) of a container's args."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--"):
            raise AssertionError(f"stray argument {a!r} in {args}")
        if "=" in a:
            k, v = a.split("=", 1)
            out[k] = v
            i += 1
        else:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise AssertionError(f"flag {a} has no value in {args}")
            out[a] = args[i + 1]
            i += 2
    return out


def expand_env(value: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion in args; an unknown reference is an error here."""
    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name not in env:
            raise AssertionError(f"$({name}) has no literal env value to expand to")
        return env[name]
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


def labels_match(selector: dict, labels: dict) -> bool:
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def duration_seconds(d: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", d))


def check_keys(where: str, obj: dict, allowed: set[str], required: set[str] = frozenset()):
    if not isinstance(obj, dict):
        raise AssertionError(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = set(obj) - allowed
    if unknown:
        raise AssertionError(f"{where}: unknown field(s) {sorted(unknown)}")
    missing = set(required) - set(obj)
    if missing:
        raise AssertionError(f"{where}: missing field(s) {sorted(missing)}")


def check_metadata(where: str, obj: dict):
    md = obj.get("metadata")
    check_keys(f"{where}.metadata", md, {"name", "namespace", "labels", "annotations"}, {"name"})
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", md["name"]):
        raise AssertionError(f"{where}: bad name {md['name']!r}")


def validate_podmonitor(obj: dict):
    """Structure of a monitoring.coreos.com/v1 PodMonitor (the fields used here)."""
    where = f"PodMonitor {obj['metadata'].get('name')}"
    check_keys(where, obj, {"apiVersion", "kind", "metadata", "spec"}, {"metadata", "spec"})
    check_metadata(where, obj)
    spec = obj["spec"]
    check_keys(f"{where}.spec", spec, {
        "selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels",
        "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit",
        "labelValueLengthLimit", "keepDroppedTargets", "attachMetadata", "scrapeProtocols",
        "scrapeClass"}, {"selector", "podMetricsEndpoints"})
    check_keys(f"{where}.spec.selector", spec["selector"], {"matchLabels", "matchExpressions"})
    for e in spec["selector"].get("matchExpressions") or []:
        check_keys(f"{where} selector expression", e, {"key", "operator", "values"},
                   {"key", "operator"})
        assert e["operator"] in {"In", "NotIn", "Exists", "DoesNotExist"}, e
    eps = spec["podMetricsEndpoints"]
    assert isinstance(eps, list) and eps, f"{where}: no podMetricsEndpoints"
    for ep in eps:
        check_keys(f"{where} endpoint", ep, {
            "port", "portNumber", "targetPort", "path", "scheme", "params", "interval",
            "scrapeTimeout", "tlsConfig", "bearerTokenSecret", "honorLabels",
            "honorTimestamps", "trackTimestampsStaleness", "basicAuth", "oauth2",
            "authorization", "metricRelabelings", "relabelings", "proxyUrl",
            "followRedirects", "enableHttp2", "filterRunning"})
        assert isinstance(ep.get("port"), str) and ep["port"], f"{where}: endpoint port name"
        assert ep.get("path", "/metrics").startswith("/"), ep
        assert ep.get("scheme", "http") in {"http", "https"}, ep
        for k in ("interval", "scrapeTimeout"):
            if k in ep:
                assert DURATION.match(ep[k]), f"{where}: {k} {ep[k]!r} is not a duration"
        if "interval" in ep and "scrapeTimeout" in ep:
            assert duration_seconds(ep["scrapeTimeout"]) <= duration_seconds(ep["interval"]), ep
        if "tlsConfig" in ep:
            check_keys(f"{where} tlsConfig", ep["tlsConfig"], {
                "ca", "cert", "keySecret", "serverName", "insecureSkipVerify"})


def validate_scaledobject(obj: dict, k8s_version: str):
    """Structure of a keda.sh/v1alpha1 ScaledObject with prometheus triggers."""
    where = f"ScaledObject {obj['metadata'].get('name')}"
    check_keys(where, obj, {"apiVersion", "kind", "metadata", "spec"}, {"metadata", "spec"})
    check_metadata(where, obj)
    spec = obj["spec"]
    check_keys(f"{where}.spec", spec, {
        "scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
        "idleReplicaCount", "minReplicaCount", "maxReplicaCount", "advanced", "fallback",
        "triggers"}, {"scaleTargetRef", "triggers"})
    check_keys(f"{where}.spec.scaleTargetRef", spec["scaleTargetRef"],
               {"apiVersion", "kind", "name", "envSourceContainerName"}, {"name"})
    for k in ("pollingInterval", "cooldownPeriod", "minReplicaCount", "maxReplicaCount"):
        if k in spec:
            assert isinstance(spec[k], int) and spec[k] >= 0, f"{where}: {k} must be an int ≥ 0"
    assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100), where
    adv = spec.get("advanced") or {}
    check_keys(f"{where}.spec.advanced", adv, {
        "restoreToOriginalReplicaCount", "horizontalPodAutoscalerConfig", "scalingModifiers"})
    hpa = adv.get("horizontalPodAutoscalerConfig") or {}
    check_keys(f"{where} horizontalPodAutoscalerConfig", hpa, {"name", "behavior"})
    if "behavior" in hpa:
        # KEDA copies it into an autoscaling/v2 HPA: validate it there.
        fake = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "x"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                            "name": "x"},
                         "maxReplicas": 2, "behavior": hpa["behavior"]}}
        try:
            kubernetes_validate.validate(fake, k8s_version, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{where}: advanced.horizontalPodAutoscalerConfig.behavior: "
                                 f"{e.message}") from None
    triggers = spec["triggers"]
    assert isinstance(triggers, list) and triggers, f"{where}: no triggers"
    for t in triggers:
        check_keys(f"{where} trigger", t, {
            "type", "name", "metadata", "metricType", "authenticationRef",
            "useCachedMetrics"}, {"type", "metadata"})
        assert t.get("metricType", "AverageValue") in {"AverageValue", "Value", "Utilization"}, t
        md = t["metadata"]
        assert all(isinstance(v, str) for v in md.values()), \
            f"{where}: trigger metadata values must be strings: {md}"
        if t["type"] == "prometheus":
            check_keys(f"{where} prometheus metadata", md, {
                "serverAddress", "query", "threshold", "activationThreshold", "namespace",
                "customHeaders", "ignoreNullValues", "unsafeSsl", "queryParameters",
                "timeout"}, {"serverAddress", "query", "threshold"})
            assert re.match(r"^https?://[^/\s]+", md["serverAddress"]), md["serverAddress"]
            float(md["threshold"])
            if "ignoreNullValues" in md:
                assert md["ignoreNullValues"] in {"true", "false"}, md


class Rendered:
    """Each overlay rendered once, lazily."""
    cache: dict[str, list[dict]] = {}

    @classmethod
    def get(cls, name: str) -> list[dict]:
        if name not in cls.cache:
            cls.cache[name] = render(os.path.join(K8S, "overlays", name))
        return cls.cache[name]


def need_kubectl():
    if not KUBECTL:
        raise unittest.SkipTest("kubectl not found (Debian 12: apt-get install kubernetes-client)")


def by_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


class OverlayChecks:
    """Checks of one rendered overlay (mixed into a TestCase per overlay)."""
    overlay = ""  # set by subclasses
    gpu = False

    @classmethod
    def setUpClass(cls):
        need_kubectl()
        cls.objs = Rendered.get(cls.overlay)
        cls.deployments = by_kind(cls.objs, "Deployment")
        cls.services = by_kind(cls.objs, "Service")

    def containers(self):
        for name, d in self.deployments.items():
            for c in d["spec"]["template"]["spec"]["containers"]:
                yield name, d, c

    def test_objects_validate(self):
        version = kubernetes_validate.latest_version()
        kinds = set()
        for o in self.objs:
            kinds.add(o["kind"])
            with self.subTest(kind=o.get("kind"), name=o.get("metadata", {}).get("name")):
                validate_object(o, version)
        self.assertTrue({"Deployment", "Service", "PodMonitor", "ScaledObject"} <= kinds, kinds)

    def test_three_deployments_labelled(self):
        self.assertEqual(set(self.deployments), set(ROLES))
        for name, d in self.deployments.items():
            component = ROLES[name][0]
            for where, labels in (("metadata", d["metadata"].get("labels", {})),
                                  ("pod template", d["spec"]["template"]["metadata"]["labels"])):
                with self.subTest(deployment=name, labels=where):
                    self.assertEqual(labels.get("app.kubernetes.io/component"), component)
                    self.assertEqual(labels.get("app.kubernetes.io/part-of"), "tandem")
                    self.assertTrue(labels.get("app.kubernetes.io/name"))
            self.assertTrue(labels_match(d["spec"]["selector"],
                                         d["spec"]["template"]["metadata"]["labels"]))

    def test_ports_and_grpc_probes(self):
        for name, d, c in self.containers():
            with self.subTest(deployment=name, container=c["name"]):
                ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
                self.assertIn("grpc", ports)
                self.assertIn("http", ports)
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    self.assertIn(probe, c, f"{probe} missing")
                    self.assertIn("grpc", c[probe], f"{probe} is not a gRPC probe")
                    self.assertEqual(c[probe]["grpc"]["port"], ports["grpc"],
                                     f"{probe} does not check the grpc port")
                self.assertEqual(c["readinessProbe"]["grpc"].get("service"), ROLES[name][2])
                for probe in ("startupProbe", "livenessProbe"):  # "" = live once listening
                    self.assertIn(c[probe]["grpc"].get("service", ""), ("",))
                self.assertGreaterEqual(
                    c["startupProbe"].get("periodSeconds", 10) *
                    c["startupProbe"].get("failureThreshold", 3), 60,
                    "startup probe gives the model under a minute to load")

    def test_flags(self):
        for name, d, c in self.containers():
            with self.subTest(deployment=name):
                self.assertEqual(c.get("command"), [ROLES[name][3]])
                env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
                flags = {k: expand_env(v, env) for k, v in parse_flags(c["args"]).items()}
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                self.assertEqual(flags.get("--model"), MODEL_PATH)
                self.assertEqual(flags.get("--host"), "0.0.0.0")
                self.assertEqual(flags.get("--port"), str(ports["grpc"]))
                self.assertEqual(flags.get("--http-port"), str(ports["http"]))
                self.assertEqual(flags.get("--metrics-prefix"), "tandem:")
                drain_ms = int(flags["--drain-timeout-ms"])
                grace = d["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
                self.assertGreater(grace, drain_ms / 1000,
                                   "terminationGracePeriodSeconds must exceed the drain timeout")
                if name == "tandem-router":
                    for flag, svc in (("--prefill", "tandem-prefill"), ("--decode", "tandem-decode")):
                        host, port = flags[flag].rsplit(":", 1)
                        self.assertEqual(host, svc)
                        self.assertIn(svc, self.services)
                        svc_ports = {p["name"]: p["port"] for p in self.services[svc]["spec"]["ports"]}
                        self.assertEqual(int(port), svc_ports["grpc"])
                    self.assertGreater(int(flags.get("--discovery-interval-ms", "5000")), 0)
                else:
                    self.assertGreaterEqual(int(flags["--threads"]), 1)
                    self.assertGreater(int(flags["--kv-cache-bytes"]), 0)
                    # GPU workers compute on the GPU and size the KV pool from its memory.
                    self.assertEqual(flags.get("--device"), "cuda" if self.gpu else "cpu")
                    self.assertIn(flags.get("--kv-transport"), ("auto", "nccl", "cuda-ipc", "host"))
                    if self.gpu:
                        # NCCL between pods needs the pod network's interface named.
                        self.assertIn("NCCL_SOCKET_IFNAME", env)
                    util = float(flags["--gpu-memory-utilization"])
                    if self.gpu:
                        self.assertTrue(0 < util <= 1, util)
                    else:
                        self.assertEqual(util, 0)
                api_key = [e for e in c.get("env", []) if e["name"] == "TANDEM_API_KEY"]
                self.assertEqual(len(api_key), 1, "TANDEM_API_KEY env")
                ref = api_key[0]["valueFrom"]["secretKeyRef"]
                self.assertEqual(ref["name"], "tandem-api-key")
                self.assertTrue(ref.get("optional"), "the API key Secret must be optional")
                internal = [e for e in c.get("env", []) if e["name"] == "TANDEM_INTERNAL_KEY"]
                self.assertEqual(len(internal), 1, "TANDEM_INTERNAL_KEY env")
                ref = internal[0]["valueFrom"]["secretKeyRef"]
                self.assertEqual(ref["name"], "tandem-internal-key")
                self.assertTrue(ref.get("optional"), "the internal key Secret must be optional")

    def test_resources(self):
        for name, d, c in self.containers():
            with self.subTest(deployment=name):
                res = c.get("resources", {})
                req, lim = res.get("requests", {}), res.get("limits", {})
                self.assertIn("cpu", req)
                self.assertIn("memory", req)
                self.assertIn("memory", lim)
                wants_gpu = self.gpu and name in WORKER_SERVICES
                if wants_gpu:
                    self.assertEqual(str(req.get("nvidia.com/gpu")), "1")
                    self.assertEqual(str(lim.get("nvidia.com/gpu")), "1")
                else:
                    self.assertNotIn("nvidia.com/gpu", req)
                    self.assertNotIn("nvidia.com/gpu", lim)
                tag = c["image"].rsplit(":", 1)[-1]
                self.assertTrue(tag.endswith("-cuda" if self.gpu else "-cpu"), c["image"])

    def test_security_context(self):
        for name, d, c in self.containers():
            with self.subTest(deployment=name):
                pod = d["spec"]["template"]["spec"]
                psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
                self.assertTrue(csc.get("runAsNonRoot", psc.get("runAsNonRoot")))
                uid = csc.get("runAsUser", psc.get("runAsUser"))
                self.assertTrue(uid is None or uid != 0)
                self.assertTrue(csc.get("readOnlyRootFilesystem"))
                self.assertIs(csc.get("allowPrivilegeEscalation"), False)
                self.assertIn("ALL", csc.get("capabilities", {}).get("drop", []))
                self.assertIs(pod.get("automountServiceAccountToken"), False)

    def test_services(self):
        self.assertEqual(set(self.services), {"tandem-router"} | WORKER_SERVICES)
        for name, s in self.services.items():
            with self.subTest(service=name):
                names = {p["name"] for p in s["spec"]["ports"]}
                self.assertEqual(names, {"grpc", "http"})
                if name in WORKER_SERVICES:
                    self.assertEqual(s["spec"].get("clusterIP"), "None", "worker Services are headless")
                else:
                    self.assertNotEqual(s["spec"].get("clusterIP"), "None")
                # Selects exactly its own Deployment's pods, and its named ports exist there.
                selected = [dn for dn, d in self.deployments.items()
                            if labels_match({"matchLabels": s["spec"]["selector"]},
                                            d["spec"]["template"]["metadata"]["labels"])]
                self.assertEqual(selected, [name])
                c = self.deployments[name]["spec"]["template"]["spec"]["containers"][0]
                container_ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                for p in s["spec"]["ports"]:
                    tp = p.get("targetPort", p["port"])
                    if isinstance(tp, str):
                        self.assertIn(tp, container_ports)
                        self.assertEqual(container_ports[tp], p["port"])

    def test_podmonitor(self):
        pms = by_kind(self.objs, "PodMonitor")
        covered = {}
        for pm in pms.values():
            for dn, d in self.deployments.items():
                if labels_match(pm["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"]):
                    for ep in pm["spec"]["podMetricsEndpoints"]:
                        covered.setdefault(dn, []).append(ep)
        self.assertEqual(set(covered), set(ROLES), "every role is scraped")
        for dn, eps in covered.items():
            with self.subTest(deployment=dn):
                self.assertEqual(len(eps), 1, "each role is scraped exactly once")
                ep = eps[0]
                self.assertEqual(ep["port"], "http")
                self.assertEqual(ep.get("path"), "/metrics")
                self.assertEqual(ep.get("interval"), "5s")

    def test_scaledobjects(self):
        sos = by_kind(self.objs, "ScaledObject")
        targets = {so["spec"]["scaleTargetRef"]["name"]: so for so in sos.values()}
        self.assertEqual(set(targets), WORKER_SERVICES)
        known = exported_metrics()
        wanted = {"tandem-prefill": "tandem:num_requests_waiting",
                  "tandem-decode": "tandem:kv_cache_usage_perc"}
        for target, so in targets.items():
            with self.subTest(target=target):
                self.assertIn(so["spec"]["scaleTargetRef"].get("kind", "Deployment"), ("Deployment",))
                self.assertIn(target, self.deployments)
                self.assertNotIn("replicas", self.deployments[target]["spec"],
                                 "the ScaledObject owns the replica count")
                self.assertGreaterEqual(so["spec"].get("minReplicaCount", 0), 1,
                                        "the router is ready only with a worker of each role")
                triggers = [t for t in so["spec"]["triggers"] if t["type"] == "prometheus"]
                self.assertTrue(triggers)
                for t in triggers:
                    names = check_dashboard.metric_names(t["metadata"]["query"])
                    self.assertTrue(names)
                    self.assertLessEqual(names, known, f"unknown metrics in {t['metadata']['query']}")
                    self.assertIn(wanted[target], names)

    def test_images_have_no_registry_host(self):
        for name, d, c in self.containers():
            first = c["image"].split("/")[0]
            if "/" in c["image"]:
                self.assertFalse("." in first or ":" in first or first == "localhost",
                                 f"{c['image']} names a registry host")


class CpuOverlayTest(OverlayChecks, unittest.TestCase):
    overlay = "cpu"


class GpuOverlayTest(OverlayChecks, unittest.TestCase):
    overlay = "gpu"
    gpu = True


def validate_inferencepool(obj: dict):
    """Structure of an inference.networking.k8s.io/v1 InferencePool (the extension's v1
    API: one target port; a Service endpoint picker needs its port)."""
    where = f"InferencePool {obj['metadata'].get('name')}"
    check_keys(where, obj, {"apiVersion", "kind", "metadata", "spec"}, {"metadata", "spec"})
    check_metadata(where, obj)
    spec = obj["spec"]
    check_keys(f"{where}.spec", spec, {"selector", "targetPorts", "appProtocol",
                                       "endpointPickerRef"},
               {"selector", "targetPorts", "endpointPickerRef"})
    check_keys(f"{where}.spec.selector", spec["selector"], {"matchLabels"}, {"matchLabels"})
    ports = spec["targetPorts"]
    assert isinstance(ports, list) and len(ports) == 1, f"{where}: one targetPort"
    check_keys(f"{where} targetPort", ports[0], {"number"}, {"number"})
    assert 1 <= ports[0]["number"] <= 65535, ports
    if "appProtocol" in spec:
        assert spec["appProtocol"] in {"http", "kubernetes.io/h2c"}, spec["appProtocol"]
    ref = spec["endpointPickerRef"]
    check_keys(f"{where}.spec.endpointPickerRef", ref,
               {"group", "kind", "name", "port", "failureMode"}, {"name"})
    if ref.get("kind", "Service") == "Service":
        assert "port" in ref, f"{where}: a Service endpoint picker needs its port"
        check_keys(f"{where} endpointPickerRef.port", ref["port"], {"number"}, {"number"})
    assert ref.get("failureMode", "FailClose") in {"FailOpen", "FailClose"}, ref


def validate_httproute(obj: dict):
    """Structure of a gateway.networking.k8s.io/v1 HTTPRoute (the fields used here)."""
    where = f"HTTPRoute {obj['metadata'].get('name')}"
    check_keys(where, obj, {"apiVersion", "kind", "metadata", "spec"}, {"metadata", "spec"})
    check_metadata(where, obj)
    spec = obj["spec"]
    check_keys(f"{where}.spec", spec, {"parentRefs", "hostnames", "rules"}, {"parentRefs"})
    for p in spec["parentRefs"]:
        check_keys(f"{where} parentRef", p, {"group", "kind", "namespace", "name",
                                             "sectionName", "port"}, {"name"})
    for r in spec.get("rules") or []:
        check_keys(f"{where} rule", r, {"name", "matches", "filters", "backendRefs",
                                        "timeouts", "retry", "sessionPersistence"})
        for b in r.get("backendRefs") or []:
            check_keys(f"{where} backendRef", b, {"group", "kind", "name", "namespace", "port",
                                                  "weight", "filters"}, {"name"})
        for k, v in (r.get("timeouts") or {}).items():
            assert k in {"request", "backendRequest"}, k
            assert re.fullmatch(r"([0-9]{1,5}(h|m|s|ms)){1,4}", v), v


def validate_object(obj: dict, k8s_version: str):
    """One rendered object: the CRDs used here by their structural checks, every
    built-in kind strictly against the Kubernetes schema (AssertionError saying where)."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key == ("monitoring.coreos.com/v1", "PodMonitor"):
        validate_podmonitor(obj)
    elif key == ("keda.sh/v1alpha1", "ScaledObject"):
        validate_scaledobject(obj, k8s_version)
    elif key == ("inference.networking.k8s.io/v1", "InferencePool"):
        validate_inferencepool(obj)
    elif key == ("gateway.networking.k8s.io/v1", "HTTPRoute"):
        validate_httproute(obj)
    else:
        try:
            kubernetes_validate.validate(obj, k8s_version, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{obj['kind']} {obj['metadata'].get('name')}: {e.message} "
                                 f"at {'/'.join(str(p) for p in e.path)}") from None


class InferenceGatewayExampleTest(unittest.TestCase):
    """The inference-gateway example overlay: an InferencePool over the routers' HTTP
    port, an endpoint picker told the metric names the routers export, an HTTPRoute to
    the pool (issue #22)."""

    @classmethod
    def setUpClass(cls):
        need_kubectl()
        cls.objs = Rendered.get("inference-gateway")

    def test_validates(self):
        version = kubernetes_validate.latest_version()
        for o in self.objs:
            with self.subTest(kind=o["kind"], name=o["metadata"]["name"]):
                validate_object(o, version)

    def test_the_pool_is_the_routers_and_the_picker_reads_their_metrics(self):
        pools = by_kind(self.objs, "InferencePool")
        self.assertEqual(len(pools), 1)
        pool = next(iter(pools.values()))
        deployments = by_kind(self.objs, "Deployment")
        selected = {n for n, d in deployments.items()
                    if labels_match(pool["spec"]["selector"],
                                    d["spec"]["template"]["metadata"]["labels"])}
        self.assertEqual(selected, {"tandem-router"})
        router = deployments["tandem-router"]["spec"]["template"]["spec"]["containers"][0]
        flags = parse_flags(router["args"])
        self.assertEqual(pool["spec"]["targetPorts"][0]["number"], int(flags["--http-port"]))
        # The endpoint picker: a Service on the port the pool names, selecting its pod,
        # whose flags name this pool and metrics the routers export under their prefix.
        ref = pool["spec"]["endpointPickerRef"]
        svc = by_kind(self.objs, "Service")[ref["name"]]
        self.assertIn(ref["port"]["number"], [p["port"] for p in svc["spec"]["ports"]])
        epp = [d for d in deployments.values()
               if labels_match({"matchLabels": svc["spec"]["selector"]},
                               d["spec"]["template"]["metadata"]["labels"])]
        self.assertEqual(len(epp), 1)
        epp_pod = epp[0]["spec"]["template"]["spec"]
        epp_flags = parse_flags(epp_pod["containers"][0]["args"])
        self.assertEqual(epp_flags["--pool-name"], pool["metadata"]["name"])
        self.assertEqual(epp_flags["--pool-namespace"], pool["metadata"]["namespace"])
        prefix = flags["--metrics-prefix"]
        exported = exported_metrics()
        for flag, metric in [("--total-queued-requests-metric", "num_requests_waiting"),
                             ("--total-running-requests-metric", "num_requests_running"),
                             ("--kv-cache-usage-percentage-metric", "kv_cache_usage_perc")]:
            self.assertEqual(epp_flags[flag], prefix + metric)
            self.assertIn("tandem:" + metric, exported)
        # It may read the pool and its pods, nothing more.
        role = by_kind(self.objs, "Role")[epp_pod["serviceAccountName"]]
        for rule in role["rules"]:
            self.assertEqual(set(rule["verbs"]), {"get", "list", "watch"})
        route = next(iter(by_kind(self.objs, "HTTPRoute").values()))
        backends = [b for r in route["spec"]["rules"] for b in r["backendRefs"]]
        self.assertEqual(backends, [{"group": "inference.networking.k8s.io",
                                     "kind": "InferencePool", "name": pool["metadata"]["name"]}])


class RouterTlsExampleTest(unittest.TestCase):
    """The router-tls example overlay: TLS flags, a mounted Secret, probes that work."""

    @classmethod
    def setUpClass(cls):
        need_kubectl()
        cls.objs = Rendered.get("router-tls")

    def test_validates(self):
        version = kubernetes_validate.latest_version()
        for o in self.objs:
            with self.subTest(kind=o["kind"], name=o["metadata"]["name"]):
                validate_object(o, version)

    def test_router_tls(self):
        d = by_kind(self.objs, "Deployment")["tandem-router"]
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        flags = parse_flags(c["args"])
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        secret_vols = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        for flag in ("--tls-cert", "--tls-key"):
            path = flags[flag]
            vol = [n for n, mp in mounts.items() if path.startswith(mp.rstrip("/") + "/")]
            self.assertEqual(len(vol), 1, f"{flag} {path} is not on a mounted volume")
            self.assertIn(vol[0], secret_vols)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertNotIn("grpc", c[probe], "kubelet gRPC probes cannot speak TLS")
        self.assertEqual(c["readinessProbe"]["httpGet"]["scheme"], "HTTPS")
        deployments = by_kind(self.objs, "Deployment")
        scraped = {}
        for pm in by_kind(self.objs, "PodMonitor").values():
            for dn, dep in deployments.items():
                if labels_match(pm["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"]):
                    for ep in pm["spec"]["podMetricsEndpoints"]:
                        scraped.setdefault(dn, []).append(ep.get("scheme", "http"))
        self.assertEqual(scraped, {"tandem-router": ["https"], "tandem-prefill": ["http"],
                                   "tandem-decode": ["http"]})


def read_dockerfile(path: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comments dropped."""
    out = []
    buf = ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not buf and (line.strip().startswith("#") or not line.strip()):
                continue
            if buf and line.strip().startswith("#"):
                continue                          # comment inside a continuation
            if line.endswith("\\"):
                buf += line[:-1] + " "
                continue
            buf += line
            instr, _, rest = buf.strip().partition(" ")
            out.append((instr.upper(), rest.strip()))
            buf = ""
    if buf:
        raise AssertionError(f"{path}: ends inside a line continuation")
    return out


DOCKER_INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY",
                       "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD",
                       "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
HOST_NAME = re.compile(r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:io|com|org|net|dev|cloud|app|gov)\b",
                       re.I)


class DockerfileTest(unittest.TestCase):
    files = {"cpu": os.path.join(DEPLOY, "docker", "Dockerfile.cpu"),
             "cuda": os.path.join(DEPLOY, "docker", "Dockerfile.cuda")}

    def stages(self, path):
        instrs = read_dockerfile(path)
        stages, args = [], {}
        for instr, rest in instrs:
            self.assertIn(instr, DOCKER_INSTRUCTIONS, f"{path}: unknown instruction {instr}")
            if instr == "ARG" and not stages:
                k, _, v = rest.partition("=")
                args[k] = v.strip('"')
            if instr == "FROM":
                stages.append([])
            elif not stages:
                self.assertEqual(instr, "ARG", f"{path}: {instr} before the first FROM")
                continue
            stages[-1].append((instr, rest))
        return instrs, stages, args

    def test_structure(self):
        for kind, path in self.files.items():
            with self.subTest(dockerfile=kind):
                instrs, stages, _ = self.stages(path)
                froms = [rest for i, rest in instrs if i == "FROM"]
                self.assertGreaterEqual(len(froms), 2, "multi-stage")
                self.assertRegex(froms[0], r"\bAS\s+builder\b", "first stage is named builder")
                final = stages[-1]
                users = [rest for i, rest in final if i == "USER"]
                self.assertTrue(users, "the final stage sets USER")
                user = users[-1].split(":")[0]
                self.assertNotIn(user, ("0", "root"))
                self.assertEqual(user, "10001")
                copied = " ".join(rest for i, rest in final if i == "COPY" and "--from=builder" in rest)
                for b in BINARIES:
                    self.assertIn(f"/build/bin/{b} ", copied + " ", f"{b} is not copied")
                self.assertIn("/usr/local/bin/", copied)
                self.assertIn("/models", copied)
                entry = [rest for i, rest in final if i == "ENTRYPOINT"]
                self.assertEqual(entry, ['["tandem-router"]'])
                exposed = " ".join(rest for i, rest in final if i == "EXPOSE").split()
                self.assertEqual(sorted(exposed), ["50051", "8000"])
                runs = " ".join(rest for i, rest in final if i == "RUN")
                self.assertIn("--no-install-recommends", runs)
                builder_runs = " ".join(rest for i, rest in stages[0] if i == "RUN")
                for script in ("scripts/setup.sh", "scripts/build.sh", "scripts/fetch-model.sh",
                               "deploy/docker/runtime-deps.sh"):
                    self.assertIn(script, builder_runs)
                self.assertTrue(any(i == "ARG" and rest.startswith("FETCH_MODEL")
                                    for i, rest in stages[0]), "FETCH_MODEL build arg")

    def test_no_registry_hosts(self):
        for kind, path in list(self.files.items()) + [("dockerignore", os.path.join(REPO, ".dockerignore"))]:
            with self.subTest(file=kind), open(path, encoding="utf-8") as f:
                text = f.read()
                self.assertEqual(HOST_NAME.findall(text), [], "host names in the file")
        for kind, path in self.files.items():
            instrs, _, args = self.stages(path)
            for i, rest in instrs:
                if i != "FROM":
                    continue
                image = rest.split()[0]
                image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), "x"), image)
                if "/" in image:
                    first = image.split("/")[0]
                    self.assertFalse("." in first or ":" in first or first == "localhost",
                                     f"{path}: {image} names a registry host")

    def test_cuda_images(self):
        instrs, _, args = self.stages(self.files["cuda"])
        froms = [re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], rest.split()[0])
                 for i, rest in instrs if i == "FROM"]
        self.assertRegex(froms[0], r"^nvidia/cuda:[\d.]+-devel-")
        self.assertRegex(froms[-1], r"^nvidia/cuda:[\d.]+-runtime-")
        self.assertEqual(froms[0].split("-devel-")[0], froms[-1].split("-runtime-")[0],
                         "builder and runtime use the same CUDA version")
        self.assertEqual(froms[0].split("-devel-")[1], froms[-1].split("-runtime-")[1],
                         "builder and runtime use the same OS")

    def cpu_runtime_packages(self) -> list[str]:
        _, _, args = self.stages(self.files["cpu"])
        return args["RUNTIME_PACKAGES"].split()

    def test_cpu_runtime_packages_exist(self):
        apt_cache = shutil.which("apt-cache")
        if not apt_cache or subprocess.run([apt_cache, "show", "libc6"], capture_output=True).returncode:
            self.skipTest("no apt-cache package lists on this machine")
        with open("/etc/os-release", encoding="utf-8") as f:
            if 'VERSION_CODENAME=bookworm' not in f.read():
                self.skipTest("not Debian 12: the package names are Debian 12's")
        for p in self.cpu_runtime_packages():
            with self.subTest(package=p):
                r = subprocess.run([apt_cache, "show", "--no-all-versions", p],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, f"apt-cache knows no package {p}")

    def test_cpu_runtime_packages_cover_built_binaries(self):
        bins = [os.path.join(BIN_DIR, b) for b in BINARIES]
        if not all(os.access(b, os.X_OK) for b in bins):
            self.skipTest(f"binaries not built in {BIN_DIR}")
        if not all(shutil.which(t) for t in ("dpkg", "dpkg-query", "ldd")):
            self.skipTest("no dpkg/ldd")
        ldd = subprocess.run(["ldd"] + bins, capture_output=True, text=True).stdout
        if re.search(r"libcuda|libcublas|libcudart", ldd):
            self.skipTest("a CUDA build: Dockerfile.cpu builds without CUDA")
        r = subprocess.run([os.path.join(DEPLOY, "docker", "runtime-deps.sh"), "--check",
                            " ".join(self.cpu_runtime_packages())] + bins,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)


class DashboardTest(unittest.TestCase):
    path = os.path.join(DEPLOY, "grafana", "tandem.json")

    def test_dashboard(self):
        import json
        with open(self.path, encoding="utf-8") as f:
            dash = json.load(f)
        self.assertGreaterEqual(dash["schemaVersion"], 36)
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        q = variables["model_name"]["query"]
        q = q["query"] if isinstance(q, dict) else q
        self.assertEqual(q.replace(" ", ""), "label_values(tandem:num_requests_running,model_name)")
        exprs = check_dashboard.dashboard_expressions(dash)
        known = exported_metrics()
        for where, expr in exprs:
            with self.subTest(where=where):
                names = check_dashboard.metric_names(expr)
                self.assertTrue(names, expr)
                self.assertLessEqual(names, known)
                if where.startswith("panel"):
                    self.assertIn('model_name=~"$model_name"', expr)
                for m in re.finditer(r"rate\([^()]*\[([^\]]*)\]", expr):
                    self.assertEqual(m.group(1), "$__rate_interval", expr)
        panels = [p for p in dash["panels"] if p["type"] != "row"]
        for p in panels:
            self.assertIn(p["type"], ("timeseries", "stat"))
            self.assertEqual(p["datasource"]["uid"], "${datasource}")
        used = set()
        for _, expr in exprs:
            used |= check_dashboard.metric_names(expr)
        for needed in ("tandem:time_to_first_token_seconds_bucket",
                       "tandem:inter_token_latency_seconds_bucket",
                       "tandem:e2e_request_latency_seconds_bucket",
                       "tandem:prompt_tokens_total", "tandem:generation_tokens_total",
                       "tandem:num_requests_running", "tandem:num_requests_waiting",
                       "tandem:kv_cache_usage_perc", "tandem:prefix_cache_hits_total",
                       "tandem:prefix_cache_queries_total",
                       "tandem:kv_transfer_latency_seconds_bucket",
                       "tandem:kv_transfer_bytes_total", "tandem:kv_transfer_failures_total",
                       "tandem:num_preemptions_total", "tandem:request_success_total",
                       "tandem:request_errors_total"):
            self.assertIn(needed, used)


class CheckDashboardTest(unittest.TestCase):
    """check_dashboard.py's PromQL reading and its exit codes."""

    def test_metric_names(self):
        cases = {
            'histogram_quantile(0.99, sum by (le) (rate(a_bucket{model_name=~"$model_name"}'
            '[$__rate_interval])))': {"a_bucket"},
            'sum(rate(x_total[5m] offset 1h)) / on(pod) group_left(model_name) '
            'sum without (le, code) (y{q="1e3", r!~"a,b"}) > bool 0.5 * 1e-3': {"x_total", "y"},
            'sum(x)by(role) + max(y @ start()) + rate(z[5m:30s]) or vector(0) unless Inf': {"x", "y", "z"},
            'label_replace(up{job="a"}, "dst", "$1", "src", "(.*)")': {"up"},
            'ns:metric:rate5m{a="b"} + e2e_x': {"ns:metric:rate5m", "e2e_x"},
            'count_values("v", build_info) # trailing comment with fake_metric': {"build_info"},
            'x[${__range}] + y offset -5m30s + z[[interval]]': {"x", "y", "z"},
        }
        for expr, want in cases.items():
            with self.subTest(expr=expr):
                self.assertEqual(check_dashboard.metric_names(expr), want)

    def test_variable_queries(self):
        v = check_dashboard.variable_expressions
        self.assertEqual(v('label_values(m{a="b,c"}, model_name)'), ['m{a="b,c"}'])
        self.assertEqual(v("label_values(model_name)"), [])
        self.assertEqual(v("query_result(sum(m2))"), ["sum(m2)"])
        self.assertEqual(v("metrics(tandem:.*)"), [])

    def test_exit_codes(self):
        import json
        script = os.path.join(DEPLOY, "grafana", "check_dashboard.py")
        dash = {"schemaVersion": 39,
                "panels": [{"type": "row", "title": "r", "panels": [
                    {"type": "timeseries", "title": "nested",
                     "targets": [{"refId": "A", "expr": 'sum(rate(b_total[$__rate_interval]))'}]}]},
                    {"type": "stat", "title": "top", "targets": [{"refId": "A", "expr": "a"}]}],
                "templating": {"list": [{"type": "query", "name": "v",
                                         "query": "label_values(c, model_name)"}]}}
        with tempfile.TemporaryDirectory() as tmp:
            dpath = os.path.join(tmp, "d.json")
            with open(dpath, "w") as f:
                json.dump(dash, f)
            expo = os.path.join(tmp, "m.txt")
            with open(expo, "w") as f:
                f.write('# HELP a x\n# TYPE a gauge\na{role="router"} 1\n'
                        '# TYPE b_total counter\n# TYPE c gauge\n')
            ok = subprocess.run([sys.executable, script, dpath, expo], capture_output=True, text=True)
            self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
            with open(expo, "w") as f:
                f.write('a 1\nc_bucket{le="+Inf"} 1\n')
            bad = subprocess.run([sys.executable, script, dpath, expo], capture_output=True, text=True)
            self.assertEqual(bad.returncode, 1)
            self.assertIn("b_total", bad.stdout)
            self.assertIn('panel "nested"', bad.stdout)
            self.assertIn("variable", bad.stdout)           # c itself is not a series
            names = os.path.join(tmp, "n.txt")
            with open(names, "w") as f:
                f.write("# names\na\nb_total\nc\n")
            ok2 = subprocess.run([sys.executable, script, dpath, "--names-file", names],
                                 capture_output=True, text=True)
            self.assertEqual(ok2.returncode, 0, ok2.stdout + ok2.stderr)
            usage = subprocess.run([sys.executable, script, dpath], capture_output=True, text=True)
            self.assertEqual(usage.returncode, 2)


def main() -> int:
    global KUBECTL, BIN_DIR
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubectl", help="kubectl to render with (default: $TANDEM_KUBECTL or PATH)")
    ap.add_argument("--bin-dir", help="the built binaries (default: $TANDEM_BIN_DIR or build/bin)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.kubectl:
        KUBECTL = args.kubectl
    if args.bin_dir:
        BIN_DIR = args.bin_dir
    if KUBECTL and not (os.path.isfile(KUBECTL) and os.access(KUBECTL, os.X_OK)):
        KUBECTL = shutil.which(KUBECTL)

    if KUBECTL:
        ver = subprocess.run([KUBECTL, "version", "--client"], capture_output=True, text=True)
        print(f"test_manifests: rendering with {KUBECTL}: "
              f"{' '.join(ver.stdout.split()[:12])}", flush=True)
    else:
        print("test_manifests: kubectl not found: the overlay checks are skipped "
              "(Debian 12: apt-get install kubernetes-client)", flush=True)

    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    result = unittest.TextTestRunner(verbosity=2 if args.verbose else 1).run(suite)
    if not result.wasSuccessful():
        return 1
    if not KUBECTL:
        print("test_manifests: SKIPPED the kubectl checks (exit 77)")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
