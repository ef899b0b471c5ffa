"""The Redis store (redis.asyncio): runs, transcripts, tickets, indexes, stats and audit. Each engine write is
one Lua script call (one round trip, atomic); every key gets a TTL."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from redis.asyncio.cluster import RedisCluster

from core.messages import Message, dump_message, load_message, took
from state.client import Client
from state.counts import RedisCounter
from state.feedback_store import RedisFeedbacks
from state.guard import guard, retried, text
from state.journal import RedisJournal
from state.keys import Keys, Renewals, Ttls, all_shards, shard_of
from state.locks import RedisLocks
from state.meta_store import RedisMeta
from state.migrate import merge_run_indexes, migrate
from state.outbox_store import RedisOutbox
from state.queue import RedisQueue
from state.records import COMMIT_ID_BYTES, RunRecord, Ticket, dump_run, first_problem, parse_run
from state.scripts import COMMIT, OPEN_TURN, SENTINEL, SHOWN, UNSHOWN_BAND
from state.store import UNSHOWN_KEEP_S, Opened, Start, Stats, Write, hour_now
from state.store_errors import CorruptRecord, StoreError
from state.timer_store import RedisTimers

_PLAIN_ID = re.compile(r"[A-Za-z0-9._:-]+")

AUDIT_SKEW_S = 300.0
"""How far a run's audit entries may lie outside its record's times (Redis's clock stamps their ids, ours the run)."""
AUDIT_RUN_MAX = 20_000
"""The most entries read from a shard's stream for one run's time window."""


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
        self._finished: dict[str, tuple[str, int]] = {}
        """Per thread in the cache: the run this process saw finish last, and the transcript's length then."""
        self.transcript_cache_size = 512
        self.renewals = Renewals()
        self._commit = client.register_script(COMMIT)
        self._open_turn = client.register_script(OPEN_TURN)
        self._shown = client.register_script(SHOWN)

    @property
    def cluster(self) -> bool:
        return isinstance(self.client, RedisCluster)

    async def ping(self, *, write: bool = False) -> None:
        """Check Redis answers (``write``: and takes a write, which lapses in 5 s — a replica, a full Redis or
        one whose snapshots fail answers PING all the same). Call it before anything else: a Cluster client learns
        the cluster's layout here, once (redis-py 8.1 breaks when concurrent first commands each start that
        discovery)."""
        async with guard("pinging"):
            if isinstance(self.client, RedisCluster):
                await self.client.initialize()
            await self.client.ping()
            if write:
                await self.client.set(self.keys.write_probe("ready"), "1", px=5000)

    async def migrate(self) -> int:
        """Move a single Redis's keys from the layout before shards (a Cluster never had it)."""
        moved = 0 if self.cluster else await migrate(self.client, self.keys, self.ttls)
        return moved + await merge_run_indexes(self.client, self.keys, self.ttls)

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
            "commit_id": commit_id, "status": run.status, "ttl": ttls.thread_s, "run_id": run.run_id,
            "status_changed": write.status_changed,
            # Scores travel as strings so that no float is rounded on its way through Lua.
            "paused_score": repr(min(p.expires_at for p in run.pending)) if run.status == "paused" and run.pending
            else False,
            "index_score": _index_score(run),
            "renew_index": write.status_changed and self.renewals.due(k.index(shard, "runs")),
            "was": write.was if write.was is not None else False,
            "counters": counted, "stats_ttl": ttls.stats_s,
            "audit": [dict(e) for e in write.audit], "audit_ttl": ttls.audit_s, "audit_max": ttls.audit_max_entries,
            "messages": len(write.messages), "tickets": len(tickets),
            "ticket_ttl": ttls.interrupt_s + ttls.claim_margin_s, "release": write.release_lease or False,
            "owner": write.lease_owner or False,
        }
        keys = [k.transcript(run.thread_id), k.run(run.run_id), k.thread_run(run.thread_id), k.index(shard, "paused"),
                k.index(shard, "runs"), k.stats(shard, hour_now()), k.audit(shard), k.cancel(run.run_id),
                k.lease(run.thread_id), *(k.token(t.pending.token) for t in tickets)]
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
            if run.status == "finished" and run.thread_id in self._transcripts:  # the cache was in step with it
                self._finished[run.thread_id] = (run.run_id, int(length))

    async def open_turn(self, thread_id: str, owner: str, ttl_ms: int, *, run_id: str | None = None,
                        start: Start | None = None) -> Opened | None:
        k, ttls = self.keys, self.ttls
        cached = self._cached(thread_id)
        shard = shard_of(thread_id)
        keys = [k.lease(thread_id), k.thread_run(thread_id), k.transcript(thread_id)]
        own_shard = f"{shard}."
        renew = [keys[2]] if self.renewals.due(keys[2]) else []  # the TTLs this call renews
        args: list[str | int] = [owner, ttl_ms, len(cached) if cached is not None else 0, k.runs_of(thread_id),
                                 run_id or "", own_shard, ttls.thread_s, "1" if renew else ""]
        if start is not None and not run_id and not _taken(cached, start.question.request_id):
            record = start.run
            counted = self.counter.counts.add(shard, start.counters)
            needle = f'"request_id":"{start.question.request_id}"' if start.question.request_id else False
            renew_index = self.renewals.due(k.index(shard, "runs"))
            commit_id = os.urandom(COMMIT_ID_BYTES).hex()
            finished = self._finished.get(thread_id)
            header = {"run_id": record.run_id, "index_score": _index_score(record), "renew_index": renew_index,
                      "needle": needle, "counters": counted, "stats_ttl": ttls.stats_s, "commit_id": commit_id,
                      "finished": finished[0] if finished and cached and finished[1] == len(cached) else False}
            keys += [k.index(shard, "runs"), k.stats(shard, hour_now())]
            args += [json.dumps(header, separators=(",", ":")), commit_id + dump_run(record),
                     dump_message(start.question)]
        else:
            start, counted, renew_index = None, {}, False
        opened = applied = False
        try:
            reply: list[Any] = await retried("taking the thread lease", self.outage_grace_s,
                                             lambda: self._open_turn(keys=keys, args=args))
            opened = bool(int(reply[0]))
            applied = opened and bool(int(reply[7]))
        finally:  # what this call did not do, a later one does: a TTL's renewal, counts of earlier writes
            for key in renew if not opened else []:
                self.renewals.forget(key)
            if start is not None and not applied:
                if renew_index:
                    self.renewals.forget(k.index(shard, "runs"))
                self.counter.counts.restore(shard, dict(Counter(counted) - Counter(start.counters)))
        if not int(reply[0]):
            return None
        found, raw, trace, length, start_at, rows, started = str(reply[1]), str(reply[2]), reply[3], *reply[4:8]
        transcript = self._transcript_rows(thread_id, cached, int(start_at), int(length), rows)
        if start is not None and int(started):
            if int(started) == 1:
                transcript.append(start.question)
                self._cache_append(thread_id, [start.question], int(length) + 1)
            return Opened(start.run, transcript, started=True)
        latest = parse_run(k.run(found), raw, trace) if raw else None
        if latest is None and found and not found.startswith(own_shard):
            latest = await self.load_run(found)  # an id minted before shards: its keys live elsewhere
        return Opened(latest, transcript)

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
        else:  # someone else wrote in between: fetch next time
            self._transcripts.pop(thread_id, None)
            self._finished.pop(thread_id, None)

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
            self._finished.pop(self._transcripts.popitem(last=False)[0], None)
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
                key = self.keys.index(shard, "paused" if index == "paused" else "runs")
                if index == "unshown":  # trimmed here, not in every commit: runs nobody showed for an hour go
                    pipe.zremrangebyscore(key, UNSHOWN_BAND, UNSHOWN_BAND + time.time() - UNSHOWN_KEEP_S)
                    pipe.zrangebyscore(key, UNSHOWN_BAND, UNSHOWN_BAND + before, withscores=True)
                elif index == "active":  # the sentinel (-1) and unshown runs are out of range
                    pipe.zrangebyscore(key, 0, min(before, UNSHOWN_BAND - 1), withscores=True)
                else:
                    pipe.zrangebyscore(key, "-inf", before, withscores=True)
            replies: list[Any] = await pipe.execute()
        shards: list[list[tuple[Any, float]]] = replies[1::2] if index == "unshown" else replies
        found = sorted(((float(score), str(text(m))) for rows in shards for m, score in rows))
        return [run_id for _, run_id in found if run_id != SENTINEL]

    async def shown(self, run_id: str, thread_id: str) -> None:
        """A front end showed the run's latest state: it leaves the index, unless it is running again."""
        key = self.keys.index(shard_of(thread_id), "runs")
        await retried("marking a run shown", self.outage_grace_s,
                      lambda: self._shown(keys=[key], args=[run_id, repr(UNSHOWN_BAND)]))

    async def read_audit(self, count: int = 100, *, run_id: str | None = None) -> list[dict[str, str]]:
        """The newest ``count`` audit entries, newest first; with ``run_id``, that run's (its shard is searched)."""
        window: tuple[str, str] | None = None
        if run_id is not None:
            run = await self.load_run(run_id)
            streams = [self.keys.audit(shard_of(run.thread_id))] if run else []
            depth = max(count, 2000)
            if run is not None:  # its entries were written while it ran: read there, whatever came after (ids are ms)
                window = (str(int((run.created_at - AUDIT_SKEW_S) * 1000)),
                          str(int((run.updated_at + AUDIT_SKEW_S) * 1000)))
        else:
            streams = [self.keys.audit(shard) for shard in all_shards()]
            depth = count
        streams.append(self.keys.legacy("audit"))  # entries written before shards, until they expire
        async with guard("reading the audit stream"):
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                if window is not None and stream != self.keys.legacy("audit"):
                    pipe.xrevrange(stream, max=window[1], min=window[0], count=AUDIT_RUN_MAX)
                else:
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

    async def flush_counts(self) -> None:
        await self.counter.flush(due_only=True)

    async def stats(self, window_s: int) -> Stats:
        return await self.counter.stats(window_s)


def _index_score(run: RunRecord) -> str:
    """Its score in the runs index (see :mod:`state.scripts`), as a string: no float rounded on its way to Lua."""
    return repr(run.updated_at if run.status == "running" else UNSHOWN_BAND + run.updated_at)


def _taken(cached: Sequence[Message] | None, request_id: str | None) -> bool:
    """Whether a start cannot be decided in the script: the request is in the cached part of the transcript, or
    its id would need escaping in JSON (the script looks for it verbatim)."""
    if request_id is None:
        return False
    return not _PLAIN_ID.fullmatch(request_id) or (cached is not None and took(cached, request_id))


def _entry_order(entry_id: Any) -> tuple[int, int]:
    ms, _, seq = str(text(entry_id)).partition("-")
    return int(ms), int(seq or 0)
