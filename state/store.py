"""The store protocol the engine talks to, and the small values it exchanges."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.messages import Message
from state.records import RunRecord, TraceEntry


@dataclass(frozen=True)
class Write:
    """One atomic write: what a step (or a pause, or a finish) adds. Nothing is rewritten."""

    run: RunRecord
    messages: Sequence[Message] = ()
    counters: Mapping[str, int] = field(default_factory=dict)
    new_tokens: Sequence[str] = ()
    audit: Sequence[Mapping[str, str]] = ()
    status_changed: bool = True
    """False when the run's status is what the last write stored: indexes need no update."""


@dataclass(frozen=True)
class Claim:
    won: bool
    holder: str


@dataclass(frozen=True)
class Stats:
    counters: dict[str, int]
    window_s: int

    def get(self, name: str) -> int:
        return self.counters.get(name, 0)

    @property
    def runs(self) -> int:
        return self.get("runs")

    @property
    def avg_steps(self) -> float:
        return self.get("steps") / self.runs if self.runs else 0.0

    @property
    def tool_failure_rate(self) -> float:
        calls = self.get("tool_calls")
        return self.get("tool_failures") / calls if calls else 0.0

    @property
    def resume_rate(self) -> float:
        asked = self.get("interrupts")
        return self.get("resumed") / asked if asked else 0.0

    @property
    def stop_reasons(self) -> dict[str, int]:
        return {k.removeprefix("stop:"): v for k, v in sorted(self.counters.items()) if k.startswith("stop:")}


def hour_now() -> int:
    return int(time.time() // 3600)


class Store(Protocol):
    durable: bool
    """False for the in-process store: everything is lost when the process ends."""

    async def ping(self) -> None: ...

    async def commit(self, write: Write) -> None:
        """Apply ``write`` atomically: append messages and trace, save the run, index new tokens."""

    async def load_run(self, run_id: str) -> RunRecord | None: ...

    async def load_transcript(self, thread_id: str) -> list[Message]: ...

    async def load_trace(self, run_id: str) -> list[TraceEntry]: ...

    async def thread_run(self, thread_id: str) -> str | None:
        """The id of the thread's latest run."""

    async def resolve_token(self, token: str) -> tuple[str, str] | None:
        """(run id, call id) of a pending interrupt's token."""

    async def claim(self, token: str, holder: str) -> Claim:
        """Claim-once: the first caller wins; everyone after learns who did."""

    async def release_claim(self, token: str) -> None: ...

    async def journal_start(self, run_id: str, call_id: str) -> bool:
        """Mark a mutating call started; False if it had been started before."""

    async def journal_finish(self, run_id: str, call_id: str, status: str) -> None: ...

    async def journal_abandon(self, run_id: str, call_id: str) -> None: ...

    async def journal(self, run_id: str) -> dict[str, str]: ...

    async def acquire_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool: ...

    async def renew_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool: ...

    async def release_lease(self, thread_id: str, owner: str) -> None: ...

    async def lease_holder(self, thread_id: str) -> str | None: ...

    async def request_cancel(self, run_id: str) -> None: ...

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        """Which of these runs someone asked to cancel (one call for all of them)."""

    async def dedupe(self, name: str, ttl_s: int | None = None) -> bool:
        """True the first time ``name`` is seen (within its TTL), False after."""

    async def put_meta(self, kind: str, name: str, fields: Mapping[str, str]) -> None: ...

    async def get_meta(self, kind: str, name: str) -> dict[str, str]: ...

    async def runs_due(self, index: str, before: float) -> list[str]:
        """Run ids in ``index`` ("paused" by earliest expiry, "active" by last write) scored at most ``before``."""

    async def read_audit(self, count: int = 100) -> list[dict[str, str]]: ...

    async def stats(self, window_s: int) -> Stats: ...

    async def close(self) -> None: ...


class JournalAdapter:
    """Presents a store as the tool runtime's MutationJournal."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def start(self, run_id: str, call_id: str) -> bool:
        return await self._store.journal_start(run_id, call_id)

    async def finish(self, run_id: str, call_id: str, status: str) -> None:
        await self._store.journal_finish(run_id, call_id, status)

    async def abandon(self, run_id: str, call_id: str) -> None:
        await self._store.journal_abandon(run_id, call_id)


def merge_stats(buckets: Sequence[Mapping[str, int]], window_s: int) -> Stats:
    total: dict[str, int] = {}
    for bucket in buckets:
        for name, value in bucket.items():
            total[name] = total.get(name, 0) + int(value)
    return Stats(total, window_s)
