"""Races between people, workers and the clock around paused runs (found by a hostile review)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from bot.agent.decisions import Confirm, Decline
from bot.agent.engine import EngineOptions
from bot.agent.engine_errors import AlreadyHandled
from bot.agent.limits import Limits
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.agent.transcript import violations
from core.messages import ToolResultMessage
from state import RedisStore
from state.store import Write
from tests.conftest import make_harness
from tests.toolkit import Change, Probe, Query, toolkit
from tools import ToolContext, confirm_in, tool


def results(transcript: list[Any]) -> dict[str, ToolResultMessage]:
    return {m.call_id: m for m in transcript if isinstance(m, ToolResultMessage)}


def hanging_change(probe: Probe, seconds: float = 60) -> Any:
    @tool(description="A prod change.", mutating=True, confirm=confirm_in("prod"), timeout_s=60)
    async def hang(args: Change, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("hang")
        await asyncio.sleep(seconds)
        return {"changed": args.target}
    return hang


async def test_a_click_after_a_worker_died_mid_change_repairs_the_run_first(store: RedisStore) -> None:
    probe = Probe()
    specs = [hanging_change(probe), toolkit(probe)["needs_env"]]
    model = ScriptedModel([reply("", call("needs_env", "q1"), call("hang", "h1", target="db", environment="prod"))])
    first = make_harness(model, store, specs)
    paused = await first.engine.ask("t", "go")
    by_call = {p.call_id: p for p in paused.pending}
    worker = asyncio.create_task(first.engine.resume_token(by_call["h1"].token, Confirm(), by="U2"))
    await asyncio.wait_for(probe.started.setdefault("hang", asyncio.Event()).wait(), 5)
    worker.cancel()  # the worker dies in the middle of the confirmed change
    with contextlib.suppress(asyncio.CancelledError):
        await worker

    second = make_harness(ScriptedModel([reply("ok")]), store, specs)
    out = await second.engine.resume_token(by_call["q1"].token, Decline("no"), by="U3")

    assert out.status == "finished" and probe.count("hang") == 1
    transcript = await store.load_transcript("t")
    assert violations(transcript) == []
    assert results(transcript)["h1"].error_code == "outcome_unknown"


async def test_a_confirmed_change_runs_to_its_end_whatever_time_the_run_has_left(store: RedisStore) -> None:
    probe = Probe()

    @tool(description="A slow read.")
    async def read(args: Query, ctx: ToolContext) -> dict[str, Any]:
        await asyncio.sleep(0.6)
        return {}

    change = hanging_change(probe, seconds=0.6)
    model = ScriptedModel([reply("", call("read", "r0")),
                           reply("", call("hang", "s1", target="db", environment="prod")), reply("done")])
    h = make_harness(model, store, [read, change], limits=Limits(max_wall_time_s=0.8), summary_timeout_s=0.1)
    paused = await h.engine.ask("t", "go")

    out = await h.engine.resume_token(paused.pending[0].token, Confirm(), by="U2")

    assert probe.count("hang") == 1
    assert results(await store.load_transcript("t"))["s1"].status == "ok"
    assert out.stop_reason == "timeout"  # the model steps after it still count against the limit


async def test_a_reply_racing_a_click_leaves_no_claim_behind(store: RedisStore) -> None:
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("needs_env", "n1"), call("needs_env", "n2")), reply("fine")])
    h = make_harness(model, store, [tools["needs_env"]])
    paused = await h.engine.ask("t", "go")
    await store.locks.claim(paused.pending[1].token, "UCLICK")  # a click in flight on the second question

    with pytest.raises(AlreadyHandled):
        await h.engine.ask("t", "never mind", user_id="U1")

    out = await h.engine.resume_token(paused.pending[0].token, Decline(), by="U2")  # the first is still open
    assert out.status == "paused"


async def test_a_stop_while_a_pause_is_being_saved_neither_duplicates_nor_crashes(store: RedisStore) -> None:
    tools = toolkit(Probe())
    h = make_harness(ScriptedModel([reply("", call("needs_env", "n1"))]), store, [tools["needs_env"]])
    saving, real = asyncio.Event(), store.commit

    async def slow_commit(write: Write) -> None:
        if write.new_tokens and not saving.is_set():
            saving.set()
            await asyncio.sleep(0.3)
        await real(write)

    store.commit = slow_commit  # type: ignore[method-assign]
    asking = asyncio.create_task(h.engine.ask("t", "go"))
    await asyncio.wait_for(saving.wait(), 5)
    run_id = await store.thread_run("t")
    out = await h.engine.cancel(run_id or "")

    assert out is not None and out.stop_reason == "cancelled"
    assert (await asking).stop_reason == "cancelled"
    transcript = await store.load_transcript("t")
    assert violations(transcript) == [] and results(transcript)["n1"].status == "cancelled"


async def test_a_pause_commit_drops_a_cancel_request_nobody_will_read(store: RedisStore) -> None:
    probe = Probe()
    change = hanging_change(probe, seconds=0.3)
    h = make_harness(ScriptedModel([reply("", call("lookup_a", "a1")),
                                    reply("", call("hang", "s1", target="db", environment="prod")),
                                    reply("changed")]),
                     store, [change, toolkit(probe)["lookup_a"]], options=EngineOptions(cancel_poll_s=0.05))
    await store.locks.request_cancel("not-yet")  # unrelated flags stay
    paused = await h.engine.ask("t", "go")
    assert paused.status == "paused"
    await store.locks.request_cancel(paused.run_id)
    # The run pauses again (a commit with a status change) before anyone acts on the flag…
    record = await store.load_run(paused.run_id)
    assert record is not None
    record.status = "running"
    await store.commit(Write(run=record))
    record.status = "paused"
    await store.commit(Write(run=record))
    # …so a confirmation later runs to its end.
    out = await h.engine.resume_token(paused.pending[0].token, Confirm(), by="U2")
    assert out.answer == "changed" and probe.count("hang") == 1
    assert await store.locks.cancel_requests(["not-yet"]) == {"not-yet": ""}


async def test_an_older_message_delivered_again_after_a_newer_one_does_not_run_again(store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("change_b", "c1", target="db")), reply("changed"), reply("second")])
    h = make_harness(model, store, [tools["change_b"]])
    await h.engine.ask("t", "change it", request_id="m1")
    await h.engine.ask("t", "thanks", request_id="m2")
    again = await h.engine.ask("t", "change it", request_id="m1")  # redelivered late
    assert probe.count("change_b") == 1 and again.answer == "second"
