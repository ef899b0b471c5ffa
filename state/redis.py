"""The Redis store (redis.asyncio): runs, transcripts, tickets, indexes, stats and audit. Each engine write is
one Lua script call (one round trip, atomic); every key gets a TTL."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from redis.asyncio.cluster import RedisCluster

from core.messages import Message, dump_message, load_message
from state.client import Client
from state.counts import RedisCounter
from state.feedback_store import RedisFeedbacks
from state.guard import guard, retried, text
from state.journal import RedisJournal
from state.keys import Keys, Ttls, all_shards, shard_of
from state.locks import RedisLocks
from state.meta_store import RedisMeta
from state.migrate import migrate
from state.outbox_store import RedisOutbox
from state.queue import RedisQueue
from state.records import COMMIT_ID_BYTES, RunRecord, Ticket, dump_run, first_problem, parse_run
from state.store import UNSHOWN, UNSHOWN_KEEP_S, Opened, Stats, Write, hour_now
from state.store_errors import CorruptRecord, StoreError
from state.timer_store import RedisTimers

# The commit. ARGV[1] is a named header (JSON), ARGV[2] the run record (with its trace) behind this commit's id, then
# the new transcript messages, then one ticket per new token. KEYS: transcript, run, thread's run, paused index, active
# index, stats bucket, audit stream, cancel flag, thread lease, unshown index, then one key per new token. A run that
# stops running (paused, finished, stalled) joins the unshown index in the same write: a front end that dies before
# showing it leaves it there for another to show. A commit whose id the run record already carries (a retry after
# its reply was lost: only a retry looks) does nothing. A writer that no longer holds the thread's lease (another
# worker took it after it lapsed) is refused. A run that pauses drops any cancel request: nobody is left to act on
# it, and it must not stop the run's next turn. The turn's last write lets go of the thread's lease, if it still
# holds it. Every command here is Redis work on every step (issue 39): a write touches only what changes.
_COMMIT = """
local h = cjson.decode(ARGV[1])
if h.check and redis.call('GETRANGE', KEYS[2], 0, #h.commit_id - 1) == h.commit_id then  -- a retry, applied already
  return redis.call('LLEN', KEYS[1])
end
local holder = false
if h.owner or h.release then holder = redis.call('GET', KEYS[9]) end  -- read once: the check and the release
if h.owner and holder and holder ~= h.owner then return redis.error_reply('OPSPILOT_LEASE_LOST ' .. holder) end
local i = 3
local length = -1
if h.messages > 0 then
  length = redis.call('RPUSH', KEYS[1], unpack(ARGV, i, i + h.messages - 1))
  if length == h.messages then redis.call('EXPIRE', KEYS[1], h.ttl) end  -- new; a turn's opening renews it
  i = i + h.messages
end
redis.call('SET', KEYS[2], ARGV[2], 'EX', h.ttl)
if h.status_changed then
  -- the thread's run is named when the run is made (it lives minutes; the name a week); an index's TTL is renewed
  -- when a run joins it (leaving needs none), and a run leaves only the index it was in (all, if not known)
  if h.was == '' or not h.was then redis.call('SET', KEYS[3], h.run_id, 'EX', h.ttl) end
  if h.paused_score then
    redis.call('ZADD', KEYS[4], h.paused_score, h.run_id)
    redis.call('EXPIRE', KEYS[4], h.ttl)
  elseif not h.was or h.was == 'paused' then redis.call('ZREM', KEYS[4], h.run_id) end
  if h.active_score then
    redis.call('ZADD', KEYS[5], h.active_score, h.run_id)
    redis.call('EXPIRE', KEYS[5], h.ttl)
  elseif not h.was or h.was == 'running' then redis.call('ZREM', KEYS[5], h.run_id) end
end
if next(h.counters) ~= nil then
  local fresh = false  -- the hour's first count of something (the hash itself may be new): its TTL is set
  for name, n in pairs(h.counters) do
    if redis.call('HINCRBY', KEYS[6], name, n) == n then fresh = true end
  end
  if fresh then redis.call('EXPIRE', KEYS[6], h.stats_ttl) end
end
for _, entry in ipairs(h.audit) do
  local fields = {}
  for name, value in pairs(entry) do
    fields[#fields + 1] = name
    fields[#fields + 1] = tostring(value)
  end
  redis.call('XADD', KEYS[7], 'MAXLEN', '~', h.audit_max, '*', unpack(fields))
  redis.call('EXPIRE', KEYS[7], h.audit_ttl)
end
-- a cancel request must not stop a paused run's next turn (a finished run has none)
if h.status_changed and not h.active_score and not h.finished then redis.call('DEL', KEYS[8]) end
if h.unshown_score then  -- trimmed by whoever reads it (runs_due)
  redis.call('ZADD', KEYS[10], h.unshown_score, h.run_id)
  redis.call('EXPIRE', KEYS[10], h.ttl)
end
for j = 0, h.tickets - 1 do
  redis.call('SET', KEYS[11 + j], ARGV[i + j], 'EX', h.ticket_ttl)
end
if h.release and holder == h.release then redis.call('DEL', KEYS[9]) end
return length
"""

# A turn opens: take the thread's lease (a retry after a lost reply finds its own owner there), then read the
# run (ARGV[5], or the thread's latest; the trace list of one written before its trace moved into its record) and
# the transcript from ARGV[3] on (all of it if it is shorter now: expired and recreated). KEYS: lease, thread's run,
# transcript. The run's keys are named from ARGV[4] (the thread's run key prefix) when its id carries the thread's
# shard (ARGV[6]): same hash slot.
# Returns {0, holder} when busy, else {1, run id, run record, trace, transcript length, first index, rows}.
_OPEN_TURN = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local holder = redis.call('GET', KEYS[1])
  if holder ~= ARGV[1] then return {0, holder or ''} end
end
local run_id = ARGV[5]
if run_id == '' then run_id = redis.call('GET', KEYS[2]) or '' end
local raw, trace = '', {}
if run_id ~= '' and string.sub(run_id, 1, #ARGV[6]) == ARGV[6] then
  raw = redis.call('GET', ARGV[4] .. run_id) or ''
  local inline = string.find(raw, '"rows":', 1, true) or string.find(raw, '"status":"finished"', 1, true)
  if raw ~= '' and not inline then trace = redis.call('LRANGE', ARGV[4] .. run_id .. ':trace', 0, -1) end
end
local length = redis.call('LLEN', KEYS[3])
if length > 0 then redis.call('EXPIRE', KEYS[3], ARGV[7]) end  -- the thread's TTL counts from its last turn
local start = tonumber(ARGV[3])
if length < start then start = 0 end
return {1, run_id, raw, trace, length, start, redis.call('LRANGE', KEYS[3], start, -1)}
"""


class RedisStore:
    durable = True

    def __init__(self, client: Client, *, keys: Keys | None = None, ttls: Ttls | None = None,
                 outage_grace_s: float = 30.0) -> None:
        self.client = client
        self.outage_grace_s = outage_grace_s
        self.keys = keys or Keys()
        self.ttls = ttls or Ttls()
        self.journal = RedisJournal(client, self.keys, self.ttls, outage_grace_s)
        self.locks = RedisLocks(client, self.keys, self.ttls, outage_grace_s)
        self.meta = RedisMeta(client, self.keys, self.ttls, outage_grace_s)
        self.outbox = RedisOutbox(client, self.keys, self.ttls, outage_grace_s)
        self.queue = RedisQueue(client, self.keys, self.ttls, outage_grace_s)
        self.feedback = RedisFeedbacks(client, self.keys, self.ttls, outage_grace_s)
        self.timers = RedisTimers(client, self.keys, self.ttls, outage_grace_s)
        self.counter = RedisCounter(client, self.keys, self.ttls)
        self._transcripts: OrderedDict[str, list[Message]] = OrderedDict()
        self.transcript_cache_size = 512
        self._commit = client.register_script(_COMMIT)
        self._open_turn = client.register_script(_OPEN_TURN)

    @property
    def cluster(self) -> bool:
        return isinstance(self.client, RedisCluster)

    async def ping(self) -> None:
        """Check Redis answers. Call it before anything else: a Cluster client learns the cluster's layout here,
        once (redis-py 8.1 breaks when concurrent first commands each start that discovery)."""
        async with guard("pinging"):
            if isinstance(self.client, RedisCluster):
                await self.client.initialize()
            await self.client.ping()

    async def migrate(self) -> int:
        """Move a single Redis's keys from the layout before shards (a Cluster never had it)."""
        return 0 if self.cluster else await migrate(self.client, self.keys, self.ttls)

    async def close(self) -> None:
        with contextlib.suppress(StoreError):
            await self.counter.flush()
        await self.client.aclose()

    async def commit(self, write: Write) -> None:
        """One atomic write as one script call: a single round trip and a single reply to parse."""
        run, k, ttls = write.run, self.keys, self.ttls
        tickets = write.tickets()
        shard = shard_of(run.thread_id)  # one hash slot for every key (see state.keys)
        counted = self.counter.counts.add(shard, write.counters)  # the shard's counts of the last seconds, or none
        commit_id = os.urandom(COMMIT_ID_BYTES).hex()
        header = {
            "commit_id": commit_id, "finished": run.status == "finished", "ttl": ttls.thread_s, "run_id": run.run_id,
            "status_changed": write.status_changed,
            # Scores travel as strings so that no float is rounded on its way through Lua.
            "paused_score": repr(min(p.expires_at for p in run.pending)) if run.status == "paused" and run.pending
            else False,
            "active_score": repr(run.updated_at) if run.status == "running" else False,
            "unshown_score": repr(run.updated_at) if write.status_changed and run.status in UNSHOWN else False,
            "was": write.was if write.was is not None else False,
            "counters": counted, "stats_ttl": ttls.stats_s,
            "audit": [dict(e) for e in write.audit], "audit_ttl": ttls.audit_s, "audit_max": ttls.audit_max_entries,
            "messages": len(write.messages), "tickets": len(tickets),
            "ticket_ttl": ttls.interrupt_s + ttls.claim_margin_s, "release": write.release_lease or False,
            "owner": write.lease_owner or False,
        }
        keys = [k.transcript(run.thread_id), k.run(run.run_id), k.thread_run(run.thread_id), k.index(shard, "paused"),
                k.index(shard, "active"), k.stats(shard, hour_now()), k.audit(shard), k.cancel(run.run_id),
                k.lease(run.thread_id), k.index(shard, "unshown"), *(k.token(t.pending.token) for t in tickets)]
        args: list[Any] = [commit_id + dump_run(run), *(dump_message(m) for m in write.messages),
                           *(t.model_dump_json() for t in tickets)]
        attempts = itertools.count()

        def attempt() -> Any:  # only a retry (the reply to an earlier attempt was lost) checks it was applied
            check = {"check": next(attempts) > 0}
            return self._commit(keys=keys, args=[json.dumps(header | check, ensure_ascii=False,
                                                            separators=(",", ":")), *args])

        try:
            length = await retried(f"saving run {run.run_id}", self.outage_grace_s, attempt)
        except BaseException:
            self.counter.counts.restore(shard, counted)  # not saved: they go with a later write
            raise
        await self.counter.flush(due_only=True)
        if write.messages:
            self._cache_append(run.thread_id, write.messages, int(length))

    async def open_turn(self, thread_id: str, owner: str, ttl_ms: int, *, run_id: str | None = None) -> Opened | None:
        k = self.keys
        cached = self._cached(thread_id)
        keys = [k.lease(thread_id), k.thread_run(thread_id), k.transcript(thread_id)]
        own_shard = f"{shard_of(thread_id)}."
        args: list[str | int] = [owner, ttl_ms, len(cached) if cached is not None else 0, k.runs_of(thread_id),
                                 run_id or "", own_shard, self.ttls.thread_s]
        reply: list[Any] = await retried("taking the thread lease", self.outage_grace_s,
                                         lambda: self._open_turn(keys=keys, args=args))
        if not int(reply[0]):
            return None
        found, raw, trace, length, start, rows = str(reply[1]), str(reply[2]), reply[3], *reply[4:7]
        record = parse_run(k.run(found), raw, trace) if raw else None
        if record is None and found and not found.startswith(own_shard):
            record = await self.load_run(found)  # an id minted before shards: its keys live elsewhere
        return Opened(record, self._transcript_rows(thread_id, cached, int(start), int(length), rows))

    async def load_run(self, run_id: str) -> RunRecord | None:
        key = self.keys.run(run_id)

        async def fetch() -> list[Any]:
            pipe = self.client.pipeline(transaction=True)  # the list: a run written before its trace was inline
            pipe.get(key)
            pipe.lrange(self.keys.run_trace(run_id), 0, -1)
            result: list[Any] = await pipe.execute()
            return result

        raw, trace = await retried(f"loading run {run_id}", self.outage_grace_s, fetch)
        if raw is None:
            return None
        return parse_run(key, str(text(raw)), trace)

    def _cache_append(self, thread_id: str, messages: Sequence[Message], new_length: int) -> None:
        cached = self._transcripts.get(thread_id)
        if cached is not None and len(cached) + len(messages) == new_length:
            cached.extend(messages)
        else:
            self._transcripts.pop(thread_id, None)  # someone else wrote in between: fetch next time

    async def load_transcript(self, thread_id: str) -> list[Message]:
        """The thread's messages. Transcripts are append-only, so a cached copy is a valid prefix and only
        the entries after it are fetched (an expired and recreated thread is shorter: refetched whole)."""
        key = self.keys.transcript(thread_id)
        cached = self._cached(thread_id)
        start = len(cached) if cached is not None else 0

        async def fetch() -> list[Any]:
            pipe = self.client.pipeline(transaction=True)
            pipe.llen(key)
            pipe.lrange(key, start, -1)
            result: list[Any] = await pipe.execute()
            return result

        length, rows = await retried(f"loading thread {thread_id}", self.outage_grace_s, fetch)
        if cached is not None and int(length) < start:
            cached, start = None, 0
            rows = await retried(f"loading thread {thread_id}", self.outage_grace_s,
                                 lambda: self.client.lrange(key, 0, -1))
            length = len(rows)
        return self._transcript_rows(thread_id, cached, start, int(length), rows)

    def _cached(self, thread_id: str) -> list[Message] | None:
        """A copy of the cached prefix: a commit may extend the cache while a read is under way."""
        cached = self._transcripts.get(thread_id)
        return list(cached) if cached is not None else None

    def _transcript_rows(self, thread_id: str, cached: list[Message] | None, start: int, length: int,
                         rows: Sequence[Any]) -> list[Message]:
        """The transcript: the cached prefix (when the read started at its end) plus ``rows``, read atomically
        from index ``start`` of a list ``length`` long."""
        key = self.keys.transcript(thread_id)
        try:
            fresh = [load_message(r) for r in rows]
        except ValidationError as exc:
            raise CorruptRecord(key, first_problem(exc)) from exc
        messages = (cached if cached is not None and start else []) + fresh
        if len(messages) != length:  # each read is atomic, so this is a bug, never a race: say so
            raise CorruptRecord(key, f"read {len(messages)} messages of {length}")
        self._transcripts[thread_id] = messages
        self._transcripts.move_to_end(thread_id)
        while len(self._transcripts) > self.transcript_cache_size:
            self._transcripts.popitem(last=False)
        return list(messages)

    async def thread_run(self, thread_id: str) -> str | None:
        key = self.keys.thread_run(thread_id)
        return text(await retried("reading the thread's run", self.outage_grace_s, lambda: self.client.get(key)))

    async def load_ticket(self, token: str) -> Ticket | None:
        key = self.keys.token(token)
        raw = text(await retried("reading a question's ticket", self.outage_grace_s, lambda: self.client.get(key)))
        if raw is None:
            return None
        if not raw.startswith("{"):  # written before tickets existed: "<run id>\n<call id>"
            return await self._legacy_ticket(token, raw)
        try:
            return Ticket.model_validate_json(raw)
        except ValidationError as exc:
            raise CorruptRecord(key, first_problem(exc)) from exc

    async def _legacy_ticket(self, token: str, raw: str) -> Ticket | None:
        run = await self.load_run(raw.split("\n", 1)[0])
        pending = next((p for p in run.pending if p.token == token), None) if run else None
        if run is None or pending is None:
            return None
        return Ticket(run_id=run.run_id, thread_id=run.thread_id, requester=run.user_id, pending=pending)

    async def runs_due(self, index: str, before: float) -> list[str]:
        async with guard("reading the run index"):
            pipe = self.client.pipeline(transaction=False)
            for shard in all_shards():
                if index == "unshown":  # trimmed here, not in every commit: runs nobody showed for an hour go
                    pipe.zremrangebyscore(self.keys.index(shard, index), "-inf", time.time() - UNSHOWN_KEEP_S)
                pipe.zrangebyscore(self.keys.index(shard, index), "-inf", before, withscores=True)
            replies: list[Any] = await pipe.execute()
        shards: list[list[tuple[Any, float]]] = replies[1::2] if index == "unshown" else replies
        found = sorted(((float(score), str(text(m))) for rows in shards for m, score in rows))
        return [run_id for _, run_id in found]

    async def shown(self, run_id: str, thread_id: str) -> None:
        """A front end showed the run's latest state: it leaves the unshown index."""
        key = self.keys.index(shard_of(thread_id), "unshown")
        await retried("marking a run shown", self.outage_grace_s, lambda: self.client.zrem(key, run_id))

    async def read_audit(self, count: int = 100, *, run_id: str | None = None) -> list[dict[str, str]]:
        """The newest ``count`` audit entries, newest first; with ``run_id``, that run's (its shard is searched)."""
        if run_id is not None:
            run = await self.load_run(run_id)
            streams = [self.keys.audit(shard_of(run.thread_id))] if run else []
            depth = max(count, 2000)
        else:
            streams = [self.keys.audit(shard) for shard in all_shards()]
            depth = count
        streams.append(self.keys.legacy("audit"))  # entries written before shards, until they expire
        async with guard("reading the audit stream"):
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.xrevrange(stream, count=depth)
            parts: list[list[Any]] = await pipe.execute()
        rows = sorted((row for part in parts for row in part or []), key=lambda row: _entry_order(row[0]),
                      reverse=True)
        entries = [{str(text(k)): str(text(v)) for k, v in (fields or {}).items()} for _, fields in rows]
        if run_id is not None:
            entries = [e for e in entries if e.get("run_id") == run_id]
        return entries[:count]

    async def tally(self, thread_id: str, name: str) -> None:
        await self.counter.tally(thread_id, name)

    async def stats(self, window_s: int) -> Stats:
        return await self.counter.stats(window_s)


def _entry_order(entry_id: Any) -> tuple[int, int]:
    ms, _, seq = str(text(entry_id)).partition("-")
    return int(ms), int(seq or 0)
