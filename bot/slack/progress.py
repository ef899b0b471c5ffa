"""The live progress message of one run: coalesced ``chat.update`` edits, final state never lost."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.blocks import fallback_text, progress_blocks
from bot.slack.meta import RUN
from bot.slack.metrics import Metrics, slack_error
from bot.slack.pacer import Pacer
from state.store import MetaStore

log = logging.getLogger(__name__)

class ProgressMessage:
    """One message, edited as the run advances: at most one edit per ``interval_s``."""

    def __init__(self, *, client: AsyncWebClient, meta: MetaStore, metrics: Metrics, channel: str, ts: str,
                 state: dict[str, Any], interval_s: float, pacer: Pacer | None = None) -> None:
        self.client = client
        self.meta = meta
        self.metrics = metrics
        self.channel = channel
        self.ts = ts
        self.state = state
        self.interval_s = interval_s
        self.pacer = pacer or Pacer(posts_per_second=0, updates_per_minute=0)
        self._dirty = False
        self._final = False
        self._last = 0.0
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    @property
    def run_id(self) -> str:
        return str(self.state["run_id"])

    def line(self, call_id: str) -> dict[str, Any] | None:
        return next((ln for ln in self.state["lines"] if ln["call_id"] == call_id), None)

    def changed(self) -> None:
        """Note a change; an edit follows within ``interval_s`` (coalescing everything in between)."""
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._edit_soon(), name=f"progress-{self.run_id}")

    async def _edit_soon(self) -> None:
        while self._dirty:
            delay = self._last + self.interval_s - time.monotonic()
            if delay > 0 and not self._final:
                await asyncio.sleep(delay)
            await self.flush()

    async def flush(self, attempts: int = 1) -> None:
        async with self._lock:
            if not self._dirty:
                return
            await self.pacer.wait("chat.update", self.channel)  # the snapshot below is taken after the wait
            self._dirty = False
            self._last = time.monotonic()
            snapshot = json.loads(json.dumps(self.state))
            for attempt in range(attempts):
                try:
                    await self.client.chat_update(channel=self.channel, ts=self.ts, text=self._text(snapshot),
                                                  blocks=progress_blocks(snapshot))
                    break
                except SlackApiError as exc:
                    self.metrics.inc("opspilot_slack_api_errors_total", method="chat.update")
                    log.warning("progress edit of %s failed: %s", self.ts, slack_error(exc))
                    if attempt + 1 < attempts:
                        await asyncio.sleep(0.5 * (attempt + 1))
            await self.meta.put(RUN, self.run_id, {"progress": json.dumps(snapshot, ensure_ascii=False)})

    async def close(self) -> None:
        """Write the final state, after any edit in flight, retrying a failed final edit."""
        self._final = True
        self._dirty = True
        if self._task is not None and not self._task.done():
            await self._task
        await self.flush(attempts=3)

    @staticmethod
    def _text(state: dict[str, Any]) -> str:
        lines = [str(state.get("header", ""))] + [f"{ln['tool']}: {ln['status']}" for ln in state["lines"]]
        return fallback_text("\n".join(lines))
