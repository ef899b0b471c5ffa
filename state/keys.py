"""Every Redis key OpsPilot uses, built here and nowhere else, each with its TTL.

Cluster-safe layout: everything one thread owns — its transcript, runs, journals, tickets, claims, outbox —
and the indexes, stats and audit those writes touch carry the same hash tag, the thread's *shard*
(``{s0}`` … ``{sf}``, a stable hash of the thread id). So each atomic write (one Lua script) stays in one
slot of a Redis Cluster, and sweeps read one small index per shard. Run ids and tokens start with their
shard (``s3.…``), so a click or a run id alone finds its keys. Ids minted before this layout (no shard)
keep their old, untagged key names, which a single Redis still serves.
"""

from __future__ import annotations

import functools
import re
import secrets
import time
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass

SHARDS = 16
"""Fixed for good: a thread's shard must never change while its keys live."""
_SHARDED_ID = re.compile(r"^(s[0-9a-f])\.")


@functools.lru_cache(maxsize=65536)  # every key of a write names its shard: computed once per thread
def shard_of(thread_id: str) -> str:
    return f"s{zlib.crc32(thread_id.encode()) % SHARDS:x}"


def all_shards() -> list[str]:
    return [f"s{i:x}" for i in range(SHARDS)]


def new_run_id(thread_id: str) -> str:
    return f"{shard_of(thread_id)}.{uuid.uuid4().hex}"


def new_token(run_id: str) -> str:
    """A question's token, in its run's shard (an unguessable secret: it is what a click presents)."""
    shard = _shard_in(run_id)
    return f"{shard}.{secrets.token_urlsafe(24)}" if shard else secrets.token_urlsafe(24)


def _shard_in(ident: str) -> str | None:
    found = _SHARDED_ID.match(ident)
    return found.group(1) if found else None


@dataclass(frozen=True)
class Ttls:
    thread_s: int = 7 * 24 * 3600
    """Transcript, the thread's current run, runs, traces and journals."""
    interrupt_s: int = 30 * 60
    """How long a question to a person stays answerable."""
    claim_margin_s: int = 24 * 3600
    """Tokens and claims outlive their interrupt, so a late click learns what happened."""
    cancel_s: int = 3600
    dedupe_s: int = 24 * 3600
    stats_s: int = 8 * 24 * 3600
    audit_s: int = 90 * 24 * 3600
    audit_max_entries: int = 100_000
    readers_s: int = 60
    dead_letters_s: int = 14 * 24 * 3600
    """Work items no worker could finish, kept for the operator (``opspilot stats``)."""
    """How long a worker that stopped reading stays in the list of the queue's readers."""
    feedback_s: int = 30 * 24 * 3600
    """A rating of an answer (👍/👎 with its context), and the lists of the latest ones."""
    timers_s: int = 400 * 24 * 3600
    """Follow-ups and schedules: refreshed at every write (a schedule's every firing), so only a timer nobody
    touched for over a year lapses."""


class Renewals:
    """When a process last renewed the TTL of a key that many writes share (a thread's transcript, a shard's runs
    index, the work stream): once per ``every_s`` is enough for a TTL of days, and spares a command per write. A key
    that such a write creates gets its TTL from that write itself."""

    def __init__(self, every_s: float = 3600.0, size: int = 4096) -> None:
        self.every_s, self.size = every_s, size
        self._at: OrderedDict[str, float] = OrderedDict()

    def due(self, key: str) -> bool:
        """Whether this write should renew ``key``'s TTL (counted as renewed from now on)."""
        now = time.monotonic()
        if now - self._at.get(key, -self.every_s) < self.every_s:
            return False
        self._at[key] = now
        self._at.move_to_end(key)
        while len(self._at) > self.size:
            self._at.popitem(last=False)
        return True

    def forget(self, key: str) -> None:
        """The renewal did not happen (its write failed): the next write renews."""
        self._at.pop(key, None)


@dataclass(frozen=True)
class Keys:
    prefix: str = "opspilot"

    def _thread(self, thread_id: str) -> str:
        return f"{self.prefix}:{{{shard_of(thread_id)}}}:thread:{thread_id}"

    def _by_id(self, ident: str) -> str:
        shard = _shard_in(ident)
        return f"{self.prefix}:{{{shard}}}" if shard else self.prefix

    def transcript(self, thread_id: str) -> str:
        return f"{self._thread(thread_id)}:transcript"

    def thread_run(self, thread_id: str) -> str:
        return f"{self._thread(thread_id)}:run"

    def lease(self, thread_id: str) -> str:
        return f"{self._thread(thread_id)}:lease"

    def run(self, run_id: str) -> str:
        return f"{self._by_id(run_id)}:run:{run_id}"

    def run_trace(self, run_id: str) -> str:
        """Where a run written before its trace moved into its record kept the trace (read, never written)."""
        return f"{self.run(run_id)}:trace"

    def runs_of(self, thread_id: str) -> str:
        """What ``run(run_id)`` starts with for the thread's runs (their ids carry the thread's shard), so a
        script that reads the thread's run pointer can name the run's keys: ``runs_of(t) + run_id``."""
        return f"{self.prefix}:{{{shard_of(thread_id)}}}:run:"

    def journal(self, run_id: str) -> str:
        return f"{self._by_id(run_id)}:run:{run_id}:journal"

    def cancel(self, run_id: str) -> str:
        return f"{self._by_id(run_id)}:run:{run_id}:cancel"

    def token(self, token: str) -> str:
        """The ticket a question's token opens (see :class:`state.records.Ticket`)."""
        return f"{self._by_id(token)}:token:{token}"

    def claim(self, token: str) -> str:
        return f"{self._by_id(token)}:claim:{token}"

    def once(self, name: str) -> str:
        """Once-per-tick markers (sweeps)."""
        return f"{self.prefix}:once:{name}"

    def write_probe(self, node: str) -> str:
        """``opspilot check``'s one write (a few seconds' TTL): whether this Redis takes writes at all."""
        return f"{self.prefix}:check:{node}"

    def dedupe(self, name: str) -> str:
        return f"{self.prefix}:dedupe:{name}"

    def claimed(self, name: str) -> str:
        """Who claimed ``name`` first (e.g. the thread investigating an alert group), until its TTL."""
        return f"{self.prefix}:claimed:{name}"

    def stats(self, shard: str, hour: int) -> str:
        return f"{self.prefix}:{{{shard}}}:stats:{hour}"

    def meta(self, kind: str, name: str) -> str:
        """Front-end bookkeeping (e.g. where a thread's Slack progress message is)."""
        return f"{self.prefix}:meta:{kind}:{name}"

    def window(self, name: str) -> str:
        """A sliding-window rate limit's start times (a sorted set scored by when each started). Its name is the
        hash tag, so the window and its ``window_held`` marker share one slot of a Redis Cluster."""
        return f"{self.prefix}:{{window:{name}}}:starts"

    def window_held(self, name: str) -> str:
        """Set while a sliding window is full and someone was told: they are told once per hold."""
        return f"{self.prefix}:{{window:{name}}}:held"

    def pace(self, workspace: str, bucket: str) -> str:
        """One Slack rate-limit bucket of a workspace (a method, or ``post:<channel>``), shared by every process.
        Its own hash tag: each bucket one slot of a Redis Cluster. TTL: until the bucket is full again (a missing
        bucket reads as full), set at every write (:mod:`state.pacing`)."""
        return f"{self.prefix}:{{pace:{workspace}:{bucket}}}"

    def index(self, shard: str, name: str) -> str:
        """One shard's part of a run index: ``paused`` (scored by the earliest question expiry, for expiry
        and reminders) or ``runs`` (running runs by their last write, for finding dead workers, and runs nobody
        showed yet by when they stopped: see :mod:`state.scripts`); ``active`` and ``unshown`` are the two that
        ``runs`` replaced, read once to move their entries (:func:`state.migrate.merge_run_indexes`)."""
        return f"{self.prefix}:{{{shard}}}:index:{name}"

    def outbox(self, thread: str) -> str:
        """One front-end conversation thread's undelivered and delivered messages (a hash of records)."""
        return f"{self.prefix}:{{{shard_of(thread)}}}:outbox:{thread}"

    def outbox_state(self, thread: str) -> str:
        """What each run shows in a front-end thread (its progress state, by run id), beside the thread's outbox
        (one hash slot: saved by the same script that records the message)."""
        return f"{self.prefix}:{{{shard_of(thread)}}}:outbox-state:{thread}"

    def outbox_due(self, shard: str) -> str:
        """One shard's threads with something to deliver, scored by their next attempt."""
        return f"{self.prefix}:{{{shard}}}:outbox-due"

    def outbox_lease(self, thread: str) -> str:
        """Who delivers a thread's messages right now (one deliverer at a time keeps them in order)."""
        return f"{self.prefix}:{{{shard_of(thread)}}}:outbox-lease:{thread}"

    def queue(self, lane: str = "work") -> str:
        """A work stream fronts add to and workers read (one consumer group each). The quick lane is tagged with
        the work stream's own name (which hashes as that untagged key does): one slot, so a worker reads both
        lanes in one command, on a cluster too."""
        return f"{self.prefix}:work" if lane == "work" else f"{{{self.prefix}:work}}:{lane}"

    def dead_letters(self) -> str:
        """Work items no worker could finish (a stream the operator reads). Its hash tag is the work stream's own
        name, which hashes as that untagged key does: one slot, so burying an entry is one transaction."""
        return f"{{{self.queue()}}}:dead"

    def readers(self) -> str:
        """The workers reading the work stream, scored by when each last read (Redis's clock): a front's readiness."""
        return f"{self.prefix}:work-readers"

    def feedback(self, shard: str, run_id: str, user: str) -> str:
        """One person's rating of one answer (its thread's shard, as the list it joins)."""
        return f"{self.prefix}:{{{shard}}}:feedback:{run_id}:{user}"

    def feedback_latest(self, shard: str, rating: str) -> str:
        """One shard's newest ratings of one kind (``up`` / ``down``), newest first."""
        return f"{self.prefix}:{{{shard}}}:feedback-latest:{rating}"

    def timers(self, shard: str) -> str:
        """One shard's follow-ups and schedules: a hash of timer id → record (JSON)."""
        return f"{self.prefix}:{{{shard}}}:timers"

    def timers_due(self, shard: str) -> str:
        """One shard's timers scored by when to look at each next (its due time, or a claim's lease end)."""
        return f"{self.prefix}:{{{shard}}}:timers-due"

    def timer_done(self, shard: str, timer_id: str) -> str:
        """Which attempt last completed or cancelled a timer (five minutes): a retry after a lost reply knows its own
        change from another's."""
        return f"{self.prefix}:{{{shard}}}:timer-done:{timer_id}"

    def timer_group(self, group: str) -> str:
        """The timers of one thread (follow-ups) or channel (schedules), in its shard: what limits count."""
        return f"{self.prefix}:{{{shard_of(group)}}}:timers-of:{group}"

    def audit(self, shard: str) -> str:
        """One shard's part of the audit stream (readers merge the shards by entry id)."""
        return f"{self.prefix}:{{{shard}}}:audit"

    def patterns(self) -> tuple[str, str]:
        """SCAN patterns that match every key of this prefix: most start with it, the work stream's lanes and dead
        letters with its name in a hash tag (``{opspilot:work}:quick``)."""
        return f"{self.prefix}:*", f"{{{self.queue()}}}:*"

    def legacy(self, name: str) -> str:
        """A key of the layout before shards (``index:paused``, ``audit``, ``outbox-due``…), read to migrate."""
        return f"{self.prefix}:{name}"
