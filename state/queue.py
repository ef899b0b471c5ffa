"""The work queue between fronts (which acknowledge Slack and enqueue) and workers (which run the engine):
a Redis Stream with one consumer group. An entry stays pending until its worker acknowledges it; a worker
that dies leaves it pending, and another claims it once it has been idle long enough. A worker still
busy with an entry touches it, so a long run is never taken from a live worker.

Two lanes, read in one command: ``work`` (questions, runs: long, claimed from a dead worker after a long idle)
and ``quick`` (what a person just clicked or typed and watches for — a click, a command, a decision): touched
often and claimed from a dead worker within seconds, so a killed worker never leaves a card waiting for the
work lane's idle period.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

from redis.exceptions import ResponseError

from state.client import Client
from state.guard import guard, retried, text
from state.keys import Keys, Renewals, Ttls

GROUP = "workers"
Lane = Literal["work", "quick"]
LANES: tuple[Lane, ...] = ("quick", "work")  # the quick lane is read first
# Reset an entry's idle time only while it is still this consumer's (never take back a reclaimed one).
_TOUCH = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if p[1] and p[1][2] == ARGV[2] then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
  return 1
end
return 0
"""
# Readers are scored by Redis's clock, so fronts and workers on different hosts agree on "recently".
_BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""
_READERS = """
local t = redis.call('TIME')
return redis.call('ZCOUNT', KEYS[1], tonumber(t[1]) + tonumber(t[2]) / 1000000 - tonumber(ARGV[1]), '+inf')
"""


@dataclass(frozen=True)
class QueueStats:
    length: int
    pending: int
    oldest_pending_s: float
    redelivered: int
    dead: int = 0
    """Entries set aside after every try failed (see :meth:`RedisQueue.bury`)."""


@dataclass(frozen=True)
class DeadLetter:
    """A work item no worker could finish: what it was, why, and when it was set aside."""

    id: str
    body: str
    reason: str
    deliveries: int
    at: float


DEAD_MAX = 1000


@dataclass(frozen=True)
class Entry:
    id: str
    body: str
    deliveries: int = 1
    lane: Lane = "work"


class RedisQueue:
    def __init__(self, client: Client, keys: Keys, ttls: Ttls, outage_grace_s: float = 30.0,
                 max_length: int = 100_000) -> None:
        self.client, self.keys, self.ttls, self.grace_s = client, keys, ttls, outage_grace_s
        self.max_length = max_length
        self._ready = False
        self._cursors: dict[Lane, str] = {lane: "0-0" for lane in LANES}
        self.renewals = Renewals()
        self._touch = client.register_script(_TOUCH)
        self._beat = client.register_script(_BEAT)
        self._readers = client.register_script(_READERS)

    async def _group(self) -> None:
        if self._ready:
            return
        for lane in LANES:
            try:
                await self.client.xgroup_create(self.keys.queue(lane), GROUP, id="0", mkstream=True)
                await self.client.expire(self.keys.queue(lane), self.ttls.thread_s)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._ready = True

    async def put(self, body: str, *, lane: Lane = "work") -> str:
        key = self.keys.queue(lane)
        renew = self.renewals.due(key)  # the stream's TTL (set when its group was made), renewed once an hour

        async def attempt() -> str:
            await self._group()
            if not renew:
                return str(text(await self.client.xadd(key, {"body": body}, maxlen=self.max_length,
                                                       approximate=True)))
            pipe = self.client.pipeline(transaction=True)
            pipe.xadd(key, {"body": body}, maxlen=self.max_length, approximate=True)
            pipe.expire(key, self.ttls.thread_s)
            entry_id, _ = await pipe.execute()
            return str(text(entry_id))

        # A retry after a lost reply may enqueue twice: work items are idempotent (see bot/slack/inbound/work.py).
        try:
            return await retried("enqueueing work", self.grace_s, attempt)
        except BaseException:
            if renew:
                self.renewals.forget(key)
            raise

    async def take(self, consumer: str, *, count: int = 1, block_ms: int = 1000) -> list[Entry]:
        async with guard("reading work"):
            await self._group()
            try:
                # BLOCK 0 would wait for ever: 0 here means "what is there now". Both lanes, quick first.
                reply: Any = await self.client.xreadgroup(GROUP, consumer, {self.keys.queue(n): ">" for n in LANES},
                                                          count=count, block=block_ms or None)
            except ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self._ready = False  # the stream expired (idle for its whole TTL): made again next round
                return []
        lanes = {self.keys.queue(n): n for n in LANES}
        return [Entry(str(text(eid)), str(text(fields.get("body"))), lane=lanes.get(str(text(key)), "work"))
                for key, rows in reply or [] for eid, fields in rows]

    async def reclaim(self, consumer: str, *, idle_ms: int, count: int = 10,
                      quick_idle_ms: int | None = None) -> list[Entry]:
        """Entries whose worker went quiet (it died), now this consumer's: the quick lane's after ``quick_idle_ms``
        (by default ``idle_ms``), the work lane's after ``idle_ms``."""
        entries = []
        for lane in LANES:
            entries += await self._reclaim(lane, consumer, quick_idle_ms if lane == "quick" and quick_idle_ms
                                           is not None else idle_ms, count)
        return entries

    async def _reclaim(self, lane: Lane, consumer: str, idle_ms: int, count: int) -> list[Entry]:
        key = self.keys.queue(lane)
        async with guard("reclaiming work"):
            await self._group()
            try:
                reply: Any = await self.client.xautoclaim(key, GROUP, consumer, idle_ms, self._cursors[lane],
                                                          count=count)
            except ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self._ready = False
                return []
        # Each call scans a window of the pending list; the next one goes on from there, so an orphan behind
        # many live entries is reached too.
        self._cursors[lane] = str(text(reply[0])) if reply else "0-0"
        rows = [(str(text(eid)), fields) for eid, fields in (reply[1] if reply else []) if fields]
        entries = []
        for eid, fields in rows:  # how often each was handed out: a poison entry must not go round for ever
            async with guard("reclaiming work"):
                detail: Any = await self.client.xpending_range(key, GROUP, eid, eid, 1)
            times = int(detail[0]["times_delivered"]) if detail else 2
            entries.append(Entry(eid, str(text(fields.get("body"))), times, lane))
        return entries

    async def touch(self, consumer: str, entry_id: str, *, lane: Lane = "work") -> bool:
        """Still working on it: reset its idle time so nobody reclaims it. False if another worker has it now."""
        async with guard("touching work"):
            return bool(await self._touch(keys=[self.keys.queue(lane)], args=[GROUP, consumer, entry_id]))

    async def ack(self, entry_id: str, *, lane: Lane = "work") -> None:
        key = self.keys.queue(lane)

        async def attempt() -> None:  # one round trip; no MULTI/EXEC: each is idempotent, and a retry sends both
            pipe = self.client.pipeline(transaction=False)
            pipe.xack(key, GROUP, entry_id)
            pipe.xdel(key, entry_id)
            await pipe.execute()

        await retried("acknowledging work", self.grace_s, attempt)

    async def retry_later(self, consumer: str, entry_id: str, *, after_s: float, idle_ms: int,
                          lane: Lane = "work") -> None:
        """A try failed: leave the entry pending, to be reclaimed (by any worker, ``idle_ms`` being what they wait
        for in its lane) in about ``after_s`` rather than after a whole idle period. JUSTID keeps the delivery
        count."""
        idle = max(idle_ms - int(after_s * 1000), 0)
        async with guard("postponing work"):
            await self.client.xclaim(self.keys.queue(lane), GROUP, consumer, 0, [entry_id], idle=idle, justid=True)

    async def bury(self, entry: Entry, reason: str) -> None:
        """Set an entry aside for the operator and take it off the queue, in one transaction (one slot)."""
        key, dead = self.keys.queue(entry.lane), self.keys.dead_letters()

        async def attempt() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.xadd(dead, {"body": entry.body, "reason": reason[:2000], "deliveries": entry.deliveries,
                             "entry": entry.id, "at": repr(time.time())}, maxlen=DEAD_MAX, approximate=True)
            pipe.expire(dead, self.ttls.dead_letters_s)
            pipe.xack(key, GROUP, entry.id)
            pipe.xdel(key, entry.id)
            await pipe.execute()

        # A retry after a lost reply may list it twice; the entry itself goes once.
        await retried("setting work aside", self.grace_s, attempt)

    async def dead_letters(self, count: int = 20) -> list[DeadLetter]:
        """The newest entries set aside, newest first."""
        async with guard("reading the dead letters"):
            rows: Any = await self.client.xrevrange(self.keys.dead_letters(), count=count)
        out = []
        for eid, fields in rows:
            f = {str(text(k)): str(text(v)) for k, v in fields.items()}
            out.append(DeadLetter(f.get("entry") or str(text(eid)), f.get("body", ""), f.get("reason", ""),
                                  int(f.get("deliveries") or 0), float(f.get("at") or 0)))
        return out

    async def stats(self) -> QueueStats:
        length, pending, detail = 0, 0, list[Any]()
        async with guard("reading the queue"):  # read only (a replica answers it): no group is made for it
            for lane in LANES:
                key = self.keys.queue(lane)
                length += int(await self.client.xlen(key))
                try:
                    summary: Any = await self.client.xpending(key, GROUP)
                except ResponseError as exc:  # no worker ever read this lane: nothing pending in it
                    if "NOGROUP" not in str(exc):
                        raise
                    continue
                pending += int(summary["pending"])
                detail += await self.client.xpending_range(key, GROUP, "-", "+", 100) if summary["pending"] else []
            dead = int(await self.client.xlen(self.keys.dead_letters()))
        oldest = max((d["time_since_delivered"] for d in detail), default=0) / 1000
        redelivered = sum(1 for d in detail if d["times_delivered"] > 1)
        return QueueStats(length, pending, oldest, redelivered, dead)

    async def beat(self, consumer: str) -> None:
        """``consumer`` is reading the queue now (see :meth:`readers`)."""
        async with guard("reporting a reader"):
            await self._beat(keys=[self.keys.readers()], args=[consumer, self.ttls.readers_s])

    async def readers(self, within_s: float) -> int:
        """How many consumers reported reading within the last ``within_s`` seconds."""
        async with guard("counting readers"):
            return int(await self._readers(keys=[self.keys.readers()], args=[within_s]))


class MemoryQueue:
    """The same semantics in one process (the in-process store): pending until acknowledged."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[str, Lane]] = OrderedDict()
        self._pending: dict[str, tuple[str, float, int]] = {}
        self._beats: dict[str, float] = {}
        self._dead: list[DeadLetter] = []
        self._seq = 0

    async def put(self, body: str, *, lane: Lane = "work") -> str:
        self._seq += 1
        entry_id = f"{int(time.time() * 1000)}-{self._seq}"
        self._entries[entry_id] = (body, lane)
        return entry_id

    async def take(self, consumer: str, *, count: int = 1, block_ms: int = 1000) -> list[Entry]:
        deadline = time.monotonic() + block_ms / 1000
        while True:
            fresh = sorted((eid for eid in self._entries if eid not in self._pending),
                           key=lambda eid: LANES.index(self._entries[eid][1]))[:count]
            if fresh or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.01)
        for eid in fresh:
            self._pending[eid] = (consumer, time.monotonic(), 1)
        return [Entry(eid, self._entries[eid][0], lane=self._entries[eid][1]) for eid in fresh]

    async def reclaim(self, consumer: str, *, idle_ms: int, count: int = 10,
                      quick_idle_ms: int | None = None) -> list[Entry]:
        now, taken = time.monotonic(), list[Entry]()
        for eid, (_, at, n) in list(self._pending.items()):
            body, lane = self._entries[eid]
            idle = quick_idle_ms if lane == "quick" and quick_idle_ms is not None else idle_ms
            if now - at >= idle / 1000 and len(taken) < count:
                self._pending[eid] = (consumer, now, n + 1)
                taken.append(Entry(eid, body, n + 1, lane))
        return taken

    async def touch(self, consumer: str, entry_id: str, *, lane: Lane = "work") -> bool:
        held = self._pending.get(entry_id)
        if held is None or held[0] != consumer:
            return False
        self._pending[entry_id] = (consumer, time.monotonic(), held[2])
        return True

    async def ack(self, entry_id: str, *, lane: Lane = "work") -> None:
        self._pending.pop(entry_id, None)
        self._entries.pop(entry_id, None)

    async def retry_later(self, consumer: str, entry_id: str, *, after_s: float, idle_ms: int,
                          lane: Lane = "work") -> None:
        held = self._pending.get(entry_id)
        if held is not None:
            self._pending[entry_id] = (consumer, time.monotonic() - idle_ms / 1000 + after_s, held[2])

    async def bury(self, entry: Entry, reason: str) -> None:
        self._dead.insert(0, DeadLetter(entry.id, entry.body, reason, entry.deliveries, time.time()))
        del self._dead[DEAD_MAX:]
        await self.ack(entry.id)

    async def dead_letters(self, count: int = 20) -> list[DeadLetter]:
        return self._dead[:count]

    async def stats(self) -> QueueStats:
        now = time.monotonic()
        return QueueStats(len(self._entries), len(self._pending),
                          max((now - at for _, at, _ in self._pending.values()), default=0.0),
                          sum(1 for *_, n in self._pending.values() if n > 1), len(self._dead))

    async def beat(self, consumer: str) -> None:
        self._beats[consumer] = time.monotonic()

    async def readers(self, within_s: float) -> int:
        since = time.monotonic() - within_s
        return sum(1 for at in self._beats.values() if at >= since)
