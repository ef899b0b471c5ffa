"""The demo model's figures say what the series say: a rate that is not zero never reads 0.0%, two services whose
rates read alike are not ranked, "the same" stands only beside two figures that read alike, and an error rate that
could not be read is said, and is no "Status: OK"."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from bot.agent.models.demo import demo_model
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from bot.slack.followups.checks import STATUS_INSTRUCTION, status_of
from state import RedisStore
from tests.conftest import make_harness
from tests.language_scan import chinese, english_runs
from tests.slack_harness import Workspace, open_workspace
from tests.test_demo_model import ask, confirmed_restart, rechecked
from tests.test_timers import Clock, open_at
from tools import ops
from tools.ops.toolbox_config import FixtureMetrics, OpsConfig

NAN = float("nan")


def _series(error_rate: list[float], p95: list[float] | None = None) -> dict[str, list[float]]:
    return {"error_rate": error_rate, "p95_latency_ms": p95 or [150.0] * len(error_rate),
            "restarts": [0.0] * len(error_rate)}


def _metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, series: dict[str, object]) -> Path:
    """A metrics fixture the app's own toolbox reads (as a deployment names one in its environment)."""
    path = tmp_path / "metrics.yml"
    path.write_text(yaml.safe_dump(series), encoding="utf-8")
    monkeypatch.setenv("OPSPILOT_TOOLBOX__METRICS__BACKEND", "fixtures")
    monkeypatch.setenv("OPSPILOT_TOOLBOX__METRICS__FILE", str(path))
    return path


@pytest.fixture
async def flat(redis_url: str, prefix: str, slack: FakeSlack, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Workspace]:
    _metrics(tmp_path, monkeypatch, {
        "orders": {"prod": _series([0.001] * 4)},
        "gateway": {"prod": _series([0.0011, 0.001, 0.001, 0.001])},  # 0.1% both, as shown
        "payments": {"staging": _series([0.0] * 40 + [0.0004] * 20)},  # 0.04%: not 0.0%
    })
    workspace = await open_workspace(redis_url, prefix, slack, language="auto")
    yield workspace
    await workspace.stop()


@pytest.mark.parametrize(("question", "said", "unsaid"), [
    ("compare orders and gateway in prod", "both 0.10%: the same", "highest"),
    ("对比一下 orders 和 gateway 生产环境的错误率", "都是 0.10%，一样", "最高"),
])
async def test_services_whose_rates_read_alike_are_not_ranked(flat: Workspace, question: str, said: str,
                                                              unsaid: str) -> None:
    """Orders and gateway both at 0.1% read "orders is highest" (the larger of two unrounded floats)."""
    answer = await ask(flat, question, "810.1")
    assert said in answer and unsaid not in answer, answer


@pytest.mark.parametrize(("question", "said"), [("check payments staging errors", "error rate 0.040% (steady high"),
                                                ("看看支付服务预发环境的报错", "错误率 0.040% (持续偏高")])
async def test_a_small_rate_is_never_shown_as_zero(flat: Workspace, question: str, said: str) -> None:
    """0.04% read "error rate 0.0% (steady high: peak 0.0% …)"."""
    answer = await ask(flat, question, "820.1")
    assert said in answer and "0.0%" not in answer, answer


@pytest.mark.parametrize(("lang", "question", "restart", "expected"), [
    ("en", "look at the payment service's recent errors", "restart it in prod",
     ["Before the restart: 0.12% (`restart_service`)", "Right after the restart: 0.16% (`restart_service`)",
      "Worse than before the restart: 0.12% → 0.16%."]),
    ("zh", "看看支付服务最近报错", "重启它（生产环境）",
     ["重启前：0.12%（`restart_service`）", "重启刚完成时：0.16%（`restart_service`）", "比重启前差：0.12% → 0.16%。"]),
])
async def test_a_follow_up_s_verdict_follows_the_figures_it_shows(
        redis_url: str, prefix: str, slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lang: str,
        question: str, restart: str, expected: list[str]) -> None:
    """0.12% before the restart and 0.16% after it: the restart's answer said "rose", the follow-up "The same as
    before the restart: 0.1% → 0.2%"."""
    _metrics(tmp_path, monkeypatch, {"payments": {"prod": {
        **_series([0.0012] * 60), "after_restart": _series([0.0012, 0.0016])}}})
    clock = Clock()
    ws = await open_at(redis_url, prefix, slack, clock, language="auto")
    try:
        answer = await confirmed_restart(ws, question, restart, "830")
        assert ("从 0.12% 升到 0.16%" if lang == "zh" else "rose from 0.12% to 0.16%") in all_text(answer)
        follow_up = await rechecked(ws, clock, answer, "830.1")
        assert ("0.16%" in follow_up.splitlines()[0]) and follow_up.splitlines()[1:] == \
            [f"  • {line}" for line in expected[:2]] + expected[2:], follow_up
        assert (english_runs(follow_up) if lang == "zh" else chinese(follow_up)) == [], follow_up
    finally:
        await ws.stop()


@pytest.mark.parametrize(("question", "said"), [("check payments staging errors and latency", "error rate: no data"),
                                                ("看看支付服务预发环境的报错和延迟", "错误率：无数据")])
async def test_a_check_that_could_not_read_the_error_rate_is_not_ok(store: RedisStore, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    question: str, said: str) -> None:
    """No error rate at all (every point NaN) while p95 went 150 → 1500 ms ended "Status: OK": with --quiet,
    nothing would have been posted."""
    path = _metrics(tmp_path, monkeypatch, {"payments": {"staging": _series([NAN] * 60, [150.0] * 40 + [1500.0] * 20)}})
    toolbox = ops.build(OpsConfig(metrics=FixtureMetrics(file=path)))
    harness = make_harness(demo_model(), store, toolbox=toolbox)
    try:
        outcome = await harness.engine.ask("check:t-1", f"{question}\n\n{STATUS_INSTRUCTION}", user_id="USCHED",
                                           unattended=True)
    finally:
        await toolbox.aclose()
    answer = outcome.answer or ""
    assert said in answer and status_of(answer)[0] == "attention", answer


def test_a_change_s_verdict_and_its_step_line_write_the_rate_as_the_answer_does() -> None:
    """1.21% before and 1.24% after: the tool said "rose from 1.21% to 1.24%" and the step line "1.21% → 1.24%",
    while the answer right below said the error rate "stayed at 1.2%"."""
    from bot.slack.outbound.outputs import output
    from tools.ops.changing import verdict
    from tools.ops.restart import Rollout

    said = verdict(("restart", "restarted"), Rollout("complete", ""), 0.0121, 0.0124)
    assert said == "restarted; the error rate stayed at 1.2%", said
    line = output("ok", None, {"ok": True, "data": {"rollout": "complete", "error_rate_before": 0.0121,
                                                    "error_rate_after": 0.0124, "verdict": said}}, "en",
                  "restart_service")
    assert "1.2% → 1.2%" in line and "1.21%" not in line, line
