"""An in-process store with the same behaviour as Redis, minus durability. Announced as non-durable."""

from __future__ import annotations

from collections import defaultdict

from core.messages import Message, took
from state.feedback_store import MemoryFeedbacks
from state.journal import MemoryJournal
from state.locks import MemoryLocks
from state.meta_store import MemoryMeta
from state.outbox_store import MemoryOutbox
from state.queue import MemoryQueue
from state.records import RunRecord, Ticket
from state.store import UNSHOWN, UNSHOWN_KEEP_S, Opened, Start, Stats, Write, covering_hours, hour_now, merge_stats
from state.store_errors import LeaseLost
from state.timer_store import MemoryTimers


class MemoryStore:
    durable = False

    def __init__(self) -> None:
        self.journal = MemoryJournal()
        self.locks = MemoryLocks()
        self.meta = MemoryMeta()
        self.outbox = MemoryOutbox()
        self.queue = MemoryQueue()
        self.feedback = MemoryFeedbacks()
        self.timers = MemoryTimers()
        self._transcripts: dict[str, list[Message]] = defaultdict(list)
        self._runs: dict[str, str] = {}
        self._thread_runs: dict[str, str] = {}
        self._tickets: dict[str, Ticket] = {}
        self._stats: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._paused: dict[str, float] = {}
        self._active: dict[str, float] = {}
        self._unshown: dict[str, float] = {}
        self._audit: list[dict[str, str]] = []

    async def ping(self, *, write: bool = False) -> None:
        return None

    async def close(self) -> None:
        return None

    async def open_turn(self, thread_id: str, owner: str, ttl_ms: int, *, run_id: str | None = None,
                        start: Start | None = None) -> Opened | None:
        if not await self.locks.acquire_lease(thread_id, owner, ttl_ms) and self.locks.holder(thread_id) != owner:
            return None
        latest = await self.load_run(run_id or self._thread_runs.get(thread_id) or "")
        transcript = await self.load_transcript(thread_id)
        rid = start.question.request_id if start is not None else None
        if start is not None and not run_id and (latest is None or latest.status == "finished") \
                and not (rid and took(transcript, rid)):
            await self.commit(Write(run=start.run, messages=[start.question], counters=start.counters, was=""))
            return Opened(start.run, [*transcript, start.question], started=True)
        return Opened(latest, transcript)

    async def commit(self, write: Write) -> None:
        run = write.run
        holder = self.locks.holder(run.thread_id)
        if write.lease_owner and holder not in (None, write.lease_owner):
            raise LeaseLost(f"saving run {run.run_id}: refused, {holder} holds the thread now")
        self._transcripts[run.thread_id].extend(write.messages)
        # Stored serialised, like Redis, so callers never share a mutable record.
        self._runs[run.run_id] = run.model_dump_json()
        self._thread_runs[run.thread_id] = run.run_id
        for ticket in write.tickets():
            self._tickets[ticket.pending.token] = ticket
        self._audit.extend(dict(e) for e in write.audit)
        self._paused.pop(run.run_id, None)
        self._active.pop(run.run_id, None)
        if run.status == "paused" and run.pending:
            self._paused[run.run_id] = min(p.expires_at for p in run.pending)
        elif run.status == "running":
            self._active[run.run_id] = run.updated_at
            self._unshown.pop(run.run_id, None)  # moving again: its events show it
        if write.status_changed and run.status in UNSHOWN:
            self._unshown[run.run_id] = run.updated_at
            for old in [r for r, at in self._unshown.items() if at < run.updated_at - UNSHOWN_KEEP_S]:
                del self._unshown[old]
        if write.status_changed and run.status != "running":
            await self.locks.clear_cancel(run.run_id)
        bucket = self._stats[hour_now()]
        for name, value in write.counters.items():
            bucket[name] += value
        if write.release_lease:
            await self.locks.release_lease(run.thread_id, write.release_lease)

    async def load_run(self, run_id: str) -> RunRecord | None:
        raw = self._runs.get(run_id)
        if not raw:
            return None
        return RunRecord.model_validate_json(raw)

    async def load_transcript(self, thread_id: str) -> list[Message]:
        return list(self._transcripts.get(thread_id, ()))

    async def thread_run(self, thread_id: str) -> str | None:
        return self._thread_runs.get(thread_id)

    async def load_ticket(self, token: str) -> Ticket | None:
        return self._tickets.get(token)

    async def shown(self, run_id: str, thread_id: str) -> None:
        self._unshown.pop(run_id, None)

    async def runs_due(self, index: str, before: float) -> list[str]:
        scores = {"paused": self._paused, "unshown": self._unshown}.get(index, self._active)
        return [run_id for run_id, score in sorted(scores.items(), key=lambda kv: kv[1]) if score <= before]

    async def read_audit(self, count: int = 100, *, run_id: str | None = None) -> list[dict[str, str]]:
        entries = [e for e in reversed(self._audit) if run_id is None or e.get("run_id") == run_id]
        return entries[:count]

    async def tally(self, thread_id: str, name: str) -> None:
        self._stats[hour_now()][name] += 1

    async def flush_counts(self) -> None:
        return None  # counted where they happen: nothing waits

    async def stats(self, window_s: int) -> Stats:
        hours = covering_hours(window_s)
        return merge_stats([self._stats.get(h, {}) for h in hours], window_s, hours)
