"""A front end's own bookkeeping beside the engine's state: small hashes (where a Slack thread, progress
message or card is) and first-time markers for event dedupe. Every key carries a TTL."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any, cast

import redis.asyncio as aioredis

from state.guard import guard, text
from state.keys import Keys, Ttls


class RedisMeta:
    def __init__(self, client: aioredis.Redis, keys: Keys, ttls: Ttls) -> None:
        self.client, self.keys, self.ttls = client, keys, ttls

    async def put(self, kind: str, name: str, fields: Mapping[str, str]) -> None:
        key = self.keys.meta(kind, name)
        async with guard("saving metadata"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(key, mapping=cast(Any, dict(fields)))
            pipe.expire(key, self.ttls.thread_s)
            await pipe.execute()

    async def get(self, kind: str, name: str) -> dict[str, str]:
        async with guard("reading metadata"):
            raw = await self.client.hgetall(self.keys.meta(kind, name))
        return {str(text(k)): str(text(v)) for k, v in raw.items()}

    async def first_time(self, name: str, ttl_s: int | None = None) -> bool:
        async with guard("deduplicating"):
            return bool(await self.client.set(self.keys.dedupe(name), "1", nx=True, ex=ttl_s or self.ttls.dedupe_s))


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
