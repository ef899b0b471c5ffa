"""A front end's own bookkeeping beside the engine's state: small hashes (where a Slack thread, progress
message or card is) and first-time markers for event dedupe. Every key carries a TTL."""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar

from state.client import Client
from state.guard import HSET_WITH_TTL, RELEASE_IF_HELD, retried, text
from state.keys import Keys, Renewals, Ttls
from state.store import Admission, MetaStore

# A sliding window in one script (both keys share a hash tag: one slot of a Redis Cluster). A member already in
# the window was admitted before (a retry after a lost reply). Refused: when a slot frees, and whether this is the
# first refusal of the hold (the marker holds until a window after it, so a long storm is reported once per
# window). Times are the caller's clock, the marker's included; TTLs only clean up. Starts that left the window are
# dropped only when the count reaches the limit: below it they cannot refuse anyone (one command fewer a start).
_ADMIT = """
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = redis.call('zcard', KEYS[1])
if n >= limit then
  redis.call('zremrangebyscore', KEYS[1], '-inf', now - window)
  n = redis.call('zcard', KEYS[1])
end
if n < limit then
  local added = redis.call('zadd', KEYS[1], 'NX', now, ARGV[4])  -- counted already (a retry): its first time
  redis.call('pexpire', KEYS[1], window)
  return {1, 0, 0, added}
end
if redis.call('zscore', KEYS[1], ARGV[4]) then return {1, 0, 0} end  -- only a full window asks who is in it
local oldest = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
local free_at = now + window
if oldest[2] then free_at = tonumber(oldest[2]) + window end
local told = tonumber(redis.call('get', KEYS[2]) or '0')
if told > now then return {0, free_at, 0, 0, told} end
redis.call('set', KEYS[2], now + window, 'PX', window)
return {0, free_at, 1, 0, now + window}
"""

# Claim-once: the first holder stays until its TTL; everyone reads who holds it (GET then SET as one step).
_CLAIM = """
local held = redis.call('get', KEYS[1])
if held then return held end
redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2])
return ARGV[1]
"""

# A short list, newest first: LTRIM only once it is over its length; its TTL set by the push that makes it, else
# renewed when ARGV[4] says (once an hour per process, state.keys.Renewals). KEYS: the list. ARGV: value, keep, ttl,
# renew.
_REMEMBER = """
local n = redis.call('LPUSH', KEYS[1], ARGV[1])
if n > tonumber(ARGV[2]) then redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1) end
if n == 1 or ARGV[4] == '1' then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return n
"""

DEDUPE_MARK: ContextVar[str | None] = ContextVar("dedupe_mark", default=None)
"""Set while one stored request is read: its dedupe markers carry its id, so reading it again (its worker died
before it was acknowledged) passes the same dedupe it passed the first time instead of being dropped."""


class RedisMeta:
    def __init__(self, client: Client, keys: Keys, ttls: Ttls, outage_grace_s: float = 30.0) -> None:
        self.client, self.keys, self.ttls, self.grace_s = client, keys, ttls, outage_grace_s
        self._admit = client.register_script(_ADMIT)
        self._claim = client.register_script(_CLAIM)
        self._unclaim = client.register_script(RELEASE_IF_HELD)
        self._put = client.register_script(HSET_WITH_TTL)
        self._remember = client.register_script(_REMEMBER)
        self.renewals = Renewals()

    async def put(self, kind: str, name: str, fields: Mapping[str, str]) -> None:
        if not fields:
            return
        keys = [self.keys.meta(kind, name)]
        args: list[str | int] = [self.ttls.thread_s, *(part for pair in fields.items() for part in pair)]
        await retried("saving metadata", self.grace_s, lambda: self._put(keys=keys, args=args))

    async def get(self, kind: str, name: str) -> dict[str, str]:
        key = self.keys.meta(kind, name)
        raw = await retried("reading metadata", self.grace_s, lambda: self.client.hgetall(key))
        return {str(text(k)): str(text(v)) for k, v in raw.items()}

    async def first_time(self, name: str, ttl_s: int | None = None) -> bool:
        key, mark = self.keys.dedupe(name), DEDUPE_MARK.get() or os.urandom(6).hex()

        async def attempt() -> bool:  # a retry after a lost reply recognises its own mark
            return bool(await self.client.set(key, mark, nx=True, ex=ttl_s or self.ttls.dedupe_s)) \
                or text(await self.client.get(key)) == mark

        return await retried("deduplicating", self.grace_s, attempt)

    async def claim(self, name: str, holder: str, ttl_s: int) -> str:
        keys, args = [self.keys.claimed(name)], [holder, str(max(ttl_s, 1))]
        return str(text(await retried("claiming", self.grace_s, lambda: self._claim(keys=keys, args=args))))

    async def unclaim(self, name: str, holder: str) -> None:
        keys = [self.keys.claimed(name)]
        await retried("letting go of a claim", self.grace_s, lambda: self._unclaim(keys=keys, args=[holder]))

    async def remember(self, name: str, value: str, *, keep: int) -> None:
        key = self.keys.meta("list", name)
        args: list[str | int] = [value, keep, self.ttls.thread_s, "1" if self.renewals.due(key) else ""]
        try:
            await retried("remembering", self.grace_s, lambda: self._remember(keys=[key], args=args))
        except BaseException:
            self.renewals.forget(key)
            raise

    async def recall(self, name: str) -> list[str]:
        key = self.keys.meta("list", name)
        values = await retried("recalling", self.grace_s, lambda: self.client.lrange(key, 0, -1))
        return [str(text(v)) for v in values]

    async def count(self, name: str, ttl_s: int) -> int:
        key = self.keys.dedupe(f"count:{name}")

        async def attempt() -> int:  # (a retry after a lost reply may count twice: a rate limit errs strict)
            pipe = self.client.pipeline(transaction=True)
            pipe.incr(key)
            pipe.expire(key, ttl_s, nx=True)
            value, _ = await pipe.execute()
            return int(value)

        return await retried("counting", self.grace_s, attempt)

    async def admit(self, name: str, member: str, *, limit: int, window_s: float, now: float) -> Admission:
        keys = [self.keys.window(name), self.keys.window_held(name)]
        args: list[int | str] = [round(now * 1000), max(round(window_s * 1000), 1), limit, member]
        admitted, free_at, first, *rest = await retried("rate limiting", self.grace_s,
                                                        lambda: self._admit(keys=keys, args=args))
        return Admission(bool(admitted), int(free_at) / 1000, bool(first), new=bool(rest and rest[0]),
                         told_until=int(rest[1]) / 1000 if len(rest) > 1 else 0.0)

    async def withdraw(self, name: str, member: str) -> None:
        key = self.keys.window(name)
        await retried("giving back a start", self.grace_s, lambda: self.client.zrem(key, member))


class MemoryMeta:
    def __init__(self) -> None:
        self._meta: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        self._seen: dict[str, float] = {}  # name → when it lapses
        self._marks: dict[str, str] = {}  # name → the stored request that set it (see DEDUPE_MARK)
        self._counts: dict[str, tuple[int, float]] = {}
        self._lists: dict[str, list[str]] = defaultdict(list)
        self._windows: dict[str, dict[str, float]] = defaultdict(dict)  # name → member → when it started
        self._held: dict[str, float] = {}  # name → when its "told" marker lapses
        self._claims: dict[str, tuple[str, float]] = {}  # name → (holder, when it lapses)

    async def put(self, kind: str, name: str, fields: Mapping[str, str]) -> None:
        self._meta[(kind, name)].update(fields)

    async def get(self, kind: str, name: str) -> dict[str, str]:
        return dict(self._meta.get((kind, name), {}))

    async def first_time(self, name: str, ttl_s: int | None = None) -> bool:
        now, mark = time.monotonic(), DEDUPE_MARK.get()
        if self._seen.get(name, 0.0) > now:
            return mark is not None and self._marks.get(name) == mark
        self._seen[name] = now + (ttl_s or 7 * 24 * 3600)
        if mark is not None:
            self._marks[name] = mark
        return True

    async def claim(self, name: str, holder: str, ttl_s: int) -> str:
        now = time.monotonic()
        held, lapses = self._claims.get(name, ("", 0.0))
        if lapses > now:
            return held
        self._claims[name] = (holder, now + max(ttl_s, 1))
        return holder

    async def unclaim(self, name: str, holder: str) -> None:
        if self._claims.get(name, ("", 0.0))[0] == holder:
            del self._claims[name]

    async def withdraw(self, name: str, member: str) -> None:
        self._windows[name].pop(member, None)

    async def remember(self, name: str, value: str, *, keep: int) -> None:
        self._lists[name] = [value, *self._lists[name]][:keep]

    async def recall(self, name: str) -> list[str]:
        return list(self._lists.get(name, []))

    async def count(self, name: str, ttl_s: int) -> int:
        now = time.monotonic()
        value, lapses = self._counts.get(name, (0, 0.0))
        value, lapses = (value + 1, lapses) if lapses > now else (1, now + ttl_s)
        self._counts[name] = (value, lapses)
        return value

    async def admit(self, name: str, member: str, *, limit: int, window_s: float, now: float) -> Admission:
        starts = self._windows[name]
        for old in [m for m, at in starts.items() if at <= now - window_s]:
            del starts[old]
        if member in starts:
            return Admission(True)
        if len(starts) < limit:
            starts[member] = now
            return Admission(True, new=True)
        first = self._held.get(name, 0.0) <= now
        if first:
            self._held[name] = now + window_s
        return Admission(False, min(starts.values(), default=now) + window_s, first, told_until=self._held[name])


@asynccontextmanager
async def one_at_a_time(meta: MetaStore, name: str, holder: str, *, hold_s: int, wait_s: float) -> AsyncIterator[bool]:
    """Whether ``holder`` got the turn ``name`` within ``wait_s`` (kept ``hold_s`` at most, should its process die
    holding it): for a count and an add that no one script can hold, such as a person's timers, which span shards
    (at once in several threads, each counted the same few and all added)."""
    deadline = time.monotonic() + wait_s
    while True:  # another process holds it: nothing here to be woken by, so look again shortly
        mine = await meta.claim(name, holder, hold_s) == holder
        if mine or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.05)
    try:
        yield mine
    finally:
        if mine:
            await meta.unclaim(name, holder)
