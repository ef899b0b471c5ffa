"""What people said about answers (👍 / 👎), with the context to act on it: the run, its question and answer
(scrubbed), the model that wrote it, who rated it, why, and a link to the thread.

One vote per person per answer: the entry's own key is set only if absent (its TTL is ``Ttls.feedback_s``),
and only then is the entry added to its shard's newest-first list of that rating (kept short), in one script.
A retry after a lost reply finds its own entry there and counts as the same vote.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from state.client import Client
from state.guard import guard, retried, text
from state.keys import Keys, Ttls, all_shards, shard_of

Rating = Literal["up", "down"]
Reason = Literal["wrong_facts", "missed", "too_slow", "other", ""]
"""What was wrong with an answer rated 👎 ("": not said)."""
REASONS: tuple[Reason, ...] = ("wrong_facts", "missed", "too_slow", "other")

QUESTION_CHARS, ANSWER_CHARS, NOTE_CHARS = 2000, 4000, 500
KEEP = 100
"""Entries of each rating kept per shard for the "latest" lists (16 shards: the newest 1,600 at least)."""

# KEYS: the entry, its shard's list for its rating. ARGV: the entry (JSON), TTL (s), how many the list keeps.
_ADD = """
local stored = redis.call('GET', KEYS[1])
if stored then return stored == ARGV[1] and 1 or 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('LPUSH', KEYS[2], ARGV[1])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
"""


class FeedbackEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    thread_id: str
    rating: Rating
    reason: Reason = ""
    note: str = ""
    question: str
    answer: str
    model: str
    user: str
    at: float
    link: str = ""
    """The answer's permalink in Slack ("" when Slack would not give one)."""

    @classmethod
    def of(cls, **fields: object) -> FeedbackEntry:
        """An entry with its texts cut to what is kept (the link to the thread has the rest)."""
        for name, limit in (("question", QUESTION_CHARS), ("answer", ANSWER_CHARS), ("note", NOTE_CHARS)):
            value = str(fields.get(name) or "")
            fields[name] = value if len(value) <= limit else value[:limit - 1] + "…"
        fields.setdefault("at", time.time())
        return cls.model_validate(fields)


class Feedbacks(Protocol):
    async def add(self, entry: FeedbackEntry) -> bool:
        """Store ``entry``; False if its user already rated its run (nothing stored)."""

    async def rated(self, run_id: str, thread_id: str, user: str) -> bool: ...

    async def latest(self, rating: Rating, count: int = 10) -> list[FeedbackEntry]:
        """The newest ``count`` entries with ``rating``, newest first."""


class RedisFeedbacks:
    def __init__(self, client: Client, keys: Keys, ttls: Ttls, outage_grace_s: float = 30.0) -> None:
        self.client, self.keys, self.ttls, self.grace_s = client, keys, ttls, outage_grace_s
        self._add = client.register_script(_ADD)

    async def add(self, entry: FeedbackEntry) -> bool:
        shard = shard_of(entry.thread_id)
        keys = [self.keys.feedback(shard, entry.run_id, entry.user), self.keys.feedback_latest(shard, entry.rating)]
        args: list[str | int] = [entry.model_dump_json(), self.ttls.feedback_s, KEEP]
        return bool(await retried("storing feedback", self.grace_s, lambda: self._add(keys=keys, args=args)))

    async def rated(self, run_id: str, thread_id: str, user: str) -> bool:
        key = self.keys.feedback(shard_of(thread_id), run_id, user)
        return bool(await retried("reading feedback", self.grace_s, lambda: self.client.exists(key)))

    async def latest(self, rating: Rating, count: int = 10) -> list[FeedbackEntry]:
        async with guard("reading feedback"):
            pipe = self.client.pipeline(transaction=False)
            for shard in all_shards():
                pipe.lrange(self.keys.feedback_latest(shard, rating), 0, count - 1)
            parts: list[list[str | bytes]] = await pipe.execute()
        return _newest([str(text(raw)) for part in parts for raw in part or []], count)


class MemoryFeedbacks:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], str] = {}
        self._lists: dict[str, list[str]] = defaultdict(list)

    async def add(self, entry: FeedbackEntry) -> bool:
        raw = entry.model_dump_json()
        stored = self._entries.setdefault((entry.run_id, entry.user), raw)
        if stored is raw:
            self._lists[entry.rating] = [raw, *self._lists[entry.rating]][:KEEP * 16]
        return stored == raw

    async def rated(self, run_id: str, thread_id: str, user: str) -> bool:
        return (run_id, user) in self._entries

    async def latest(self, rating: Rating, count: int = 10) -> list[FeedbackEntry]:
        return _newest(self._lists[rating], count)


def _newest(rows: list[str], count: int) -> list[FeedbackEntry]:
    entries = []
    for raw in rows:
        try:
            entries.append(FeedbackEntry.model_validate_json(raw))
        except ValidationError:
            continue  # written by another version: not shown rather than failing the list
    return sorted(entries, key=lambda e: e.at, reverse=True)[:count]
