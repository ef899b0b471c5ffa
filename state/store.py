"""The seams between the engine and its storage, each a short protocol, and the values they exchange.

    Store         runs, transcripts and the tickets that open pending calls (the engine's state)
    ├── .journal  Journal: a change is recorded as started before it runs, finished after
    └── .locks    Locks: claim-once answers, per-thread leases, once-per-tick sweeps, cancel flags
    Reports       counters and the audit stream (``opspilot stats``, the answer's audit list)
    MetaStore     a front end's own bookkeeping (where a Slack message is) and event dedupe
    Outbox        a front end's messages, recorded before they are sent and retried until delivered
    WorkQueue     work from fronts (which acknowledge and enqueue) to workers (which run the engine)

:class:`state.redis.RedisStore` and :class:`state.memory.MemoryStore` implement Store and Reports;
their ``meta``, ``outbox`` and ``queue`` attributes are the matching MetaStore, Outbox and WorkQueue.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.messages import Message, UserMessage
from state.feedback_store import Feedbacks
from state.outbox_store import Delivered, Due, OutboxRecord, Put
from state.queue import DeadLetter, Entry, Lane, QueueStats
from state.records import RunRecord, Ticket

UNSHOWN = ("paused", "finished", "stalled")
"""A run that stops running in one of these states waits in the ``unshown`` index until a front end shows it."""
UNSHOWN_KEEP_S = 3600
"""How long the index keeps a run nobody showed (a host with no front end never does: the terminal chat)."""


@dataclass(frozen=True)
class Write:
    """One atomic write: what a step (or a pause, or a finish) adds. Only the run's small record (with its trace)
    is rewritten; messages are appended."""

    run: RunRecord
    messages: Sequence[Message] = ()
    counters: Mapping[str, int] = field(default_factory=dict)
    new_tokens: Sequence[str] = ()
    audit: Sequence[Mapping[str, str]] = ()
    status_changed: bool = True
    """False when the run's status is what the last write stored: indexes need no update."""
    release_lease: str | None = None
    """The thread lease's owner, when this is the turn's last write: the lease goes with it (no extra trip)."""
    lease_owner: str | None = None
    """Who writes: refused (:class:`state.store_errors.LeaseLost`) if another owner holds the thread's lease."""
    was: str | None = None
    """The status the store holds before this write ("": a new run, nothing stored); None: not known, so every
    index is brought up to date. Known, a write touches only the indexes the run leaves or joins."""

    def tickets(self) -> list[Ticket]:
        """What each new token opens, stored beside it so a click needs one read."""
        if not self.new_tokens:
            return []
        run = self.run
        by_token = {p.token: p for p in run.pending}
        return [Ticket(run_id=run.run_id, thread_id=run.thread_id, requester=run.user_id, pending=by_token[t])
                for t in self.new_tokens if t in by_token]  # a question answered before it was saved needs none


@dataclass(frozen=True)
class Start:
    """A new run, made by a turn's opening itself when the thread has none under way and has not taken
    ``question`` already (its ``request_id``): no second write before the run's first step, and the run exists from
    the moment its turn holds the thread (a Stop pressed on another instance finds it)."""

    run: RunRecord
    question: UserMessage
    counters: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Opened:
    """What a turn starts from, read together with taking the thread's lease."""

    run: RunRecord | None
    """The thread's latest run (or the run asked for); None if there is none. When ``started``: the new run."""
    transcript: list[Message]
    started: bool = False
    """The turn's :class:`Start` was applied: its run is saved and its question is the transcript's last message."""


@dataclass(frozen=True)
class Claim:
    won: bool
    holder: str
    age_s: float = 0.0
    """How long ago the holder claimed it: a claim whose decision never landed can be told apart."""


@dataclass(frozen=True)
class Stats:
    """Counters summed over whole-hour buckets. ``since`` is where the first bucket read begins: the buckets that
    cover a window reach back to the start of the hour the window begins in, so "last 1h" at 14:05 counts from
    13:00, and says so (a run counted in the hour it started is never cut off at the window's edge)."""

    counters: dict[str, int]
    window_s: int
    since: float

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


def covering_hours(window_s: int, now: float | None = None) -> range:
    """The hour buckets that cover the last ``window_s`` seconds: from the one the window begins in to this one."""
    at = time.time() if now is None else now
    return range(int((at - max(window_s, 1)) // 3600), int(at // 3600) + 1)


def merge_stats(buckets: Sequence[Mapping[str, int]], window_s: int, hours: range) -> Stats:
    total: dict[str, int] = {}
    for bucket in buckets:
        for name, value in bucket.items():
            total[name] = total.get(name, 0) + int(value)
    return Stats(total, window_s, since=hours.start * 3600.0)


class Journal(Protocol):
    """Started/finished per mutating call: what proves whether a change ran. The tool runtime's
    ``MutationJournal`` is the first three methods."""

    async def start(self, run_id: str, call_id: str, arguments: Mapping[str, Any] | None = None) -> bool:
        """Mark a mutating call started, with what it runs with; False if it had been started before."""

    async def finish(self, run_id: str, call_id: str, status: str,
                     arguments: Mapping[str, Any] | None = None) -> None: ...

    async def abandon(self, run_id: str, call_id: str) -> None:
        """It stopped to ask a person before changing anything: it may start again later."""

    async def states(self, run_id: str) -> dict[str, str]:
        """call id → ``started`` or ``finished``."""

    async def arguments(self, run_id: str) -> dict[str, dict[str, Any]]:
        """call id → the arguments it started with."""


class Locks(Protocol):
    """Who may act now. Every lock expires by itself, so a dead process never holds one for good."""

    async def claim(self, token: str, holder: str) -> Claim:
        """Claim-once: the first caller wins; everyone after learns who did."""

    async def release_claim(self, token: str) -> None: ...

    async def claimed_by(self, token: str) -> str | None:
        """Who claimed ``token`` (None: nobody yet); claims nothing."""

    async def take_claim(self, token: str, holder: str) -> None:
        """Take over a claim whose holder died before deciding (checked by the caller, under the lease)."""

    async def acquire_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool: ...

    async def leased(self, thread_id: str) -> bool:
        """Whether someone holds the thread now (a live worker renews its lease; a dead one's lapses)."""

    async def renew_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool: ...

    async def release_lease(self, thread_id: str, owner: str) -> None: ...

    async def once(self, name: str, ttl_s: int) -> bool:
        """True for the first caller of ``name`` within ``ttl_s`` (one instance per sweep tick)."""

    async def request_cancel(self, run_id: str, by: str = "") -> None: ...

    async def clear_cancel(self, run_id: str) -> None:
        """A request nobody will act on (the run paused or ended): it must not stop a later turn."""

    async def cancel_requests(self, run_ids: Sequence[str]) -> dict[str, str]:
        """Which of these runs someone asked to cancel (one call for all of them)."""


class Store(Protocol):
    durable: bool
    """False for the in-process store: everything is lost when the process ends."""

    @property
    def journal(self) -> Journal: ...

    @property
    def locks(self) -> Locks: ...

    async def ping(self, *, write: bool = False) -> None: ...

    async def close(self) -> None: ...

    async def flush_counts(self) -> None:
        """This process's counts that waited long enough, to the stats now (an idle process has no next write
        for them to ride with)."""

    async def open_turn(self, thread_id: str, owner: str, ttl_ms: int, *, run_id: str | None = None,
                        start: Start | None = None) -> Opened | None:
        """Take the thread's lease for ``owner`` and read the run (the thread's latest, or ``run_id``) and the
        transcript, in one round trip; with ``start``, make that run there too where it applies (see
        :class:`Start`). None while someone else holds the lease."""

    async def commit(self, write: Write) -> None:
        """Apply ``write`` atomically: append messages, save the run, store the new tickets."""

    async def load_run(self, run_id: str) -> RunRecord | None: ...

    async def load_transcript(self, thread_id: str) -> list[Message]: ...

    async def thread_run(self, thread_id: str) -> str | None:
        """The id of the thread's latest run."""

    async def load_ticket(self, token: str) -> Ticket | None:
        """The pending call a token opens, with its run, thread and requester: one read."""

    async def shown(self, run_id: str, thread_id: str) -> None:
        """A front end showed the run's latest state (see :data:`UNSHOWN`)."""

    async def runs_due(self, index: str, before: float) -> list[str]:
        """Run ids in ``index`` ("paused" by earliest expiry, "active" by last write, "unshown" by when they stopped
        running) scored at most ``before``."""


class Reports(Protocol):
    @property
    def feedback(self) -> Feedbacks:
        """Ratings of answers with their context (see :mod:`state.feedback_store`)."""

    async def stats(self, window_s: int) -> Stats: ...

    async def tally(self, thread_id: str, name: str) -> None:
        """One more ``name`` in this hour's stats (what happens outside a run: feedback on an answer)."""

    async def read_audit(self, count: int = 100, *, run_id: str | None = None) -> list[dict[str, str]]:
        """The newest ``count`` audit entries (of one run, if given), newest first."""


@dataclass(frozen=True)
class Admission:
    """What a sliding-window limit answered (:meth:`MetaStore.admit`)."""

    admitted: bool
    free_at: float = 0.0
    """Refused: when the oldest start leaves the window and one more may start (epoch seconds)."""
    first_refusal: bool = False
    """Refused, and the first refusal since the window was last open: the one to tell someone about."""
    new: bool = False
    """Admitted, and counted now (not a start read again): :meth:`MetaStore.withdraw` may give it back."""
    told_until: float = 0.0
    """Refused: when the period the refusal is told in ends (the same for every refusal of one full window: a key
    to tell it once by, whichever refusal gets to)."""


class MetaStore(Protocol):
    """A front end's bookkeeping, kept as small hashes with the thread's TTL."""

    async def put(self, kind: str, name: str, fields: Mapping[str, str]) -> None: ...

    async def get(self, kind: str, name: str) -> dict[str, str]: ...

    async def first_time(self, name: str, ttl_s: int | None = None) -> bool:
        """True the first time ``name`` is seen (within its TTL), False after: event and message dedupe."""

    async def claim(self, name: str, holder: str, ttl_s: int) -> str:
        """``holder`` holds ``name`` for ``ttl_s`` unless someone does already: whoever holds it (one script, so
        claimers at the same moment all read the one winner; a retry after a lost reply reads itself)."""

    async def unclaim(self, name: str, holder: str) -> None:
        """Let go of ``name`` if ``holder`` still holds it (what it was claimed for did not happen)."""

    async def count(self, name: str, ttl_s: int) -> int:
        """Adds one to a counter that lives ``ttl_s`` from its first count; its new value (rate limits)."""

    async def admit(self, name: str, member: str, *, limit: int, window_s: float, now: float) -> Admission:
        """A sliding-window limit: ``member`` starts at ``now`` when fewer than ``limit`` started in the
        ``window_s`` before it (so never more than ``limit`` in any window); the same member again is the same
        start (a retried request counts once)."""

    async def withdraw(self, name: str, member: str) -> None:
        """Give back ``member``'s start in window ``name`` (admitted here, then refused by another window)."""

    async def remember(self, name: str, value: str, *, keep: int) -> None:
        """``value`` first in the list ``name``, which keeps its newest ``keep`` (a person's recent questions)."""

    async def recall(self, name: str) -> list[str]:
        """The list ``name``, newest first."""


class Outbox(Protocol):
    """Per thread, in order: each message's desired state and what was delivered (see :mod:`state.outbox_store`)."""

    async def put(self, thread: str, key: str, fields: Mapping[str, Any], *, due: float,
                  urgent: bool = False, state: tuple[str, str] | None = None) -> Put: ...

    async def save_state(self, thread: str, run_id: str, state: str) -> None: ...

    async def shown_state(self, thread: str, run_id: str) -> str | None:
        """What run ``run_id`` shows in the thread (its progress state, saved with its message), if anything."""

    async def records(self, thread: str) -> list[OutboxRecord]: ...

    async def patch(self, thread: str, key: str, fields: Mapping[str, Any], *,
                    delivered: int | None = None) -> None: ...

    async def settle(self, thread: str, *, retry_at: float, release: str | None = None,
                     delivered: Sequence[Delivered] = (), seen: Mapping[str, int] | None = None) -> Due:
        """Leave the due index if everything is delivered, else come back at ``retry_at``, or now if a message
        other than progress was put since the round read ``seen`` (its versions). ``release``: the delivery lease's
        owner, letting go of it in the same call; ``delivered``: what the round sent, saved first."""
        ...

    async def due(self, now: float, limit: int = 64) -> list[str]: ...

    async def due_among(self, threads: Collection[str], now: float) -> list[str]:
        """Which of ``threads`` are due by ``now``, soonest first: a round for the threads this process just wrote
        to reads only them, not every shard's index."""
        ...

    async def backlog(self) -> int: ...

    async def lease(self, thread: str, owner: str, ttl_ms: int) -> bool: ...

    async def renew(self, thread: str, owner: str, ttl_ms: int) -> bool: ...

    async def release(self, thread: str, owner: str) -> None: ...


class WorkQueue(Protocol):
    """Work from fronts to workers, each entry pending until acknowledged (see :mod:`state.queue`)."""

    async def put(self, body: str, *, lane: Lane = "work") -> str: ...

    async def take(self, consumer: str, *, count: int = 1, block_ms: int = 1000) -> list[Entry]: ...

    async def reclaim(self, consumer: str, *, idle_ms: int, count: int = 10,
                      quick_idle_ms: int | None = None) -> list[Entry]: ...

    async def touch(self, consumer: str, entry_id: str, *, lane: Lane = "work") -> bool: ...

    async def ack(self, entry_id: str, *, lane: Lane = "work") -> None: ...

    async def retry_later(self, consumer: str, entry_id: str, *, after_s: float, idle_ms: int,
                          lane: Lane = "work") -> None:
        """A try failed: any worker takes the entry again in about ``after_s``."""

    async def bury(self, entry: Entry, reason: str) -> None:
        """Every try failed: set the entry aside for the operator (see :meth:`dead_letters`) and acknowledge it."""

    async def dead_letters(self, count: int = 20) -> list[DeadLetter]:
        """The newest entries set aside, newest first."""

    async def stats(self) -> QueueStats: ...

    async def beat(self, consumer: str) -> None:
        """``consumer`` is reading the queue now (its key expires: see ``Ttls.readers_s``)."""

    async def readers(self, within_s: float) -> int:
        """How many consumers reported reading within the last ``within_s`` seconds (a front's readiness)."""
