"""Re-check, like Stop, Confirm and 👎, acts only on a run of its own thread: a press carrying another thread's
run id (a button's value copied from elsewhere) schedules nothing in the clicked thread and says why."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator

import pytest

from bot.demo.sender import block_action, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import buttons
from bot.slack.followups.buttons import RECHECK
from bot.slack.outbound.thread_meta import thread_key
from tests.slack_harness import CHANNEL, Workspace
from tests.test_followups import restarted
from tests.test_timers import QUESTION, Clock, open_at


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_at(redis_url, prefix, slack, Clock())
    yield workspace
    await workspace.stop()


async def test_a_re_check_with_another_threads_run_id_is_refused(ws: Workspace) -> None:
    answer = await restarted(ws, "770.1")  # a change ran here: its answer has Re-check
    run_id = next(b["value"] for b in buttons(answer) if b["action_id"] == RECHECK)
    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "780.1"))  # another thread, answered
    await ws.settle()
    other = copy.deepcopy(ws.slack.thread(CHANNEL, "780.1")[-1])
    assert other.get("thread_ts") == "780.1"

    await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=other, action_id=RECHECK,
                                        value=run_id))  # signed, through the Slack endpoint
    await ws.settle()
    assert await ws.store.timers.pending(thread_key(CHANNEL, "780.1")) == []
    assert await ws.store.timers.pending(thread_key(CHANNEL, "770.1")) == []
    assert "does not belong to this message" in ws.slack.ephemeral_texts("UREQ")[-1]

    # In its own thread the same press schedules its re-check, as before.
    await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=copy.deepcopy(answer),
                                        action_id=RECHECK, value=run_id))
    await ws.settle()
    assert len(await ws.store.timers.pending(thread_key(CHANNEL, "770.1"))) == 1
