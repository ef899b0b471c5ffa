"""The demo model on the change history says only what the records and the metrics show: a restart is not
credited with a recovery from errors that began after it, and a change whose time its source did not record
exactly is not given one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.agent.deps import RunDeps
from bot.agent.engine import Engine
from bot.agent.events import EventBus
from bot.agent.limits import Limits
from bot.agent.models.demo import demo_model
from bot.agent.models.demo_changes import change_line
from state import MemoryStore
from tools import ops
from tools.ops.toolbox_config import FileChanges, OpsConfig, Verification
from tools.registry import Registry


async def _answer(question: str, changes: Path) -> str:
    config = OpsConfig(changes=[FileChanges(file=changes)], verify=Verification(timeout_s=10, poll_s=0.05,
                                                                                settle_s=0))
    toolbox = ops.build(config)
    deps = RunDeps(model=demo_model(), registry=Registry.of(toolbox.specs), store=MemoryStore(), bus=EventBus(),
                   limits=Limits(max_steps=8, max_wall_time_s=60))
    try:
        return (await Engine(deps).ask("t:1", question, user_id="U1", context="")).answer or ""
    finally:
        await toolbox.aclose()


@pytest.mark.parametrize(("question", "said", "unsaid"), [
    ("did the orders restart in staging help?", "the errors began 41 min after the restart", "It looks like it"),
    ("orders staging 的重启有用吗？", "报错是重启之后 41 分钟才开始的", "看起来有用"),
])
async def test_a_restart_before_the_errors_is_not_credited_with_their_recovery(tmp_path: Path, question: str,
                                                                              said: str, unsaid: str) -> None:
    """The bundled orders/staging errors began 09:11 and were back by 09:15; the restart was at 08:30."""
    changes = tmp_path / "changes.jsonl"
    changes.write_text(
        '{"at": "2026-12-02T08:30:00Z", "service": "orders", "environment": "staging", "kind": "redeploy", '
        '"version": "2026.12.01-4", "description": "routine restart"}\n')
    answer = await _answer(question, changes)
    assert said in answer and unsaid not in answer, answer


@pytest.mark.parametrize(("time", "en", "zh"), [
    ("unknown", "`rollback revision 3` at an unknown time after 09:30:00 UTC",
     "回滚 `revision 3`，09:30:00 UTC 之后的某个时间"),
    ("approximate", "`rollback revision 3` at about 09:30:00 UTC", "回滚 `revision 3`，约 09:30:00 UTC"),
    (None, "`rollback revision 3` at 09:30:00 UTC", "回滚 `revision 3`，09:30:00 UTC"),
])
def test_a_change_s_time_is_said_as_exactly_as_its_source_recorded_it(time: str | None, en: str, zh: str) -> None:
    change = {"at": "2026-12-02T09:30:00Z", "kind": "rollback", "version": "revision 3", "source": "kubernetes",
              **({"time": time} if time else {})}
    assert change_line(change, zh=False).startswith(en)
    assert change_line(change, zh=True).startswith(zh)


HISTORY = (
    '{"at": "2026-12-01T14:02:00Z", "service": "orders", "environment": "staging", "kind": "deploy", '
    '"version": "2026.12.01-4"}\n'
    '{"at": "2026-12-02T09:10:01Z", "service": "orders", "environment": "staging", "kind": "deploy", '
    '"version": "2026.12.02-1"}\n'
    '{"at": "2026-12-02T09:13:30Z", "service": "orders", "environment": "staging", "kind": "rollback", '
    '"version": "2026.12.01-4"}\n')


@pytest.mark.parametrize(("later", "said"), [
    ('{"at": "2026-12-02T09:40:00Z", "service": "orders", "environment": "staging", "kind": "undo", '
     '"version": "2026.12.02-1"}', "`2026.12.02-1` is back: the rollback before this one was undone."),
    ('{"at": "2026-12-02T09:40:00Z", "service": "orders", "environment": "staging", "kind": "deploy", '
     '"version": "2026.12.02-2"}', "Since then: `deploy 2026.12.02-2` at 2026-12-02 09:40:00 UTC"),
])
async def test_a_rollback_followed_by_another_release_is_not_the_end_of_the_story(tmp_path: Path, later: str,
                                                                                said: str) -> None:
    """Rolled back at 09:13, then rolled back again (to the very release rolled back) or redeployed at 09:40: it
    was "Yes" and nothing more, as if the rollback's release still ran."""
    changes = tmp_path / "changes.jsonl"
    changes.write_text(HISTORY + later + "\n")
    answer = await _answer("was the orders deploy in staging rolled back?", changes)
    assert said in answer, answer
    changes.write_text(HISTORY)
    alone = await _answer("was the orders deploy in staging rolled back?", changes)
    assert "is back" not in alone and "Since then" not in alone


@pytest.mark.parametrize(("question", "at", "said"), [
    ("what happened at 09:11?", "09:11", ""),
    ("what happened at 09:11 UTC in prod?", "09:11", ""),
    ("what happened at 9:11 pm?", "21:11", "9:11 pm"),
    ("what happened at 12:30 am?", "00:30", "12:30 am"),
    ("what happened at 17:11 UTC+8?", "09:11", "17:11 UTC+8"),
    ("what happened at 9:11 PST?", "17:11", "9:11 PST"),
    ("北京时间 17:11 发生了什么？", "09:11", "17:11（北京时间）"),
    ("下午 5:11 出了什么事？", "17:11", "下午5:11"),
    ("what happened at 17:11 MSK?", "14:11", "17:11 MSK"),
    ("what happened at 17:11 (UTC+8)?", "09:11", "17:11 UTC+8"),
    ("what happened at UTC+8 17:11?", "09:11", "UTC+8 17:11"),
    ("what happened at 2026-12-02T17:11+08:00?", "09:11", "T17:11+08:00"),
    ("at 10:30 IT says the deploy broke it", "10:30", ""),  # a capital word after a time is no zone
])
def test_a_time_is_read_in_the_zone_it_was_said_in(question: str, at: str, said: str) -> None:
    """"9:11 pm" was 09:11 UTC and "北京时间 17:11" was 17:11 UTC: the wrong burst, or none, for the right one."""
    from bot.agent.models.demo_intent import read

    ask = read(question)
    assert (ask.at, ask.said_at, ask.zone_unknown) == (at, said, "")


@pytest.mark.parametrize(("question", "now", "meant"), [
    ("what happened today at 01:00 UTC+8?", "2026-12-07T20:00:00Z", "2026-12-07T17:00:00Z"),  # 12-08 in UTC+8
    ("what happened today at 9:11 am PST?", "2026-12-08T03:00:00Z", "2026-12-07T17:11:00Z"),  # 12-07 in PST
    ("what happened yesterday at 01:00 UTC+8?", "2026-12-07T20:00:00Z", "2026-12-06T17:00:00Z"),
    ("what happened at 09:11?", "2026-12-02T10:00:00Z", "2026-12-02T09:11:00Z"),
    ("what happened at 14:02?", "2026-12-02T10:00:00Z", "2026-12-01T14:02:00Z"),  # the last 14:02 before now
])
def test_today_and_yesterday_are_the_asker_s_in_the_zone_said(question: str, now: str, meant: str) -> None:
    from bot.agent.models.demo_changes import moment
    from bot.agent.models.demo_intent import read
    from tools.ops.changes import timestamp

    assert moment(read(question), {"window": {"to": now}}) == timestamp(meant)


async def test_a_zone_with_more_than_one_meaning_is_asked_about(tmp_path: Path) -> None:
    changes = tmp_path / "changes.jsonl"
    changes.write_text("")
    answer = await _answer("what happened in staging at 17:11 CST?", changes)
    assert "not which time zone `CST` means" in answer and "UTC*" not in answer


async def test_the_burst_asked_about_in_beijing_time_is_found(tmp_path: Path) -> None:
    """The bundled orders/staging burst began 09:11 UTC: 17:11 Beijing time."""
    changes = tmp_path / "changes.jsonl"
    changes.write_text('{"at": "2026-12-02T09:10:01Z", "service": "orders", "environment": "staging", '
                       '"kind": "deploy", "version": "2026.12.02-1"}\n')
    answer = await _answer("北京时间 17:11 staging 发生了什么？", changes)
    assert "*09:11 UTC 前后*（即你问的 17:11（北京时间））" in answer and "`orders`（`staging`）09:11" in answer
