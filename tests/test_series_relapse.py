"""An error rate that spiked, came back, and rose again: what is said of it now, and "was it the deploy?", are
about the rise under way — the one before it said as recovered, never "not back yet" since the first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.agent.models.demo_answers import metric_part
from bot.agent.models.demo_history import restarts_part, rollback_part
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.outbound.outputs import output
from bot.slack.rollbacks.offer import ROLLBACK
from core.messages import ToolResultMessage
from tests.slack_harness import CHANNEL, open_workspace
from tools.ops.series import Series, describe, figures, gist, iso
from tools.ops.verdict import judge

T0 = 1_796_202_000.0  # 2026-12-02T09:00:00Z
MIN = 60.0
# 0.2% 09:01–09:20, 5% 09:21–09:23, 0.2% 09:24–09:51, 5% again 09:52–10:00
AGAIN = [0.002] * 20 + [0.05] * 3 + [0.002] * 28 + [0.05] * 9


def at(values: list[float]) -> Series:
    return [(T0 + (i + 1) * MIN, v) for i, v in enumerate(values)]


def deploy(hhmm: str, version: str = "2026.12.02-9") -> dict[str, Any]:
    return {"kind": "deploy", "version": version, "at": f"2026-12-02T{hhmm}:00Z"}


def test_a_rise_after_a_recovery_is_the_one_described() -> None:
    shape = describe(at(AGAIN))
    assert (shape.trend, shape.onset_at, shape.extreme_at) == ("steady high", T0 + 52 * MIN, T0 + 52 * MIN)
    assert (shape.excursions, shape.earlier_onset_at, shape.earlier_recovered_at) == (2, T0 + 21 * MIN, T0 + 24 * MIN)
    line = gist("error_rate", shape)
    assert "not back yet" not in line and "spiked at 09:21" in line and "back by 09:24, then steady high since 09:52" \
        in line, line
    fig = figures(shape)
    assert (fig["onset_at"], fig["earlier_onset_at"], fig["earlier_recovered_at"], fig["excursions"]) == \
        ("2026-12-02T09:52:00Z", "2026-12-02T09:21:00Z", "2026-12-02T09:24:00Z", 2)
    slack = {lang: output("ok", None, {"ok": True, "data": {"metrics": {"error_rate": fig}}}, lang) for lang in
             ("en", "zh")}
    assert "since 09:52; earlier: spiked at 09:21, back by 09:24" in slack["en"], slack
    assert "09:52 起" in slack["zh"] and "此前 09:21 曾升高，09:24 已恢复" in slack["zh"], slack
    en, zh = metric_part(fig, "error rate", "%", False), metric_part(fig, "错误率", "%", True)
    assert "since 09:52; earlier: spiked at 09:21 to 5.0%, back by 09:24" in en and "began 09:21" not in en, en
    assert "09:52 起；此前 09:21 曾升高，峰值 5.0%，09:24 已恢复" in zh and "尚未恢复" not in zh, zh


def test_a_smaller_rise_after_a_recovery_is_the_one_described_too() -> None:
    """A 10% spike back at 0.2% for 16 minutes, then 2–3% after a 09:38 deploy: the new rise was under half the
    spike's peak, so the line said "elevated, not back yet: began 09:20" and the verdict "no: 18 min before"."""
    values = [0.002 + (0.0001 if i % 2 else 0) for i in range(20)] + [0.10] * 4 + \
        [0.002 + (0.0001 if i % 2 else 0) for i in range(16)] + [0.02 + i * 0.0005 for i in range(20)]
    shape = describe(at(values))
    assert shape.onset_at == T0 + 41 * MIN and shape.earlier_recovered_at == T0 + 25 * MIN, gist("error_rate", shape)
    assert "not back yet" not in gist("error_rate", shape)
    assert judge({"changes": [deploy("09:39")]}, figures(shape), None).kind == "yes"


@pytest.mark.parametrize("values", [
    [0.0] * 20 + [1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1],  # comes and goes: no recovery
    [0.0] * 20 + [0.05] * 10 + [0.0] * 2 + [0.05] * 10,  # two points back is a pause, not a recovery
])
def test_a_pause_is_not_a_recovery(values: list[float]) -> None:
    shape = describe(at(values))
    assert shape.excursions == 1 and shape.onset_at == T0 + 21 * MIN and "earlier_onset_at" not in figures(shape)


def test_a_larger_rise_after_a_recovery_keeps_the_one_before() -> None:
    shape = describe(at([0.002] * 20 + [0.03] * 3 + [0.002] * 28 + [0.05] * 9))  # (a blip under half-way: none)
    assert (shape.onset_at, shape.excursions, shape.earlier_onset_at) == (T0 + 52 * MIN, 2, T0 + 21 * MIN)


def test_was_it_the_deploy_is_about_the_rise_under_way() -> None:
    """It was "No: the errors began 29 min before 2026.12.02-9", a deploy 2 minutes before the errors came back."""
    fig = figures(describe(at(AGAIN)))
    yes = judge({"changes": [deploy("09:50"), deploy("09:00", "2026.12.01-3")]}, fig, None)
    assert (yes.kind, yes.began, iso(yes.change_at)) == ("yes", T0 + 52 * MIN, "2026-12-02T09:50:00Z")
    assert yes.previous is not None and yes.previous["version"] == "2026.12.01-3"
    # A change before the first rise and none since: the errors, coming and going, began at the first.
    first = judge({"changes": [deploy("09:15")]}, fig, None)
    assert (first.kind, first.began) == ("yes", T0 + 21 * MIN)
    # A change while the first rise was under way: which rise it could have caused is not known.
    assert judge({"changes": [deploy("09:22")]}, fig, None).hidden == "recurring"
    # Risen and recovered twice before the change: recurring, not tied to it by timing.
    thrice = figures(describe(at([0.002] * 10 + [0.05] * 3 + [0.002] * 12 + [0.05] * 3 + [0.002] * 23
                                 + [0.05] * 9)))
    assert thrice["excursions"] == 3, thrice
    assert judge({"changes": [deploy("09:50")]}, thrice, None).hidden == "recurring"


def _fixture(tmp_path: Path, rate: list[float]) -> tuple[Path, Path]:
    flat = {"p95_latency_ms": [180] * 60, "restarts": [0] * 60}
    metrics = tmp_path / "metrics.yml"
    metrics.write_text(json.dumps({"payments": {"prod": {"error_rate": rate, **flat}}}))  # JSON is YAML
    changes = tmp_path / "changes.jsonl"
    changes.write_text("\n".join(json.dumps({**c, "service": "payments", "environment": "prod"})
                                 for c in (deploy("09:50"), deploy("07:00", "2026.12.01-3"))) + "\n")
    return metrics, changes


@pytest.mark.parametrize(("question", "expected", "absent"), [
    ("was it the deploy? payments prod errors",
     ["error rate 5.0% (steady high: peak 5.0% at 09:52, since 09:52; earlier: spiked at 09:21",
      "Errors began: 2026-12-02 09:52:00 UTC", "Yes: the errors began 2 min after 2026.12.02-9",
      "An earlier rise, from 09:21, was back at its baseline by 09:24"],
     ["not back yet", "No:"]),
    ("支付服务生产环境的报错是发版引起的吗？",
     ["09:52 起；此前 09:21 曾升高", "报错开始：2026-12-02 09:52:00 UTC", "是：报错在 2026.12.02-9 之后 2 分钟 开始",
      "此前 09:21 错误率也曾升高，09:24 已回到基线"],
     ["尚未恢复", "不是："]),
])
async def test_the_answer_and_its_button_are_about_the_rise_under_way(
        redis_url: str, prefix: str, slack: FakeSlack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        question: str, expected: list[str], absent: list[str]) -> None:
    metrics, changes = _fixture(tmp_path, AGAIN)
    monkeypatch.setenv("OPSPILOT_TOOLBOX__METRICS__BACKEND", "fixtures")
    monkeypatch.setenv("OPSPILOT_TOOLBOX__METRICS__FILE", str(metrics))
    monkeypatch.setenv("OPSPILOT_TOOLBOX__CHANGES", json.dumps([{"backend": "files", "file": str(changes)}]))
    ws = await open_workspace(redis_url, prefix, slack, language="auto")
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", question, "930.1"))
        await ws.settle()
        answer = slack.thread(CHANNEL, "930.1")[-1]
        text = all_text(answer)
        for part in expected:
            assert part in text, text
        for part in absent:
            assert part not in text, text
        offered = [b for m in slack.thread(CHANNEL, "930.1") for b in buttons(m) if b["action_id"] == ROLLBACK]
        assert [json.loads(b["value"])["release"] for b in offered] == ["2026.12.01-3"], offered
    finally:
        await ws.stop()


def _read(name: str, found: dict[str, Any]) -> ToolResultMessage:
    body = {"ok": True, "data": {"service_id": "payments", "environment": "prod", **found}}
    return ToolResultMessage(call_id=name, name=name, content=json.dumps(body), status="ok")


@pytest.mark.parametrize("zh", [False, True])
def test_a_restart_or_rollback_that_ended_the_first_rise_is_not_said_to_come_before_the_errors(zh: bool) -> None:
    """A restart at 09:22, the rate back at 09:24, up again at 09:52: "the errors began 30 min after the restart"
    (the rise under way read as all there was) — or, before, "still not back to its baseline"."""
    rate = {"metrics": {"error_rate": figures(describe(at(AGAIN)))}, "window_minutes": 60}
    window = {"window": {"minutes": 60, "to": "2026-12-02T10:00:00Z"}}
    restart = {"kind": "restart", "version": "revision 4", "at": "2026-12-02T09:22:00Z"}
    reads = [_read("query_metrics", rate), _read("recent_changes", {**window, "changes": [restart]})]
    helped = "\n".join(restarts_part(reads, [], "payments", "did the restart help?", zh))
    assert ("起初有用：重启后 2 分钟 回到基线，但 09:52 又升高了" if zh else
            "It looked like it at first: back to its baseline 2 min after the restart, but the errors came back at "
            "09:52") in helped, helped
    rollback = {"kind": "rollback", "version": "2026.12.01-3", "to_version": "2026.12.01-3",
                "at": "2026-12-02T09:22:00Z"}
    reads[1] = _read("recent_changes", {**window, "changes": [rollback]})
    said = "\n".join(rollback_part(reads, "payments", zh))
    assert ("回滚后 2 分钟，错误率在 09:24 回到基线，但 09:52 又升高了" if zh else
            "back to its baseline by 09:24, 2 min after the rollback, but rose again at 09:52") in said, said
