"""The hour's counters (runs, steps, tool calls, tokens…) on their way to Redis: kept in this process for a few
seconds per shard, then added by the next commit of that shard (inside its script, no extra round trip), or
flushed when the stats are read or the store closes. A run's counters used to cost one HINCRBY each in its last
write — five to seven commands a run (issue 39). What that costs: a process killed -9 loses at most
``EVERY_S`` of its steps', tool calls' and tokens' counts (the runs themselves are counted exactly, and their
records, traces and audit entries are written with every step)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from state.client import Client
from state.guard import guard
from state.keys import Keys, Ttls, all_shards, shard_of
from state.store import Stats, covering_hours, hour_now, merge_stats

EVERY_S = 10.0
"""How long counts wait in process for their shard's next commit."""
EXACT = frozenset({"runs"})
"""Counted by the write that carries them, never waiting: a run started counts even if its process is killed."""


class Counts:
    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s = every_s
        self._waiting: dict[str, Counter[str]] = {}
        self._since: dict[str, float] = {}

    def add(self, shard: str, counters: Mapping[str, int]) -> dict[str, int]:
        """Count ``counters``; what the commit in ``shard`` should add now (empty: they wait). The caller gives
        back (:meth:`restore`) what its write did not save."""
        now = {k: v for k, v in counters.items() if k in EXACT}
        if waiting := {k: v for k, v in counters.items() if k not in EXACT}:
            self._waiting.setdefault(shard, Counter()).update(waiting)
            self._since.setdefault(shard, time.monotonic())
        if time.monotonic() - self._since.get(shard, float("inf")) < self.every_s:
            return now
        return dict(Counter(self.take(shard)) + Counter(now))

    def take(self, shard: str) -> dict[str, int]:
        self._since.pop(shard, None)
        return {k: v for k, v in self._waiting.pop(shard, Counter()).items() if v}

    def restore(self, shard: str, counters: Mapping[str, int]) -> None:
        if counters:
            self._waiting.setdefault(shard, Counter()).update(counters)
            self._since.setdefault(shard, time.monotonic())

    def shards(self) -> list[str]:
        return list(self._waiting)


class RedisCounter:
    """The hour's stats in Redis, one hash per shard and hour: what commits count (through :class:`Counts`) and
    single tallies (a refusal, a follow-up fired), read back summed over shards and hours."""

    def __init__(self, client: Client, keys: Keys, ttls: Ttls) -> None:
        self.client, self.keys, self.ttls = client, keys, ttls
        self.counts = Counts()

    async def tally(self, thread_id: str, name: str) -> None:
        key = self.keys.stats(shard_of(thread_id), hour_now())
        async with guard("counting"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hincrby(key, name, 1)
            pipe.expire(key, self.ttls.stats_s)
            await pipe.execute()

    async def flush(self, *, due_only: bool = False) -> None:
        """Add this process's waiting counts to the hour's stats (``due_only``: those waiting long enough)."""
        taken = {s: c for s in self.counts.shards()
                 if (c := self.counts.add(s, {}) if due_only else self.counts.take(s))}
        if not taken:
            return
        try:
            async with guard("counting into the stats"):
                pipe = self.client.pipeline(transaction=False)
                for shard, counters in taken.items():
                    key = self.keys.stats(shard, hour_now())
                    for name, n in counters.items():
                        pipe.hincrby(key, name, n)
                    pipe.expire(key, self.ttls.stats_s)
                await pipe.execute()
        except BaseException:
            for shard, counters in taken.items():
                self.counts.restore(shard, counters)
            raise

    async def stats(self, window_s: int) -> Stats:
        await self.flush()  # this process's own, so a reader here sees every run it counted
        hours = covering_hours(window_s)
        async with guard("reading stats"):
            pipe = self.client.pipeline(transaction=False)
            for hour in hours:
                for shard in all_shards():
                    pipe.hgetall(self.keys.stats(shard, hour))
                pipe.hgetall(self.keys.legacy(f"stats:{hour}"))
            buckets: list[dict[str, Any]] = await pipe.execute()
        return merge_stats(buckets, window_s, hours)
