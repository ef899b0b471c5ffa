"""The hour's counters wait a few seconds in process and ride along with a later commit (issue 39: one HINCRBY per
counter per run was a third of a step's Redis commands); runs are counted at once; nothing is lost on a failed
write, and a reader sees its own process's counts."""

from __future__ import annotations

from bot.agent.models.scripted import ScriptedModel, reply
from state import RedisStore
from state.counts import Counts
from state.store import covering_hours, hour_now
from tests.conftest import make_harness


def test_counts_wait_then_ride_with_a_commit_and_runs_never_wait() -> None:
    counts = Counts(every_s=0.0)
    assert counts.add("s1", {"runs": 1, "steps": 2}) == {"runs": 1, "steps": 2}  # due at once with every_s 0
    waiting = Counts(every_s=3600)
    assert waiting.add("s1", {"runs": 1, "steps": 2}) == {"runs": 1}  # the run itself is counted by this write
    assert waiting.add("s1", {"steps": 1, "tool_calls": 3}) == {}
    assert waiting.add("s2", {"steps": 5}) == {}  # shards wait apart (each commit touches its own slot)
    waiting.restore("s1", {"runs": 1})  # a write that failed gives its counts back
    assert waiting.take("s1") == {"steps": 3, "tool_calls": 3, "runs": 1} and waiting.shards() == ["s2"]


async def test_a_reader_sees_its_own_process_counts(store: RedisStore) -> None:
    h = make_harness(ScriptedModel([reply("one"), reply("two")]), store)
    await h.engine.ask("t1", "first?")
    await h.engine.ask("t1", "second?")
    stats = await store.stats(3600)
    assert stats.runs == 2 and stats.get("steps") == 2


async def test_a_window_reads_every_hour_bucket_it_covers_and_says_from_when(store: RedisStore) -> None:
    # "last 1h" read only the current hour's bucket: at 14:01 it covered one minute, and a run counted at 13:59
    # vanished from it. A counter written into the previous hour's bucket must be in a one-hour window.
    while True:  # written and read within one hour (a read after the hour turns covers other buckets)
        hour = hour_now()
        await store.client.hset(store.keys.stats("s0", hour - 1), mapping={"runs": 3})
        await store.client.expire(store.keys.stats("s0", hour - 1), 600)
        await store.client.hset(store.keys.stats("s0", hour - 2), mapping={"runs": 50})  # before the window
        await store.client.expire(store.keys.stats("s0", hour - 2), 600)
        stats = await store.stats(3600)
        if hour_now() == hour:
            break
    assert stats.runs == 3 and stats.since == (hour - 1) * 3600
    assert covering_hours(3600, now=14 * 3600 + 60) == range(13, 15)
    assert covering_hours(86400, now=48 * 3600) == range(24, 49)  # the hour a day ago begins is in the window


async def test_an_idle_process_s_counts_reach_redis_with_its_sweep(store: RedisStore, redis_url: str,
                                                                   prefix: str) -> None:
    """A process that stops working has no next write for its waiting counts to ride with: its sweep tick (every
    instance's, claimed or not) takes them there once they are due."""
    from bot.agent.sweeps import Sweeps
    from state import Keys, connect

    h = make_harness(ScriptedModel([reply("one")]), store)
    await h.engine.ask("t1", "first?")
    reader = RedisStore(connect(redis_url), keys=Keys(prefix))  # another process, reading
    try:
        assert (await reader.stats(3600)).get("steps") == 0  # waiting in the first process
        store.counter.counts.every_s = 0.0  # now due
        await Sweeps(h.engine, interval_s=3600).tick()
        assert (await reader.stats(3600)).get("steps") == 1
    finally:
        await reader.close()
