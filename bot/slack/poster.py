"""Every Web API call OpsPilot makes goes through here: paced under Slack's limits, and a failure is
counted and logged for the operator, never raised into a listener or a run."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack import blocks as kit
from bot.slack.metrics import Metrics, slack_error
from bot.slack.pacer import Pacer

log = logging.getLogger(__name__)


class Poster:
    def __init__(self, client: AsyncWebClient, pacer: Pacer, metrics: Metrics) -> None:
        self.client = client
        self.pacer = pacer
        self.metrics = metrics

    async def call(self, method: str, call: Callable[[], Awaitable[Any]], channel: str | None = None) -> Any:
        """The call's response, or None if Slack refused it (already logged and counted)."""
        await self.pacer.wait(method, channel)
        try:
            return await call()
        except SlackApiError as exc:
            self.metrics.inc("opspilot_slack_api_errors_total", method=method)
            log.warning("Slack %s failed: %s", method, slack_error(exc))
            return None

    async def post(self, channel: str, text: str, blocks: list[kit.Block] | None = None,
                   thread_ts: str | None = None) -> Any:
        return await self.call("chat.postMessage", lambda: self.client.chat_postMessage(
            channel=channel, thread_ts=thread_ts, text=text, blocks=blocks), channel=channel)

    async def update(self, channel: str, ts: str, text: str, blocks: list[kit.Block]) -> Any:
        return await self.call("chat.update", lambda: self.client.chat_update(
            channel=channel, ts=ts, text=text, blocks=blocks), channel=channel)

    async def say(self, channel: str, thread_ts: str, text: str) -> None:
        await self.post(channel, kit.fallback_text(text), [kit.mrkdwn(text)], thread_ts=thread_ts)

    async def tell(self, channel: str, user: str, text: str, thread_ts: str | None = None) -> None:
        """An ephemeral message only ``user`` sees."""
        await self.call("chat.postEphemeral", lambda: self.client.chat_postEphemeral(
            channel=channel, user=user, text=text, thread_ts=thread_ts))
