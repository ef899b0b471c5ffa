"""A burst of progress is shown once (issue 39): a step's events come out together, and the front end saves the
run's progress and queues its message's new state once for them, not once per event; what it shows in the end is
the same."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bench.common import engine, payload_tools
from bot.agent.events import Event, EventBus, ModelStep, RunFinished, ToolCallEvent
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import mention
from bot.demo.workspace import TEAM, all_text
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.pacer import Pacer
from bot.slack.outbound.thread_meta import RUN, THREAD, thread_key
from state import Keys, RedisStore, StoreError, Ttls, connect
from state.outbox_store import RedisOutbox
from tests.slack_harness import CHANNEL, Workspace, open_workspace
from tests.toolkit import Change
from tools import ToolContext, tool


async def test_a_subscriber_looking_ahead_is_given_the_run_s_next_queued_event() -> None:
    bus, seen = EventBus(), []

    async def sink(event: Event, following: Event | None) -> None:
        seen.append((event.type, following.type if following is not None else None))

    bus.subscribe_looking_ahead(sink)
    bus.publish(ModelStep(run_id="r1", thread_id="t", seq=1, step=1, latency_ms=1.0, asked_for_tools=True,
                          stop="tool_use"))
    for n in (1, 2):
        bus.publish(ToolCallEvent(run_id="r1", thread_id="t", seq=1 + n, step=1, call_id=f"c{n}", tool="lookup_a",
                                  arguments={}, mutating=False))
    await bus.drain()
    assert seen == [("model_step", "tool_call"), ("tool_call", "tool_call"), ("tool_call", None)]


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    turn = [reply("", call("lookup_a", "a1", q="x"), call("lookup_b", "b1", q="y")), reply("Both lookups answered.")]
    model = ScriptedModel(turn * 3)
    workspace = await open_workspace(redis_url, prefix, slack, model=model, specs=payload_tools(64))
    yield workspace
    await workspace.stop()


async def test_a_step_s_progress_is_saved_and_queued_once_per_burst(ws: Workspace) -> None:
    await ws.sender.event(mention(CHANNEL, "UREQ", "look both up", "20.1"))
    await ws.settle(30)
    records = {r.key: r for r in await ws.store.outbox.records(f"{CHANNEL}:20.1")}
    (progress,) = [r for key, r in records.items() if key.startswith("progress:")]
    # One per event would be 8: the start, the step, its two calls, their two results, the answer's step, the end.
    # The step and its calls come out together (one burst); the results as each call ends (one or two); the
    # answer's step with the end.
    assert progress.version <= 5, progress.version
    shown = [m for m in ws.slack.thread(CHANNEL, "20.1") if m.get("bot") and "lookup_a" in all_text(m)]
    assert len(shown) == 1
    text = all_text(shown[0])
    assert ":white_check_mark: Done" in text and "lookup_b" in text and "running" not in text.lower()


class _CountedReports:
    """The store's reports, counting the audit reads an answer makes."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.audit_reads = inner, 0

    async def read_audit(self, count: int = 100, *, run_id: str | None = None) -> list[dict[str, str]]:
        self.audit_reads += 1
        return list(await self.inner.read_audit(count, run_id=run_id))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_an_answer_that_changed_nothing_does_not_read_the_audit_stream(ws: Workspace) -> None:
    """Only a run that called a tool that changes things has changes to list under its answer."""
    counted = _CountedReports(ws.service.renderer.reports)
    ws.service.renderer.reports = cast(Any, counted)
    await ws.sender.event(mention(CHANNEL, "UREQ", "look both up", "21.1"))
    await ws.settle(30)
    assert any("Both lookups answered." in all_text(m) for m in ws.slack.thread(CHANNEL, "21.1"))
    assert counted.audit_reads == 0


async def test_a_run_says_at_its_end_whether_it_may_have_changed_something(store: RedisStore) -> None:
    """By its own trace (not what a front end happened to show): a tool that changes things, or one the registry
    does not know, makes its run's answer look its changes up."""
    @tool(description="Changes something.", mutating=True)
    async def mutate(args: Change, ctx: ToolContext) -> dict[str, Any]:
        return {"changed": args.target}

    ends: list[bool] = []
    bus = EventBus()
    bus.listen(lambda e: ends.append(e.may_have_changed) if isinstance(e, RunFinished) else None)
    model = ScriptedModel([reply("", call("lookup_a", "a1", q="x")), reply("read"),
                           reply("", call("mutate", "m1", target="db", environment="staging")), reply("changed")])
    eng = engine(store, model, [*payload_tools(64), mutate], bus=bus)
    await eng.ask("t-read", "look")
    await eng.ask("t-change", "change it")
    assert ends == [False, True]


async def test_a_run_shown_by_an_earlier_build_goes_on_from_the_state_it_saved(ws: Workspace) -> None:
    """Before issue 39 a run's shown state lived in the metadata store (``slack-run``): a run paused then is
    rendered on from it, not started afresh."""
    renderer, thread = ws.service.renderer, thread_key(CHANNEL, "23.1")
    await renderer.meta.put(THREAD, thread, {"channel": CHANNEL, "thread_ts": "23.1", "lang": "en"})
    old = {"run_id": "r-old", "header": ":raised_hand: Waiting", "step": 1, "lines": [], "stoppable": True,
           "note": "", "lang": "en", "channel": CHANNEL, "thread_ts": "23.1", "requester": "UREQ"}
    await renderer.meta.put(RUN, "r-old", {"progress": json.dumps(old)})
    assert await renderer.progress_of("r-old", thread, "en", "UREQ")
    assert not await ws.store.outbox.records(f"{CHANNEL}:23.1")  # nothing opened afresh
    assert not await renderer.progress_of("r-none", "terminal:1", "en", None)  # not a Slack thread


async def test_with_the_store_down_a_run_s_progress_waits_and_is_never_posted_directly(slack: FakeSlack) -> None:
    """A message that cannot be recorded is sent once directly (typically the one saying the store is down); a
    run's progress is not: it would be a second message, and its state would be lost. Catch-up shows the run once
    the store is back."""
    down = connect("redis://127.0.0.1:1/0", timeout_s=0.2)
    outbox = SlackOutbox(store=RedisOutbox(down, Keys("down"), Ttls(), outage_grace_s=0.3),
                         client=AsyncWebClient(token=slack.token, base_url=slack.api_url),
                         pacer=Pacer(workspace=TEAM), metrics=Metrics())
    try:
        with pytest.raises(StoreError):
            await outbox.message("progress:r9", CHANNEL, "24.1", "working", [kit.mrkdwn("working")],
                                 state=("r9", "{}"))
        assert not slack.called("chat.postMessage")
        await outbox.message("notice:1", CHANNEL, "24.1", "the store is down", [kit.mrkdwn("the store is down")])
        assert len(slack.called("chat.postMessage")) == 1
    finally:
        await down.aclose()
