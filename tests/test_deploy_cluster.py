"""deploy/kubernetes/keda.yaml, networkpolicy.yaml and podmonitor.yaml (validated with the rest in
tests/test_deploy.py). KEDA scales the workers on the work stream's pending entries, reaching Redis with the pods'
Secret. Every port that serves /metrics is scraped and let in from the monitoring namespace, Slack's HTTP
reaches the front, and the pods may reach what they use — DNS, the Secret's Redis, HTTPS (Slack, the model, the
cluster API) and the backends the ConfigMap configures — and nothing else is let in."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from bot.slack.inbound.worker import Worker
from state import Keys
from state.queue import GROUP
from tests.test_deploy import (
    REDIS_AUTH_PARAMS,
    REDIS_STREAMS_KEYS,
    _keda_secret_refs,
    _load_config,
    _parses,
    _secret,
    containers,
    named,
    of_kind,
)

MONITORING = {"kubernetes.io/metadata.name": "monitoring"}


def test_the_scaled_object_scales_workers_on_the_work_streams_pending_entries(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    [scaled] = of_kind("ScaledObject")
    spec = scaled["spec"]
    assert named("Deployment", spec["scaleTargetRef"]["name"])["metadata"]["labels"][
        "app.kubernetes.io/component"] == "worker"
    assert spec["minReplicaCount"] >= 1  # pending entries exist only once a worker took work
    [trigger] = spec["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "redis-streams" and set(meta) <= REDIS_STREAMS_KEYS
    settings = _load_config(tmp_path, monkeypatch)
    assert meta["stream"] == Keys(prefix=settings.key_prefix).queue()
    assert meta["consumerGroup"] == GROUP
    # Below what one worker takes at once, so a full worker asks for another.
    concurrency = inspect.signature(Worker).parameters["concurrency"].default
    assert 0 < int(meta["pendingEntriesCount"]) < concurrency
    redis = urlparse(_secret()["REDIS_URL"])  # the Redis the pods use
    assert meta.get("databaseIndex", "0") == (redis.path.strip("/") or "0")
    # The connection comes from the pods' Secret, through a TriggerAuthentication: nothing hard-coded.
    assert not set(meta) & {"address", "host", "port", "addressFromEnv", "hostFromEnv", "portFromEnv",
                            "passwordFromEnv", "usernameFromEnv", "enableTLS"}
    assert trigger["authenticationRef"].get("kind", "TriggerAuthentication") == "TriggerAuthentication"
    auth = named("TriggerAuthentication", trigger["authenticationRef"]["name"])
    assert auth["metadata"]["namespace"] == scaled["metadata"]["namespace"]
    parts = {ref["parameter"]: _secret()[ref["key"]] for ref in _keda_secret_refs()}
    assert set(parts) <= REDIS_AUTH_PARAMS and {"address", "password"} <= set(parts)
    # Its parts of the Secret say what REDIS_URL says.
    assert parts["address"] == f"{redis.hostname}:{redis.port or 6379}"
    assert parts["password"] == unquote(redis.password or "")
    assert parts.get("username", "") == unquote(redis.username or "")
    assert parts.get("tls", "disable") == ("enable" if redis.scheme == "rediss" else "disable")


def _pods() -> list[tuple[dict[str, str], list[dict[str, Any]]]]:
    """Each Deployment's pod labels and its container ports."""
    return [(d["spec"]["template"]["metadata"]["labels"],
             [p for c in d["spec"]["template"]["spec"]["containers"] for p in c["ports"]])
            for d in of_kind("Deployment")]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _rules(labels: dict[str, str], direction: str) -> list[dict[str, Any]]:
    policies = [p for p in of_kind("NetworkPolicy") if _selects(p["spec"]["podSelector"], labels)]
    return [r for p in policies if direction.capitalize() in p["spec"]["policyTypes"]
            for r in p["spec"].get(direction, [])]


def _port_in(rule: dict[str, Any], port: int | str, protocol: str = "TCP", name: str | None = None) -> bool:
    return any(p.get("protocol", "TCP") == protocol and p["port"] in (port, name) for p in rule.get("ports", []))


def test_every_pod_is_under_a_default_deny_policy_both_ways() -> None:
    for labels, _ in _pods():
        types = {t for p in of_kind("NetworkPolicy") if _selects(p["spec"]["podSelector"], labels)
                 for t in p["spec"]["policyTypes"]}
        assert types == {"Ingress", "Egress"}, labels


def test_prometheus_may_scrape_every_metrics_port_and_nothing_else_comes_in() -> None:
    for labels, ports in _pods():
        rules = _rules(labels, "ingress")
        for port in ports:
            assert any(_port_in(r, port["containerPort"], name=port["name"])
                       and {"namespaceSelector": {"matchLabels": MONITORING}} in r["from"] for r in rules), port
        open_to_all = [r for r in rules if "from" not in r]
        if labels["app.kubernetes.io/component"] == "front":  # Slack's HTTP mode: the Service's target port
            target = named("Service", "opspilot-front")["spec"]["ports"][0]["targetPort"]
            assert [r["ports"] for r in open_to_all] == [[{"protocol": "TCP", "port": target}]]
        else:
            assert open_to_all == [], labels


def _may_reach(labels: dict[str, str], port: int, protocol: str = "TCP", namespace: str | None = None) -> bool:
    """Whether an egress rule lets ``labels``' pods reach ``port`` (in ``namespace``: the pods' own when None)."""
    for rule in _rules(labels, "egress"):
        if not _port_in(rule, port, protocol):
            continue
        for peer in rule.get("to", [{}]):
            if "ipBlock" in peer and peer["ipBlock"]["cidr"] == "0.0.0.0/0" and not peer["ipBlock"].get("except"):
                return True
            spaces = peer.get("namespaceSelector")
            if spaces is None and namespace is None:
                return True
            if spaces == {} or (spaces and namespace and _selects(spaces, {"kubernetes.io/metadata.name": namespace})):
                return True
    return False


def test_the_pods_may_reach_dns_redis_https_the_cluster_api_and_the_configured_backends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _load_config(tmp_path, monkeypatch)
    backends = [urlparse(settings.toolbox.logs.url), urlparse(settings.toolbox.metrics.url)]
    redis = urlparse(_secret()["REDIS_URL"])
    for labels, _ in _pods():
        assert _may_reach(labels, 53, "UDP", "kube-system") and _may_reach(labels, 53, "TCP", "kube-system")
        # REDIS_URL's host: a Service of this namespace (<name>.opspilot.svc) or of another one.
        parts = (redis.hostname or "").split(".")
        assert _may_reach(labels, redis.port or 6379, namespace=None if parts[1] == "opspilot" else parts[1])
        assert _may_reach(labels, 443, namespace="anywhere") and _may_reach(labels, 6443, namespace="anywhere")
        for url in backends:
            namespace = (url.hostname or "").split(".")[1]
            assert _may_reach(labels, url.port or 80, namespace=namespace), url.geturl()
        assert not _may_reach(labels, 5432, namespace="anywhere")  # and not everything


def test_every_metrics_port_is_scraped() -> None:
    [front] = [c for name, c in containers() if name == "opspilot-front"]
    serve = _parses(front["args"])
    # serve --workers N: the front on --port, its worker processes on the N ports after it; each declared.
    declared = {p["containerPort"]: p["name"] for p in front["ports"]}
    assert set(declared) == set(range(serve.port, serve.port + serve.workers + 1))
    [monitor] = of_kind("PodMonitor")
    endpoints = monitor["spec"]["podMetricsEndpoints"]
    assert {e["path"] for e in endpoints} == {"/metrics"}
    for labels, ports in _pods():
        assert _selects(monitor["spec"]["selector"], labels)
        assert {p["name"] for p in ports} <= {e["port"] for e in endpoints}, labels
