"""recent_changes against its real protocols: the Kubernetes rollout history (ReplicaSets through
kubernetes_asyncio against the local API server stand-in), a deploy-events URL and a JSONL file; sources merged
newest first, and "nothing changed" said only about sources that answered."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.ops_servers import OpsFakes, replica_set
from tests.test_ops import data, error_code, run
from tools import ops
from tools.ops import config as cfg

NOW = "2026-12-02T10:00:00Z"


@pytest.fixture
async def fakes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[OpsFakes]:
    monkeypatch.setenv("OPS_TOKEN", "secret-token")
    f = OpsFakes()
    f.replica_sets = [
        replica_set(1, "2026-11-20T08:00:00Z", "payments-api:7.7.0", cause="release 2026.11.20-1"),
        replica_set(2, "2026-12-01T16:20:00Z", "payments-api:7.8.0", cause="release 2026.12.01-3"),
        replica_set(3, "2026-12-02T09:50:30Z", "payments-api:7.8.0", restarted_at="2026-12-02T09:50:30Z"),
        replica_set(1, "2026-12-02T09:55:00Z", "gateway:2.0.0", owner="gateway", app="payments-api"),  # not ours
    ]
    await f.server.start()
    yield f
    await f.server.stop()


def toolbox(*sources: cfg.FileChanges | cfg.HttpChanges | cfg.KubernetesChanges) -> ops.Toolbox:
    return ops.build(cfg.OpsConfig(changes=list(sources), now=NOW))


def kube(fakes: OpsFakes, **extra: object) -> cfg.KubernetesChanges:
    return cfg.KubernetesChanges(backend="kubernetes", api_url=fakes.url, token_env="OPS_TOKEN", **extra)


async def test_kubernetes_rollout_history_three_revisions(fakes: OpsFakes) -> None:
    found = data(await run(toolbox(kube(fakes)), "recent_changes", service_id="payments", environment="prod",
                           minutes=3 * 24 * 60))
    changes = found["changes"]
    assert [c["version"] for c in changes] == ["revision 3", "revision 2"]  # newest first, revision 1 before
    assert changes[0]["kind"] == "restart" and changes[0]["at"] == "2026-12-02T09:50:30Z"  # same image: a restart
    assert changes[1] == {"at": "2026-12-01T16:20:00Z", "kind": "image", "version": "revision 2",
                          "from_version": "revision 1", "description": "release 2026.12.01-3",
                          "from_images": ["payments-api:7.7.0"], "images": ["payments-api:7.8.0"],
                          "changed": ["image of container api"],
                          "source": "Kubernetes rollout history (payments/payments-api)"}
    assert found["last_before_window"]["version"] == "revision 1"
    listed = [r for r in fakes.requests if r[0] == "k8s_replicasets"]
    assert listed and listed[0][2]["labelSelector"] == "app=payments-api"  # the deployment's own selector
    assert found["summary"].startswith("2 changes in the last 4320 min: restart revision 3 at 09:50 UTC")


async def test_kubernetes_refusal_is_classified(fakes: OpsFakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_TOKEN", "wrong")
    obs = await run(toolbox(kube(fakes)), "recent_changes", service_id="payments", environment="prod")
    assert error_code(obs) == "permission_denied"


async def test_deploy_events_url_filtered_here_too(fakes: OpsFakes) -> None:
    fakes.change_events = [
        {"at": "2026-12-02T09:50:30Z", "service": "payments", "environment": "prod", "version": "2026.12.02-2",
         "author": "ci", "image": "payments-api:7.8.1"},
        {"at": "2026-12-02T09:40:00Z", "service": "payments", "environment": "staging", "version": "x"},
        {"at": "2026-12-02T09:30:00Z", "service": "orders", "environment": "prod", "version": "y"},
        {"at": "yesterday", "service": "payments"}, "garbage"]
    source = cfg.HttpChanges(backend="http", url=f"{fakes.url}/hooks/changes", token_env="OPS_TOKEN")
    found = data(await run(toolbox(source), "recent_changes", service_id="payments", environment="prod",
                           minutes=60))
    assert [c["version"] for c in found["changes"]] == ["2026.12.02-2"]
    assert found["changes"][0]["images"] == ["payments-api:7.8.1"] and found["unreadable_records"] == 2
    sent = next(r[2] for r in fakes.requests if r[0] == "changes")
    assert sent == {"service": "payments", "environment": "prod", "since": "2026-12-02T09:00:00Z", "until": NOW}


async def test_sources_merge_and_a_failed_one_is_said(fakes: OpsFakes, tmp_path: Path) -> None:
    events = tmp_path / "changes.jsonl"
    events.write_text(json.dumps({"at": "2026-12-02T09:49:00Z", "service": "payments", "environment": "prod",
                                  "kind": "config", "description": "pool size 50"}) + "\n{not json\n")
    dead = cfg.HttpChanges(backend="http", url="http://127.0.0.1:9/changes", timeout_s=2)
    found = data(await run(toolbox(cfg.FileChanges(file=events), kube(fakes), dead), "recent_changes",
                           service_id="payments", environment="prod", minutes=60))
    assert [(c["kind"], c["at"][11:16]) for c in found["changes"]] == [("restart", "09:50"), ("config", "09:49")]
    assert found["unavailable"][0]["errorCode"] == "upstream_error" and found["unreadable_records"] == 1
    assert "not checked: deploy events (deploy events API)" in found["summary"]


async def test_nothing_answered_is_an_error_never_no_changes(tmp_path: Path) -> None:
    missing = toolbox(cfg.FileChanges(file=tmp_path / "none.jsonl"))
    assert error_code(await run(missing, "recent_changes", service_id="orders", environment="prod")) == \
        "not_configured"
    prod_only = toolbox(cfg.FileChanges(file=tmp_path / "none.jsonl", environments=["prod"]))
    assert error_code(await run(prod_only, "recent_changes", service_id="orders", environment="staging")) == \
        "not_configured"


async def test_demo_deploy_events_line_up_with_the_logs_and_metrics() -> None:
    demo = ops.build()
    orders = data(await run(demo, "recent_changes", service_id="orders", environment="staging", minutes=240))
    assert orders["changes"][0]["version"] == "2026.12.02-1" and orders["changes"][0]["at"] == "2026-12-02T09:10:01Z"
    metrics = data(await run(demo, "query_metrics", service_id="orders", environment="staging"))
    rate = metrics["metrics"]["error_rate"]
    assert rate["trend"] == "spiked and recovered" and rate["onset_at"] == "2026-12-02T09:11:00Z"
    assert rate["recovered_at"] == "2026-12-02T09:15:00Z"
    assert metrics["summary"].startswith("error_rate 0, spiked and recovered: began 09:11, back by 09:15")
    quiet = data(await run(demo, "recent_changes", service_id="orders", environment="prod", minutes=240))
    assert quiet["changes"] == [] and quiet["last_before_window"]["version"] == "2026.11.30-2"
    assert quiet["summary"].startswith("no change in the last 240 min; the last one: deploy 2026.11.30-2 at "
                                       "2026-11-30 15:04 UTC")
