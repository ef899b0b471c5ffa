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
