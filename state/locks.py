"""Who may act now: claim-once answers, per-thread leases, once-per-tick sweeps and cancel flags.
Every one of them expires by itself, so a dead process never holds one for good."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from typing import Any

from state.client import Client
from state.guard import RELEASE_IF_HELD, RENEW_IF_HELD, guard, retried, text
from state.keys import Keys, Ttls
from state.store import Claim

# Claim-once: SET NX wins, otherwise report the holder and the claim's remaining TTL (hence its age).
_CLAIM = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return {1, ARGV[1], -1} end
return {0, redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}
"""


_ATTEMPTS = itertools.count(1)
_MARK = "\x1f"  # between a claim's holder and the attempt that wrote it


def _attempt() -> str:
    """Unique per claim attempt, across processes: a retry after a lost reply recognises its own write."""
    return f"{os.getpid()}.{next(_ATTEMPTS)}"


class RedisLocks:
    def __init__(self, client: Client, keys: Keys, ttls: Ttls, outage_grace_s: float = 30.0) -> None:
        self.client, self.keys, self.ttls, self.grace_s = client, keys, ttls, outage_grace_s
        self._claim = client.register_script(_CLAIM)
        self._renew = client.register_script(RENEW_IF_HELD)
        self._release = client.register_script(RELEASE_IF_HELD)

    async def claim(self, token: str, holder: str) -> Claim:
        ttl = self.ttls.interrupt_s + self.ttls.claim_margin_s
        mine = f"{holder}{_MARK}{_attempt()}"
        keys = [self.keys.claim(token)]
        # Retried through an outage (a Redis restart leaves stale pooled connections behind): the attempt id
        # tells a retry whose first try landed (its own value is there) from a claim someone else won.
        won, who, left = await retried("claiming an interrupt", self.grace_s,
                                       lambda: self._claim(keys=keys, args=[mine, ttl]))
        value = str(text(who) or "")
        won = bool(won) or value == mine
        age_s = ttl - int(left) / 1000 if not won and int(left) >= 0 else 0.0
        return Claim(won, value.split(_MARK, 1)[0], age_s)

    async def claimed_by(self, token: str) -> str | None:
        key = self.keys.claim(token)
        value = text(await retried("reading a claim", self.grace_s, lambda: self.client.get(key)))
        return str(value).split(_MARK, 1)[0] if value else None

    async def release_claim(self, token: str) -> None:
        key = self.keys.claim(token)
        await retried("releasing a claim", self.grace_s, lambda: self.client.delete(key))

    async def take_claim(self, token: str, holder: str) -> None:
        key, ttl = self.keys.claim(token), self.ttls.interrupt_s + self.ttls.claim_margin_s
        await retried("taking over a claim", self.grace_s,
                      lambda: self.client.set(key, f"{holder}{_MARK}{_attempt()}", ex=ttl))

    async def acquire_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool:
        key = self.keys.lease(thread_id)

        async def attempt() -> bool:  # a retry after a lost reply finds its own owner id there
            if await self.client.set(key, owner, nx=True, px=ttl_ms):
                return True
            return text(await self.client.get(key)) == owner

        return await retried("taking the thread lease", self.grace_s, attempt)

    async def leased(self, thread_id: str) -> bool:
        key = self.keys.lease(thread_id)
        return bool(await retried("reading the thread lease", self.grace_s, lambda: self.client.exists(key)))

    async def renew_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool:
        keys = [self.keys.lease(thread_id)]
        return bool(await retried("renewing the thread lease", self.grace_s,
                                  lambda: self._renew(keys=keys, args=[owner, ttl_ms])))

    async def release_lease(self, thread_id: str, owner: str) -> None:
        keys = [self.keys.lease(thread_id)]
        await retried("releasing the thread lease", self.grace_s, lambda: self._release(keys=keys, args=[owner]))

    async def once(self, name: str, ttl_s: int) -> bool:
        async with guard("claiming a tick"):
            return bool(await self.client.set(self.keys.once(name), "1", nx=True, ex=ttl_s))

    async def request_cancel(self, run_id: str, by: str = "") -> None:
        key = self.keys.cancel(run_id)  # the flag's value says who asked
        await retried("requesting a cancel", self.grace_s, lambda: self.client.set(key, by or "1",
                                                                                     ex=self.ttls.cancel_s))

    async def clear_cancel(self, run_id: str) -> None:
        key = self.keys.cancel(run_id)
        await retried("clearing a cancel", self.grace_s, lambda: self.client.delete(key))

    async def cancel_requests(self, run_ids: Sequence[str]) -> dict[str, str]:
        """The runs asked to stop, each with who asked ("" when unknown)."""
        if not run_ids:
            return {}
        async with guard("checking for cancels"):
            pipe = self.client.pipeline(transaction=False)  # not MGET: the flags live in different slots
            for run_id in run_ids:
                pipe.get(self.keys.cancel(run_id))
            flags: list[Any] = await pipe.execute()
        return {run_id: "" if text(flag) == "1" else str(text(flag))
                for run_id, flag in zip(run_ids, flags, strict=True) if flag}


class MemoryLocks:
    def __init__(self) -> None:
        self._claims: dict[str, tuple[str, float]] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self._once: dict[str, float] = {}
        self._cancels: dict[str, str] = {}

    async def claim(self, token: str, holder: str) -> Claim:
        if token in self._claims:
            who, at = self._claims[token]
            return Claim(False, who, time.monotonic() - at)
        self._claims[token] = (holder, time.monotonic())
        return Claim(True, holder)

    async def claimed_by(self, token: str) -> str | None:
        return self._claims[token][0] if token in self._claims else None

    async def release_claim(self, token: str) -> None:
        self._claims.pop(token, None)

    async def take_claim(self, token: str, holder: str) -> None:
        self._claims[token] = (holder, time.monotonic())

    def holder(self, thread_id: str) -> str | None:
        held = self._leases.get(thread_id)
        return held[0] if held is not None and held[1] >= time.monotonic() else None

    async def acquire_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool:
        if self.holder(thread_id) is not None:
            return False
        self._leases[thread_id] = (owner, time.monotonic() + ttl_ms / 1000)
        return True

    async def leased(self, thread_id: str) -> bool:
        return self.holder(thread_id) is not None

    async def renew_lease(self, thread_id: str, owner: str, ttl_ms: int) -> bool:
        if self.holder(thread_id) != owner:
            return False
        self._leases[thread_id] = (owner, time.monotonic() + ttl_ms / 1000)
        return True

    async def release_lease(self, thread_id: str, owner: str) -> None:
        if self.holder(thread_id) == owner:
            del self._leases[thread_id]

    async def once(self, name: str, ttl_s: int) -> bool:
        now = time.monotonic()
        if self._once.get(name, 0.0) > now:
            return False
        self._once[name] = now + ttl_s
        return True

    async def request_cancel(self, run_id: str, by: str = "") -> None:
        self._cancels[run_id] = by

    async def clear_cancel(self, run_id: str) -> None:
        self._cancels.pop(run_id, None)

    async def cancel_requests(self, run_ids: Sequence[str]) -> dict[str, str]:
        return {r: self._cancels[r] for r in run_ids if r in self._cancels}
