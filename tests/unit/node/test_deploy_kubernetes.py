"""deploy/kubernetes/: every manifest passes the Kubernetes API's own schemas (strict: an
unknown field is an error; the schemas of the kinds used are in kubernetes_schemas/, taken
from the `kubernetes-validate` package by its refresh.py, and the check runs with network
connections refused), KEDA's ScaledObject (a CRD, whose
schema is not in that package) passes a structural schema of the fields it uses, and the
manifests agree with the node: the rendered cluster.toml loads, names the pods and the
headless Service, the probes' paths are the node's, the stop grace covers its SIGTERM
handoff, and the autoscalers read metrics the node exports."""
from __future__ import annotations

import functools
import json
import re
import shutil
import socket
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import yaml

from tsched.node import config as config_mod
from tsched.node.api import auth
from tsched.node.api.openapi.document import document
from tsched.node.assembly import SHUTDOWN_S, STOP_STACKS_AFTER_S
from tsched.node.raft.handoff import HANDOFF_S

ROOT = Path(__file__).resolve().parents[3]
DIR = ROOT / "deploy" / "kubernetes"
SCHEMAS = Path(__file__).resolve().parent / "kubernetes_schemas"   # v1.30.0, strict
CRD_KINDS = {("keda.sh/v1alpha1", "ScaledObject"),
             ("kustomize.config.k8s.io/v1beta1", "Kustomization")}   # not API resources


def _docs() -> list[tuple[str, dict]]:
    return [(path.name, doc) for path in sorted(DIR.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def _one(kind: str, name: str | None = None) -> dict:
    found = [d for _, d in _docs() if d["kind"] == kind
             and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test: the schemas must be the package's own."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a network connection was attempted: {args}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.mark.parametrize("name, doc", [d for d in _docs()
                                       if (d[1]["apiVersion"], d[1]["kind"]) not in CRD_KINDS],
                         ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_manifest_passes_the_kubernetes_schema(no_network, name: str, doc: dict) -> None:
    _validate(doc)


def test_the_schema_check_is_strict(no_network) -> None:
    sts = dict(_one("StatefulSet"), spec={**_one("StatefulSet")["spec"], "replica": 3})
    with pytest.raises(jsonschema.ValidationError, match="replica"):
        _validate(sts)


def test_the_schema_check_reaches_into_the_definitions(no_network) -> None:
    """A typo deep in the pod template (a container's field) is caught too: the kinds'
    schemas reach their definitions."""
    sts = _one("StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    bad = {**pod, "containers": [{**pod["containers"][0], "imagePullPolice": "Always"}]}
    doc = {**sts, "spec": {**sts["spec"], "template": {**sts["spec"]["template"], "spec": bad}}}
    with pytest.raises(jsonschema.ValidationError, match="imagePullPolice"):
        _validate(doc)


def _validate(doc: dict) -> None:
    """The kind's schema, file named as the package names it: apps/v1 -> apps-v1."""
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", doc["apiVersion"])
    schema = json.loads((SCHEMAS / f"{doc['kind'].lower()}-{api}.json").read_text())
    kind = referencing.Resource.from_contents(schema)
    registry = _definitions().with_resource(kind.id(), kind)
    jsonschema.Draft202012Validator(schema, registry=registry).validate(doc)


@functools.cache
def _definitions() -> referencing.Registry:
    """The definitions every kind's schema refers to (280 KB), read once."""
    defs = referencing.Resource.from_contents(
        json.loads((SCHEMAS / "_definitions.json").read_text()))
    return referencing.Registry().with_resource(defs.id(), defs)


# KEDA 2.x's ScaledObject (keda.sh/v1alpha1), the fields these manifests use, closed where
# a typo would silently do nothing; trigger metadata is a map of strings, as in its CRD.
_INT = {"type": "integer", "minimum": 0}
_POLICY = {"type": "object", "additionalProperties": False,
           "required": ["type", "value", "periodSeconds"],
           "properties": {"type": {"enum": ["Pods", "Percent"]}, "value": _INT,
                          "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800}}}
_RULES = {"type": "object", "additionalProperties": False, "properties": {
    "stabilizationWindowSeconds": {"type": "integer", "minimum": 0, "maximum": 3600},
    "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
    "policies": {"type": "array", "minItems": 1, "items": _POLICY}}}
SCALED_OBJECT = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"}, "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": {"type": "object", "required": ["scaleTargetRef", "triggers"],
                 "additionalProperties": False, "properties": {
            "scaleTargetRef": {"type": "object", "required": ["name"],
                               "additionalProperties": False, "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "name": {"type": "string"}}},
            "pollingInterval": _INT, "cooldownPeriod": _INT, "minReplicaCount": _INT,
            "maxReplicaCount": {"type": "integer", "minimum": 1},
            "fallback": {"type": "object", "required": ["failureThreshold", "replicas"],
                         "additionalProperties": False,
                         "properties": {"failureThreshold": _INT, "replicas": _INT}},
            "advanced": {"type": "object", "additionalProperties": False, "properties": {
                "horizontalPodAutoscalerConfig": {
                    "type": "object", "additionalProperties": False, "properties": {
                        "behavior": {"type": "object", "additionalProperties": False,
                                     "properties": {"scaleUp": _RULES,
                                                    "scaleDown": _RULES}}}}}},
            "triggers": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["type", "metadata"],
                "additionalProperties": False, "properties": {
                    "type": {"type": "string"}, "name": {"type": "string"},
                    "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                    "metadata": {"type": "object",
                                 "additionalProperties": {"type": "string"}}}}}}}}}
PROMETHEUS_TRIGGER = {"type": "object", "required": ["serverAddress", "query", "threshold"],
                      "properties": {"threshold": {"pattern": r"^[0-9]+(\.[0-9]+)?$"}}}


def test_scaled_object_has_keda_s_structure() -> None:
    so = _one("ScaledObject")
    jsonschema.validate(so, SCALED_OBJECT)
    for trigger in so["spec"]["triggers"]:
        assert trigger["type"] == "prometheus"
        jsonschema.validate(trigger["metadata"], PROMETHEUS_TRIGGER)


def test_autoscalers_target_the_workers_and_read_the_nodes_metrics() -> None:
    workers = _one("Deployment", "tsworker")
    so, hpa = _one("ScaledObject"), _one("HorizontalPodAutoscaler")
    for target in (so["spec"]["scaleTargetRef"], hpa["spec"]["scaleTargetRef"]):
        assert (target["kind"], target["name"]) == ("Deployment", workers["metadata"]["name"])
    rules = yaml.safe_load(_one("ConfigMap", "tsched-adapter-rules")["data"]["config.yaml"])
    served = {r["name"]["as"] for r in rules["externalRules"]}
    assert {m["external"]["metric"]["name"] for m in hpa["spec"]["metrics"]} == served
    queries = [t["metadata"]["query"] for t in so["spec"]["triggers"]] + \
        [r["metricsQuery"] for r in rules["externalRules"]]
    exported = {"tsched_ready_tasks", "tsched_worker_slots"}   # node/ops/capacity.py
    for query in queries:
        assert any(name + "{" in query for name in exported), query
    assert "tsched_ready_tasks{" in queries[0] and 'state="idle"' in queries[0]


def _rendered_config() -> config_mod.ClusterConfig:
    """The ConfigMap's cluster.toml as the init container renders it."""
    text = _one("ConfigMap", "tsched-config")["data"]["cluster.toml"]
    for key, value in (("RAFT_SECRET", "s" * 48), ("ADMIN_TOKEN_SHA256", "a" * 64),
                       ("WORKER_TOKEN_SHA256", "b" * 64), ("METRICS_TOKEN_SHA256", "c" * 64)):
        assert f"@{key}@" in text
        text = text.replace(f"@{key}@", value)
    init = _one("StatefulSet")["spec"]["template"]["spec"]["initContainers"][0]
    assert {e["name"] for e in init["env"]} == {"RAFT_SECRET", "ADMIN_TOKEN_SHA256",
                                                "WORKER_TOKEN_SHA256", "METRICS_TOKEN_SHA256"}
    cfg = config_mod.parse(tomllib.loads(text), base_dir="/etc/tsched")
    assert auth.parse(cfg.auth) is not None   # HTTP off loopback needs [auth]
    return cfg


def test_the_node_config_names_the_pods_and_their_stable_addresses() -> None:
    cfg = _rendered_config()
    sts, headless = _one("StatefulSet"), _one("Service", "tsched")
    ns, replicas = sts["metadata"]["namespace"], sts["spec"]["replicas"]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"]
    assert sts["spec"]["serviceName"] == "tsched" and sts["spec"]["podManagementPolicy"] == "Parallel"
    ports = {p["name"]: p["port"] for p in headless["spec"]["ports"]}
    mount = next(m["mountPath"] for m in sts["spec"]["template"]["spec"]["containers"][0]
                 ["volumeMounts"] if m["name"] == "data")
    assert [n.id for n in cfg.nodes] == [f"tsched-{i}" for i in range(replicas)]
    for n in cfg.nodes:
        host = f"{n.id}.tsched.{ns}.svc.cluster.local"
        assert (n.raft, n.http) == (f"{host}:{ports['raft']}", f"{host}:{ports['http']}")
        assert n.data_dir == f"{mount}/{n.id}"
    url = next(e["value"] for e in _one("Deployment", "tsworker")["spec"]["template"]["spec"]
               ["containers"][0]["env"] if e["name"] == "TSCTL_URL")
    assert url.split(",") == [n.url for n in cfg.nodes]


def test_probes_and_the_stop_grace_fit_the_node() -> None:
    spec = _one("StatefulSet")["spec"]["template"]["spec"]
    node = spec["containers"][0]
    assert node["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert node["livenessProbe"]["httpGet"]["path"] == "/livez"
    paths = document()["paths"]
    assert "/readyz" in paths and "/livez" in paths
    assert {"/readyz", "/livez"} <= auth.OPEN_PATHS   # probes carry no token
    # SIGTERM: handoff, then in-flight requests; the stacks are dumped if still running.
    assert spec["terminationGracePeriodSeconds"] > max(HANDOFF_S + SHUTDOWN_S,
                                                       STOP_STACKS_AFTER_S)
    assert "$(POD_NAME)" in node["command"]
    workers = _one("Deployment", "tsworker")["spec"]["template"]["spec"]
    grace = workers["containers"][0]["command"]
    assert workers["terminationGracePeriodSeconds"] > float(grace[grace.index("--grace") + 1])


def test_kubectl_kustomize_renders_the_cluster_and_the_workers() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run([kubectl, "kustomize", str(DIR)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(out.stdout) if d)
    assert kinds == ["ConfigMap", "Deployment", "Namespace", "PodDisruptionBudget",
                     "Service", "Service", "StatefulSet"]
