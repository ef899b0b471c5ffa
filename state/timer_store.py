"""Follow-ups and scheduled checks, kept until they fire: durable, and each due time fired once however many
instances look.

Per shard (the hash tag of the thread or channel a timer belongs to, see :mod:`state.keys`): a hash of
timer id → record (JSON), and a sorted set scoring each timer by when to look at it next. A claim is one
script: the due members' scores move a lease ahead, so no other instance sees them; the claimer hands on
the work, then *completes* the occurrence — a follow-up is removed, a schedule gets its next due time. A
claimer that dies in between leaves the timer to be claimed again when the lease ends (and the work it may
already have handed on carries an id made of the timer and its due time, so it runs once).

Completion is compare-and-set on the record as claimed: a claimer whose lease ran out (another fired the
occurrence and moved on) changes nothing. Lua never parses a record; each is compared as the string it is.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from state.client import Client
from state.guard import guard, retried, text
from state.keys import Keys, Ttls, all_shards, shard_of

Kind = Literal["followup", "schedule"]
Added = Literal["added", "full", "exists"]


class Firing(Exception):
    """A timer being fired (claimed) cannot be cancelled: its turn may already be under way."""


class Timer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    kind: Kind
    group: str
    """What limits count and where it lives: the engine thread id (follow-ups) or ``channel:<id>`` (schedules)."""
    channel: str
    thread_ts: str | None = None
    owner: str
    """Who asked (a Slack user id), or ``config`` for a schedule from the configuration."""
    question: str
    created_at: float
    due: int
    """The occurrence it waits for (epoch seconds)."""
    cron: str = ""
    timezone: str = ""
    quiet: bool = False
    source: str = ""
    """How it was made: ``model`` (the follow-up tool), ``button``, ``command``, ``config``."""
    name: str = ""

    @property
    def request_id(self) -> str:
        """The work this occurrence hands on: the same id however often it is handed on."""
        return f"timer:{self.id}:{self.due}"


def new_timer_id(group: str, seed: str = "") -> str:
    """A new timer's id; the same for the same ``seed`` (a command read twice keeps one schedule)."""
    tail = hashlib.sha256(seed.encode()).hexdigest()[:16] if seed else uuid.uuid4().hex[:16]
    return f"{shard_of(group)}.{tail}"


def _shard(timer_id: str) -> str:
    return timer_id.partition(".")[0]


@dataclass(frozen=True)
class Claimed:
    timer: Timer
    raw: str
    """The record exactly as stored when claimed: what completing it compares against."""


# KEYS: records, due index, group. ARGV: id, record, due, limit (0: none), ttl.
_ADD = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 'exists' end
local limit = tonumber(ARGV[4])
if limit > 0 then
  local n = 0
  for _, id in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    if redis.call('HEXISTS', KEYS[1], id) == 1 then n = n + 1 else redis.call('SREM', KEYS[3], id) end
  end
  if n >= limit then return 'full' end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[5]) end
return 'added'
"""
# KEYS: records, due index. ARGV: now, lease end, how many.
_CLAIM = """
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))) do
  local raw = redis.call('HGET', KEYS[1], id)
  if raw then
    redis.call('ZADD', KEYS[2], ARGV[2], id)
    out[#out + 1] = raw
  else
    redis.call('ZREM', KEYS[2], id)
  end
end
return out
"""
# KEYS: records, due index, group, done marker. ARGV: id, record as claimed, next record ('' when done), next due,
# ttl, this attempt's id. The marker lets a retry after a lost reply know the change it finds for its own.
_COMPLETE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  if redis.call('GET', KEYS[4]) == ARGV[6] then return 1 end
  return 0
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('SREM', KEYS[3], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
  for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[5]) end
end
redis.call('SET', KEYS[4], ARGV[6], 'EX', 300)
return 1
"""
# KEYS: records, due index, group, done marker. ARGV: id, "1" to leave one being fired, this attempt's id, who
# cancels, how long that is kept. Returns the record removed, MINE (this attempt removed it already: a retry after a
# lost reply), nil, or FIRING: claimed (its due index holds its lease's end, past its own due time), its turn may be
# under way. The done marker keeps who cancelled it and the record, written with the removal: a canceller that dies
# right after still leaves who cancelled what (see TimerStore.cancelled).
_CANCEL = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then
  local done = redis.call('GET', KEYS[4])
  if done and string.sub(done, 1, #ARGV[3] + 1) == ARGV[3] .. '\\n' then return 'MINE' end
  return false
end
if ARGV[2] == '1' then
  local held = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '0') or 0
  if held > (tonumber(cjson.decode(raw)['due']) or 0) then return 'FIRING' end
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('SET', KEYS[4], ARGV[3] .. '\\n' .. ARGV[4] .. '\\n' .. raw, 'EX', ARGV[5])
return raw
"""


class TimerStore(Protocol):
    async def add(self, timer: Timer, *, limit: int = 0) -> Added:
        """Keep ``timer`` until it fires; ``full`` when its group already has ``limit`` pending (0: no limit)."""

    async def get(self, timer_id: str) -> Timer | None: ...

    async def claim(self, now: float, lease_s: float, limit: int = 32) -> list[Claimed]:
        """The timers due at ``now``, each now this caller's for ``lease_s`` (nobody else sees them meanwhile)."""

    async def complete(self, claimed: Claimed, next_due: int | None = None) -> bool:
        """Done with the claimed occurrence: removed (``next_due`` None) or waiting for ``next_due``. False if it
        changed since the claim (cancelled, or fired by another after this claim's lease ran out)."""

    async def cancelled(self, timer_id: str) -> tuple[str, Timer] | None:
        """Who cancelled ``timer_id`` and the timer as it was, kept as long as a thread; None if it was not."""

    async def cancel(self, timer_id: str, *, unless_firing: bool = False, by: str = "") -> Timer | None:
        """Removed; the timer as it was, or None if there was none (fired, or cancelled already). ``unless_firing``:
        :class:`Firing` when it is being fired (claimed: its turn may be under way), and kept."""

    async def pending(self, group: str) -> list[Timer]: ...

    async def every(self) -> list[Timer]:
        """Every timer kept (App Home, ``/opspilot schedules``, the config's schedules at start)."""


def _parse(raw: str | bytes | None) -> Timer | None:
    if raw is None:
        return None
    try:
        return Timer.model_validate_json(raw)
    except ValidationError:
        return None  # written by another version: left alone rather than failing every list


class RedisTimers:
    def __init__(self, client: Client, keys: Keys, ttls: Ttls, outage_grace_s: float = 30.0) -> None:
        self.client, self.keys, self.ttls, self.grace_s = client, keys, ttls, outage_grace_s
        self._add = client.register_script(_ADD)
        self._claim = client.register_script(_CLAIM)
        self._complete = client.register_script(_COMPLETE)
        self._cancel = client.register_script(_CANCEL)

    def _keys(self, shard: str, group: str) -> list[str]:
        return [self.keys.timers(shard), self.keys.timers_due(shard), self.keys.timer_group(group)]

    async def add(self, timer: Timer, *, limit: int = 0) -> Added:
        keys = self._keys(_shard(timer.id), timer.group)
        args: list[str | int] = [timer.id, timer.model_dump_json(), timer.due, limit, self.ttls.timers_s]
        # Repeated after a lost reply, it finds its own record: "exists", which the caller reads as done.
        answer = await retried("keeping a timer", self.grace_s, lambda: self._add(keys=keys, args=args))
        return "added" if text(answer) == "added" else "full" if text(answer) == "full" else "exists"

    async def get(self, timer_id: str) -> Timer | None:
        key = self.keys.timers(_shard(timer_id))
        return _parse(text(await retried("reading a timer", self.grace_s, lambda: self.client.hget(key, timer_id))))

    async def claim(self, now: float, lease_s: float, limit: int = 32) -> list[Claimed]:
        async def one(shard: str) -> list[Claimed]:
            async with guard("claiming due timers"):
                rows = await self._claim(keys=[self.keys.timers(shard), self.keys.timers_due(shard)],
                                         args=[repr(now), repr(now + lease_s), limit])
            return [Claimed(t, str(text(r))) for r in rows or [] if (t := _parse(text(r))) is not None]

        # One script per shard (a Cluster serves each in its own slot); an outage fails the round, not a shard.
        found = await asyncio.gather(*(one(shard) for shard in all_shards()))
        return sorted((c for part in found for c in part), key=lambda c: c.timer.due)

    async def complete(self, claimed: Claimed, next_due: int | None = None) -> bool:
        timer = claimed.timer
        following = timer.model_copy(update={"due": next_due}).model_dump_json() if next_due is not None else ""
        keys = [*self._keys(_shard(timer.id), timer.group), self.keys.timer_done(_shard(timer.id), timer.id)]
        args: list[str | int] = [timer.id, claimed.raw, following, next_due or 0, self.ttls.timers_s,
                                 uuid.uuid4().hex]
        return bool(await retried("completing a timer", self.grace_s, lambda: self._complete(keys=keys, args=args)))

    async def cancelled(self, timer_id: str) -> tuple[str, Timer] | None:
        key = self.keys.timer_done(_shard(timer_id), timer_id)
        done = str(text(await retried("reading a timer's end", self.grace_s, lambda: self.client.get(key))) or "")
        _, by, raw = [*done.split("\n", 2), "", ""][:3]
        timer = _parse(raw) if raw else None
        return (by, timer) if timer is not None else None

    async def cancel(self, timer_id: str, *, unless_firing: bool = False, by: str = "") -> Timer | None:
        current = await self.get(timer_id)
        if current is None:
            return None
        keys = [*self._keys(_shard(timer_id), current.group), self.keys.timer_done(_shard(timer_id), timer_id)]
        args = [timer_id, "1" if unless_firing else "", uuid.uuid4().hex, by, self.ttls.thread_s]
        raw = await retried("cancelling a timer", self.grace_s, lambda: self._cancel(keys=keys, args=args))
        if text(raw) == "FIRING":
            raise Firing(timer_id)
        if text(raw) == "MINE":  # this very cancel, retried after its reply was lost
            return current
        return _parse(text(raw)) if raw else None

    async def pending(self, group: str) -> list[Timer]:
        key, records = self.keys.timer_group(group), self.keys.timers(shard_of(group))
        async with guard("reading timers"):
            ids = sorted(str(text(i)) for i in await self.client.smembers(key))
            rows = await self.client.hmget(records, ids) if ids else []
        return sorted((t for r in rows if (t := _parse(text(r))) is not None), key=lambda t: t.due)

    async def every(self) -> list[Timer]:
        async with guard("reading timers"):
            pipe = self.client.pipeline(transaction=False)
            for shard in all_shards():
                pipe.hvals(self.keys.timers(shard))
            parts: list[list[str | bytes]] = await pipe.execute()
        return sorted((t for part in parts for r in part or [] if (t := _parse(text(r))) is not None),
                      key=lambda t: t.due)


class MemoryTimers:
    """The same semantics in one process (the in-process store)."""

    def __init__(self) -> None:
        self._records: dict[str, str] = {}
        self._scores: dict[str, float] = {}
        self._cancelled: dict[str, tuple[str, str]] = {}  # id → who cancelled it, the record

    async def add(self, timer: Timer, *, limit: int = 0) -> Added:
        if timer.id in self._records:
            return "exists"
        if limit and len(await self.pending(timer.group)) >= limit:
            return "full"
        self._records[timer.id] = timer.model_dump_json()
        self._scores[timer.id] = timer.due
        return "added"

    async def get(self, timer_id: str) -> Timer | None:
        return _parse(self._records.get(timer_id))

    async def claim(self, now: float, lease_s: float, limit: int = 32) -> list[Claimed]:
        due = sorted((score, tid) for tid, score in self._scores.items() if score <= now)[:limit * 16]
        out = []
        for _, tid in due:
            self._scores[tid] = now + lease_s
            timer = _parse(self._records[tid])
            if timer is not None:
                out.append(Claimed(timer, self._records[tid]))
        return sorted(out, key=lambda c: c.timer.due)

    async def complete(self, claimed: Claimed, next_due: int | None = None) -> bool:
        tid = claimed.timer.id
        if self._records.get(tid) != claimed.raw:
            return False
        if next_due is None:
            del self._records[tid]
            self._scores.pop(tid, None)
        else:
            self._records[tid] = claimed.timer.model_copy(update={"due": next_due}).model_dump_json()
            self._scores[tid] = next_due
        return True

    async def cancelled(self, timer_id: str) -> tuple[str, Timer] | None:
        by, raw = self._cancelled.get(timer_id, ("", ""))
        timer = _parse(raw) if raw else None
        return (by, timer) if timer is not None else None

    async def cancel(self, timer_id: str, *, unless_firing: bool = False, by: str = "") -> Timer | None:
        timer = _parse(self._records.get(timer_id))
        if unless_firing and timer is not None and self._scores.get(timer_id, 0) > timer.due:
            raise Firing(timer_id)
        self._scores.pop(timer_id, None)
        if (raw := self._records.pop(timer_id, None)) is not None:
            self._cancelled[timer_id] = (by, raw)
        return _parse(raw)

    async def pending(self, group: str) -> list[Timer]:
        return [t for t in await self.every() if t.group == group]

    async def every(self) -> list[Timer]:
        return sorted((t for r in self._records.values() if (t := _parse(r)) is not None), key=lambda t: t.due)
