"""The journal of changes: a mutating call is marked started before its body runs and finished after,
so that after a crash we know whether a change may have happened (and never run it twice)."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import redis.asyncio as aioredis

from state.guard import guard, text
from state.keys import Keys, Ttls


class RedisJournal:
    def __init__(self, client: aioredis.Redis, keys: Keys, ttls: Ttls) -> None:
        self.client, self.keys, self.ttls = client, keys, ttls

    async def start(self, run_id: str, call_id: str) -> bool:
        key = self.keys.journal(run_id)
        async with guard("journaling a change"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hsetnx(key, call_id, json.dumps({"state": "started", "at": time.time()}))
            pipe.expire(key, self.ttls.thread_s)
            first, _ = await pipe.execute()
        return bool(first)

    async def finish(self, run_id: str, call_id: str, status: str) -> None:
        key = self.keys.journal(run_id)
        async with guard("journaling a change"):
            await self.client.hset(key, call_id, json.dumps({"state": "finished", "status": status,
                                                             "at": time.time()}))

    async def abandon(self, run_id: str, call_id: str) -> None:
        async with guard("journaling a change"):
            await self.client.hdel(self.keys.journal(run_id), call_id)

    async def states(self, run_id: str) -> dict[str, str]:
        async with guard("reading the journal"):
            raw = await self.client.hgetall(self.keys.journal(run_id))
        return {str(text(cid)): json.loads(v).get("state", "unknown") for cid, v in raw.items()}


class MemoryJournal:
    def __init__(self) -> None:
        self._journals: dict[str, dict[str, str]] = defaultdict(dict)

    async def start(self, run_id: str, call_id: str) -> bool:
        journal = self._journals[run_id]
        if call_id in journal:
            return False
        journal[call_id] = "started"
        return True

    async def finish(self, run_id: str, call_id: str, status: str) -> None:
        self._journals[run_id][call_id] = "finished"

    async def abandon(self, run_id: str, call_id: str) -> None:
        self._journals[run_id].pop(call_id, None)

    async def states(self, run_id: str) -> dict[str, str]:
        return dict(self._journals.get(run_id, {}))
