"""Client-side pacing under Slack's rate limits, so bursts queue instead of meeting 429s.

``chat.postMessage``: about one message per second per channel. ``chat.update``: Tier 3, about 50 a
minute. ``chat.startStream`` / ``stopStream``: Tier 2 (20 a minute); ``chat.appendStream``: Tier 4 (100);
``assistant.threads.setStatus``: 50. Each call reserves the next free slot of a token bucket (FIFO: tokens
may go negative) and waits for it; a progress message takes its snapshot only after the wait, so edits that queue
behind others coalesce into the latest state.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass


@dataclass
class Bucket:
    rate: float  # tokens per second
    capacity: float
    tokens: float
    stamp: float

    def ready_in(self, now: float) -> float:
        """How long until a token is free, without taking one."""
        tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        return 0.0 if tokens >= 1 else (1 - tokens) / self.rate

    def reserve(self, now: float) -> float:
        """Take one token; return how long to wait for it."""
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


class Pacer:
    def __init__(self, *, posts_per_second: float = 0.95, post_burst: float = 1,
                 updates_per_minute: float = 45, update_burst: float = 5) -> None:
        self.enabled = posts_per_second > 0 and updates_per_minute > 0
        self._post = (posts_per_second, post_burst)
        self._update = (updates_per_minute / 60, update_burst)
        # Below Slack's figures (a rolling minute lets a full burst plus a full rate through, Slack does not).
        self._tiers = {"chat.update": self._update, "chat.startStream": (15 / 60, 2), "chat.stopStream": (15 / 60, 2),
                       "chat.appendStream": (80 / 60, 5), "assistant.threads.setStatus": (40 / 60, 3)}
        self._buckets: dict[str, Bucket] = {}

    def _bucket(self, key: str, rate: float, capacity: float) -> Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket(rate, capacity, capacity, time.monotonic())
        return bucket

    def delay(self, method: str, channel: str | None) -> float:
        if not self.enabled:
            return 0.0
        if method == "chat.postMessage" and channel:
            return self._bucket(f"post:{channel}", *self._post).reserve(time.monotonic())
        if method in self._tiers:
            return self._bucket(method, *self._tiers[method]).reserve(time.monotonic())
        return 0.0

    def try_reserve(self, method: str, max_wait_s: float) -> float | None:
        """Reserve a slot for ``method`` only if it comes within ``max_wait_s``: the wait, or None (nothing
        reserved). Checking and reserving at once, so concurrent callers cannot all pass the check."""
        if not self.enabled or method not in self._tiers:
            return 0.0
        bucket = self._bucket(method, *self._tiers[method])
        now = time.monotonic()
        if bucket.ready_in(now) > max_wait_s:
            return None
        return bucket.reserve(now)

    def ready_in(self, method: str) -> float:
        """Seconds until a call of ``method`` may go without queueing."""
        if not self.enabled or method not in self._tiers:
            return 0.0
        return self._bucket(method, *self._tiers[method]).ready_in(time.monotonic())

    def edit_ready_in(self) -> float:
        """Seconds until an edit may go without queueing (edits can wait: a newer state coalesces them)."""
        return self.ready_in("chat.update")

    async def wait(self, method: str, channel: str | None = None) -> None:
        delay = self.delay(method, channel)
        if delay > 0:
            await asyncio.sleep(delay)
