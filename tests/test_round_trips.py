"""What a model step costs in Redis: at most two round trips and one durable write per step, the lease let go by
the turn's last write, the trace appended rather than rewritten. Counted at the client (``bench.common.CountingRedis``,
a client that records the requests it sends), against the real server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bench.common import counting_store, payload_tools, steps_script
from bot.agent.deps import RunDeps
from bot.agent.engine import Engine, EngineOptions
from bot.agent.events import Event, EventBus
from bot.agent.limits import Limits
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.agent.transcript import violations
from state import LeaseLost, RedisStore, Write
from tests.toolkit import Change
from tools import ToolContext, tool
from tools.registry import Registry


@pytest.fixture
async def counted(redis_url: str, prefix: str) -> AsyncIterator[tuple[RedisStore, list[str]]]:
    store, trips = counting_store(redis_url, prefix)
    yield store, trips
    keys = [k async for k in store.client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await store.client.delete(*keys)
    await store.close()


def _engine(store: RedisStore, model: ScriptedModel, specs: Any, bus: EventBus | None = None) -> Engine:
    deps = RunDeps(model=model, registry=Registry.of(specs), store=store,
                   bus=bus or EventBus(), limits=Limits(max_steps=20, identical_call_limit=100))
    return Engine(deps, EngineOptions(lease_wait_s=5))


@pytest.mark.parametrize("tool_steps", [1, 3])
async def test_a_step_costs_at_most_two_round_trips(counted: tuple[RedisStore, list[str]], tool_steps: int) -> None:
    store, trips = counted
    engine = _engine(store, ScriptedModel(steps_script(tool_steps), strict=False), payload_tools(64))
    await engine.ask("thread", "warm up")  # scripts loaded into the server once
    for turn in range(3):
        trips.clear()
        out = await engine.ask("thread", f"question {turn}")
        assert out.answer == "done"
        steps = tool_steps + 1
        # open the turn (lease + run + transcript, and the new run with its question), one write per step (the
        # last one also lets go of the lease): nothing else.
        assert trips == ["EVALSHA"] * (1 + steps), trips
        assert len(trips) / steps <= 2
    assert not await store.client.exists(store.keys.lease("thread"))  # let go by the last write
    record = await store.load_run(out.run_id)
    assert record is not None
    assert [e.kind for e in record.trace] == (["step", "call", "call"] * tool_steps) + ["step", "finish"]
    stored = str(await store.client.get(store.keys.run(out.run_id)))
    finished = json.loads(stored[stored.index("{"):])
    assert len(finished["rows"]) == len(record.trace)  # a finished run holds its whole trace: one key
    assert await store.client.ttl(store.keys.run(out.run_id)) > 0
    assert violations(await store.load_transcript("thread")) == []


async def test_front_ends_recording_events_keep_the_lease_until_they_have(counted: tuple[RedisStore, list[str]]
                                                                           ) -> None:
    """With a subscriber (Slack rendering) the lease is let go after its events are recorded: one more trip."""
    store, trips = counted
    seen: list[str] = []

    async def sink(event: Event) -> None:
        held = await store.client.get(store.keys.lease("thread"))
        seen.append(f"{event.type}:{'held' if held else 'free'}")

    bus = EventBus()
    bus.subscribe(sink)
    engine = _engine(store, ScriptedModel(steps_script(1), strict=False), payload_tools(64), bus)
    await engine.ask("thread", "warm up")
    trips.clear()
    seen.clear()
    await engine.ask("thread", "question")
    assert trips.count("EVALSHA") == 1 + 2 + 1  # the release after the front end is done
    assert seen[-1] == "run_finished:held"  # recorded before another instance could take the thread
    assert not await store.client.exists(store.keys.lease("thread"))


async def test_a_change_is_durable_before_it_runs(counted: tuple[RedisStore, list[str]]) -> None:
    """Read-only calls are saved with their results; a change's call is saved before it runs (and journaled)."""
    store, _ = counted
    stored_before: list[int] = []
    live: list[Any] = []

    @tool(description="Changes something.", mutating=True)
    async def mutate(args: Change, ctx: ToolContext) -> dict[str, Any]:
        stored_before.append(int(await store.client.llen(store.keys.transcript("thread"))))
        raw = str(await store.client.get(store.keys.run(ctx.run_id)))
        live.append(json.loads(raw[raw.index("{"):]).get("rows"))
        return {"changed": args.target}

    model = ScriptedModel([reply("", call("mutate", "m1", target="db", environment="staging")), reply("changed")])
    out = await _engine(store, model, [mutate]).ask("thread", "change it")
    assert out.answer == "changed"
    assert stored_before == [2]  # the question and the model's call were stored before the change began
    assert [row[0] for row in live[0]] == ["step"]  # the step that asked for the change, in the record
    assert await store.journal.states(out.run_id) == {"m1": "finished"}


async def test_a_worker_that_lost_its_lease_writes_nothing_more(counted: tuple[RedisStore, list[str]]) -> None:
    """Its lease lapsed (it could not renew in time) and another worker took the thread: its next write is
    refused, so two workers never write one transcript; the taker's writes go through."""
    store, _ = counted
    started, release = asyncio.Event(), asyncio.Event()

    @tool(description="Slow read.")
    async def slow(args: Change, ctx: ToolContext) -> dict[str, Any]:
        started.set()
        await release.wait()
        return {"read": args.target}

    model = ScriptedModel([reply("", call("slow", "s1", target="db")), reply("done")])
    engine = _engine(store, model, [slow])
    turn = asyncio.create_task(engine.ask("thread", "look"))
    await started.wait()
    lease = store.keys.lease("thread")
    await store.client.set(lease, "another-worker:1", px=30_000)  # the lapse and the takeover, as Redis sees them
    before = await store.client.llen(store.keys.transcript("thread"))
    release.set()
    with pytest.raises(LeaseLost, match="another-worker:1 holds the thread"):
        await turn
    assert await store.client.llen(store.keys.transcript("thread")) == before
    assert await store.client.get(lease) == "another-worker:1"  # not released by the loser either
    opened = await store.open_turn("thread", "another-worker:1", 30_000)  # the taker reads and writes on
    assert opened is not None and opened.run is not None
    await store.commit(Write(run=opened.run, lease_owner="another-worker:1"))


async def test_a_last_write_that_finds_another_owner_leaves_its_lease_in_place(
        counted: tuple[RedisStore, list[str]]) -> None:
    """The turn's last write checks the lease and lets go of it: when the lease lapsed and another worker took it,
    nothing is written and that worker's lease is left as it is (its own expiry, not ours)."""
    store, _ = counted
    engine = _engine(store, ScriptedModel([reply("first")]), [])
    await engine.ask("thread", "hello")
    lease = store.keys.lease("thread")
    assert await store.client.exists(lease) == 0  # the answer's write let go of it
    opened = await store.open_turn("thread", "w:1", 30_000)
    assert opened is not None and opened.run is not None
    await store.client.set(lease, "another-worker:1", px=30_000)
    before = await store.client.get(store.keys.run(opened.run.run_id))
    with pytest.raises(LeaseLost, match="another-worker:1 holds the thread"):
        await store.commit(Write(run=opened.run, lease_owner="w:1", release_lease="w:1"))
    assert await store.client.get(lease) == "another-worker:1"
    assert 25_000 < await store.client.pttl(lease) <= 30_000  # untouched: its own 30 s
    assert await store.client.get(store.keys.run(opened.run.run_id)) == before
    await store.commit(Write(run=opened.run, lease_owner="another-worker:1", release_lease="another-worker:1"))
    assert await store.client.exists(lease) == 0
