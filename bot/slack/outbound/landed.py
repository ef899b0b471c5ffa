"""A post whose answer never came (a timeout, a 5xx, a dropped connection) may have landed: before posting it
again the outbox looks for it. Every post carries its outbox key in Slack message ``metadata``; a reply is looked
for in its thread (``conversations.replies``), a post outside a thread in its channel from just before its first
attempt (``conversations.history``, newest first). Both read a bounded number of pages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound.counters import Metrics
from state.outbox_store import OutboxRecord

METADATA_TYPE = "opspilot_message"
PAGES = 50
"""Up to 10,000 messages: a post is looked for only after its answer was lost, and a busy channel or a long
thread must not turn the look into an endless read."""
SKEW_S = 120.0
"""How far before the first attempt a channel is read: Slack's clock (a message's ts) and ours may differ."""

Call = Callable[[str, str | None, Callable[[], Awaitable[Any]]], Awaitable[Any]]


async def find_posted(call: Call, client: AsyncWebClient, record: OutboxRecord, metrics: Metrics) -> str | None:
    """The ts of an earlier attempt of this post that landed after all, or None. ``call`` is the outbox's own
    (paced, retried: a lookup that fails is tried again with the post)."""
    f = record.fields
    channel = f["channel"]

    def page(cursor: str | None) -> Callable[[], Awaitable[Any]]:
        if f.get("thread_ts"):
            return lambda: client.conversations_replies(channel=channel, ts=f["thread_ts"],
                                                        include_all_metadata=True, limit=200, cursor=cursor)
        since = float(f.get("attempted_at") or f.get("put_at") or 0)
        oldest = f"{max(since - SKEW_S, 0):.6f}" if since else None  # recorded by an older version: newest first
        return lambda: client.conversations_history(channel=channel, oldest=oldest, include_all_metadata=True,
                                                    limit=200, cursor=cursor)

    method = "conversations.replies" if f.get("thread_ts") else "conversations.history"
    cursor: str | None = None
    for _ in range(PAGES):
        answer = await call(method, None, page(cursor)) or {}
        for message in answer.get("messages", []):
            meta = message.get("metadata") or {}
            if meta.get("event_type") == METADATA_TYPE and (meta.get("event_payload") or {}).get("key") == record.key:
                metrics.inc("opspilot_outbox_duplicates_avoided_total")
                return str(message["ts"])
        cursor = (answer.get("response_metadata") or {}).get("next_cursor") or None
        if not cursor:
            return None
    return None
