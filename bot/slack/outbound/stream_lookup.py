"""Finding a stream again after Slack's answer was lost: the one a start began, and whether our stop landed.

A post carries its outbox key in Slack message ``metadata`` from the start (see :mod:`bot.slack.outbound.landed`); a
stream gets it only when it stops (``chat.stopStream`` takes metadata, ``chat.startStream`` does not) and a live
stream shows nothing else to know it by, so one whose start answer was lost is found by elimination
(:func:`strangers`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound.landed import METADATA_TYPE, PAGES

Call = Callable[..., Awaitable[Any]]
"""The outbox's way to call Slack: ``call(method, channel, fn, refusals=False, paced=True)``."""


def mark(key: str) -> dict[str, Any]:
    """The metadata that marks a message as outbox message ``key``."""
    return {"event_type": METADATA_TYPE, "event_payload": {"key": key}}


def marked(message: dict[str, Any]) -> str | None:
    """The outbox key a message is marked with, or None."""
    meta = message.get("metadata") or {}
    if not isinstance(meta, dict) or meta.get("event_type") != METADATA_TYPE:
        return None
    return str((meta.get("event_payload") or {}).get("key") or "") or None


async def replies(call: Call, client: AsyncWebClient, channel: str, thread_ts: str,
                  oldest: str | None = None) -> AsyncIterator[dict[str, Any]]:
    """The thread's messages with their metadata, oldest first (from ``oldest`` on, inclusive, when given)."""
    cursor: str | None = None
    for _ in range(PAGES):
        page = await call("conversations.replies", None, lambda c=cursor: client.conversations_replies(
            channel=channel, ts=thread_ts, include_all_metadata=True, limit=200, cursor=c, oldest=oldest,
            inclusive=True if oldest else None))
        for message in (page or {}).get("messages", []):
            yield message
        cursor = ((page or {}).get("response_metadata") or {}).get("next_cursor") or None
        if not cursor:
            return


async def strangers(call: Call, client: AsyncWebClient, channel: str, thread_ts: str, *, around: float,
                    skew_s: float, me: dict[str, Any], known: set[str]) -> list[str]:
    """The ts of messages in the thread that this app posted from ``around - skew_s`` on but the outbox does not
    know (no ts of a record, no mark), nearest ``around`` first: a stream whose start answer was lost, or a
    message sent without the outbox (a store-down notice, a file), which a stream call refuses."""
    found: list[str] = []
    async for message in replies(call, client, channel, thread_ts, oldest=f"{around - skew_s:.6f}"):
        ts = str(message.get("ts") or "")
        mine = (me.get("user_id") and message.get("user") == me["user_id"]) or \
            (me.get("bot_id") and message.get("bot_id") == me["bot_id"])
        if mine and ts != thread_ts and ts not in known and float(ts) >= around - skew_s \
                and marked(message) is None and not message.get("files"):
            found.append(ts)
    return sorted(found, key=lambda ts: abs(float(ts) - around))
