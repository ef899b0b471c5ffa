"""Alerts where they fire: a bot message from a configured alert source starts an investigation in its own
thread (or offers an **Investigate** button), once per alert group, within a per-channel rate limit.

An automatic run is *unattended*: the alert source is its requester of record, and every change it proposes
waits for a person's Confirm (the runtime's gate, not the prompt, enforces it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bot.agent.engine import Engine
from bot.config import AlertSource, SlackConfig
from bot.slack import blocks as kit
from bot.slack.alert import Alert, parse
from bot.slack.history import material, quote_thread
from bot.slack.meta import thread_key
from bot.slack.outbox import SlackOutbox
from bot.slack.work import Converse, WorkItem
from core.redact import redact
from state.store import MetaStore

log = logging.getLogger(__name__)

ALERT = "slack-alert"  # meta kind: per channel and alert group, the thread investigating it
INVESTIGATE = "opspilot_investigate"


class Alerts:
    def __init__(self, *, config: SlackConfig, engine: Engine, meta: MetaStore, outbox: SlackOutbox,
                 dispatch: Callable[[WorkItem], Awaitable[None]]) -> None:
        self.config = config
        self.engine = engine
        self.meta = meta
        self.outbox = outbox
        self.dispatch = dispatch

    async def on_alert(self, event: dict[str, Any], source: AlertSource) -> None:
        alert = parse(event)
        channel, ts = str(event["channel"]), str(event["ts"])
        if alert is None or event.get("thread_ts") not in (None, ts):
            return  # not an alert, or a bot's reply inside a thread
        if not await self.meta.first_time(f"alert-message:{channel}:{ts}"):
            return  # the same message delivered again
        group = f"{channel}:{alert.key}"
        known = await self.meta.get(ALERT, group)
        when = kit.hhmm()
        if alert.status == "resolved":
            if known.get("thread_ts"):
                await self.outbox.say(channel, known["thread_ts"],
                                      f":white_check_mark: Resolved at {when}: {kit.escape(alert.title)}")
            return
        window = source.dedupe_window_s
        fresh = await self.meta.first_time(f"alert-window:{group}", ttl_s=window) if window else True
        if known.get("thread_ts") and (not fresh or await self.engine.under_way(thread_key(channel,
                                                                                           known["thread_ts"]))):
            log.info("alert %s in %s fired again: noted in thread %s", alert.group, channel, known["thread_ts"])
            await self.outbox.say(channel, known["thread_ts"],
                                  f":repeat: Fired again at {when} ({alert.count} firing). Already looked at in "
                                  "this thread; mention me for a fresh look.")
            return
        # Kept unquoted: each run quotes it afresh (a new nonce per request, the Investigate button's included).
        context = redact(material([event], ts, 1, self.config.thread_context_chars))
        await self.meta.put(ALERT, group, {"thread_ts": ts, "title": alert.title[:300], "context": context})
        await self.meta.put(ALERT, f"{channel}:{ts}", {"group": group})
        if source.mode == "button":
            await self._offer(channel, ts, "Want me to look into this alert?")
            return
        if not await self._within_rate(source):
            return await self._offer(channel, ts, f"Not investigating automatically: more than {source.max_runs} "
                                                  f"alerts in this channel in {source.rate_window_s // 60} min.")
        await self.dispatch(self._converse(alert, channel, ts, context, requester=_source_id(event)))

    async def investigate(self, channel: str, alert_ts: str, user: str) -> str | None:
        """Someone pressed Investigate under an alert: its run starts, with that person as the requester.
        Returns what to tell them when it does not."""
        group = (await self.meta.get(ALERT, f"{channel}:{alert_ts}")).get("group", "")
        known = await self.meta.get(ALERT, group) if group else {}
        if not known.get("context"):
            return "I no longer have this alert (it is too old); mention me in its thread instead."
        if not await self.meta.first_time(f"investigate:{channel}:{alert_ts}"):
            return "I am already on it: see this thread."
        alert = Alert("firing", known.get("title", "an alert"), group)
        await self.dispatch(self._converse(alert, channel, alert_ts, known["context"], requester=user,
                                           unattended=False))
        return None

    def _converse(self, alert: Alert, channel: str, ts: str, context: str, *, requester: str,
                  unattended: bool = True) -> Converse:
        return Converse(channel=channel, thread_ts=ts, user=requester, text=alert.question(),
                        request_id=f"{channel}:{ts}:alert", context=quote_thread(context), unattended=unattended)

    async def _within_rate(self, source: AlertSource) -> bool:
        bucket = int(time.time() // source.rate_window_s)
        started = await self.meta.count(f"alert-runs:{source.channel}:{bucket}", ttl_s=source.rate_window_s)
        if started <= source.max_runs:
            return True
        if await self.meta.first_time(f"alert-storm:{source.channel}:{bucket}", ttl_s=source.rate_window_s):
            until = kit.hhmm((bucket + 1) * source.rate_window_s)
            log.warning("alert storm in %s: automatic investigations held back until %s", source.channel, until)
            await self.outbox.say(source.channel, None,
                                  f":rotating_light: Many alerts at once: I stopped investigating them automatically "
                                  f"until {until} (limit {source.max_runs} per {source.rate_window_s // 60} min). "
                                  "Press *Investigate* under the alerts that matter.")
        return False

    async def _offer(self, channel: str, ts: str, text: str) -> None:
        blocks = [kit.mrkdwn(text), {"type": "actions", "elements": [kit.button("Investigate", INVESTIGATE, ts,
                                                                                 style="primary")]}]
        await self.outbox.message(f"alert-offer:{ts}", channel, ts, text, blocks)


def _source_id(event: dict[str, Any]) -> str:
    return str(event.get("bot_id") or event.get("app_id") or event.get("username") or "alert")
