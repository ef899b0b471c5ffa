"""An in-process store with the same behaviour as Redis, minus durability. Announced as non-durable."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence

from core.messages import Message
from state.records import RunRecord, TraceEntry
from state.store import Claim, Stats, Write, hour_now, merge_stats


class MemoryStore:
    durable = False

    def __init__(self) -> None:
        self._transcripts: dict[str, list[Message]] = defaultdict(list)
        self._runs: dict[str, str] = {}
        self._thread_runs: dict[str, str] = {}
        self._tokens: dict[str, tuple[str, str]] = {}
        self._claims: dict[str, str] = {}
        self._journals: dict[str, dict[str, str]] = defaultdict(dict)
        self._leases: dict[str, tuple[str, float]] = {}
        self._cancels: set[str] = set()
        self._seen: set[str] = set()
        self._stats: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._meta: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        self._paused: dict[str, float] = {}
        self._active: dict[str, float] = {}
        self._audit: list[dict[str, str]] = []

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def commit(self, write: Write) -> None:
        run = write.run
        self._transcripts[run.thread_id].extend(write.messages)
        # Stored serialised, like Redis, so callers never share a mutable record.
        self._runs[run.run_id] = run.model_dump_json()
        self._thread_runs[run.thread_id] = run.run_id
        by_token = {p.token: p for p in run.pending}
        for token in write.new_tokens:
            self._tokens[token] = (run.run_id, by_token[token].call.id)
        self._audit.extend(dict(e) for e in write.audit)
        self._paused.pop(run.run_id, None)
        self._active.pop(run.run_id, None)
        if run.status == "paused" and run.pending:
            self._paused[run.run_id] = min(p.expires_at for p in run.pending)
        elif run.status == "running":
            self._active[run.run_id] = run.updated_at
        bucket = self._stats[hour_now()]
        for name, value in write.counters.items():
            bucket[name] += value

    async def load_run(self, run_id: str) -> RunRecord | None:
        raw = self._runs.get(run_id)
        return RunRecord.model_validate_json(raw) if raw else None

    async def load_transcript(self, thread_id: str) -> list[Message]:
        return list(self._transcripts.get(thread_id, ()))

    async def load_trace(self, run_id: str) -> list[TraceEntry]:
        run = await self.load_run(run_id)
        return list(run.trace) if run else []

    async def thread_run(self, thread_id: str) -> str | None:
        return self._thread_runs.get(thread_id)

    async def resolve_token(self, token: str) -> tuple[str, str] | None:
        return self._tokens.get(token)

    async def claim(self, token: str, holder: str) -> Claim:
        if token in self._claims:
            return Claim(False, self._claims[token])
        self._claims[token] = holder
        return Claim(True, holder)

    async def release_claim(self, token: str) -> None:
        self._claims.pop(token, None)

    async def journal_start(self, run_id: str, call_id: str) -> bool:
        journal = self._journals[run_id]
        if call_id in journal:
            return False
        journal[call_id] = "started"
        return True

    async def journal_finish(self, run_id: str, call_id: str, status: str) -> None:
        self._journals[run_id][call_id] = "finished"

    async def journal_abandon(self, run_id: str, call_id: str) -> None:
        self._journals[run_id].pop(call_id, None)

    async def journal(self, run_id: str) -> dict[str, str]:
        return dict(self._journals.get(run_id, {}))

    def _live_lease(self, thread_id: str) -> str | None:
        held = self._leases.get(thread_id)
        if held is None or held[1] < time.monotonic():
            return None
        return held[0]

    async def acquire_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool:
        if self._live_lease(thread_id) is not None:
            return False
        self._leases[thread_id] = (owner, time.monotonic() + ttl_ms / 1000)
        return True

    async def renew_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool:
        if self._live_lease(thread_id) != owner:
            return False
        self._leases[thread_id] = (owner, time.monotonic() + ttl_ms / 1000)
        return True

    async def release_lease(self, thread_id: str, owner: str) -> None:
        if self._live_lease(thread_id) == owner:
            del self._leases[thread_id]

    async def lease_holder(self, thread_id: str) -> str | None:
        return self._live_lease(thread_id)

    async def request_cancel(self, run_id: str) -> None:
        self._cancels.add(run_id)

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        return {r for r in run_ids if r in self._cancels}

    async def put_meta(self, kind: str, name: str, fields: Mapping[str, str]) -> None:
        self._meta[(kind, name)].update(fields)

    async def get_meta(self, kind: str, name: str) -> dict[str, str]:
        return dict(self._meta.get((kind, name), {}))

    async def runs_due(self, index: str, before: float) -> list[str]:
        scores = self._paused if index == "paused" else self._active
        return [run_id for run_id, score in sorted(scores.items(), key=lambda kv: kv[1]) if score <= before]

    async def read_audit(self, count: int = 100) -> list[dict[str, str]]:
        return list(reversed(self._audit[-count:]))

    async def dedupe(self, name: str, ttl_s: int | None = None) -> bool:
        if name in self._seen:
            return False
        self._seen.add(name)
        return True

    async def stats(self, window_s: int) -> Stats:
        now = hour_now()
        hours = range(now - max(window_s // 3600, 1) + 1, now + 1)
        return merge_stats([self._stats.get(h, {}) for h in hours], window_s)
