"""Cancellation: at any moment, and every issued call id still gets its result."""

from __future__ import annotations

import asyncio
import json
from typing import Any

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


class _SlowFinish(RedisStore):
    """A Redis that takes half a second over the write that finishes a run (a busy one may)."""

    entered = asyncio.Event()

    async def commit(self, write: object) -> int:  # type: ignore[override]
        if getattr(getattr(write, "run", None), "status", "") == "finished" and not self.entered.is_set():
            self.entered.set()
            await asyncio.sleep(0.5)
        return await super().commit(write)  # type: ignore[arg-type]


async def test_a_stop_or_the_deadline_during_the_final_save_changes_nothing(store: RedisStore) -> None:
    """A Stop (or the wall-time deadline) landing while the complete answer was being saved finished the run a
    second time: the answer shown was edited into "Stopped at …", and the record's stop reason flipped."""
    from bot.agent.limits import Limits
    from state.records import FinishTrace

    slow = _SlowFinish(store.client, keys=store.keys, ttls=store.ttls)
    slow.entered = asyncio.Event()
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("lookup_a", "a1")), reply("payments is healthy (lookup_a).")])
    h = make_harness(model, slow, [tools["lookup_a"]])
    asking = asyncio.create_task(h.engine.ask("t1", "is payments ok?", user_id="U1"))
    await slow.entered.wait()
    run_id = h.of("run_started")[0].run_id
    await h.engine.cancel(run_id, by="U1")
    out = await asking
    record = await store.load_run(run_id)
    assert out.stop_reason == record.stop_reason == "final_answer"
    assert [e.stop_reason for e in h.of("run_finished")] == ["final_answer"]
    assert [e.stop_reason for e in record.trace if isinstance(e, FinishTrace)] == ["final_answer"]

    slow.entered = asyncio.Event()  # the deadline now, instead of a Stop
    model = ScriptedModel([reply("", call("lookup_a", "a2")), reply("payments is healthy (lookup_a)."),
                           reply("summary")], latency_s=0.1)
    h = make_harness(model, slow, [tools["lookup_a"]], limits=Limits(max_wall_time_s=0.4))
    out = await h.engine.ask("t2", "is payments ok?", user_id="U1")
    assert out.stop_reason == "final_answer" and [e.stop_reason for e in h.of("run_finished")] == ["final_answer"]


async def test_a_limit_whose_summary_the_deadline_cuts_is_still_that_limit(store: RedisStore) -> None:
    """The step limit reached with little wall time left: the deadline cut its summary, and the run was recorded
    and shown as "Stopped: out of time"."""
    from bot.agent.limits import Limits
    from bot.agent.models.base import AUTO, ToolChoice

    class FirstSummaryHangs(ScriptedModel):
        """Steps at once; the first summary (no tools offered) outlasts the run's wall time (a slow provider)."""

        hung = False

        async def complete(self, messages: Any, tools: Any, *, tool_choice: ToolChoice | None = None,
                           max_tokens: int | None = None) -> Any:
            if tool_choice is not None and tool_choice.mode == "none" and not self.hung:
                self.hung = True
                await asyncio.sleep(60)  # cut by the run's deadline, long before this
            return await super().complete(messages, tools, tool_choice=tool_choice or AUTO, max_tokens=max_tokens)

    tools = toolkit(Probe())
    model = FirstSummaryHangs([reply("", call("lookup_a", q="1")), reply("", call("lookup_b", q="2")),
                               reply("A is 1 and B is 2 so far.")])
    h = make_harness(model, store, [tools["lookup_a"], tools["lookup_b"]],
                     limits=Limits(max_steps=2, max_wall_time_s=5))
    out = await h.engine.ask("t", "check A and B", user_id="U1")
    assert model.hung and out.stop_reason == "max_steps", out


async def test_calls_answered_by_a_stop_are_in_the_trace(store: RedisStore) -> None:
    """A Stop mid-batch left results {a1: ok, c1: outcome_unknown} in the transcript and no call rows in the run's
    trace: `opspilot report`'s counts and the handover's "outcome unknown" flag read the trace."""
    from state.records import CallTrace

    probe = Probe()
    fast, slow = toolkit(probe), toolkit(probe, slow_s=5)
    model = ScriptedModel([reply("", call("lookup_a", "a1"), call("change", "c1", target="payments"))])
    h = make_harness(model, store, [fast["lookup_a"], slow["change"]])
    asking = asyncio.create_task(h.engine.ask("t1", "check then change staging", user_id="U1"))
    await asyncio.wait_for(probe.started.setdefault("change", asyncio.Event()).wait(), 10)
    run_id = h.of("run_started")[0].run_id
    await h.engine.cancel(run_id, by="U1")
    await asking
    record = await store.load_run(run_id)
    traced = {c.call_id: c.error_code or c.status for c in record.trace if isinstance(c, CallTrace)}
    results = {m.call_id: m.error_code or m.status for m in await store.load_transcript("t1")
               if isinstance(m, ToolResultMessage)}
    assert traced == results and set(results) == {"a1", "c1"}, (traced, results)


async def test_a_stop_mid_batch_counts_what_ran_and_times_what_it_cut_off(store: RedisStore) -> None:
    """The calls that finished before a Stop are counted in the stats as any result is (`broken`'s failure too),
    and the call the Stop cut off is traced with how long it ran, not 0 ms."""
    from state.records import CallTrace

    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1"), call("broken", "x1"), call("lookup_a", "a1"))])
    h = make_harness(model, store, [tools["blocker"], tools["broken"], tools["lookup_a"]])
    asking = asyncio.create_task(h.engine.ask("t", "go"))
    run_id = await _run_id(h)
    for name in ("blocker", "lookup_a"):
        await asyncio.wait_for(probe.started.setdefault(name, asyncio.Event()).wait(), 5)
    before = await store.stats(3600)
    await asyncio.sleep(0.2)  # the blocker has been running at least this long when the Stop cuts it off
    await h.engine.cancel(run_id)
    await asking
    record = await store.load_run(run_id)
    assert record is not None
    rows = {row.call_id: row for row in record.trace if isinstance(row, CallTrace)}
    assert rows["b1"].status == "cancelled" and rows["b1"].latency_ms >= 200
    await store.flush_counts()
    stats = await store.stats(3600)
    assert stats.get("tool_calls") - before.get("tool_calls") == 3
    assert stats.get("tool_failures") - before.get("tool_failures") >= 1


async def test_a_model_call_cut_off_keeps_its_step_row(store: RedisStore) -> None:
    """A Stop during the model call left no step row: the trace said one step fewer than the run made, and how
    long the call took before it was cut off was nowhere."""
    from state.records import StepTrace

    model = ScriptedModel([reply("never")], latency_s=5)
    h = make_harness(model, store, [])
    asking = asyncio.create_task(h.engine.ask("t", "go"))
    run_id = await _run_id(h)
    await asyncio.sleep(0.2)
    await h.engine.cancel(run_id)
    await asking
    record = await store.load_run(run_id)
    assert record is not None
    [row] = [row for row in record.trace if isinstance(row, StepTrace)]
    assert row.model_stop == "cut_off" and row.model_latency_ms >= 200
