"""The message a slash command's thread starts from ("<@U1> asked: …"), posted once per command.

A command is read again when the worker that read it died before acknowledging it, and Slack may post a message
whose answer never comes back (a 5xx after acting, a hang). So the post carries the command's key in its metadata,
its ts is kept once known (a command read again answers in the thread it started), and an attempt whose answer
was lost is looked for in the channel before anything is said or tried again — never "send it again" about a
message that is there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound.api_errors import (
    SLACK_FAILURES,
    may_have_acted,
    rate_limited,
    retried,
    retry_after,
    slack_error,
)
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.landed import METADATA_TYPE, find_posted
from bot.slack.outbound.pacer import Pacer
from core.redact import redact
from state.outbox_store import OutboxRecord
from state.store import MetaStore

log = logging.getLogger(__name__)

KIND = "command-thread"
TRIES = 3
BACKOFF_S = 1.0
MAX_WAIT_S = 10.0  # a longer Retry-After: given up and said (the person sends it again), not held in a worker


class ThreadStarts:
    def __init__(self, *, client: AsyncWebClient, pacer: Pacer, meta: MetaStore, metrics: Metrics) -> None:
        self.client, self.pacer, self.meta, self.metrics = client, pacer, meta, metrics

    async def start(self, channel: str, text: str, key: str) -> tuple[str | None, str]:
        """The thread's ts, or None and why not: Slack's refusal (nothing was posted), or ``unconfirmed`` (Slack
        did not answer and the message was not found: it may still appear)."""
        kept = await self.meta.get(KIND, key)
        if kept.get("ts"):
            return kept["ts"], ""  # posted by an earlier reading of this command
        since = float(kept.get("attempted_at") or 0) or time.time()
        if kept.get("attempted_at") and (landed := await self._landed(channel, key, since)):
            return await self._kept(key, landed), ""
        await self.meta.put(KIND, key, {"attempted_at": f"{since:.6f}"})  # before it may land
        # A 429 or a 5xx Slack answered must not drop the question: tried again (a 429 after its Retry-After; a 5xx
        # once the post was looked for after a pause and is surely not there). No answer at all (a timeout) is not
        # tried again: the post may still be on its way, and a second one would show the question twice.
        for attempt in range(1, TRIES + 1):
            await self.pacer.wait("chat.postMessage", channel)
            try:
                answer = await self.client.chat_postMessage(
                    channel=channel, text=redact(text),
                    metadata={"event_type": METADATA_TYPE, "event_payload": {"key": key}})
            except SLACK_FAILURES as exc:
                self.metrics.inc("opspilot_slack_api_errors_total", method="chat.postMessage")
                last = attempt == TRIES
                if not may_have_acted(exc):
                    wait = retry_after(exc) or BACKOFF_S
                    limited = rate_limited(exc) or slack_error(exc) == "ratelimited"
                    if limited and not last and wait <= MAX_WAIT_S:
                        await asyncio.sleep(wait)
                        continue
                    return None, slack_error(exc)  # refused: nothing was posted
                log.warning("the thread of command %s: no answer from Slack (%s); looking for it", key,
                            slack_error(exc))
                if not last and isinstance(exc, SlackApiError):  # Slack answered, failing: look after a pause
                    await asyncio.sleep(BACKOFF_S * 2 ** (attempt - 1))
                landed = await self._landed(channel, key, since)
                if landed:
                    return await self._kept(key, landed), ""
                if landed is None or last or not isinstance(exc, SlackApiError):
                    return None, "unconfirmed"  # not known to be absent, or perhaps still on its way
                continue
            return await self._kept(key, str(answer["ts"])), ""
        raise AssertionError("unreachable")  # the loop returns

    async def _kept(self, key: str, ts: str) -> str:
        await self.meta.put(KIND, key, {"ts": ts})
        return ts

    async def _landed(self, channel: str, key: str, since: float) -> str | None:
        """The post's ts; "" when it is surely not there; None when that could not be told (Slack failing)."""
        async def call(method: str, where: str | None, request: Any) -> Any:
            await self.pacer.wait(method, where)
            return await retried(method, request, attempts=3)  # one 5xx must not leave a posted question unanswered

        record = OutboxRecord(key, 0, 0, 0, {"channel": channel, "attempted_at": since})
        try:
            return await find_posted(call, self.client, record, self.metrics) or ""
        except SLACK_FAILURES as exc:  # not known: said as such, never as "not posted"
            log.warning("could not look for the thread of command %s: %s", key, slack_error(exc))
            return None
