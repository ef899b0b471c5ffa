"""Client-side pacing under Slack's rate limits, so bursts queue instead of meeting 429s.

``chat.postMessage``: about one message per second per channel. ``chat.update``: Tier 3, about 50 a
minute. ``chat.startStream`` / ``stopStream``: Tier 2 (20 a minute); ``chat.appendStream``: Tier 4 (100);
``assistant.threads.setStatus``: 50. Slack counts per workspace, whichever process calls: the buckets live in
Redis (:mod:`state.pacing`, one per method and workspace, one per channel for posts), shared by every front and
worker. While Redis cannot be reached they are counted in this process instead, so delivery never waits for Redis.

Priorities, for edits (Slack's scarcest budget): a card (outbox keys ``card:…``: a decision, an expiry) reserves
the next slot in line and waits for it; any other edit (an answer brought up to date, a Stop message ended) takes a
slot only while one remains for cards (so does a progress message's settled state: its run ended or waits for a
person, its Stop button goes), and a progress edit (``progress:…``) only while two remain; refused, both
come back later, and progress coalesces into its next state meanwhile. So nothing but other cards is ever in line
ahead of a card: a Confirm card shows who confirmed within a slot or two, however many runs are answering.

A delivery reserves its turn at most a few seconds ahead (``HORIZON_S`` in :mod:`.sending`), further off it comes
back when the turn would have come: a turn reserved by a process that is then killed is lost to everyone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar

from state.pacing import FOREVER_S, Grant, MemoryPacing, Pacing
from state.store_errors import StoreError

log = logging.getLogger(__name__)

Workspace = str | Callable[[], Awaitable[str | None]]
"""The workspace whose budget this is (its team id), or how to learn it (None: not known yet)."""

_EDIT_RESERVE = 2  # edit slots a progress edit leaves for cards and other edits
_CARD_RESERVE = 1  # edit slots any other edit leaves for cards
_SHARED_TIMEOUT_S = 1.0  # longer than this for Redis to answer: paced in process
_LOCAL_FOR_S = 5.0  # after Redis failed us, paced in process this long before asking it again
# Set by edit_slot when a progress edit took its slot: its call then goes without taking another. A context
# variable, so each outbox thread's delivery task (where the slot is taken and the call made) has its own.
_PREPAID: ContextVar[str | None] = ContextVar("pacer_prepaid", default=None)


def low_priority(key: str) -> bool:
    """Outbox messages that may wait for Slack's budget: progress, whose next state supersedes this one. (The
    outbox's settle script, ``state.outbox_store._SETTLE``, tells them by the same prefix.)"""
    return key.startswith("progress:")


def first_in_line(key: str) -> bool:
    """Outbox messages whose edits go before any other: cards, which people act on (a Confirm still showing
    after the click invites a second one)."""
    return key.startswith("card:")


class NotYet(Exception):
    """No slot within the time asked for: come back in ``wait_s`` (when one would have been free)."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(wait_s)
        self.wait_s = wait_s


class Pacer:
    def __init__(self, *, posts_per_second: float = 0.95, post_burst: float = 1,
                 updates_per_minute: float = 45, update_burst: float = 5, shared: Pacing | None = None,
                 workspace: Workspace = "local") -> None:
        self.enabled = posts_per_second > 0 and updates_per_minute > 0
        self._post = (posts_per_second, post_burst)
        # Below Slack's figures (a rolling minute lets a full burst plus a full rate through, Slack does not).
        self._tiers = {"chat.update": (updates_per_minute / 60, update_burst),
                       "chat.startStream": (15 / 60, 2), "chat.stopStream": (15 / 60, 2),
                       "chat.appendStream": (80 / 60, 5), "assistant.threads.setStatus": (40 / 60, 3)}
        self.shared = shared
        self.local = MemoryPacing()
        self._workspace = workspace
        self._team = workspace if isinstance(workspace, str) else None
        self._local_until = 0.0
        self._next: dict[str, float] = {}  # bucket → when its next slot is free, as last heard (ready_in)

    def _bucket(self, method: str, channel: str | None) -> tuple[str, float, float] | None:
        if method == "chat.postMessage" and channel:
            return (f"post:{channel}", *self._post)
        if method in self._tiers:
            return (method, *self._tiers[method])
        return None

    async def _take(self, bucket: str, rate: float, capacity: float, reserve: float = 0.0,
                    max_wait_s: float = FOREVER_S) -> Grant:
        grant = None
        if self.shared is not None and time.monotonic() >= self._local_until:
            grant = await self._take_shared(self.shared, bucket, rate, capacity, reserve, max_wait_s)
        if grant is None:
            grant = await self.local.take(self._team or "local", bucket, rate=rate, capacity=capacity,
                                          reserve=reserve, max_wait_s=max_wait_s)
        self._next[bucket] = time.monotonic() + grant.next_s
        return grant

    async def _take_shared(self, shared: Pacing, bucket: str, rate: float, capacity: float, reserve: float,
                           max_wait_s: float) -> Grant | None:
        """The workspace's budget in Redis, or None: never hold a message back for Redis. Unreachable (or the
        workspace not known yet), each process paces on its own for a while; Slack may then see up to one budget
        per process, and the 429s that costs are retried like any other."""
        try:
            async with asyncio.timeout(_SHARED_TIMEOUT_S):
                team = self._team
                if team is None and not isinstance(self._workspace, str):
                    team = self._team = await self._workspace()
                if team is None:
                    raise LookupError("the workspace is not known yet")
                return await shared.take(team, bucket, rate=rate, capacity=capacity, reserve=reserve,
                                         max_wait_s=max_wait_s)
        except (StoreError, TimeoutError, LookupError) as exc:
            if time.monotonic() >= self._local_until + _LOCAL_FOR_S:  # once per outage, not once per call
                log.warning("Slack calls paced in this process only for now: %s", exc or type(exc).__name__)
            self._local_until = time.monotonic() + _LOCAL_FOR_S
            return None

    async def delay(self, method: str, channel: str | None = None, *, within_s: float | None = None) -> float:
        """Reserve the next slot for ``method``: how long until it comes (0: go now). ``within_s``: only one that
        comes that soon, else :class:`NotYet` (nothing taken)."""
        if not self.enabled or (bucket := self._bucket(method, channel)) is None:
            return 0.0
        grant = await self._take(*bucket, max_wait_s=FOREVER_S if within_s is None else within_s)
        if not grant.taken:
            raise NotYet(grant.wait_s)
        return grant.wait_s

    async def wait(self, method: str, channel: str | None = None, *, within_s: float | None = None) -> None:
        """Wait for a slot for a call of ``method`` (none when :meth:`edit_slot` took it already; ``within_s``:
        see :meth:`delay`)."""
        if _PREPAID.get() == method:
            _PREPAID.set(None)
            return
        delay = await self.delay(method, channel, within_s=within_s)
        if delay > 0:
            await asyncio.sleep(delay)

    async def edit_slot(self, key: str, method: str, *, settled: bool = False) -> float:
        """Seconds until an edit of outbox message ``key`` (by ``method``) may go; 0: now. A progress edit, or any
        other ``chat.update`` but a card's, takes its slot here, only while slots remain for those before it (it
        never waits in line: it comes back later); a card reserves its slot in line when it is sent. ``settled``:
        a progress message's last state (its run ended or waits for a person: no Stop button any more), which goes
        with the other edits, ahead of progress still moving."""
        _PREPAID.set(None)
        if not self.enabled or first_in_line(key) or method not in self._tiers:
            return 0.0
        if not low_priority(key) and method != "chat.update":
            return 0.0
        rate, capacity = self._tiers[method]
        reserve = 0.0 if method != "chat.update" else \
            min(_EDIT_RESERVE if low_priority(key) and not settled else _CARD_RESERVE, capacity - 1)
        grant = await self._take(method, rate, capacity, reserve, max_wait_s=0.0)
        if not grant.taken:
            return max(grant.wait_s, 0.01)
        _PREPAID.set(method)
        return 0.0

    async def try_reserve(self, method: str, max_wait_s: float) -> float | None:
        """Reserve a slot for ``method`` only if it comes within ``max_wait_s``: the wait, or None (nothing
        reserved). Checking and reserving at once, so concurrent callers cannot all pass the check."""
        if not self.enabled or method not in self._tiers:
            return 0.0
        grant = await self._take(method, *self._tiers[method], max_wait_s=min(max_wait_s, FOREVER_S))
        return grant.wait_s if grant.taken else None

    def ready_in(self, method: str) -> float:
        """Seconds until a call of ``method`` may go without queueing, as last heard (a hint: nothing is taken)."""
        if not self.enabled or method not in self._tiers:
            return 0.0
        return max(0.0, self._next.get(method, 0.0) - time.monotonic())
