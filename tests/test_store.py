"""The Redis store: claim-once, leases, TTLs on every key, append-only growth, corrupt records."""

from __future__ import annotations

import asyncio

import pytest

from bot.agent.decisions import Confirm
from bot.agent.engine_errors import ThreadBusy
from bot.agent.models.scripted import ScriptedModel, call, reply
from state import CorruptRecord, Keys, MemoryStore, RedisStore, StoreUnavailable, connect
from state.keys import Renewals, shard_of
from tests.conftest import make_harness
from tools import ops


@pytest.fixture(params=["redis", "cluster", "memory"])
def any_store(request: pytest.FixtureRequest) -> RedisStore | MemoryStore:
    if request.param == "memory":
        return MemoryStore()
    store: RedisStore = request.getfixturevalue("store" if request.param == "redis" else "cluster_store")
    return store


async def test_claim_once_under_contention(any_store: RedisStore | MemoryStore) -> None:
    claims = await asyncio.gather(*(any_store.locks.claim("tok", f"U{i}") for i in range(25)))
    winners = [c for c in claims if c.won]
    assert len(winners) == 1
    assert all(c.holder == winners[0].holder for c in claims)
    assert not (await any_store.locks.claim("tok", winners[0].holder)).won  # the same person twice: still once


async def test_lease_is_exclusive_and_lapses(any_store: RedisStore | MemoryStore) -> None:
    locks = any_store.locks
    assert await locks.acquire_lease("th", "a", 100)
    assert not await locks.acquire_lease("th", "b", 100)
    assert not await locks.renew_lease("th", "b", 100)
    await locks.release_lease("th", "b")  # not the owner: no effect
    assert not await locks.acquire_lease("th", "c", 100)  # still a's
    assert await locks.renew_lease("th", "a", 100)
    await asyncio.sleep(0.15)
    assert await locks.acquire_lease("th", "b", 100)


async def test_dedupe_and_journal(any_store: RedisStore | MemoryStore) -> None:
    assert await any_store.meta.first_time("event-1") and not await any_store.meta.first_time("event-1")
    assert await any_store.locks.once("tick-1", 60) and not await any_store.locks.once("tick-1", 60)
    journal = any_store.journal
    assert await journal.start("r", "c") and not await journal.start("r", "c")
    await journal.finish("r", "c", "ok")
    assert await journal.states("r") == {"c": "finished"}
    # A change that ran keeps what it ran with (a form's environment): a worker lost before its result was saved
    # audits it as that, not as the model's call.
    assert await journal.start("r", "d", {"service_id": "payments", "environment": "prod"})
    await journal.finish("r", "d", "ok", {"service_id": "payments", "environment": "prod"})
    assert (await journal.arguments("r"))["d"] == {"service_id": "payments", "environment": "prod"}


def _kind(key: str) -> str:
    return next(part for part in key.split(":")[1:] if not part.startswith("{"))


async def test_every_key_has_a_ttl_and_the_transcript_only_grows(store: RedisStore, prefix: str) -> None:
    toolbox = ops.build()
    model = ScriptedModel([reply("", call("search_resource", query="payments"), call("search_docs", query="db")),
                           reply("answer"),
                           reply("", call("restart_service", "r1", service_id="payments", environment="prod")),
                           reply("restarted")])
    h = make_harness(model, store, toolbox=toolbox)
    await h.engine.ask("t", "payments?")
    first = await store.client.lrange(Keys(prefix).transcript("t"), 0, -1)
    paused = await h.engine.ask("t", "restart in prod")
    await store.meta.first_time("evt")
    await h.engine.resume_token(paused.pending[0].token, Confirm(), by="U2")
    await store.stats(3600)  # the hour's counts reach Redis with a later commit, when read, or at close

    keys = [k async for k in store.client.scan_iter(match=f"{prefix}:*")]
    kinds = {_kind(k) for k in keys}
    assert {"thread", "run", "token", "claim", "stats", "dedupe", "audit"} <= kinds
    # Everything the thread's writes touch shares its hash tag: one Cluster slot per atomic commit.
    tags = {k.split(":")[1] for k in keys if _kind(k) not in {"dedupe", "meta", "once", "work"}}
    assert tags == {"{" + shard_of("t") + "}"}
    for key in keys:
        assert await store.client.ttl(key) > 0, f"{key} has no TTL"
    after = await store.client.lrange(Keys(prefix).transcript("t"), 0, -1)
    assert after[:len(first)] == first and len(after) == len(first) + 4  # user, assistant, result, answer


async def test_a_corrupt_run_record_is_an_error_for_that_run_only(store: RedisStore, prefix: str) -> None:
    toolbox = ops.build()
    h = make_harness(ScriptedModel([reply("fine"), reply("fine"), reply("still fine")]), store, toolbox=toolbox)
    ok = await h.engine.ask("good", "hi")
    bad = await h.engine.ask("bad", "hi")
    await store.client.set(Keys(prefix).run(bad.run_id), '{"schema_version": 99}', ex=60)

    with pytest.raises(CorruptRecord, match="schema version 99"):
        await store.load_run(bad.run_id)
    await store.client.set(Keys(prefix).run(bad.run_id), "not json", ex=60)
    with pytest.raises(CorruptRecord, match="not JSON"):
        await store.load_run(bad.run_id)
    assert (await store.load_run(ok.run_id)) is not None
    assert (await h.engine.ask("good", "again")).answer == "still fine"


async def test_a_corrupt_transcript_entry_is_reported_with_its_key(store: RedisStore, prefix: str) -> None:
    await store.client.rpush(Keys(prefix).transcript("t"), '{"role": "alien"}')
    with pytest.raises(CorruptRecord) as info:
        await store.load_transcript("t")
    assert info.value.key == Keys(prefix).transcript("t")


async def test_an_unreachable_redis_is_a_clear_error() -> None:
    dead = RedisStore(connect("redis://127.0.0.1:9/0", timeout_s=0.5))
    with pytest.raises(StoreUnavailable, match="Redis unreachable"):
        await dead.ping()
    await dead.close()


async def test_a_busy_thread_waits_then_says_so(store: RedisStore) -> None:
    from bot.agent.engine import EngineOptions

    h = make_harness(ScriptedModel([reply("x")]), store, [], options=EngineOptions(lease_wait_s=0.2))
    assert await store.locks.acquire_lease("t", "someone-else", 5000)
    with pytest.raises(ThreadBusy):
        await h.engine.ask("t", "hello")


async def test_stats_from_the_store(store: RedisStore) -> None:
    toolbox = ops.build()
    model = ScriptedModel([reply("", call("search_resource", query="nothing-like-this")), reply("not found"),
                           reply("", call("restart_service", "r1", service_id="payments", environment="prod")),
                           reply("restarted")])
    h = make_harness(model, store, toolbox=toolbox)
    await h.engine.ask("a", "find it")
    paused = await h.engine.ask("b", "restart")
    await h.engine.resume_token(paused.pending[0].token, Confirm(), by="U2")

    s = await store.stats(3600)
    assert s.runs == 2 and s.get("steps") == 4 and s.avg_steps == 2.0
    assert s.get("tool_calls") == 2 and s.get("tool_failures") == 1  # not_found, and the restart once it ran (a call
    # that asked a person was counted twice: when it asked and when it ran)
    assert s.get("interrupts") == 1 and s.resume_rate == 1.0
    assert s.stop_reasons == {"final_answer": 2}


def test_a_finished_run_is_stored_compactly_and_read_back_whole() -> None:
    """A run's trace is in its record, as rows (no field names); a finished one (kept a week, one per turn) goes
    without its id (its key's) or its recent calls. Read back, each is the same record; records written the older
    ways (the trace inline as objects, or in a list beside a live run) still read."""
    import json

    from state.records import CallTrace, FinishTrace, RunRecord, StepTrace, dump_run, parse_run

    run = RunRecord(run_id="s3.abc", thread_id="slack:C1:1.1", user_id="U1", text="q", status="finished", step=2,
                    active_ms=12.345678, recent_calls=["lookup:ffff"], created_at=1.5, updated_at=2.5,
                    trace=[StepTrace(step=1, model_latency_ms=3.2, asked_for_tools=True, model_stop="tool_use",
                                     input_tokens=7),
                           CallTrace(step=1, call_id="c1", tool="lookup", args_digest="lookup:ffff", status="error",
                                     error_code="timeout", latency_ms=9.5),
                           CallTrace(step=1, call_id="c2", tool="other", args_digest="odd-digest", status="ok",
                                     latency_ms=1.0),
                           FinishTrace(stop_reason="final_answer", steps=2, active_ms=12.3)])
    key = "opspilot:{s3}:run:s3.abc"
    stored = dump_run(run)
    assert '"run_id"' not in stored and '"recent_calls"' not in stored and '"args_digest"' not in stored
    back = parse_run(key, stored)
    assert back.trace == run.trace and back.run_id == "s3.abc" and back.active_ms == 12.3
    assert back.model_dump(exclude={"recent_calls", "active_ms"}) == run.model_dump(exclude={"recent_calls",
                                                                                             "active_ms"})
    older = json.loads(stored)
    older.pop("rows")
    older |= {"run_id": "s3.abc", "trace": [{"kind": e.kind, **e.model_dump(mode="json")} for e in run.trace]}
    assert parse_run(key, json.dumps(older)).trace == run.trace
    live = run.model_copy(update={"status": "running"})
    stored = dump_run(live)
    assert '"run_id"' in stored and '"recent_calls"' in stored  # a live run keeps what its next step needs
    assert parse_run(key, stored).model_dump(exclude={"active_ms"}) == live.model_dump(exclude={"active_ms"})
    # A live run written before its trace moved into its record: the trace came from a list beside it.
    older = json.loads(stored)
    older.pop("rows")
    lines = [json.dumps({"kind": e.kind, **e.model_dump(mode="json")}) for e in run.trace]
    assert parse_run(key, json.dumps(older), lines).trace == run.trace


def test_a_finished_runs_stop_reason_and_steps_are_stored_once() -> None:
    """In its last trace row (kind ``end``), not beside it as well; read back whole. A record whose last row says
    something else keeps its own fields."""
    from state.records import FinishTrace, RunRecord, StepTrace, dump_run, parse_run

    trace = [StepTrace(step=1, model_latency_ms=3.2, asked_for_tools=False, model_stop="end_turn"),
             FinishTrace(stop_reason="final_answer", steps=1, active_ms=5.0)]
    run = RunRecord(run_id="s3.abc", thread_id="t", text="q", status="finished", step=1, stop_reason="final_answer",
                    active_ms=5.04, created_at=1.5, updated_at=2.5, trace=trace)
    stored = dump_run(run)
    assert '"stop_reason"' not in stored and '"step":' not in stored and '["end","final_answer",1,5.0]' in stored
    back = parse_run("opspilot:{s3}:run:s3.abc", stored)
    assert (back.stop_reason, back.step, back.trace) == ("final_answer", 1, trace)
    other = run.model_copy(update={"stop_reason": "max_steps"})
    assert parse_run("k:run:s3.abc", dump_run(other)).stop_reason == "max_steps"


def test_a_record_whose_trace_rows_are_not_a_list_is_named_corrupt() -> None:
    from state.records import parse_run
    from state.store_errors import CorruptRecord

    with pytest.raises(CorruptRecord, match="rows: not a list"):
        parse_run("k:run:s3.abc", '{"schema_version":3,"thread_id":"t","text":"q","created_at":1,"updated_at":1,'
                                  '"rows":5}')


async def test_a_request_already_in_its_window_is_admitted_again_and_counted_once(store: RedisStore) -> None:
    """A retry after a lost reply is the same member: admitted again, whether the window has room or is full,
    and it never takes a second place in it."""
    meta = store.meta
    first = await meta.admit("starts:U1", "req-1", limit=2, window_s=60, now=1000.0)
    again = await meta.admit("starts:U1", "req-1", limit=2, window_s=60, now=1001.0)
    assert first.admitted and again.admitted
    assert (await meta.admit("starts:U1", "req-2", limit=2, window_s=60, now=1002.0)).admitted  # room for two
    assert not (await meta.admit("starts:U1", "req-3", limit=2, window_s=60, now=1003.0)).admitted
    assert (await meta.admit("starts:U1", "req-1", limit=2, window_s=60, now=1004.0)).admitted  # full: still in
    # req-1 keeps its first time (1000, not its retry's 1001): it has left the window by 1060.5, req-2 has not
    assert (await meta.admit("starts:U1", "req-4", limit=2, window_s=60, now=1060.5)).admitted


async def test_a_remembered_list_keeps_its_newest_and_a_ttl_with_fewer_commands(store: RedisStore) -> None:
    """A short list (a person's recent questions): newest first, trimmed once over its length; the push that makes
    it sets its TTL, later pushes leave it until the process's hourly renewal, and a list gone behind the
    process's back is made again with its TTL."""
    meta, key = store.meta, store.keys.meta("list", "recent:U1")
    for n in range(5):
        await meta.remember("recent:U1", f"q{n}", keep=3)
    assert await meta.recall("recent:U1") == ["q4", "q3", "q2"]
    assert 0 < await store.client.ttl(key) <= store.ttls.thread_s
    await store.client.expire(key, 100)
    await meta.remember("recent:U1", "q5", keep=3)
    assert await store.client.ttl(key) <= 100  # renewed this hour already
    meta.renewals = Renewals(every_s=0)  # an hour later
    await meta.remember("recent:U1", "q6", keep=3)
    assert await store.client.ttl(key) > 100 and await meta.recall("recent:U1") == ["q6", "q5", "q4"]
    meta.renewals = Renewals()
    meta.renewals.due(key)  # renewed this hour, as far as the process knows
    await store.client.delete(key)
    await meta.remember("recent:U1", "q7", keep=3)
    assert await store.client.ttl(key) > 0 and await meta.recall("recent:U1") == ["q7"]
