"""The work queue, in Redis and in memory: pending until acknowledged, claimed from dead workers only."""

from __future__ import annotations

import asyncio

import pytest

from state import MemoryStore, RedisStore
from state.queue import RedisQueue
from state.store import WorkQueue


@pytest.fixture(params=["redis", "cluster", "memory"])
def queue(request: pytest.FixtureRequest) -> WorkQueue:
    if request.param == "memory":
        return MemoryStore().queue
    store: RedisStore = request.getfixturevalue("store" if request.param == "redis" else "cluster_store")
    return store.queue


async def test_an_entry_is_pending_until_acknowledged(queue: WorkQueue) -> None:
    await queue.put('{"n": 1}')
    (entry,) = await queue.take("w1", block_ms=100)
    assert entry.body == '{"n": 1}' and await queue.take("w2", block_ms=50) == []  # nobody else gets it
    assert (await queue.stats()).pending == 1
    await queue.ack(entry.id)
    stats = await queue.stats()
    assert (stats.length, stats.pending) == (0, 0)


async def test_a_dead_workers_entry_is_claimed_a_live_ones_is_not(queue: WorkQueue) -> None:
    await queue.put("dead")
    await queue.put("alive")
    _dead, alive = await queue.take("w1", count=2, block_ms=100)
    await asyncio.sleep(0.25)
    await queue.touch("w1", alive.id)  # w1 still works on this one
    claimed = await queue.reclaim("w2", idle_ms=200)
    assert [e.body for e in claimed] == ["dead"] and claimed[0].deliveries > 1
    assert await queue.reclaim("w3", idle_ms=200) == []  # w2 has it now


async def test_the_stream_has_a_ttl(store: RedisStore) -> None:
    await store.queue.put("x")
    assert await store.client.ttl(store.keys.queue()) > 0


async def test_touch_never_takes_back_an_entry_another_worker_claimed(queue: WorkQueue) -> None:
    await queue.put("x")
    (entry,) = await queue.take("w1", block_ms=100)
    await asyncio.sleep(0.15)
    assert [e.id for e in await queue.reclaim("w2", idle_ms=100)] == [entry.id]
    assert not await queue.touch("w1", entry.id)  # w1 learns it lost the entry
    assert await queue.touch("w2", entry.id)


async def test_a_dead_workers_entry_behind_many_live_ones_is_reached(queue: WorkQueue) -> None:
    """XAUTOCLAIM scans a window of the pending list per call (COUNT × 10 entries); the next call must go on
    from where the last one stopped, or an orphan behind more than a window of live entries is never found."""
    live_count = 130
    for n in range(live_count):
        await queue.put(f"live-{n}")
    live = await queue.take("w1", count=live_count, block_ms=100)
    assert len(live) == live_count
    await queue.put("orphan")
    assert len(await queue.take("dead", block_ms=100)) == 1
    idle_ms = 1000  # long enough that touching 130 entries, even on a busy machine, ends well within it
    await asyncio.sleep(idle_ms / 1000 + 0.05)  # the orphan is idle from here on (idle time only grows)
    for entry in live:  # w1 is alive and working on every one of its entries
        assert await queue.touch("w1", entry.id)
    found: list[str] = []
    for _ in range(4):  # 130 live entries ahead of it: a window of 100 cannot cover them in one call
        found += [e.body for e in await queue.reclaim("w2", idle_ms=idle_ms, count=10)]
        if "orphan" in found:
            break
    assert "orphan" in found and not any(b.startswith("live-") for b in found), found


async def test_readers_are_the_workers_that_read_lately(queue: WorkQueue) -> None:
    assert await queue.readers(10) == 0
    for worker in ("w1", "w2", "w1"):
        await queue.beat(worker)
    assert await queue.readers(10) == 2
    await asyncio.sleep(0.3)
    await queue.beat("w2")
    assert await queue.readers(0.2) == 1  # w1 has not read since
    if isinstance(queue, RedisQueue):  # the list expires like every key
        assert 0 < await queue.client.ttl(queue.keys.readers()) <= queue.ttls.readers_s


async def test_the_quick_lane_is_read_first_and_handed_on_sooner(queue: WorkQueue) -> None:
    """What a person watches (a click, a command) is read before the work lane's backlog and claimed from a dead
    worker after its own short idle period, while a live worker's long work is left alone."""
    await queue.put("question")
    await queue.put("click", lane="quick")
    taken = await queue.take("w1", count=2, block_ms=100)
    assert [(e.body, e.lane) for e in taken] == [("click", "quick"), ("question", "work")]
    await asyncio.sleep(0.25)
    claimed = await queue.reclaim("w2", idle_ms=60_000, quick_idle_ms=200)
    assert [(e.body, e.lane) for e in claimed] == [("click", "quick")] and claimed[0].deliveries == 2
    assert not await queue.touch("w1", claimed[0].id, lane="quick")
    await queue.ack(claimed[0].id, lane="quick")
    await queue.ack(taken[1].id)
    stats = await queue.stats()
    assert (stats.length, stats.pending) == (0, 0)
