"""A turn's opening makes its new run (one write less per turn, issue 39), never where the thread has a run under
way or has taken the question already; the shards' runs index (running, then unshown, in one sorted set); the TTLs
of keys many writes share, renewed once an hour per process, never lost. Against the real Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from bench.common import server_sample
from bot.agent.models.scripted import ScriptedModel, reply
from core.messages import UserMessage
from state import RedisStore, RunRecord, Write, connect
from state.keys import Keys, new_run_id, shard_of
from state.migrate import merge_run_indexes
from state.records import PendingCall
from state.scripts import SENTINEL, UNSHOWN_BAND
from state.store import Start
from tests.conftest import OwnRedis, make_harness


def _start(thread: str, text: str, request_id: str | None = None) -> Start:
    now = time.time()
    record = RunRecord(run_id=new_run_id(thread), thread_id=thread, user_id="U1", text=text, created_at=now,
                       updated_at=now, request_id=request_id, event_seq=1)
    return Start(record, UserMessage(content=text, user_id="U1", request_id=request_id), {"runs": 1})


@pytest.fixture
async def second(redis_url: str, prefix: str, store: RedisStore) -> AsyncIterator[RedisStore]:
    """Another process's store on the same Redis: nothing cached."""
    other = RedisStore(store.client.__class__.from_url(redis_url, decode_responses=True), keys=store.keys)
    yield other
    await other.close()


class LosingProxy:
    """A TCP hop to Redis that, once armed, lets the next EVALSHA through and loses its reply (the connection
    drops): what a network blip does to a write that Redis applied. While ``deaf``, it loses every reply: each try
    is applied, none is answered."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port, self.armed, self.deaf, self.lost = upstream_port, False, False, 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        doomed = asyncio.Event()

        async def upstream() -> None:
            while data := await reader.read(65536):
                if self.armed and b"EVALSHA" in data.upper():
                    self.armed = False
                    doomed.set()
                up_writer.write(data)
                await up_writer.drain()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                if doomed.is_set() or self.deaf:
                    self.lost += 1
                    break
                writer.write(data)
                await writer.drain()

        pumps = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        writer.close()
        up_writer.close()


async def test_the_opening_makes_the_run_once_even_when_its_reply_is_lost(redis_url: str, store: RedisStore) -> None:
    proxy = LosingProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]))
    port = await proxy.start()
    through = RedisStore(connect(f"redis://127.0.0.1:{port}/{redis_url.rsplit('/', 1)[1]}"), keys=store.keys)
    try:
        await through.ping()
        warm = _start("warm", "x", "Ev0")
        await through.open_turn("warm", "w:0", 30_000, start=warm)  # its script cached:
        start = _start("t", "first", "Ev1")  # a fresh Redis answers the first EVALSHA NOSCRIPT, nothing applied
        proxy.armed = True
        opened = await through.open_turn("t", "w:1", 30_000, start=start)  # applied; its reply lost; retried
        assert proxy.lost == 1
        assert opened is not None and opened.started and opened.run == start.run
        assert [m.content for m in opened.transcript] == ["first"]
        assert [m.content for m in await store.load_transcript("t")] == ["first"]  # written once
    finally:
        await through.close()
    assert await store.thread_run("t") == start.run.run_id
    saved = await store.load_run(start.run.run_id)
    assert saved is not None and saved.status == "running" and saved.event_seq == 1
    assert sorted(await store.runs_due("active", float("inf"))) == sorted([warm.run.run_id, start.run.run_id])


async def test_no_run_is_made_while_one_is_under_way_or_for_a_question_taken_already(
        store: RedisStore, second: RedisStore) -> None:
    first = _start("t", "first", "Ev1")
    opened = await store.open_turn("t", "w:1", 30_000, start=first)
    assert opened is not None and opened.started
    await store.commit(Write(run=opened.run.model_copy(update={"status": "paused"}), lease_owner="w:1",
                             release_lease="w:1", was="running"))
    busy = await store.open_turn("t", "w:2", 30_000, start=_start("t", "second", "Ev2"))
    assert busy is not None and not busy.started  # paused: the message answers it, the engine decides
    assert busy.run is not None and busy.run.run_id == first.run.run_id
    await store.commit(Write(run=busy.run.model_copy(update={"status": "finished"}), lease_owner="w:2",
                             release_lease="w:2", was="paused"))
    # The first question delivered again: this process has it cached, another reads it in the script.
    for where in (store, second):
        again = await where.open_turn("t", "w:3", 30_000, start=_start("t", "first", "Ev1"))
        assert again is not None and not again.started and again.run is not None
        assert again.run.run_id == first.run.run_id
        await where.locks.release_lease("t", "w:3")
    assert [m.content for m in await store.load_transcript("t")] == ["first"]
    # An id the script could not look for verbatim is decided by the engine, not started blind.
    odd = await second.open_turn("t", "w:4", 30_000, start=_start("t", "odd", 'Ev"1'))
    assert odd is not None and not odd.started
    await second.counter.flush()
    assert (await store.stats(3600)).runs == 1  # a start not made is not counted


async def test_a_redelivered_question_is_answered_once_through_the_engine(store: RedisStore) -> None:
    h = make_harness(ScriptedModel([reply("one"), reply("two")]), store)
    first = await h.engine.ask("t", "hello", user_id="U1", request_id="Ev1")
    again = await h.engine.ask("t", "hello", user_id="U1", request_id="Ev1")
    assert first.answer == "one" and again.run_id == first.run_id and again.answer == "one"
    assert [m.content for m in await store.load_transcript("t") if isinstance(m, UserMessage)] == ["hello"]
    stats = await store.stats(3600)
    assert stats.runs == 1


async def test_the_runs_index_moves_a_run_between_running_and_unshown(store: RedisStore) -> None:
    start = _start("t", "q")
    opened = await store.open_turn("t", "w:1", 30_000, start=start)
    assert opened is not None and opened.started
    run_id = start.run.run_id
    paused = opened.run.model_copy(update={"status": "paused", "updated_at": time.time()})
    await store.commit(Write(run=paused, lease_owner="w:1", was="running"))
    assert await store.runs_due("active", float("inf")) == []
    assert await store.runs_due("unshown", float("inf")) == [run_id]
    running = paused.model_copy(update={"status": "running"})
    await store.commit(Write(run=running, lease_owner="w:1", was="paused"))
    await store.shown(run_id, "t")  # a front end late with the paused state: the running run stays found
    assert await store.runs_due("active", float("inf")) == [run_id]
    await store.commit(Write(run=running.model_copy(update={"status": "finished"}), lease_owner="w:1",
                             release_lease="w:1", was="running"))
    assert await store.runs_due("unshown", float("inf")) == [run_id]
    await store.shown(run_id, "t")
    assert await store.runs_due("unshown", float("inf")) == [] and await store.runs_due("active", 1e12) == []
    index = store.keys.index(shard_of("t"), "runs")
    assert await store.client.zscore(index, SENTINEL) == -1  # kept: the key stays, with its TTL
    assert await store.client.ttl(index) > 0


async def test_indexes_of_the_build_before_move_into_the_runs_index(store: RedisStore) -> None:
    shard, now = shard_of("t"), time.time()
    old_active, old_unshown = store.keys.index(shard, "active"), store.keys.index(shard, "unshown")
    await store.client.zadd(old_active, {"s0.a": now - 100})
    await store.client.zadd(old_unshown, {"s0.u": now - 50})
    assert await merge_run_indexes(store.client, store.keys, store.ttls) == 2
    assert await store.runs_due("active", now) == ["s0.a"]
    assert await store.runs_due("unshown", now) == ["s0.u"]
    assert not await store.client.exists(old_active, old_unshown)
    assert await store.client.ttl(store.keys.index(shard, "runs")) > 0
    assert await merge_run_indexes(store.client, store.keys, store.ttls) == 0  # done: nothing moves again
    assert await store.client.zscore(store.keys.index(shard, "runs"), "s0.u") == UNSHOWN_BAND + now - 50


async def test_a_thread_in_use_keeps_its_ttl_within_an_hour_of_its_last_turn(store: RedisStore,
                                                                          second: RedisStore) -> None:
    h = make_harness(ScriptedModel([reply("one"), reply("two"), reply("three")]), store)
    await h.engine.ask("t", "one")
    key = store.keys.transcript("t")
    full = store.ttls.thread_s
    assert await store.client.ttl(key) > full - 60
    await store.client.expire(key, 100)  # as if its last turn were days ago
    await h.engine.ask("t", "two")  # renewed by this process within the hour: left
    assert await store.client.ttl(key) <= 100
    other = make_harness(ScriptedModel([reply("three")]), second)
    await other.engine.ask("t", "three")  # another process's first turn here renews it
    assert await store.client.ttl(key) > full - 60


async def test_a_run_under_way_whose_record_says_finished_inside_is_not_taken_for_finished(store: RedisStore) -> None:
    """A paused run's question may carry ``"status":"finished"`` in its arguments (a job's state): the opening
    still sees a run under way, and the person's message answers it rather than starting a second run."""
    start = _start("t", "first", "Ev1")
    opened = await store.open_turn("t", "w:1", 30_000, start=start)
    assert opened is not None and opened.started
    call = {"id": "c1", "name": "close_job", "arguments": {"status": "finished", "service": "api"}}
    pending = PendingCall.model_validate({
        "call": call, "token": "s0.tok", "interrupt_type": "confirm_risky", "reason": "r",
        "payload": {"status": "finished"}, "arguments": {"status": "finished"}, "step": 1,
        "created_at": time.time(), "expires_at": time.time() + 600})
    paused = opened.run.model_copy(update={"status": "paused", "pending": [pending]})
    await store.commit(Write(run=paused, lease_owner="w:1", release_lease="w:1", was="running"))
    again = await store.open_turn("t", "w:2", 30_000, start=_start("t", "second", "Ev2"))
    assert again is not None and not again.started
    assert again.run is not None and again.run.run_id == start.run.run_id and again.run.status == "paused"
    assert await store.thread_run("t") == start.run.run_id


async def test_a_run_whose_worker_died_before_its_first_step_is_closed_out(store: RedisStore) -> None:
    """The opening saves the run at step 0; its worker dies in the first model call. The next message closes it
    out (finished at step 0: its record saves and reads back) and is answered by a run of its own."""
    opened = await store.open_turn("t", "dead:1", 30_000, start=_start("t", "first", "Ev1"))
    assert opened is not None and opened.started
    await store.client.delete(store.keys.lease("t"))  # the dead worker's lease lapsed
    h = make_harness(ScriptedModel([reply("second answer")]), store)
    out = await h.engine.ask("t", "second", user_id="U1", request_id="Ev2")
    assert out.answer == "second answer" and out.run_id != opened.run.run_id
    closed = await store.load_run(opened.run.run_id)
    assert closed is not None and closed.status == "finished" and closed.step == 0
    assert closed.stop_reason == "worker_lost"  # what happened (a restart), not "internal error"


async def test_a_thread_this_process_served_last_opens_without_reading_it(own_redis: OwnRedis) -> None:
    """Its last run finished here, at the transcript length cached here: the opening pushes the question and, as
    nobody wrote in between, makes the run without reading the thread's run, its record or the transcript."""
    store = RedisStore(connect(own_redis.url), keys=Keys("p"))
    try:
        await make_harness(ScriptedModel([reply("one")]), store).engine.ask("t", "first")
        before = await server_sample(own_redis.url)
        opened = await store.open_turn("t", "w:2", 30_000, start=_start("t", "second"))
        calls = (await server_sample(own_redis.url)).since(before).calls
        assert opened is not None and opened.started
        assert calls["get"] == calls["lrange"] == 0 and calls["rpush"] == 1, calls
        assert [m.content for m in opened.transcript] == ["first", "one", "second"]
        fresh = RedisStore(connect(own_redis.url), keys=Keys("p"))  # nothing cached: what Redis holds
        assert [m.content for m in await fresh.load_transcript("t")] == ["first", "one", "second"]
        assert await fresh.thread_run("t") == opened.run.run_id
        await fresh.close()
    finally:
        await store.close()


async def test_a_thread_written_elsewhere_since_goes_the_long_way(store: RedisStore, second: RedisStore) -> None:
    """Another process made a run in the thread after this one saw its last run finish: the question pushed on
    trust is taken back, and the opening reads and decides as before (a paused run is answered, not overrun)."""
    await make_harness(ScriptedModel([reply("one")]), store).engine.ask("t", "first")
    elsewhere = await second.open_turn("t", "w:2", 30_000, start=_start("t", "elsewhere", "Ev2"))
    assert elsewhere is not None and elsewhere.started
    paused = elsewhere.run.model_copy(update={"status": "paused"})
    await second.commit(Write(run=paused, lease_owner="w:2", release_lease="w:2", was="running"))
    here = await store.open_turn("t", "w:3", 30_000, start=_start("t", "here", "Ev3"))
    assert here is not None and not here.started
    assert here.run is not None and here.run.run_id == elsewhere.run.run_id and here.run.status == "paused"
    assert [m.content for m in here.transcript] == ["first", "one", "elsewhere"]
    await store.commit(Write(run=paused.model_copy(update={"status": "finished"}), lease_owner="w:3",
                             release_lease="w:3", was="paused"))
    assert [m.content for m in await second.load_transcript("t")] == ["first", "one", "elsewhere"]
    assert await store.thread_run("t") == elsewhere.run.run_id


async def test_a_new_thread_opens_without_reading_its_transcript(own_redis: OwnRedis) -> None:
    """No run named and nothing cached (a new thread, most likely): the question is pushed first and, as it made
    the list, nothing is read. A thread whose run's name expired but whose messages live is read as before."""
    store = RedisStore(connect(own_redis.url), keys=Keys("p"))
    try:
        before = await server_sample(own_redis.url)
        opened = await store.open_turn("new", "w:1", 30_000, start=_start("new", "hello"))
        calls = (await server_sample(own_redis.url)).since(before).calls
        assert opened is not None and opened.started and [m.content for m in opened.transcript] == ["hello"]
        assert calls["lrange"] == 0 and calls["rpush"] == 1, calls
        assert 0 < await store.client.ttl(store.keys.transcript("new")) <= store.ttls.thread_s
        await store.client.delete(store.keys.thread_run("new"), store.keys.lease("new"))  # the name expired
        other = RedisStore(connect(own_redis.url), keys=Keys("p"))  # nothing cached there
        again = await other.open_turn("new", "w:2", 30_000, start=_start("new", "again"))
        assert again is not None and again.started
        assert [m.content for m in again.transcript] == ["hello", "again"]
        assert [m.content for m in await other.load_transcript("new")] == ["hello", "again"]
        await other.close()
    finally:
        await store.close()
