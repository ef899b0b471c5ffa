"""A message's link as Slack gives it (right on Enterprise Grid, in a shared channel and in the local Slack):
every list and record that links a thread asks here."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound.api_errors import SLACK_FAILURES, slack_error

log = logging.getLogger(__name__)


async def permalink(client: AsyncWebClient, channel: str, ts: str | None) -> str:
    """``chat.getPermalink``; "" when there is no message or Slack cannot say (a deleted message links nowhere: left
    out, never made up)."""
    if not ts:
        return ""
    try:
        answer: Any = await client.chat_getPermalink(channel=channel, message_ts=ts)
    except SLACK_FAILURES as exc:
        log.info("no permalink for %s/%s: %s", channel, ts, slack_error(exc))
        return ""
    return str(answer.get("permalink") or "")
