"""A front end's own bookkeeping beside the engine's state: small hashes (where a Slack thread, progress
message or card is) and first-time markers for event dedupe. Every key carries a TTL."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, cast

from state.client import Client
from state.guard import retried, text
from state.keys import Keys, Ttls


class RedisMeta:
    def __init__(self, client: Client, keys: Keys, ttls: Ttls, outage_grace_s: float = 30.0) -> None:
        self.client, self.keys, self.ttls, self.grace_s = client, keys, ttls, outage_grace_s

    async def put(self, kind: str, name: str, fields: Mapping[str, str]) -> None:
        key = self.keys.meta(kind, name)

        async def attempt() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(key, mapping=cast(Any, dict(fields)))
            pipe.expire(key, self.ttls.thread_s)
            await pipe.execute()

        await retried("saving metadata", self.grace_s, attempt)

    async def get(self, kind: str, name: str) -> dict[str, str]:
        key = self.keys.meta(kind, name)
        raw = await retried("reading metadata", self.grace_s, lambda: self.client.hgetall(key))
        return {str(text(k)): str(text(v)) for k, v in raw.items()}

    async def first_time(self, name: str, ttl_s: int | None = None) -> bool:
        key, mark = self.keys.dedupe(name), os.urandom(6).hex()

        async def attempt() -> bool:  # a retry after a lost reply recognises its own mark
            return bool(await self.client.set(key, mark, nx=True, ex=ttl_s or self.ttls.dedupe_s)) \
                or text(await self.client.get(key)) == mark

        return await retried("deduplicating", self.grace_s, attempt)


class MemoryMeta:
    def __init__(self) -> None:
        self._meta: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        self._seen: set[str] = set()

    async def put(self, kind: str, name: str, fields: Mapping[str, str]) -> None:
        self._meta[(kind, name)].update(fields)

    async def get(self, kind: str, name: str) -> dict[str, str]:
        return dict(self._meta.get((kind, name), {}))

    async def first_time(self, name: str, ttl_s: int | None = None) -> bool:
        if name in self._seen:
            return False
        self._seen.add(name)
        return True
