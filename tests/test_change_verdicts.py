"""What a change history can vouch for: a list cut to its newest entries, a source not asked, records unread, a
change recorded twice, a change whose time is only "after" its stamp. "No", "none" and a count are said only of
a list that is all of the window; otherwise "can't tell", "none found", "at least"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.agent.events import ToolResultEvent
from bot.agent.models.demo_history import restarts_part, rollback_part
from bot.slack.rollbacks.offer import offer, remember
from core.messages import ToolResultMessage
from tests.test_changes import toolbox
from tests.test_ops import data, run
from tools.ops import toolbox_config as cfg
from tools.ops.series import describe, figures
from tools.ops.verdict import judge

RISE = {"trend": "steady high", "current": 0.2, "baseline": 0.001, "peak": 0.2, "onset_at": "2026-12-02T09:10:06Z"}
DEPLOY = {"kind": "deploy", "version": "2026.12.02-1", "at": "2026-12-02T09:10:01Z"}
BEFORE = {"kind": "deploy", "version": "2026.12.01-4", "at": "2026-12-01T14:02:00Z"}


def scales(n: int) -> list[dict[str, Any]]:
    return [{"kind": "scale", "to_version": str(i), "at": f"2026-12-02T09:{59 - i:02d}:00Z"} for i in range(n)]


def test_a_list_cut_before_the_errors_is_not_a_no() -> None:
    """20 autoscaler events after the errors listed, the deploy 5 s before them left off: it was "No: the errors
    began 10 min before scale 3"."""
    cut = {"changes": scales(20), "more_changes": 1}
    assert judge(cut, RISE, None).kind == "incomplete" and judge(cut, RISE, None).hidden == "cut"
    whole = {"changes": [*scales(12), DEPLOY, BEFORE]}
    verdict = judge(whole, RISE, None)
    assert verdict.kind == "yes" and verdict.previous == BEFORE
    assert judge({**whole, "more_changes": 3}, RISE, None).kind == "yes"  # what came before the errors is listed


def test_a_change_of_unknown_time_is_not_timed() -> None:
    """A rollback Kubernetes kept no time for, stamped with the revision before it: it was "Yes: the errors began
    10 min after rollback revision 3"."""
    undated = {"kind": "rollback", "version": "revision 3", "at": "2026-12-02T09:00:00Z", "time": "unknown"}
    verdict = judge({"changes": [undated]}, RISE, None)
    assert (verdict.kind, verdict.hidden, verdict.change) == ("incomplete", "undated", None)


def test_a_release_recorded_twice_is_not_the_release_before_it() -> None:
    """A retried CI webhook: the button offered to roll back to the culprit itself."""
    verdict = judge({"changes": [DEPLOY, dict(DEPLOY), BEFORE]}, RISE, None)
    assert verdict.kind == "yes" and verdict.previous == BEFORE


def test_one_deploy_recorded_by_two_sources_is_not_the_release_before_it() -> None:
    """CI's ``2026.12.02-1`` and Kubernetes' ``revision 2`` are one deploy, seconds apart: the button offered
    "Roll back to 2026.12.02-1" — the culprit itself — and a webhook backend "rolled back" to the same images."""
    kube = {"kind": "image", "version": "revision 2", "at": "2026-12-02T09:10:03Z", "source": "kubernetes",
            "images": ["orders-api:4.2.0"]}
    ci = {**DEPLOY, "source": "ci", "images": ["orders-api:4.2.0"]}
    older = {**BEFORE, "source": "ci", "images": ["orders-api:4.1.9"]}
    verdict = judge({"changes": [kube, ci, older]}, RISE, None)
    assert verdict.kind == "yes" and verdict.change == kube and verdict.previous == older
    unimaged = {**DEPLOY, "source": "ci"}  # no images named: told apart by time and source alone
    assert judge({"changes": [kube, unimaged, BEFORE]}, RISE, None).previous == BEFORE


def test_the_revision_before_a_config_change_is_offered_though_it_runs_the_same_images() -> None:
    """A config revision keeps the images of the deploy before it: that deploy is the release before it (rolling
    back to the one before that would also undo the morning's deploy, unasked)."""
    culprit = {"kind": "config", "version": "revision 5", "at": "2026-12-02T09:10:01Z", "source": "kubernetes",
               "images": ["orders-api:4.2.0"]}
    morning = {"kind": "image", "version": "revision 4", "at": "2026-12-02T07:00:00Z", "source": "kubernetes",
               "images": ["orders-api:4.2.0"]}
    older = {"kind": "image", "version": "revision 3", "at": "2026-12-01T14:02:00Z", "source": "kubernetes",
             "images": ["orders-api:4.1.9"]}
    assert judge({"changes": [culprit, morning, older]}, RISE, None).previous == morning


def test_no_rollback_is_offered_for_a_change_that_was_no_release() -> None:
    """A flag flipped 5 s before the errors: rolling back to the release running since the morning undoes
    nothing (it was offered, and refused as "runs it already" once pressed)."""
    flag = {"kind": "config", "at": "2026-12-02T09:10:01Z", "description": "feature flag fast-path on"}
    verdict = judge({"changes": [flag, BEFORE]}, RISE, None)
    assert (verdict.kind, verdict.change, verdict.previous) == ("yes", flag, None)
    scale = {"kind": "scale", "to_version": "2", "at": "2026-12-02T09:10:01Z"}
    assert judge({"changes": [scale, BEFORE]}, RISE, None).previous is None


def test_a_deploy_before_the_first_metric_point_has_no_baseline_before_it() -> None:
    """Metrics read from 09:01, the deploy at 08:45, the errors from 09:10: it was "Yes: … and the error rate was at
    its baseline before it", of a before nothing was read of."""
    deploy = {**DEPLOY, "at": "2026-12-02T08:45:00Z"}
    rate = {**RISE, "onset_at": "2026-12-02T09:10:00Z", "first_point_at": "2026-12-02T09:01:00Z", "step_s": 60}
    verdict = judge({"changes": [deploy, BEFORE]}, rate, None)
    assert (verdict.kind, verdict.hidden, verdict.change, verdict.previous) == ("incomplete", "before_data", deploy,
                                                                                None)
    read_from_before = {**rate, "first_point_at": "2026-12-02T08:30:00Z"}
    assert judge({"changes": [deploy, BEFORE]}, read_from_before, None).kind == "yes"


def test_a_flat_rate_read_from_after_the_deploy_is_no_sign_of_nothing() -> None:
    """8 % all the metric window long (read from 09:01), the deploy at 08:30: it was "No sign of it: the error rate
    did not clearly rise", of a rate before the deploy nobody read. The tool's figures carry where they begin."""
    deploy = {**DEPLOY, "at": "2026-12-02T08:30:00Z"}
    flat = {"trend": "flat", "current": 0.08, "baseline": 0.08, "first_point_at": "2026-12-02T09:01:00Z"}
    verdict = judge({"changes": [deploy]}, flat, None)
    assert (verdict.kind, verdict.hidden, verdict.change) == ("incomplete", "before_data", deploy)
    assert judge({"changes": [{**deploy, "at": "2026-12-02T09:20:00Z"}]}, flat, None).kind == "no_rise"
    assert "first_point_at" in figures(describe([(1_796_000_000.0 + 60 * i, 0.08) for i in range(10)]))


def test_a_deploy_within_the_metrics_step_before_the_onset_cannot_be_told_from_it() -> None:
    """The onset is a one-minute point: the errors began somewhere in the minute before it. A deploy 20 s before
    that point was "Yes: the errors began 20 s after"; one error log line 45 s earlier said "No"."""
    deploy = {**DEPLOY, "at": "2026-12-02T09:09:40Z"}
    rate = {**RISE, "onset_at": "2026-12-02T09:10:00Z", "first_point_at": "2026-12-02T08:10:00Z", "step_s": 60}
    verdict = judge({"changes": [deploy, BEFORE]}, rate, None)
    assert (verdict.kind, verdict.hidden) == ("incomplete", "resolution")
    logs = {"patterns": [{"pattern": "timeout", "first_seen": "2026-12-02T09:09:50Z"}]}
    assert judge({"changes": [deploy, BEFORE]}, rate, logs).kind == "yes"  # a log line dates it to the second
    earlier = {**deploy, "at": "2026-12-02T09:08:30Z"}
    assert judge({"changes": [earlier, BEFORE]}, rate, None).kind == "yes"


async def test_a_change_delivered_twice_is_listed_once(tmp_path: Path) -> None:
    events = tmp_path / "changes.jsonl"
    record = {"at": "2026-12-02T09:50:00Z", "service": "payments", "environment": "prod", "version": "v2"}
    events.write_text((json.dumps(record) + "\n") * 2)
    found = data(await run(toolbox(cfg.FileChanges(file=events)), "recent_changes", service_id="payments",
                           environment="prod", minutes=60))
    assert [c["version"] for c in found["changes"]] == ["v2"]
    assert "1 record of a change already listed counted once" in found["summary"], found["summary"]


def result(found: dict[str, Any]) -> ToolResultMessage:
    body = {"ok": True, "data": {"service_id": "gateway", "environment": "prod",
                                 "window": {"minutes": 1440, "to": "2026-12-02T10:00:00Z"}, **found}}
    return ToolResultMessage(call_id="c1", name="recent_changes", content=json.dumps(body), status="ok")


def test_no_rollback_in_a_partial_list_is_not_no() -> None:
    restarts = [{"kind": "restart", "version": f"r{i}", "at": f"2026-12-02T0{i}:10:00Z"} for i in range(3)]
    for partial, why in (({"more_changes": 5}, "5 older changes not listed"),
                         ({"unavailable": [{"source": "deploy events"}]}, "not checked: `deploy events`"),
                         ({"unreadable_records": 2}, "2 records could not be read")):
        said = "\n".join(rollback_part([result({"changes": restarts, **partial})], "gateway", False))
        assert "Can't tell: no rollback among the changes listed, but " + why in said, said
        counted = "\n".join(restarts_part([result({"changes": restarts, **partial})], [], "gateway", "", False))
        assert f"last 24 h: at least 3 ({why})" in counted, counted
    said = "\n".join(rollback_part([result({"changes": restarts})], "gateway", False))
    assert "No: no rollback is recorded in the last 24 h" in said
    none = "\n".join(restarts_part([result({"changes": [], "unavailable": [{"source": "ci"}]})], [], "gateway", "",
                                   True))
    assert "变更记录里最近 24 小时的重启：没有找到（没有查到：`ci`）" in none, none


def test_one_restart_recorded_by_two_sources_is_one_restart() -> None:
    """CI's event at 09:50:31 and Kubernetes' revision at 09:50:30 are one restart: it was "2"."""
    restarts = [{"kind": "restart", "version": "2026.12.01-3", "at": "2026-12-02T09:50:31Z", "source": "ci"},
                {"kind": "restart", "version": "revision 3", "at": "2026-12-02T09:50:30Z", "source": "kubernetes"},
                {"kind": "restart", "version": "revision 2", "at": "2026-12-02T08:00:00Z", "source": "kubernetes"}]
    said = "\n".join(restarts_part([result({"changes": restarts})], [], "gateway", "", False))
    assert "last 24 h: 2 (3 records from different sources)" in said, said


def read(tool: str, found: dict[str, Any]) -> ToolResultEvent:
    return ToolResultEvent(run_id="r", thread_id="t", seq=1, step=1, call_id=tool, tool=tool, status="ok",
                           error_code=None, summary="", latency_ms=1.0, data={"ok": True, "data": found})


def test_the_rollback_button_reads_the_whole_list() -> None:
    """The offer kept the first 10 changes: with 12 scale events after the deploy the answer said "Yes" and the
    button was gone."""
    state: dict[str, Any] = {}
    found = {"service_id": "orders", "environment": "staging", "changes": [*scales(12), DEPLOY, BEFORE]}
    remember(state, read("recent_changes", found))
    remember(state, read("query_metrics", {"service_id": "orders", "environment": "staging",
                                           "metrics": {"error_rate": RISE}}))
    block = offer(state, "r", "en")
    assert block is not None and "2026.12.01-4" in json.dumps(block)


def test_no_release_before_is_guessed() -> None:
    """With older releases cut off the list, the release before was the last one before the window, two days and
    two releases back; across a rollback, the release the rollback had already taken away."""
    v = [{"kind": "deploy", "version": f"v{i}", "at": f"2026-12-02T0{5 + i}:00:00Z"} for i in range(1, 4)]
    culprit = {"kind": "deploy", "version": "v4", "at": "2026-12-02T09:10:01Z"}
    cut = {"changes": [*scales(19), culprit], "more_changes": 2, "last_before_window": v[0]}
    assert (judge(cut, RISE, None).kind, judge(cut, RISE, None).previous) == ("yes", None)
    back = {"kind": "rollback", "version": "v1", "at": "2026-12-02T08:30:00Z"}
    verdict = judge({"changes": [culprit, back, v[1], v[0]]}, RISE, None)
    assert (verdict.kind, verdict.previous) == ("yes", None)


def test_a_change_of_unknown_time_before_a_later_revision_is_ordered() -> None:
    """A rollback Kubernetes kept no time for, followed by a dated revision of the same deployment: it came before
    that revision, so it cannot be what came just before the errors ("can't tell" took the button away)."""
    source = {"source": "Kubernetes rollout history (payments/payments-api)"}
    undated = {"kind": "rollback", "version": "revision 3", "at": "2026-12-02T07:00:00Z", "time": "unknown", **source}
    image = {"kind": "image", "version": "revision 4", "at": "2026-12-02T09:10:00Z", **source}
    verdict = judge({"changes": [image, undated]}, RISE, None)
    assert (verdict.kind, verdict.change) == ("yes", image)
    other = {**image, "source": "deploy events"}  # another source's change does not order it
    assert judge({"changes": [other, undated]}, RISE, None).hidden == "undated"


def test_the_revision_before_is_the_one_kubernetes_would_roll_back_to() -> None:
    """A config-only revision between two images: the button said "Roll back to revision 1", which takes the config
    change away too (unseen on the card), where `kubectl rollout undo` takes revision 2. A rollback someone already
    did after the culprit: the button offered it again."""
    culprit = {"kind": "image", "version": "revision 3", "at": "2026-12-02T09:10:01Z"}
    config = {"kind": "config", "version": "revision 2", "at": "2026-12-02T08:00:00Z"}
    first = {"kind": "image", "version": "revision 1", "at": "2026-12-01T08:00:00Z"}
    assert judge({"changes": [culprit, config, first]}, RISE, None).previous == config
    undone = {"kind": "rollback", "version": "revision 4", "to_version": "revision 1", "at": "2026-12-02T09:20:00Z"}
    verdict = judge({"changes": [undone, culprit, config, first]}, RISE, None)
    assert (verdict.kind, verdict.change, verdict.previous) == ("yes", culprit, None)
    named = {"kind": "config", "version": "2026.12.02-cfg", "at": "2026-12-02T08:00:00Z"}  # a CI record: no release
    assert judge({"changes": [DEPLOY, named, BEFORE]}, RISE, None).previous == BEFORE


def test_a_rollback_dated_by_its_rollout_s_end_is_not_after_the_errors() -> None:
    """A rollback began at 09:05, its rollout took ten minutes and Kubernetes dated it at 09:15 ("approximate"): with
    errors from 09:10:06, it was "No: the errors began 5 min before rollback revision 4"."""
    back = {"kind": "rollback", "version": "revision 4", "at": "2026-12-02T09:15:00Z", "time": "approximate"}
    older = {"kind": "image", "version": "revision 3", "at": "2026-12-01T09:00:00Z"}
    verdict = judge({"changes": [back, older]}, RISE, None)
    assert (verdict.kind, verdict.hidden) == ("incomplete", "approximate")
    exact = {**back, "time": None}  # a time Kubernetes did keep: it came after the errors
    assert judge({"changes": [exact, older]}, RISE, None).kind == "no"
