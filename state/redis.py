"""The Redis store (redis.asyncio). One MULTI per write; every key gets a TTL."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.messages import Message, dump_message, load_message
from state.errors import CorruptRecord, StoreError, StoreUnavailable
from state.keys import Keys, Ttls
from state.records import SCHEMA_VERSION, RunRecord, TraceEntry
from state.store import Claim, Stats, Write, hour_now, merge_stats

# Claim-once: SET NX wins, otherwise report the holder. One round trip, atomic.
_CLAIM = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return {1, ARGV[1]} end
return {0, redis.call('get', KEYS[1])}
"""
# The commit (see RedisStore.commit for the argument layout). Every key written gets its TTL.
_COMMIT = """
local ttl = tonumber(ARGV[1])
local n_msg, n_cnt, n_audit, n_tok = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local i = 15
local length = -1
if n_msg > 0 then
  length = redis.call('RPUSH', KEYS[1], unpack(ARGV, i, i + n_msg - 1))
  redis.call('EXPIRE', KEYS[1], ttl)
  i = i + n_msg
end
redis.call('SET', KEYS[2], ARGV[2], 'EX', ttl)
if ARGV[4] == '1' then
  redis.call('SET', KEYS[3], ARGV[3], 'EX', ttl)
  if ARGV[5] ~= '' then redis.call('ZADD', KEYS[4], ARGV[5], ARGV[3]) else redis.call('ZREM', KEYS[4], ARGV[3]) end
  if ARGV[6] ~= '' then redis.call('ZADD', KEYS[5], ARGV[6], ARGV[3]) else redis.call('ZREM', KEYS[5], ARGV[3]) end
  redis.call('EXPIRE', KEYS[4], ttl)
  redis.call('EXPIRE', KEYS[5], ttl)
end
if n_cnt > 0 then
  for j = 0, n_cnt - 1 do
    redis.call('HINCRBY', KEYS[6], ARGV[i + 2 * j], ARGV[i + 2 * j + 1])
  end
  redis.call('EXPIRE', KEYS[6], tonumber(ARGV[7]))
  i = i + 2 * n_cnt
end
if n_audit > 0 then
  for j = 0, n_audit - 1 do
    local entry = cjson.decode(ARGV[i + j])
    local fields = {}
    for name, value in pairs(entry) do
      fields[#fields + 1] = name
      fields[#fields + 1] = tostring(value)
    end
    redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[10], '*', unpack(fields))
  end
  redis.call('EXPIRE', KEYS[7], tonumber(ARGV[9]))
  i = i + n_audit
end
for j = 0, n_tok - 1 do
  redis.call('SET', KEYS[8 + j], ARGV[i + j], 'EX', tonumber(ARGV[8]))
end
return length
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def connect(url: str, *, timeout_s: float = 5.0, max_connections: int = 64) -> aioredis.Redis:
    """A client whose pool waits for a free connection (up to ``timeout_s``) rather than failing,
    so hundreds of concurrent runs share a bounded number of connections."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url, decode_responses=True, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
        max_connections=max_connections, timeout=timeout_s,
    )
    return aioredis.Redis(connection_pool=pool)


@asynccontextmanager
async def _guard(what: str) -> AsyncIterator[None]:
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise StoreUnavailable(f"Redis unreachable while {what}: {exc}") from exc
    except RedisError as exc:
        raise StoreError(f"Redis error while {what}: {exc}") from exc


class RedisStore:
    durable = True

    def __init__(self, client: aioredis.Redis, *, keys: Keys | None = None, ttls: Ttls | None = None) -> None:
        self.client = client
        self.keys = keys or Keys()
        self.ttls = ttls or Ttls()
        self._transcripts: OrderedDict[str, list[Message]] = OrderedDict()
        self.transcript_cache_size = 512
        self._commit = client.register_script(_COMMIT)
        self._claim = client.register_script(_CLAIM)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    async def ping(self) -> None:
        async with _guard("pinging"):
            await self.client.ping()

    async def close(self) -> None:
        await self.client.aclose()

    async def commit(self, write: Write) -> None:
        """One atomic write as one script call: a single round trip and a single reply to parse."""
        run, k = write.run, self.keys
        by_token = {p.token: p for p in run.pending}
        paused = run.status == "paused" and bool(run.pending)
        keys = [k.transcript(run.thread_id), k.run(run.run_id), k.thread_run(run.thread_id), k.paused_index(),
                k.active_index(), k.stats(hour_now()), k.audit(), *(k.token(t) for t in write.new_tokens)]
        counters = [str(x) for name, value in write.counters.items() for x in (name, value)]
        args: list[Any] = [
            self.ttls.thread_s, _dump_run(run), run.run_id, int(write.status_changed),
            min(p.expires_at for p in run.pending) if paused else "",
            run.updated_at if run.status == "running" else "",
            self.ttls.stats_s, self.ttls.interrupt_s + self.ttls.claim_margin_s, self.ttls.audit_s,
            self.ttls.audit_max_entries,
            len(write.messages), len(write.counters), len(write.audit), len(write.new_tokens),
            *(dump_message(m) for m in write.messages), *counters,
            *(json.dumps(dict(e), ensure_ascii=False) for e in write.audit),
            *(f"{run.run_id}\n{by_token[t].call.id}" for t in write.new_tokens),
        ]
        async with _guard(f"saving run {run.run_id}"):
            length = await self._commit(keys=keys, args=args)
        if write.messages:
            self._cache_append(run.thread_id, write.messages, int(length))

    async def load_run(self, run_id: str) -> RunRecord | None:
        key = self.keys.run(run_id)
        async with _guard(f"loading run {run_id}"):
            raw = _text(await self.client.get(key))
        if raw is None:
            return None
        return _parse_run(key, raw)

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
        cached = self._transcripts.get(thread_id)
        start = len(cached) if cached is not None else 0
        async with _guard(f"loading thread {thread_id}"):
            pipe = self.client.pipeline(transaction=True)
            pipe.llen(key)
            pipe.lrange(key, start, -1)
            length, rows = await pipe.execute()
            if cached is not None and int(length) < start:
                cached, start, rows = None, 0, await self.client.lrange(key, 0, -1)
        try:
            fresh = [load_message(r) for r in rows]
        except ValidationError as exc:
            raise CorruptRecord(key, _first_problem(exc)) from exc
        messages = (cached or []) + fresh
        self._transcripts[thread_id] = messages
        self._transcripts.move_to_end(thread_id)
        while len(self._transcripts) > self.transcript_cache_size:
            self._transcripts.popitem(last=False)
        return list(messages)

    async def load_trace(self, run_id: str) -> list[TraceEntry]:
        run = await self.load_run(run_id)
        return list(run.trace) if run else []

    async def thread_run(self, thread_id: str) -> str | None:
        async with _guard("reading the thread's run"):
            value = _text(await self.client.get(self.keys.thread_run(thread_id)))
        return value

    async def resolve_token(self, token: str) -> tuple[str, str] | None:
        async with _guard("resolving a token"):
            raw = _text(await self.client.get(self.keys.token(token)))
        if raw is None or "\n" not in raw:
            return None
        run_id, call_id = raw.split("\n", 1)
        return run_id, call_id

    async def claim(self, token: str, holder: str) -> Claim:
        ttl = self.ttls.interrupt_s + self.ttls.claim_margin_s
        async with _guard("claiming an interrupt"):
            won, who = await self._claim(keys=[self.keys.claim(token)], args=[holder, ttl])
        return Claim(bool(won), str(who or ""))

    async def release_claim(self, token: str) -> None:
        async with _guard("releasing a claim"):
            await self.client.delete(self.keys.claim(token))

    async def journal_start(self, run_id: str, call_id: str) -> bool:
        key = self.keys.journal(run_id)
        async with _guard("journaling a change"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hsetnx(key, call_id, json.dumps({"state": "started", "at": time.time()}))
            pipe.expire(key, self.ttls.thread_s)
            first, _ = await pipe.execute()
        return bool(first)

    async def journal_finish(self, run_id: str, call_id: str, status: str) -> None:
        key = self.keys.journal(run_id)
        async with _guard("journaling a change"):
            await self.client.hset(key, call_id, json.dumps({"state": "finished", "status": status,
                                                             "at": time.time()}))

    async def journal_abandon(self, run_id: str, call_id: str) -> None:
        async with _guard("journaling a change"):
            await self.client.hdel(self.keys.journal(run_id), call_id)

    async def journal(self, run_id: str) -> dict[str, str]:
        async with _guard("reading the journal"):
            raw = await self.client.hgetall(self.keys.journal(run_id))
        return {str(_text(cid)): json.loads(v).get("state", "unknown") for cid, v in raw.items()}

    async def acquire_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool:
        async with _guard("taking the thread lease"):
            return bool(await self.client.set(self.keys.lease(thread_id), owner, nx=True, px=ttl_ms))

    async def renew_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool:
        async with _guard("renewing the thread lease"):
            return bool(await self._renew(keys=[self.keys.lease(thread_id)], args=[owner, ttl_ms]))

    async def release_lease(self, thread_id: str, owner: str) -> None:
        async with _guard("releasing the thread lease"):
            await self._release(keys=[self.keys.lease(thread_id)], args=[owner])

    async def lease_holder(self, thread_id: str) -> str | None:
        async with _guard("reading the thread lease"):
            value = _text(await self.client.get(self.keys.lease(thread_id)))
        return value

    async def request_cancel(self, run_id: str) -> None:
        async with _guard("requesting a cancel"):
            await self.client.set(self.keys.cancel(run_id), "1", ex=self.ttls.cancel_s)

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        if not run_ids:
            return set()
        async with _guard("checking for cancels"):
            flags = await self.client.mget([self.keys.cancel(r) for r in run_ids])
        return {run_id for run_id, flag in zip(run_ids, flags, strict=True) if flag}

    async def dedupe(self, name: str, ttl_s: int | None = None) -> bool:
        async with _guard("deduplicating"):
            return bool(await self.client.set(self.keys.dedupe(name), "1", nx=True, ex=ttl_s or self.ttls.dedupe_s))

    async def put_meta(self, kind: str, name: str, fields: Mapping[str, str]) -> None:
        key = self.keys.meta(kind, name)
        async with _guard("saving metadata"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(key, mapping=cast(Any, dict(fields)))
            pipe.expire(key, self.ttls.thread_s)
            await pipe.execute()

    async def get_meta(self, kind: str, name: str) -> dict[str, str]:
        async with _guard("reading metadata"):
            raw = await self.client.hgetall(self.keys.meta(kind, name))
        return {str(_text(k)): str(_text(v)) for k, v in raw.items()}

    async def runs_due(self, index: str, before: float) -> list[str]:
        key = self.keys.paused_index() if index == "paused" else self.keys.active_index()
        async with _guard("reading the run index"):
            members: list[Any] = await self.client.zrangebyscore(key, "-inf", before)
        return [str(_text(m)) for m in members]

    async def read_audit(self, count: int = 100) -> list[dict[str, str]]:
        async with _guard("reading the audit stream"):
            rows: list[Any] = await self.client.xrevrange(self.keys.audit(), count=count) or []
        return [{str(_text(k)): str(_text(v)) for k, v in (fields or {}).items()} for _, fields in rows]

    async def stats(self, window_s: int) -> Stats:
        now = hour_now()
        hours = range(now - max(window_s // 3600, 1) + 1, now + 1)
        async with _guard("reading stats"):
            pipe = self.client.pipeline(transaction=False)
            for hour in hours:
                pipe.hgetall(self.keys.stats(hour))
            buckets: list[dict[str, Any]] = await pipe.execute()
        return merge_stats(buckets, window_s)


def _dump_run(run: RunRecord) -> str:
    """Compact: defaults are left out (they are restored on load), the schema version never is."""
    body = run.model_dump(mode="json", exclude_defaults=True, exclude={"trace"})
    body["schema_version"] = run.schema_version
    if run.trace:  # entries keep their discriminator ("kind"), which is a default
        body["trace"] = [entry.model_dump(mode="json", exclude_none=True) for entry in run.trace]
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _parse_run(key: str, raw: str) -> RunRecord:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise CorruptRecord(key, "not JSON") from exc
    version = body.get("schema_version") if isinstance(body, dict) else None
    if version != SCHEMA_VERSION:
        raise CorruptRecord(key, f"schema version {version!r}, this build reads {SCHEMA_VERSION}")
    try:
        return RunRecord.model_validate(body)
    except ValidationError as exc:
        raise CorruptRecord(key, _first_problem(exc)) from exc


def _first_problem(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where + ': ' if where else ''}{err['msg']}"
