"""recent_changes against its real protocols: the Kubernetes rollout history (ReplicaSets through
kubernetes_asyncio against the local API server stand-in), a deploy-events URL and a JSONL file; sources merged
newest first, and "nothing changed" said only about sources that answered."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.slack.outbound.outputs import output
from tests.fakes.ops_servers import OpsFakes, replica_set
from tests.fakes.rollouts import Rollouts
from tests.test_ops import data, error_code, run
from tools import ops
from tools.ops import toolbox_config as cfg
from tools.ops.verdict import judge

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


async def test_a_change_cause_carried_over_from_the_revision_before_is_not_quoted(fakes: OpsFakes) -> None:
    """Kubernetes copies the Deployment's annotations onto each new ReplicaSet: a CI deploy that set no cause after
    OpsPilot's rollback carried "rollback to revision 1 by UALICE via OpsPilot" and was described by it."""
    ours = "rollback to revision 1 by UALICE via OpsPilot: 5xx after 7.8.0"
    fakes.replica_sets = [
        replica_set(3, "2026-11-20T08:00:00Z", "payments-api:7.7.0", cause=ours, history="1"),  # reused: rollback
        replica_set(2, "2026-12-01T16:20:00Z", "payments-api:7.8.0", cause="release 2026.12.01-3"),
        replica_set(4, "2026-12-02T09:50:30Z", "payments-api:7.9.0", cause=ours)]  # a CI deploy: cause copied
    found = data(await run(toolbox(kube(fakes)), "recent_changes", service_id="payments", environment="prod",
                           minutes=3 * 24 * 60))
    newest = found["changes"][0]
    assert newest["version"] == "revision 4" and "description" not in newest, newest
    assert "carried over" in newest["note"] and "via OpsPilot" not in json.dumps(newest)


async def test_an_init_containers_new_image_is_named(fakes: OpsFakes) -> None:
    """Only a migration job's image changed: it was "image change revision 2 (payments-api:7.8.0 →
    payments-api:7.8.0)", the image that changed never named."""
    first = replica_set(1, "2026-11-20T08:00:00Z", "payments-api:7.8.0")
    second = replica_set(2, "2026-12-02T09:30:00Z", "payments-api:7.8.0")
    first["spec"]["template"]["spec"]["initContainers"] = [{"name": "migrate", "image": "migrate:1"}]
    second["spec"]["template"]["spec"]["initContainers"] = [{"name": "migrate", "image": "migrate:2"}]
    fakes.replica_sets = [first, second]
    found = data(await run(toolbox(kube(fakes)), "recent_changes", service_id="payments", environment="prod",
                           minutes=3 * 24 * 60))
    [change] = found["changes"]
    assert change["kind"] == "image" and change["from_images"] == ["payments-api:7.8.0", "migrate:1 (init)"]
    assert change["images"] == ["payments-api:7.8.0", "migrate:2 (init)"]


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


async def test_a_paged_answer_is_not_read_as_the_whole_history(fakes: OpsFakes, tmp_path: Path) -> None:
    """``{"items": [], "has_more": true}`` was "nothing changed": the first page alone, read as all of it."""
    fakes.change_events = {"items": [], "has_more": True, "next": "/hooks/changes?page=2"}  # type: ignore[assignment]
    source = cfg.HttpChanges(backend="http", url=f"{fakes.url}/hooks/changes", token_env="OPS_TOKEN")
    events = tmp_path / "changes.jsonl"
    events.write_text("")
    found = data(await run(toolbox(cfg.FileChanges(file=events), source), "recent_changes", service_id="payments",
                           environment="prod", minutes=60))
    assert found["changes"] == [] and "one page of several" in found["unavailable"][0]["message"]


async def test_a_deploy_its_event_says_failed_is_said_so_and_not_blamed(fakes: OpsFakes) -> None:
    fakes.change_events = [{"at": "2026-12-02T09:50:30Z", "service": "payments", "environment": "prod",
                            "version": "2026.12.02-2", "status": "completed", "conclusion": "failure"},
                           {"at": "2026-12-02T09:40:00Z", "service": "payments", "environment": "prod",
                            "version": "2026.12.02-1", "status": "succeeded"}]
    source = cfg.HttpChanges(backend="http", url=f"{fakes.url}/hooks/changes", token_env="OPS_TOKEN")
    found = data(await run(toolbox(source), "recent_changes", service_id="payments", environment="prod",
                           minutes=60))
    assert [c.get("status") for c in found["changes"]] == ["failure", None]  # GitHub's status says "completed"
    assert "2026.12.02-2 [failure]" in found["summary"]
    rise = {"trend": "steady high", "current": 0.2, "baseline": 0.001, "peak": 0.2, "onset_at": "2026-12-02T09:50:36Z"}
    verdict = judge(found, rise, None)
    assert (verdict.kind, verdict.hidden) == ("incomplete", "failed")


async def test_an_event_naming_no_environment_is_not_blamed_for_one(fakes: OpsFakes) -> None:
    """An event with no environment was listed (unmarked) for prod and for staging, and blamed: "Yes … after it"."""
    fakes.change_events = [{"at": "2026-12-02T09:50:30Z", "service": "payments", "version": "2026.12.02-9"}]
    source = cfg.HttpChanges(backend="http", url=f"{fakes.url}/hooks/changes", token_env="OPS_TOKEN")
    found = data(await run(toolbox(source), "recent_changes", service_id="payments", environment="prod",
                           minutes=60))
    assert found["changes"][0]["scope"] == "environment not stated"
    assert "2026.12.02-9 [environment not stated]" in found["summary"]
    rise = {"trend": "steady high", "current": 0.2, "baseline": 0.001, "peak": 0.2, "onset_at": "2026-12-02T09:51:00Z"}
    assert (judge(found, rise, None).kind, judge(found, rise, None).hidden) == ("incomplete", "unscoped")


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


# --- every kind of change, from histories the deployment controller would leave (tests/fakes/rollouts.py) ---

def _use(fakes: OpsFakes, sim: Rollouts) -> None:
    fakes.deployment, fakes.replica_sets = sim.deployment, sim.replica_sets


async def _last_hour(fakes: OpsFakes, minutes: int = 60) -> dict[str, Any]:
    found: dict[str, Any] = data(await run(toolbox(kube(fakes)), "recent_changes", service_id="payments",
                                           environment="prod", minutes=minutes))
    return found


async def test_a_rollback_is_a_rollback_dated_when_it_happened(fakes: OpsFakes) -> None:
    sim = Rollouts("payments-api:1.4.1", "2026-11-28T08:00:00Z")  # revision 1, days ago
    sim.set_image("payments-api:1.4.2", "2026-12-02T08:00:00Z")  # revision 2
    sim.undo("2026-12-02T09:12:00Z")  # revision 1's ReplicaSet is reused as revision 3
    _use(fakes, sim)
    found = await _last_hour(fakes)
    [back] = found["changes"]
    assert back["kind"] == "rollback" and back["version"] == "revision 3" and back["to_version"] == "revision 1"
    assert back["from_version"] == "revision 2" and back["images"] == ["payments-api:1.4.1"]
    assert back["changed"] == ["image of container api"] and back["time"] == "approximate"
    assert "2026-12-02T09:12:00Z" <= back["at"] <= "2026-12-02T09:12:30Z"  # not the ReplicaSet's creation
    assert found["summary"] == "1 change in the last 60 min: rollback to revision 1 (payments-api:1.4.1) at " \
        "about 09:12 UTC"
    assert found["last_before_window"]["kind"] == "image"


async def test_a_rollback_to_a_chosen_revision_keeps_its_time_when_scaled_later(fakes: OpsFakes) -> None:
    sim = Rollouts("payments-api:1.4.0", "2026-11-20T08:00:00Z")
    sim.set_image("payments-api:1.4.1", "2026-11-25T08:00:00Z")
    sim.set_image("payments-api:1.4.2", "2026-12-02T07:00:00Z")
    sim.undo("2026-12-02T09:20:00Z", to_revision=1)
    sim.scale(6, "2026-12-02T09:50:00Z")  # moves the reused ReplicaSet's managedFields time: not the rollback's
    _use(fakes, sim)
    found = await _last_hour(fakes)
    assert [(c["kind"], c["at"][11:16]) for c in found["changes"]] == [("scale", "09:50"), ("rollback", "09:20")]
    assert found["changes"][1]["to_version"] == "revision 1" and found["changes"][1]["images"] == \
        ["payments-api:1.4.0"]
    assert found["changes"][0]["to_version"] == "6 replicas" and found["changes"][0]["author"] == "kubectl"
    assert found["summary"].startswith("2 changes in the last 60 min: scale to 6 replicas at 09:50 UTC; rollback "
                                       "to revision 1 (payments-api:1.4.0) at about 09:20 UTC")


async def test_a_restart_after_a_restart(fakes: OpsFakes) -> None:
    sim = Rollouts()
    sim.restart("2026-12-02T08:00:00Z")
    sim.restart("2026-12-02T09:30:00Z")
    _use(fakes, sim)
    found = await _last_hour(fakes, minutes=180)
    assert [(c["kind"], c["version"], c.get("changed")) for c in found["changes"]] == [
        ("restart", "revision 3", ["restartedAt"]), ("restart", "revision 2", ["restartedAt"])]
    assert found["changes"][0]["from_version"] == "revision 2" and found["changes"][0]["at"] == \
        "2026-12-02T09:30:00Z"


async def test_an_env_change_after_a_restart_is_a_config_change_without_its_value(fakes: OpsFakes) -> None:
    sim = Rollouts(env={"DB_PASSWORD": "hunter2"})
    sim.restart("2026-12-02T08:00:00Z")
    sim.set_env("LOG_LEVEL", "debug", "2026-12-02T09:40:00Z")  # the restartedAt annotation is carried over
    sim.set_env("DB_PASSWORD", "s3cr3t-value", "2026-12-02T09:45:00Z")
    _use(fakes, sim)
    found = await _last_hour(fakes)
    assert [(c["kind"], c["changed"]) for c in found["changes"]] == [
        ("config", ["env DB_PASSWORD changed"]), ("config", ["env LOG_LEVEL added"])]
    assert found["summary"] == "2 changes in the last 60 min: config change revision 4 (env DB_PASSWORD) at " \
        "09:45 UTC; config change revision 3 (env LOG_LEVEL added) at 09:40 UTC"
    told = json.dumps(found)
    assert "debug" not in told and "s3cr3t" not in told and "hunter2" not in told


async def test_an_image_change_names_both_images(fakes: OpsFakes) -> None:
    sim = Rollouts("payments-api:1.4.1")
    sim.set_image("payments-api:1.4.2", "2026-12-02T09:30:00Z")
    _use(fakes, sim)
    found = await _last_hour(fakes)
    [change] = found["changes"]
    assert change["kind"] == "image" and change["from_images"] == ["payments-api:1.4.1"]
    assert change["images"] == ["payments-api:1.4.2"] and change["at"] == "2026-12-02T09:30:00Z"
    assert found["summary"] == "1 change in the last 60 min: image change revision 2 (payments-api:1.4.1 → " \
        "payments-api:1.4.2) at 09:30 UTC"


async def test_scaling_is_a_change_without_a_revision(fakes: OpsFakes) -> None:
    sim = Rollouts()
    sim.scale(5, "2026-12-02T09:40:00Z", manager="horizontal-pod-autoscaler")
    _use(fakes, sim)
    found = await _last_hour(fakes)
    assert [(c["kind"], c["to_version"], c["at"]) for c in found["changes"]] == [
        ("scale", "5 replicas", "2026-12-02T09:40:00Z")]
    assert found["summary"].startswith("1 change in the last 60 min: scale to 5 replicas at 09:40 UTC")


async def test_a_paused_deployment_is_said_with_what_waits(fakes: OpsFakes) -> None:
    sim = Rollouts()
    sim.pause("2026-12-02T09:20:00Z")
    sim.set_env("LOG_LEVEL", "debug", "2026-12-02T09:25:00Z")  # held back: no new ReplicaSet
    _use(fakes, sim)
    found = await _last_hour(fakes)
    assert [(c["kind"], c["at"]) for c in found["changes"]] == [("pause", "2026-12-02T09:20:00Z")]
    assert found["notes"] == ["the deployment is paused: template changes are not rolled out until it is "
                              "resumed (waiting: env LOG_LEVEL added)"]
    assert "paused" in found["summary"] and "debug" not in json.dumps(found)
    sim.resume("2026-12-02T09:45:00Z")  # the held-back change rolls out now
    found = await _last_hour(fakes)
    assert [(c["kind"], c["at"][11:16]) for c in found["changes"]] == [("config", "09:45")]
    assert "notes" not in found


async def test_a_resume_without_changes_is_a_change(fakes: OpsFakes) -> None:
    sim = Rollouts()
    sim.pause("2026-12-02T08:20:00Z")
    sim.resume("2026-12-02T09:35:00Z")
    _use(fakes, sim)
    found = await _last_hour(fakes)
    assert [(c["kind"], c["at"]) for c in found["changes"]] == [("resume", "2026-12-02T09:35:00Z")]


async def test_cicd_kinds_pass_through_in_one_spelling(tmp_path: Path) -> None:
    events = tmp_path / "changes.jsonl"
    kinds = ["rollback", "Scale", "config", "restart", "image", "deploy", "Release", "revert"]
    events.write_text("".join(json.dumps({"at": f"2026-12-02T09:{10 + i}:00Z", "service": "payments",
                                          "kind": k, "version": f"v{i}"}) + "\n" for i, k in enumerate(kinds)))
    found = data(await run(toolbox(cfg.FileChanges(file=events)), "recent_changes", service_id="payments",
                           environment="prod", minutes=60))
    assert [c["kind"] for c in reversed(found["changes"])] == \
        ["rollback", "scale", "config", "restart", "image", "deploy", "deploy", "rollback"]


def test_slack_counts_changes_and_says_their_kinds() -> None:
    one: dict[str, Any] = {"window": {"minutes": 60}, "changes": [
        {"kind": "rollback", "version": "revision 3", "to_version": "revision 1", "at": "2026-12-02T09:12:00Z"}]}
    assert output("ok", None, {"ok": True, "data": one}, "en") == "1 change in 60 min: rollback to `revision 1` 09:12"
    two = {**one, "changes": one["changes"] + [{"kind": "config", "version": "revision 2",
                                                "at": "2026-12-02T09:05:00Z"}]}
    assert output("ok", None, {"ok": True, "data": two}, "en") == \
        "2 changes in 60 min: rollback to `revision 1` 09:12, config change `revision 2` 09:05"
    assert output("ok", None, {"ok": True, "data": two}, "zh") == \
        "60 分钟内 2 次变更：回滚到 `revision 1` 09:12，配置变更 `revision 2` 09:05"


def test_slack_says_only_what_the_list_shows_of_counts_and_times() -> None:
    """25 autoscaler changes, 20 listed, read "20 changes"; a window whose one record was unreadable read "no
    change"; a rollback Kubernetes kept no time for read as at its stamp."""
    listed = [{"kind": "scale", "to_version": f"{i} replicas", "at": f"2026-12-02T09:{50 - i:02d}:00Z"}
              for i in range(20)]
    cut = {"window": {"minutes": 1440}, "changes": listed, "more_changes": 5}
    said = output("ok", None, {"ok": True, "data": cut}, "en")
    assert said.startswith("at least 25 changes in 1440 min (the newest 3 listed): "), said
    unread = {"window": {"minutes": 1440}, "changes": [], "unreadable_records": 1}
    assert output("ok", None, {"ok": True, "data": unread}, "en") == \
        "no change found in 1440 min; records unreadable: 1"
    undated = {"window": {"minutes": 60}, "changes": [
        {"kind": "rollback", "to_version": "revision 1", "at": "2026-12-02T08:20:00Z", "time": "unknown"},
        {"kind": "rollback", "to_version": "revision 2", "at": "2026-12-02T09:12:00Z", "time": "approximate"}]}
    assert output("ok", None, {"ok": True, "data": undated}, "en") == \
        "2 changes in 60 min: rollback to `revision 1` after 08:20, rollback to `revision 2` about 09:12"


async def test_what_could_not_be_read_is_said_and_times_in_milliseconds_are_times(tmp_path: Path) -> None:
    """A deploy timed in epoch milliseconds (as CI systems write it) was read as seconds in the year 58,000 and
    dropped unsaid; records with no time, or one far in the future, made the summary say "no change" with the
    count only in a field of its own, and the verdict "No: nothing changed"."""
    from datetime import datetime

    from tools.ops.verdict import judge

    now = datetime.fromisoformat(NOW.replace("Z", "+00:00")).timestamp()
    events = tmp_path / "changes.jsonl"
    events.write_text("".join(json.dumps(r) + "\n" for r in [
        {"at": int((now - 600) * 1000), "service": "payments", "environment": "prod", "version": "v2"},
        {"at": now + 86400 * 365, "service": "payments", "environment": "prod", "version": "v9"},
        {"service": "payments", "environment": "prod", "version": "v0"}]))
    found = data(await run(toolbox(cfg.FileChanges(file=events)), "recent_changes", service_id="payments",
                           environment="prod", minutes=60))
    assert [(c["version"], c["at"][11:16]) for c in found["changes"]] == [("v2", "09:50")]
    assert found["unreadable_records"] == 2 and "2 records could not be read" in found["summary"], found["summary"]
    events.write_text(json.dumps({"service": "payments", "environment": "prod"}) + "\n")
    none = data(await run(toolbox(cfg.FileChanges(file=events)), "recent_changes", service_id="payments",
                          environment="prod", minutes=60))
    assert none["changes"] == [] and none["summary"].startswith("no readable change in the last 60 min"), none
    flat = {"trend": "flat", "current": 0.001, "baseline": 0.001}
    assert judge(none, flat, None).kind == "incomplete"  # not "nothing changed": one record could not be read


def test_a_change_on_another_day_is_dated() -> None:
    """Over a day's window, yesterday's 14:02 read as today's."""
    day: dict[str, Any] = {"window": {"minutes": 1440, "to": "2026-12-02T10:00:00Z"}, "changes": [
        {"kind": "deploy", "version": "2026.12.02-1", "at": "2026-12-02T09:10:00Z"},
        {"kind": "deploy", "version": "2026.12.01-4", "at": "2026-12-01T14:02:00Z"}]}
    assert output("ok", None, {"ok": True, "data": day}, "en").endswith(
        "deploy `2026.12.02-1` 09:10, deploy `2026.12.01-4` 12-01 14:02")
