"""Token buckets for Slack's rate limits: in Redis, one budget per workspace that every process draws on, and
in process (the fallback while Redis is away, or without Redis).

A call takes one token. One that must go (a card closing, an answer) reserves the next free slot even when the
bucket is empty — tokens go negative, callers are served in order — and waits for it. One that can wait (a
progress edit, which a newer state will supersede) takes a token only while more than ``reserve`` remain, so it
never queues ahead of the others: refused, it is told how long until one would be free.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from state.client import Client
from state.guard import guard
from state.keys import Keys

FOREVER_S = 1e9
"""``max_wait_s`` for a call that waits whatever it takes."""

# KEYS[1]: the bucket (a hash: tokens, stamp). ARGV: rate (tokens per second), capacity, reserve (tokens the call
# must leave), max_wait_s (negative: only look). Redis's clock, so processes on hosts whose clocks differ still
# share one budget. Answers {taken, wait, wait of the next call}, in microseconds (Lua numbers reach the
# caller as integers). The TTL only cleans up: a bucket gone is a full one.
_TAKE = """
local rate, capacity = tonumber(ARGV[1]), tonumber(ARGV[2])
local reserve, max_wait = tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'stamp')
local tokens = tonumber(state[1]) or capacity
local stamp = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - stamp) * rate)
local wait = math.max(0, (1 + reserve - tokens) / rate)
local taken = 0
if max_wait >= 0 and wait <= max_wait then
  taken = 1
  tokens = tokens - 1
  redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'stamp', string.format('%.6f', now))
  redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - tokens) / rate * 1000) + 1000)
end
local after = math.max(0, (1 - tokens) / rate)
return {taken, math.floor(wait * 1000000 + 0.5), math.floor(after * 1000000 + 0.5)}
"""


@dataclass(frozen=True)
class Grant:
    taken: bool
    wait_s: float
    """Taken: how long until its slot. Refused: how long until the call would have been granted."""
    next_s: float
    """How long the next call would wait for a slot (a hint, without taking one)."""


class Pacing(Protocol):
    async def take(self, workspace: str, bucket: str, *, rate: float, capacity: float, reserve: float = 0.0,
                   max_wait_s: float = FOREVER_S) -> Grant: ...


class RedisPacing:
    """Every process's calls to one workspace counted together, as Slack counts them."""

    def __init__(self, client: Client, keys: Keys) -> None:
        self.client, self.keys = client, keys
        self._take = client.register_script(_TAKE)

    async def take(self, workspace: str, bucket: str, *, rate: float, capacity: float, reserve: float = 0.0,
                   max_wait_s: float = FOREVER_S) -> Grant:
        # Not retried: a caller that cannot reach Redis paces in process instead of waiting for it.
        async with guard("pacing Slack calls"):
            taken, wait, after = await self._take(keys=[self.keys.pace(workspace, bucket)],
                                                  args=[repr(rate), repr(capacity), repr(reserve), repr(max_wait_s)])
        return Grant(bool(taken), int(wait) / 1e6, int(after) / 1e6)


class MemoryPacing:
    """The same buckets, counted in this process only."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}  # (workspace, bucket) → (tokens, stamp)

    async def take(self, workspace: str, bucket: str, *, rate: float, capacity: float, reserve: float = 0.0,
                   max_wait_s: float = FOREVER_S) -> Grant:
        now = time.monotonic()
        tokens, stamp = self._buckets.get((workspace, bucket), (capacity, now))
        tokens = min(capacity, tokens + max(0.0, now - stamp) * rate)
        wait = max(0.0, (1 + reserve - tokens) / rate)
        taken = max_wait_s >= 0 and wait <= max_wait_s
        if taken:
            tokens -= 1
            self._buckets[(workspace, bucket)] = (tokens, now)
        return Grant(taken, wait, max(0.0, (1 - tokens) / rate))
