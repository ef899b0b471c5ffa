"""Where things are in Slack, kept in the front end's metadata store (each a small hash with the thread's TTL).

    slack-thread  engine thread id → channel, thread_ts           (written when a conversation starts)
    slack-run     run id → the model that answered (feedback); its rendered state until issue 39 (now saved
                  beside the thread's outbox, ``Keys.outbox_state``: read here for runs paused before)
    slack-card    question token → channel, ts of its card, summary, decided (the final wording, once)
    slack-storm   an alert storm's note key → said (its note was put in the outbox: later refusals need not)
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping

from state.keys import Renewals
from state.store import Admission, MetaStore

THREAD, RUN, CARD, STORM = "slack-thread", "slack-run", "slack-card", "slack-storm"


def thread_key(channel: str, thread_ts: str) -> str:
    """The engine's thread id for a Slack thread."""
    return f"slack:{channel}:{thread_ts}"


def channel_of(thread_id: str) -> str:
    """The Slack channel of an engine thread id ("" for a thread that is not Slack's)."""
    kind, _, rest = thread_id.partition(":")
    return rest.partition(":")[0] if kind == "slack" else ""


PLACE = ("channel", "thread_ts", "lang")
"""A thread's place and language: written when its first conversation starts and never changed after ("a thread
keeps the language of its first question"), so a process may keep them."""


class KnownThreads:
    """The metadata store, with each thread's place and language (:data:`PLACE`) kept in this process once known:
    every surface reads them (the front's limits, the worker, the progress, feedback), and a conversation wrote
    them again with each question. A write that changes nothing is left out, but for the TTL's hourly renewal; the
    copy is read from Redis again after ``keep_s`` (an entry that expired and was made again is seen then)."""

    def __init__(self, meta: MetaStore, *, keep_s: float = 3600.0, size: int = 4096) -> None:
        self.meta, self.keep_s, self.size = meta, keep_s, size
        self._known: OrderedDict[str, tuple[float, dict[str, str]]] = OrderedDict()
        self.renewals = Renewals(every_s=keep_s)

    async def get(self, kind: str, name: str) -> dict[str, str]:
        if kind == THREAD and (known := self._fresh(name)) is not None:
            return dict(known)
        fields = await self.meta.get(kind, name)
        if kind == THREAD and all(fields.get(f) for f in PLACE):
            self._keep(name, fields)
        return fields

    async def put(self, kind: str, name: str, fields: Mapping[str, str]) -> None:
        if kind != THREAD:
            await self.meta.put(kind, name, fields)
            return
        known = self._fresh(name)
        if known is not None and all(known.get(k) == v for k, v in fields.items()) and not self.renewals.due(name):
            return
        try:
            await self.meta.put(kind, name, fields)
        except BaseException:
            self.renewals.forget(name)
            raise
        if known is None:
            self.renewals.due(name)  # renewed by this write
        merged = {**(known or {}), **fields}
        if all(merged.get(f) for f in PLACE):
            self._keep(name, merged)

    def cached(self, name: str) -> dict[str, str]:
        """A thread's place and language as this process knows them, without asking the store (it may be away)."""
        return dict(self._fresh(name) or {})

    def _fresh(self, name: str) -> dict[str, str] | None:
        entry = self._known.get(name)
        if entry is None or time.monotonic() - entry[0] > self.keep_s:
            return None
        return entry[1]

    def _keep(self, name: str, fields: Mapping[str, str]) -> None:
        self._known[name] = (time.monotonic(), dict(fields))
        self._known.move_to_end(name)
        while len(self._known) > self.size:
            self._known.popitem(last=False)

    async def first_time(self, name: str, ttl_s: int | None = None) -> bool:
        return await self.meta.first_time(name, ttl_s)

    async def claim(self, name: str, holder: str, ttl_s: int) -> str:
        return await self.meta.claim(name, holder, ttl_s)

    async def unclaim(self, name: str, holder: str) -> None:
        await self.meta.unclaim(name, holder)

    async def count(self, name: str, ttl_s: int) -> int:
        return await self.meta.count(name, ttl_s)

    async def admit(self, name: str, member: str, *, limit: int, window_s: float, now: float) -> Admission:
        return await self.meta.admit(name, member, limit=limit, window_s=window_s, now=now)

    async def withdraw(self, name: str, member: str) -> None:
        await self.meta.withdraw(name, member)

    async def remember(self, name: str, value: str, *, keep: int) -> None:
        await self.meta.remember(name, value, keep=keep)

    async def recall(self, name: str) -> list[str]:
        return await self.meta.recall(name)


def known_lang(meta: MetaStore, channel: str, thread_ts: str | None) -> str | None:
    """The thread's language as this process last saw it, with no store call (for what is said while it is away)."""
    if not thread_ts or not isinstance(meta, KnownThreads):
        return None
    return meta.cached(thread_key(channel, thread_ts)).get("lang") or None
