"""Streamed progress when Slack loses a reply or Redis goes away: every stream Slack started is stopped once,
the answer is shown once, and no Stop button is left live once the run is over."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from state.store_errors import StoreUnavailable
from tests.conftest import OwnRedis, until
from tests.slack_harness import CHANNEL, open_workspace
from tests.test_streaming import ask, stop_buttons
from tests.toolkit import Probe, toolkit

ANSWER = "The answer, once."


def shown(message: dict[str, Any]) -> str:
    """What a person reads in a message: its text and blocks, and what its stream shows."""
    return all_text(message) + str((message.get("stream") or {}).get("markdown") or "")


def steps(message: dict[str, Any], tool: str) -> int:
    """How many times a message shows a step of ``tool``: a line of the plain message, or a task card."""
    tasks = (message.get("stream") or {}).get("tasks", [])
    return all_text(message).count(f"`{tool}`") + sum(t["title"].startswith(tool) for t in tasks)


def closed_once(slack: FakeSlack, thread_ts: str, tools: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every stream stopped, the answer once, each step once, no live Stop: the bot's messages in the thread."""
    assert slack.streams_started and not slack.unstopped_streams(), [m["ts"] for m in slack.unstopped_streams()]
    bot = [m for m in slack.thread(CHANNEL, thread_ts) if m.get("bot")]
    assert sum(ANSWER in shown(m) for m in bot) == 1, [shown(m)[:80] for m in bot]
    for tool in tools:
        assert sum(steps(m, tool) for m in bot) == 1, (tool, [shown(m)[:80] for m in bot])
    assert not stop_buttons(slack, thread_ts)
    return bot


def one_stream_carries_the_run(slack: FakeSlack, bot: list[dict[str, Any]]) -> None:
    """As with no fault: one streamed message, stopped with the answer, never edited into something else."""
    [message] = bot
    assert message["stream"]["state"] == "stopped" and ANSWER in message["stream"]["markdown"]
    assert [m["ts"] for m in slack.streams_started] == [message["ts"]]
    assert not [c for c in slack.called("chat.update") if c["ts"] == message["ts"]]


async def test_a_lost_answer_to_start_stream_finds_the_stream_it_started(redis_url: str, prefix: str,
                                                                          slack: FakeSlack) -> None:
    model = ScriptedModel([reply("Look first.", call("lookup_a", "a1")), reply(ANSWER)])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream",
                              specs=[toolkit(Probe())["lookup_a"]])
    try:
        slack.fault("lost", "chat.startStream", times=1)  # Slack started it, but the reply never came
        await ws.sender.event(ask(slack, "check", "950.1"))
        await ws.settle()
        one_stream_carries_the_run(slack, closed_once(slack, "950.1", ("lookup_a",)))
        assert ws.service.metrics.value("opspilot_streams_found_total") == 1
    finally:
        await ws.stop()


async def test_lost_answers_to_every_stream_call(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    model = ScriptedModel([reply("Look first.", call("lookup_a", "a1")), reply("", call("lookup_b", "b1")),
                           reply(ANSWER)])
    tools = toolkit(Probe())
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream",
                              specs=[tools["lookup_a"], tools["lookup_b"]])
    try:
        for method in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
            slack.fault("lost", method, times=1)
        await ws.sender.event(ask(slack, "check", "951.1"))
        await ws.settle()
        one_stream_carries_the_run(slack, closed_once(slack, "951.1", ("lookup_a", "lookup_b")))
    finally:
        await ws.stop()


async def test_a_lost_answer_to_stop_stream_leaves_the_answer_in_the_stream(redis_url: str, prefix: str,
                                                                             slack: FakeSlack) -> None:
    """The stop landed: not taken for a stream Slack timed out (which would be edited into a plain message and
    the answer posted below it, shown a second time)."""
    model = ScriptedModel([reply("", call("lookup_a", "a1")), reply(ANSWER)])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream",
                              specs=[toolkit(Probe())["lookup_a"]])
    try:
        slack.fault("lost", "chat.stopStream", times=2)
        await ws.sender.event(ask(slack, "check", "952.1"))
        await ws.settle()
        one_stream_carries_the_run(slack, closed_once(slack, "952.1", ("lookup_a",)))
    finally:
        await ws.stop()


async def _outage(own_redis: OwnRedis, outage_s: float) -> None:
    """Once a watcher has stopped Redis: back after ``outage_s`` (longer than the workspace's grace), the
    outage's length, not a wait for anything to happen."""
    await until(lambda: own_redis.proc is None)
    await asyncio.sleep(outage_s)
    own_redis.start()


def stop_redis_when(slack: FakeSlack, own_redis: OwnRedis, when: Callable[[dict[str, Any]], bool]) -> None:
    """Stop Redis the moment Slack shows a message for which ``when(message)`` holds (once)."""
    async def watch(change: dict[str, Any]) -> None:
        if change["type"] == "message" and when(change["message"]) and own_redis.proc is not None \
                and slack.watchers:
            slack.watchers.clear()
            own_redis.stop()
    slack.watchers.append(watch)


async def test_redis_away_as_the_stream_starts(own_redis: OwnRedis, prefix: str, slack: FakeSlack) -> None:
    """Slack started the stream but its ts could not be recorded: the stream is found again, and its Stop goes
    once the run is over."""
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("Look first.", call("blocker", "b1")), reply(ANSWER)])
    ws = await open_workspace(own_redis.url, prefix, slack, model=model, progress="stream", specs=[tools["blocker"]],
                              outage_grace_s=1.0, outbox_max_backoff_s=0.5)
    try:
        held = slack.fault("error", "chat.startStream")  # the stream starts once the step runs (the engine waits)
        await ws.sender.event(ask(slack, "check", "953.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        stop_redis_when(slack, own_redis, lambda m: "stream" in m)
        held.times = 0
        await _outage(own_redis, 3.0)
        await until(lambda: bool(stop_buttons(slack, "953.1")))  # found again, its Stop is up
        probe.release.set()
        await ws.settle(60)
        one_stream_carries_the_run(slack, closed_once(slack, "953.1", ("blocker",)))
    finally:
        probe.release.set()
        await ws.stop()


async def test_redis_away_as_the_stream_stops(own_redis: OwnRedis, prefix: str, slack: FakeSlack) -> None:
    """Slack stopped the stream but that could not be recorded: the stop is not sent again as a fall back."""
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("Look first.", call("blocker", "b1")), reply(ANSWER)])
    ws = await open_workspace(own_redis.url, prefix, slack, model=model, progress="stream", specs=[tools["blocker"]],
                              outage_grace_s=1.0, outbox_max_backoff_s=0.5)
    try:
        await ws.sender.event(ask(slack, "check", "954.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        await until(lambda: bool(stop_buttons(slack, "954.1")))
        stop_redis_when(slack, own_redis, lambda m: ANSWER in str((m.get("stream") or {}).get("markdown")))
        probe.release.set()
        await _outage(own_redis, 3.0)
        await ws.settle(60)
        one_stream_carries_the_run(slack, closed_once(slack, "954.1", ("blocker",)))
    finally:
        probe.release.set()
        await ws.stop()


async def test_a_stop_message_recorded_just_before_redis_went_away_is_still_deleted(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """The outbox recorded the Stop message, then could not record that it had (Redis went away, or the process
    died, between two writes): the Stop still goes once the run is over."""
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("Look first.", call("blocker", "b1")), reply(ANSWER)])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream", specs=[tools["blocker"]],
                              outbox_max_backoff_s=0.5)
    store = ws.service.outbox.store
    patch, failed = store.patch, []

    async def patch_once_failing(thread: str, key: str, fields: Any, *, delivered: int | None = None) -> None:
        if "control_put" in fields and not failed:
            failed.append(key)
            raise StoreUnavailable("Redis unreachable while updating the outbox (a test)")
        await patch(thread, key, fields, delivered=delivered)

    store.patch = patch_once_failing  # type: ignore[method-assign]
    try:
        await ws.sender.event(ask(slack, "check", "955.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        await until(lambda: bool(failed) and bool(stop_buttons(slack, "955.1")))
        probe.release.set()
        await ws.settle()
        one_stream_carries_the_run(slack, closed_once(slack, "955.1", ("blocker",)))
    finally:
        probe.release.set()
        await ws.stop()


async def test_a_stream_not_found_in_time_is_stopped_and_deleted_when_the_run_ends(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """The look for a lost start's stream read nothing (the thread could not be read), so the stream was
    started again: the first one is found when the stream ends, stopped and deleted, and shows nothing twice."""
    model = ScriptedModel([reply("Look first.", call("lookup_a", "a1")), reply(ANSWER)])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream",
                              specs=[toolkit(Probe())["lookup_a"]])
    try:
        slack.fault("lost", "chat.startStream", times=1)
        slack.fault("refuse", "conversations.replies", times=1, error="missing_scope")
        await ws.sender.event(ask(slack, "check", "956.1"))
        await ws.settle()
        [stray, stream] = slack.streams_started
        assert stray in slack.deleted and stray["stream"]["state"] == "stopped"
        assert closed_once(slack, "956.1", ("lookup_a",)) == [stream]
        assert ANSWER in stream["stream"]["markdown"]
        assert ws.service.metrics.value("opspilot_streams_strays_stopped_total") == 1
    finally:
        await ws.stop()
