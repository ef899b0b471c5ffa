"""The journal of changes: a mutating call is marked started before its body runs and finished after,
so that after a crash we know whether a change may have happened (and never run it twice)."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from state.client import Client
from state.guard import retried, text
from state.keys import Keys, Ttls


class RedisJournal:
    def __init__(self, client: Client, keys: Keys, ttls: Ttls, outage_grace_s: float = 30.0) -> None:
        self.client, self.keys, self.ttls, self.grace_s = client, keys, ttls, outage_grace_s

    async def start(self, run_id: str, call_id: str, arguments: Mapping[str, Any] | None = None) -> bool:
        key = self.keys.journal(run_id)
        # Marked with a nonce: a retry after a lost reply recognises its own first attempt. With the arguments it
        # runs with (a form's answers included): a change cut off by a crash is audited as what may have run.
        mark = json.dumps({"state": "started", "at": time.time(), "by": os.urandom(6).hex(),
                           "arguments": dict(arguments or {})}, ensure_ascii=False, default=str)

        async def attempt() -> bool:
            pipe = self.client.pipeline(transaction=True)
            pipe.hsetnx(key, call_id, mark)
            pipe.expire(key, self.ttls.thread_s)
            first, _ = await pipe.execute()
            return bool(first) or text(await self.client.hget(key, call_id)) == mark

        return await retried("journaling a change", self.grace_s, attempt)

    async def finish(self, run_id: str, call_id: str, status: str,
                     arguments: Mapping[str, Any] | None = None) -> None:
        key = self.keys.journal(run_id)
        # With what it ran with, still: a worker lost before the result was saved audits it as that, not as the
        # model's call (a form's environment dropped).
        mark = json.dumps({"state": "finished", "status": status, "at": time.time(),
                           "arguments": dict(arguments or {})}, ensure_ascii=False, default=str)
        await retried("journaling a change", self.grace_s, lambda: self.client.hset(key, call_id, mark))

    async def abandon(self, run_id: str, call_id: str) -> None:
        key = self.keys.journal(run_id)
        await retried("journaling a change", self.grace_s, lambda: self.client.hdel(key, call_id))

    async def states(self, run_id: str) -> dict[str, str]:
        key = self.keys.journal(run_id)
        raw = await retried("reading the journal", self.grace_s, lambda: self.client.hgetall(key))
        return {str(text(cid)): json.loads(v).get("state", "unknown") for cid, v in raw.items()}

    async def arguments(self, run_id: str) -> dict[str, dict[str, Any]]:
        """call id → the arguments it started with (a mark written before they were kept: none)."""
        key = self.keys.journal(run_id)
        raw = await retried("reading the journal", self.grace_s, lambda: self.client.hgetall(key))
        return {str(text(cid)): dict(json.loads(v).get("arguments") or {}) for cid, v in raw.items()}


class MemoryJournal:
    def __init__(self) -> None:
        self._journals: dict[str, dict[str, str]] = defaultdict(dict)
        self._arguments: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)

    async def start(self, run_id: str, call_id: str, arguments: Mapping[str, Any] | None = None) -> bool:
        journal = self._journals[run_id]
        if call_id in journal:
            return False
        journal[call_id] = "started"
        self._arguments[run_id][call_id] = dict(arguments or {})
        return True

    async def finish(self, run_id: str, call_id: str, status: str,
                     arguments: Mapping[str, Any] | None = None) -> None:
        self._journals[run_id][call_id] = "finished"
        if arguments is not None:
            self._arguments[run_id][call_id] = dict(arguments)

    async def abandon(self, run_id: str, call_id: str) -> None:
        self._journals[run_id].pop(call_id, None)

    async def states(self, run_id: str) -> dict[str, str]:
        return dict(self._journals.get(run_id, {}))

    async def arguments(self, run_id: str) -> dict[str, dict[str, Any]]:
        return dict(self._arguments.get(run_id, {}))
