"""Cancellation: at any moment, and every issued call id still gets its result."""

from __future__ import annotations

import asyncio
import json

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.agent.transcript import violations
from core.messages import ToolResultMessage
from state import RedisStore
from tests.conftest import Harness, make_harness
from tests.toolkit import Probe, toolkit


async def _run_id(h: Harness) -> str:
    for _ in range(200):
        started = h.of("run_started")
        if started:
            return str(started[0].run_id)
        await asyncio.sleep(0.01)
    raise AssertionError("run never started")


async def test_cancel_mid_batch_answers_every_call_id(store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1"), call("lookup_a", "a1"))])
    h = make_harness(model, store, [tools["blocker"], tools["lookup_a"]])

    asking = asyncio.create_task(h.engine.ask("t", "go"))
    run_id = await _run_id(h)
    await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 5)
    out = await h.engine.cancel(run_id)

    assert out is not None and out.stop_reason == "cancelled"
    assert (await asking).stop_reason == "cancelled"
    transcript = await store.load_transcript("t")
    assert violations(transcript) == []
    res = {m.call_id: m for m in transcript if isinstance(m, ToolResultMessage)}
    assert res["b1"].status == "cancelled" and res["a1"].status == "ok"
    assert sorted(e.call_id for e in h.of("tool_result")) == ["a1", "b1"]
    assert h.of("run_finished")[0].stop_reason == "cancelled"
    record = await store.load_run(run_id)
    assert record is not None and record.status == "finished" and record.stop_reason == "cancelled"


async def test_cancel_during_the_model_call(store: RedisStore) -> None:
    model = ScriptedModel([reply("never")], latency_s=5)
    h = make_harness(model, store, [])
    asking = asyncio.create_task(h.engine.ask("t", "go"))
    run_id = await _run_id(h)
    await asyncio.sleep(0.05)

    out = await h.engine.cancel(run_id)

    assert out is not None and out.stop_reason == "cancelled"
    assert (await asking).status == "finished"


async def test_cancel_a_paused_run_answers_the_pending_call(store: RedisStore) -> None:
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("needs_env", "n1"))])
    h = make_harness(model, store, [tools["needs_env"]])
    paused = await h.engine.ask("t", "go")

    out = await h.engine.cancel(paused.run_id)

    assert out is not None and out.stop_reason == "cancelled"
    transcript = await store.load_transcript("t")
    assert violations(transcript) == []
    result = next(m for m in transcript if isinstance(m, ToolResultMessage))
    assert result.status == "cancelled" and json.loads(result.content)["errorCode"] == "cancelled"


async def test_cancel_from_another_instance_through_redis(store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1"))])
    running = make_harness(model, store, [tools["blocker"]])
    other = make_harness(ScriptedModel([]), store, [tools["blocker"]])

    asking = asyncio.create_task(running.engine.ask("t", "go"))
    run_id = await _run_id(running)
    await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 5)
    assert await other.engine.cancel(run_id) is None  # it is not running here: asked through Redis

    out = await asyncio.wait_for(asking, 5)
    assert out.stop_reason == "cancelled"
    assert violations(await store.load_transcript("t")) == []
