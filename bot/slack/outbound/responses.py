"""Answering an interaction through its ``response_url`` (Slack's interactivity guide): a reply only the person sees
(a slash command's answer where the bot cannot post), or, with ``replace_original``, the clicked message edited in
place. Not a Web API method, so outside chat.update's budget (Tier 3, shared by every edit in the workspace): a
card closed this way shows who confirmed at once, however many runs are editing their progress. A URL serves 5
uses within 30 minutes; after that (404 ``used_url`` / ``expired_url``) the caller edits with chat.update."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound.blocks import Block
from bot.slack.outbound.counters import Metrics
from core.outages import Outage
from state.outbox_store import OutboxRecord
from state.store import Outbox

log = logging.getLogger(__name__)
_TRIES = 3  # attempts through a response URL (it serves 5 uses): a click's before chat.update, an answer's
RESPOND_BACKOFF_S = 0.5


class ResponseFailed(Exception):
    """The POST did not take. ``transient``: it may take later (a 5xx, a 429, no answer); else never (a used or
    expired URL, a refusal)."""

    def __init__(self, error: str, *, transient: bool) -> None:
        super().__init__(error)
        self.error, self.transient = error, transient


class TryLater(Exception):
    """The response URL failed for now: the outbox comes back to this message (the edit is idempotent, so a
    lost reply is harmless)."""


class InPlace:
    """Edits of a clicked message through the click's response URL (an outbox record's ``response_url``)."""

    def __init__(self, store: Outbox, client: AsyncWebClient, metrics: Metrics, slack: Outage) -> None:
        self.store, self.client, self.metrics, self.slack = store, client, metrics, slack

    async def edit(self, thread: str, record: OutboxRecord, blocks: list[Block] | None) -> bool:
        """True when it took; :class:`TryLater`; False when the URL cannot serve (used, expired, refused, or a few
        tries failed): the caller edits with chat.update, and the record forgets the URL."""
        f = record.fields
        tries = int(f.get("response_tries") or 0)
        if tries < _TRIES:
            try:
                await replace_original(f["response_url"], f["text"], blocks or [], session=self.client.session,
                                       timeout_s=float(self.client.timeout))
                self.slack.ok()
                return True
            except ResponseFailed as exc:
                self.metrics.inc("opspilot_slack_api_errors_total", method="response_url")
                if exc.transient and tries + 1 < _TRIES:
                    self.slack.failed(f"response_url: {exc.error}")
                    await self.store.patch(thread, record.key, {"response_tries": tries + 1})
                    raise TryLater(exc.error) from exc
                log.info("%s edited with chat.update: its response URL did not take it (%s)", record.key, exc.error)
        await self.store.patch(thread, record.key, {"response_url": ""})
        f["response_url"] = ""
        return False


def usable(url: object) -> bool:
    return isinstance(url, str) and url.startswith(("https://", "http://"))


async def post_response(url: str, payload: dict[str, Any], *, session: aiohttp.ClientSession | None = None,
                        timeout_s: float = 10.0) -> None:
    """POST ``payload`` to ``url``; :class:`ResponseFailed` unless Slack took it. ``session``: a kept one."""
    if not usable(url):
        raise ResponseFailed("no_response_url", transient=False)
    try:
        async with _session(session) as s, s.post(url, json=payload,
                                                  timeout=aiohttp.ClientTimeout(total=timeout_s)) as answer:
            status, body = answer.status, (await answer.text())[:300]
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise ResponseFailed(type(exc).__name__, transient=True) from exc
    if status == 429 or status >= 500:
        raise ResponseFailed(f"http_{status}", transient=True)
    if status >= 300:
        raise ResponseFailed(body.strip() or f"http_{status}", transient=False)
    with contextlib.suppress(ValueError):
        answer_json = json.loads(body)
        if isinstance(answer_json, dict) and answer_json.get("ok") is False:
            raise ResponseFailed(str(answer_json.get("error") or "refused"), transient=False)


async def replace_original(url: str, text: str, blocks: list[Block], *,
                           session: aiohttp.ClientSession | None = None, timeout_s: float = 10.0) -> None:
    """Edit the clicked message to ``text``/``blocks`` (idempotent: a retry after a lost reply does no harm)."""
    await post_response(url, {"replace_original": True, "text": text, "blocks": blocks}, session=session,
                        timeout_s=timeout_s)


async def respond(response_url: str, text: str) -> None:
    """An ephemeral answer through a command's or a shortcut's ``response_url`` (works where the bot cannot post):
    the only word the person gets, so a 5xx, a 429 or a dropped connection is tried again, within the URL's five
    uses (an ephemeral leaves no trace to look for: one whose reply was lost may show twice, never none); a
    timeout is not (it may still arrive)."""
    if not usable(response_url):
        return
    for attempt in range(_TRIES):
        try:
            await post_response(response_url, {"response_type": "ephemeral", "text": text})
            return
        except ResponseFailed as exc:
            # no answer in time: it may still be shown (and a worker must not wait three timeouts): not again
            if not exc.transient or exc.error == "TimeoutError" or attempt + 1 == _TRIES:
                log.warning("response_url did not take the answer: %s", exc.error)
                return
            await asyncio.sleep(RESPOND_BACKOFF_S * 2 ** attempt)


@contextlib.asynccontextmanager
async def _session(kept: aiohttp.ClientSession | None) -> AsyncIterator[aiohttp.ClientSession]:
    if kept is not None and not kept.closed:
        yield kept
        return
    async with aiohttp.ClientSession() as session:
        yield session
