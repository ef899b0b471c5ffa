"""A durable outbox of messages a front end must deliver: recorded before they are sent, retried until
delivered, a newer state of the same message superseding an older one.

Per conversation thread: one hash of message records (field = message key, value = JSON) and a place
in its shard's ``due`` index (scored by the next attempt; the hash and the index share a hash slot).
A record keeps the desired state (``version``) and what was delivered (``sent_version``, ``ts``);
once delivered its text is dropped, only its ts stays.
Every write is one Lua script, so a new state can never slip between a delivery and its bookkeeping.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

from state.client import Client
from state.guard import HSET_WITH_TTL, RELEASE_IF_HELD, RENEW_IF_HELD, guard, retried, text
from state.keys import Keys, Renewals, Ttls, all_shards, shard_of


@dataclass(frozen=True)
class OutboxRecord:
    key: str
    version: int
    sent_version: int
    seq: int
    fields: dict[str, Any]

    @property
    def dirty(self) -> bool:
        return self.version > self.sent_version

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)


def _record(key: str, raw: str | bytes) -> OutboxRecord:
    body = json.loads(raw)
    return OutboxRecord(key, int(body.pop("version", 0)), int(body.pop("sent_version", 0)), int(body.pop("seq", 0)),
                        body)


class Put(NamedTuple):
    """What recording a message's state did: its version, and the time by which its thread is due for sure (None
    when not known: it kept a later time, a backoff or a budget's)."""

    version: int
    due_by: float | None


class Due(IntEnum):
    """What a round's settle left: nothing to send, the thread due at the round's next attempt, or due now (a
    message the round never read was put meanwhile). Truthy while anything is left."""

    NO = 0
    LATER = 1
    NOW = 2


@dataclass(frozen=True)
class Delivered:
    """A version of a message Slack took in a delivery round, saved by the round's settle (see ``_SETTLE``)."""

    key: str
    fields: Mapping[str, Any]
    version: int


DUE_SENTINEL = "~"
"""A member of each due index, due never (scored +inf): it keeps the key, so the ZADD that adds it made the key."""
SEQ_FIELD = "~seq"
"""A per-thread counter in the thread's hash: the order messages were first recorded in (clocks may tie)."""

# KEYS: thread hash, due index. ARGV: message key, fields (JSON), now (ms), due at, ttl, thread, ZADD's flag (NX:
# a thread waiting out a backoff or a budget keeps its time; LT: an urgent message brings it forward), which TTLs to
# renew ("h": the hash's, "d": the index's, "s": the states'; each process renews a key once an hour, see
# state.keys.Renewals), then, optionally, a run id and its shown state (KEYS[3]: the thread's states). Returns the
# message's version and 1 if the thread is now due by ARGV[4] for sure (its writer's next round need not ask).
# A write that makes a key sets its TTL itself: the hash is new when its first message takes seq 1, the index when
# its sentinel (DUE_SENTINEL, due never) is added with the thread, the states' hash when a run's state is new.
_PUT = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local rec = cur and cjson.decode(cur)
if not rec then
  rec = {version = 0, sent_version = 0, seq = redis.call('HINCRBY', KEYS[1], '~seq', 1)}
end
for k, v in pairs(cjson.decode(ARGV[2])) do rec[k] = v end
if rec.direct_after and not rec.maybe_direct then  -- landed late: its writer may have given up and sent it directly
  local now = redis.call('TIME')
  if now[1] + now[2] / 1000000 - rec.put_at >= rec.direct_after / 2 then rec.maybe_direct = true end
end
rec.version = rec.version + 1
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(rec))
if rec.seq == 1 and not cur or string.find(ARGV[8], 'h', 1, true) then redis.call('EXPIRE', KEYS[1], ARGV[5]) end
local added = redis.call('ZADD', KEYS[2], ARGV[7], 'inf', '~', ARGV[4], ARGV[6])
if added == 2 or string.find(ARGV[8], 'd', 1, true) then redis.call('EXPIRE', KEYS[2], ARGV[5]) end
if KEYS[3] and (redis.call('HSET', KEYS[3], ARGV[9], ARGV[10]) == 1 or string.find(ARGV[8], 's', 1, true)) then
  redis.call('EXPIRE', KEYS[3], ARGV[5])
end
-- due by ARGV[4] for sure: brought forward (LT), or added now (NX: the sentinel is new only with the index)
return {rec.version, (ARGV[7] == 'LT' or added > 0) and 1 or 0}
"""
# Shared by _PATCH and _SETTLE: a message's record with ``fields`` applied and, when a version was delivered
# (``sent``, or nil), that version marked sent; a delivered state's text and blocks are dropped: only what later
# edits need (ts) is kept.
_APPLY = """
local function apply(rec, fields, sent)
  for k, v in pairs(fields) do rec[k] = v end
  if sent then
    rec.sent_version = math.max(rec.sent_version, sent)
    if rec.sent_version >= rec.version then rec.text = nil; rec.blocks = nil end
  end
  return rec
end
"""
# KEYS: thread hash. ARGV: message key, fields (JSON), delivered version ('' for none).
_PATCH = _APPLY + """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
local rec = apply(cjson.decode(cur), cjson.decode(ARGV[2]), tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(rec))
return 1
"""
# KEYS: thread hash, due index, and the delivery lease to let go of (optional). ARGV: thread, next attempt if
# anything is still undelivered, the thread's TTL, the lease's owner (see RELEASE_IF_HELD; '' for none), then the
# round's delivered versions (JSON: [key, fields, version] each), saved first as _PATCH would: the round's
# bookkeeping in one script. Records are decoded only as far as needed. The index's sentinel goes with the thread:
# an index gone since the thread's last write is made again with its TTL. ARGV[6]: the versions the round read
# (JSON object, '' if not known) and ARGV[7] now: a message other than progress (the prefix of
# bot.slack.outbound.pacer.low_priority) put while the round ran (an answer, a card) was never weighed by it, so
# the thread is due now, not at the round's next attempt (which may be a progress edit's interval away). Returns 0
# (nothing left), 1 (due at the next attempt) or 2 (due now).
_SETTLE = _APPLY + """
local raw = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 2, #all, 2 do
  if all[i - 1] ~= '~seq' then raw[all[i - 1]] = all[i] end
end
for _, sent in ipairs(cjson.decode(ARGV[5])) do
  if raw[sent[1]] then
    raw[sent[1]] = cjson.encode(apply(cjson.decode(raw[sent[1]]), sent[2], sent[3]))
    redis.call('HSET', KEYS[1], sent[1], raw[sent[1]])
  end
end
local seen = ARGV[6] ~= '' and cjson.decode(ARGV[6])
local due, at = 0, ARGV[2]
for key, body in pairs(raw) do
  local rec = cjson.decode(body)
  if rec.version > rec.sent_version then
    due = 1
    if seen and (seen[key] or 0) < rec.version and string.sub(key, 1, 9) ~= 'progress:' then
      if tonumber(ARGV[7]) < tonumber(ARGV[2]) then due, at = 2, ARGV[7] end
      break
    end
  end
end
if due == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
elseif redis.call('ZADD', KEYS[2], 'inf', '~', at, ARGV[1]) == 2 then
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
if KEYS[3] and redis.call('GET', KEYS[3]) == ARGV[4] then redis.call('DEL', KEYS[3]) end
return due
"""


class RedisOutbox:
    def __init__(self, client: Client, keys: Keys, ttls: Ttls, outage_grace_s: float = 30.0) -> None:
        self.client, self.keys, self.ttls, self.grace_s = client, keys, ttls, outage_grace_s
        self.renewals = Renewals()
        self._put = client.register_script(_PUT)
        self._patch = client.register_script(_PATCH)
        self._settle = client.register_script(_SETTLE)
        self._release = client.register_script(RELEASE_IF_HELD)
        self._renew = client.register_script(RENEW_IF_HELD)
        self._hset = client.register_script(HSET_WITH_TTL)

    async def put(self, thread: str, key: str, fields: Mapping[str, Any], *, due: float, urgent: bool = False,
                  state: tuple[str, str] | None = None) -> Put:
        """Record the desired state of message ``key`` (see :class:`Put`). ``urgent``: the thread is due by ``due``
        even if it was to come back later (else it keeps its time). ``state``: a run's shown state (run id, JSON)
        to save with it (:meth:`shown_state`)."""
        keys = [self.keys.outbox(thread), self.keys.outbox_due(shard_of(thread))]
        if state is not None:
            keys.append(self.keys.outbox_state(thread))
        if "put_at" in fields:  # it may be sent directly if this gives up: the script marks it if it lands late
            fields = {**fields, "direct_after": self.grace_s}
        renew = "".join(mark for mark, k in zip("hds", keys, strict=False) if self.renewals.due(k))
        args: list[str | int] = [key, json.dumps(dict(fields), ensure_ascii=False), int(time.time() * 1000),
                                 repr(due), self.ttls.thread_s, thread, "LT" if urgent else "NX", renew,
                                 *(state or ())]
        # Repeating it after a lost reply only skips a version number.
        try:
            version, known = await retried("recording a message to send", self.grace_s,
                                           lambda: self._put(keys=keys, args=args))
        except BaseException:
            for mark, k in zip("hds", keys, strict=False):
                if mark in renew:
                    self.renewals.forget(k)
            raise
        return Put(int(version), due if int(known) else None)

    async def save_state(self, thread: str, run_id: str, state: str) -> None:
        """A run's shown state alone (no message changes with it)."""
        keys = [self.keys.outbox_state(thread)]
        args: list[str | int] = [self.ttls.thread_s, run_id, state]
        await retried("saving what a run shows", self.grace_s, lambda: self._hset(keys=keys, args=args))

    async def shown_state(self, thread: str, run_id: str) -> str | None:
        key = self.keys.outbox_state(thread)
        return text(await retried("reading what a run shows", self.grace_s, lambda: self.client.hget(key, run_id)))

    async def records(self, thread: str) -> list[OutboxRecord]:
        async with guard("reading the outbox"):
            raw = await self.client.hgetall(self.keys.outbox(thread))
        return sorted((_record(str(text(k)), v) for k, v in raw.items() if text(k) != SEQ_FIELD), key=lambda r: r.seq)

    async def patch(self, thread: str, key: str, fields: Mapping[str, Any], *, delivered: int | None = None) -> None:
        args: list[str | int] = [key, json.dumps(dict(fields), ensure_ascii=False),
                                 "" if delivered is None else delivered]
        await retried("updating the outbox", self.grace_s, lambda: self._patch(keys=[self.keys.outbox(thread)],
                                                                                 args=args))

    async def settle(self, thread: str, *, retry_at: float, release: str | None = None,
                     delivered: Sequence[Delivered] = (), seen: Mapping[str, int] | None = None) -> Due:
        """Leave the due index if everything is delivered, else come back at ``retry_at`` (see :class:`Due`).
        ``release``: the delivery lease's owner, letting go of it in the same call (one script, not two);
        ``delivered``: what the round sent, saved first (as :meth:`patch` with ``delivered`` would); ``seen``: the
        versions the round read (a message put since, other than progress, makes the thread due now)."""
        keys = [self.keys.outbox(thread), self.keys.outbox_due(shard_of(thread))]
        if release is not None:
            keys.append(self.keys.outbox_lease(thread))
        sent = [[d.key, dict(d.fields), d.version] for d in delivered]
        args: list[str | int] = [thread, repr(retry_at), self.ttls.thread_s, release or "",
                                 json.dumps(sent, ensure_ascii=False),
                                 "" if seen is None else json.dumps(dict(seen)), repr(time.time())]
        async with guard("updating the outbox"):
            return Due(int(await self._settle(keys=keys, args=args)))

    async def due(self, now: float, limit: int = 64) -> list[str]:
        async with guard("reading the outbox"):
            pipe = self.client.pipeline(transaction=False)
            for shard in all_shards():
                pipe.zrangebyscore(self.keys.outbox_due(shard), "-inf", now, start=0, num=limit, withscores=True)
            shards: list[list[tuple[Any, float]]] = await pipe.execute()
        due = sorted((float(score), str(text(m))) for rows in shards for m, score in rows)
        return [thread for _, thread in due[:limit]]

    async def due_among(self, threads: Collection[str], now: float) -> list[str]:
        if not threads:
            return []
        ordered = list(threads)
        async with guard("reading the outbox"):
            pipe = self.client.pipeline(transaction=False)
            for thread in ordered:
                pipe.zscore(self.keys.outbox_due(shard_of(thread)), thread)
            scores: list[float | None] = await pipe.execute()
        return [t for score, t in sorted((float(s), t) for s, t in zip(scores, ordered, strict=True)
                                         if s is not None and float(s) <= now)]

    async def backlog(self) -> int:
        async with guard("reading the outbox"):
            pipe = self.client.pipeline(transaction=False)
            for shard in all_shards():
                pipe.zcard(self.keys.outbox_due(shard))
                pipe.zscore(self.keys.outbox_due(shard), DUE_SENTINEL)
            counts = await pipe.execute()
            return sum(int(n) - (score is not None) for n, score in zip(counts[::2], counts[1::2], strict=True))

    async def lease(self, thread: str, owner: str, ttl_ms: int) -> bool:
        """Re-entrant for its owner: a lease it could not release (Redis was away) is its own again."""
        key = self.keys.outbox_lease(thread)
        async with guard("taking an outbox lease"):
            if await self.client.set(key, owner, nx=True, px=ttl_ms):
                return True
            if text(await self.client.get(key)) != owner:
                return False
            await self.client.pexpire(key, ttl_ms)
            return True

    async def renew(self, thread: str, owner: str, ttl_ms: int) -> bool:
        """Extend the lease only while it is still ``owner``'s (not re-entrant: one that lapsed is lost)."""
        async with guard("renewing an outbox lease"):
            return bool(await self._renew(keys=[self.keys.outbox_lease(thread)], args=[owner, ttl_ms]))

    async def release(self, thread: str, owner: str) -> None:
        async with guard("releasing an outbox lease"):
            await self._release(keys=[self.keys.outbox_lease(thread)], args=[owner])


class MemoryOutbox:
    def __init__(self) -> None:
        self._threads: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        self._due: dict[str, float] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self._states: dict[tuple[str, str], str] = {}
        self._seq = 0

    async def put(self, thread: str, key: str, fields: Mapping[str, Any], *, due: float, urgent: bool = False,
                  state: tuple[str, str] | None = None) -> Put:
        if state is not None:
            await self.save_state(thread, *state)
        self._seq += 1
        rec = self._threads[thread].setdefault(key, {"version": 0, "sent_version": 0, "seq": self._seq})
        rec.update(fields)
        rec["version"] += 1
        known = urgent or thread not in self._due
        self._due[thread] = min(self._due.get(thread, due), due) if urgent else self._due.get(thread, due)
        return Put(int(rec["version"]), due if known else None)

    async def save_state(self, thread: str, run_id: str, state: str) -> None:
        self._states[thread, run_id] = state

    async def shown_state(self, thread: str, run_id: str) -> str | None:
        return self._states.get((thread, run_id))

    async def records(self, thread: str) -> list[OutboxRecord]:
        return sorted((_record(k, json.dumps(v)) for k, v in self._threads.get(thread, {}).items()),
                      key=lambda r: r.seq)

    async def patch(self, thread: str, key: str, fields: Mapping[str, Any], *, delivered: int | None = None) -> None:
        rec = self._threads.get(thread, {}).get(key)
        if rec is None:
            return
        rec.update(fields)
        if delivered is not None:
            rec["sent_version"] = max(rec["sent_version"], delivered)
            if rec["sent_version"] >= rec["version"]:
                rec.pop("text", None)
                rec.pop("blocks", None)

    async def settle(self, thread: str, *, retry_at: float, release: str | None = None,
                     delivered: Sequence[Delivered] = (), seen: Mapping[str, int] | None = None) -> Due:
        for d in delivered:
            await self.patch(thread, d.key, d.fields, delivered=d.version)
        if release is not None:
            await self.release(thread, release)
        dirty = {k: r for k, r in self._threads.get(thread, {}).items() if r["version"] > r["sent_version"]}
        if not dirty:
            self._due.pop(thread, None)
            return Due.NO
        now = time.time()
        if seen is not None and now < retry_at and any(
                seen.get(k, 0) < r["version"] and not k.startswith("progress:") for k, r in dirty.items()):
            self._due[thread] = now
            return Due.NOW
        self._due[thread] = retry_at
        return Due.LATER

    async def due(self, now: float, limit: int = 64) -> list[str]:
        return [t for t, at in sorted(self._due.items(), key=lambda kv: kv[1]) if at <= now][:limit]

    async def due_among(self, threads: Collection[str], now: float) -> list[str]:
        return [t for t, at in sorted(self._due.items(), key=lambda kv: kv[1]) if at <= now and t in threads]

    async def backlog(self) -> int:
        return len(self._due)

    async def lease(self, thread: str, owner: str, ttl_ms: int) -> bool:
        held = self._leases.get(thread)
        if held is not None and held[1] > time.monotonic() and held[0] != owner:
            return False
        self._leases[thread] = (owner, time.monotonic() + ttl_ms / 1000)
        return True

    async def renew(self, thread: str, owner: str, ttl_ms: int) -> bool:
        held = self._leases.get(thread)
        if held is None or held[0] != owner or held[1] <= time.monotonic():
            return False
        self._leases[thread] = (owner, time.monotonic() + ttl_ms / 1000)
        return True

    async def release(self, thread: str, owner: str) -> None:
        if self._leases.get(thread, ("", 0.0))[0] == owner:
            del self._leases[thread]
