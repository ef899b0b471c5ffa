"""Sending one outbox record to Slack (:mod:`bot.slack.outbound.outbox` decides when): a post that looks first
whether an earlier attempt landed, an edit (through a clicked card's response URL where there is one), a stream's
next state, a removal; every Web API failure classified once — retry later, or never."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import time
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound.api_errors import SLACK_FAILURES, rate_limited, retry_after, slack_error, transient
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.hold import Hold
from bot.slack.outbound.landed import METADATA_TYPE, find_posted
from bot.slack.outbound.outgoing import message_fields as _message
from bot.slack.outbound.pacer import Pacer
from bot.slack.outbound.responses import InPlace, TryLater
from bot.slack.outbound.streams import StreamRefused, Streams
from core.outages import outage
from state.outbox_store import Delivered, OutboxRecord
from state.store import Outbox

log = logging.getLogger("bot.slack.outbound.outbox")  # the operator's log names the outbox, as before
SLACK = outage("Slack")
_STREAM_SPACING_S = 0.2


def plain_edit(record: OutboxRecord) -> bool:
    """An edit by chat.update (of a message posted already), not a stream's nor through a response URL."""
    return bool(record.get("ts")) and record.get("kind") != "stream" and not record.get("response_url")


class Retry(Exception):
    """Slack did not take it this time; it may later (``after_s``: when Slack said to come back)."""

    def __init__(self, after_s: float | None = None) -> None:
        super().__init__(after_s)
        self.after_s = after_s


HORIZON_S = 5.0
"""How far ahead a delivery reserves its turn in Slack's budget (a channel's posts, the workspace's edits); one
further off comes back when its turn would have come. A turn is reserved in Redis, for every process: one
reserved by a process that is then killed is lost, and with a long line (the soak's alert storm, ~100 posts in
one channel, with a process killed every 10 s) most of the line was turns of dead processes, and the channel's
posts crawled at a tenth of their pace."""


class Sender:
    def __init__(self, *, store: Outbox, client: AsyncWebClient, pacer: Pacer, streams: Streams, metrics: Metrics,
                 update_interval_s: float) -> None:
        self.store, self.client, self.pacer, self.streams, self.metrics = store, client, pacer, streams, metrics
        self.update_interval_s = update_interval_s
        self.in_place = InPlace(store, client, metrics, SLACK)
        self.hold: Hold | None = None
        self.delivered: list[Delivered] | None = None
        """In a delivery round: the version it sent last, saved by the round's settle (one script for the round's
        bookkeeping), or before the round goes on to its next message (:meth:`save_delivered`), so that nothing
        Slack took waits unsaved behind another message's pace. Lost with its process, a post's ts is found again
        by its "attempted" mark (saved before the call); an edit is made again, to the same state."""

    def holding(self, hold: Hold) -> Sender:
        """This sender for one delivery round: each of its Slack calls starts only while ``hold`` is sure
        (:class:`~bot.slack.outbound.hold.LeaseLost` otherwise)."""
        bound = copy.copy(self)
        bound.hold, bound.delivered = hold, []
        return bound

    async def direct(self, f: dict[str, Any], *, key: str = "", since: float = 0.0) -> None:
        """Sent now, past the store. A message that has a record (``key``): its put may have landed, only its reply
        lost, and the record delivered meanwhile — looked for first, and marked with its key, so that a record that
        lands later finds this post (:mod:`bot.slack.outbound.landed`) instead of posting it again."""
        if f.get("kind") not in ("ephemeral", "message") or not f.get("channel"):
            log.warning("%s not sent directly: not a message of its own", key or "a message")
            return
        blocks = json.loads(f["blocks"]) if f.get("blocks") else None
        if f["kind"] == "ephemeral":  # leaves no trace to look for: the one repeat the outbox allows
            await self.call("chat.postEphemeral", f["channel"], lambda: self.client.chat_postEphemeral(
                channel=f["channel"], user=f["user"], text=f["text"], thread_ts=f.get("thread_ts")))
            return
        record = OutboxRecord(key, 0, 0, 0, {**f, "attempted_at": since})
        if key and await find_posted(self.call, self.client, record, self.metrics) is not None:
            return
        metadata = {"event_type": METADATA_TYPE, "event_payload": {"key": key}} if key else None
        await self.call("chat.postMessage", f["channel"], lambda: self.client.chat_postMessage(
            channel=f["channel"], thread_ts=f.get("thread_ts"), text=f["text"], blocks=blocks, metadata=metadata))

    async def save_delivered(self, thread: str) -> None:
        """Save what this round sent so far (see :attr:`delivered`)."""
        while self.delivered:
            sent = self.delivered[0]
            await self.store.patch(thread, sent.key, sent.fields, delivered=sent.version)
            self.delivered.pop(0)

    async def edit_wait(self, record: OutboxRecord) -> float:
        """Edits of one message are spaced by ``update_interval_s``; only a card's edit queues for Slack's edit
        budget, others come back when a slot is free (:meth:`Pacer.edit_slot`), coalescing meanwhile. A stream's
        appends are spaced less (they show every step; Tier 4) and coalesce the same way."""
        if record.get("kind") == "ephemeral" or not record.get("ts"):
            return 0.0
        method, spacing_s = "chat.update", self.update_interval_s
        if record.get("kind") == "stream" and not record.get("fallback"):
            if record.get("final") or record.get("stopped"):
                return 0.0
            method, spacing_s = "chat.appendStream", _STREAM_SPACING_S
        spacing = float(record.get("sent_at", 0.0)) + spacing_s - time.time()
        return spacing if spacing > 0 else await self.pacer.edit_slot(record.key, method,
                                                                       settled=bool(record.get("settled")))

    async def send(self, thread: str, record: OutboxRecord) -> None:
        f = record.fields
        if f.get("gone"):
            await self._remove(thread, record)
            return
        if f["kind"] == "stream" and not f.get("fallback"):
            try:
                await self.streams.send(thread, record, self.call, self.store)
                return
            except StreamRefused as exc:
                log.info("progress %s as a plain message (%s)", record.key, exc.error)
                self.metrics.inc("opspilot_stream_fallbacks_total", reason=exc.error)
                await self.streams.abandon(thread, record, self.store, self.call)
                await self.store.patch(thread, record.key, {"fallback": exc.error})
        blocks = json.loads(f["blocks"]) if f.get("blocks") else None
        if f["kind"] == "ephemeral":
            await self.call("chat.postEphemeral", f["channel"], lambda: self.client.chat_postEphemeral(
                channel=f["channel"], user=f["user"], text=f["text"], thread_ts=f.get("thread_ts")))
            ts = None
        elif f.get("ts"):
            try:  # a clicked card: through the click's response URL, outside chat.update's budget
                done = bool(f.get("response_url")) and await self.in_place.edit(thread, record, blocks)
            except TryLater as exc:
                raise Retry() from exc
            if not done:
                await self._update(thread, record, blocks)
            ts = f["ts"]
        else:
            # Attempted before, or recorded late (its put may have given up and sent it directly: see `direct`).
            landed = await find_posted(self.call, self.client, record, self.metrics) \
                if f.get("attempted") or f.get("maybe_direct") else None
            if landed is None:
                await self.turn("chat.postMessage", f["channel"])  # before it counts as attempted
                # The first attempt's time stays: a look in the channel reads from just before it.
                await self.store.patch(thread, record.key, {"attempted": True,
                                                            "attempted_at": f.get("attempted_at") or time.time()})
                answer = await self.call("chat.postMessage", f["channel"], lambda: self.client.chat_postMessage(
                    channel=f["channel"], thread_ts=f.get("thread_ts"), text=f["text"], blocks=blocks,
                    metadata={"event_type": METADATA_TYPE, "event_payload": {"key": record.key}}), paced=False)
                ts = str(answer["ts"]) if answer is not None else None
            else:
                # An earlier attempt landed after all: bring it to the current state instead of posting again.
                ts = landed
                await self.store.patch(thread, record.key, {"ts": ts, "attempted": False})
                await self.call("chat.update", f["channel"], lambda: self.client.chat_update(
                    channel=f["channel"], ts=landed, text=f["text"], blocks=blocks))
        if f["kind"] == "stream" and f.get("final"):
            await self.put_then(thread, record)
        sent = Delivered(record.key, {"ts": ts, "attempted": False, "sent_at": time.time()}, record.version)
        if self.delivered is not None:
            self.delivered.append(sent)
        else:
            await self.store.patch(thread, sent.key, sent.fields, delivered=sent.version)

    async def _update(self, thread: str, record: OutboxRecord, blocks: Any) -> None:
        """``chat.update``; a fallen-back stream Slack still streams (``message_is_streaming``: its stop failed, or
        came back as a stray) is stopped first and edited on the next round, never dropped."""
        f = record.fields
        try:
            await self.call("chat.update", f["channel"], lambda: self.client.chat_update(
                channel=f["channel"], ts=f["ts"], text=f["text"], blocks=blocks), refusals=True)
        except StreamRefused as exc:
            if exc.error == "message_is_streaming" and f["kind"] == "stream":
                if f.get("final"):  # the answer does not wait for the progress message's end
                    await self.put_then(thread, record)
                with contextlib.suppress(StreamRefused):  # it will not stop: its edit is dropped, as any refused one
                    await self.streams.stop_streaming(f["channel"], f["ts"], self.call)
                    raise Retry() from exc  # stopped (or Slack failing the stop for now): edited on the next round
            log.error("Slack chat.update refused a message for good (%s): dropped", exc.error)
            self.metrics.inc("opspilot_outbox_dropped_total")

    async def _remove(self, thread: str, record: OutboxRecord) -> None:
        """A message taken back: deleted if it was posted (or landed unseen), never posted if not yet."""
        f = record.fields
        ts = f.get("ts") or (await find_posted(self.call, self.client, record, self.metrics) if f.get("attempted")
                             else None)
        if ts:
            await self.call("chat.delete", f["channel"], lambda: self.client.chat_delete(channel=f["channel"], ts=ts))
        await self.store.patch(thread, record.key, {"ts": None, "attempted": False}, delivered=record.version)

    async def put_then(self, thread: str, record: OutboxRecord) -> None:
        """A fallen-back stream's end: post what the stream would have said at its end (the answer), once."""
        f = record.fields
        if f.get("then_put"):
            return
        for key, text, then_blocks in json.loads(f.get("then") or "[]"):
            # Recorded, never sent directly: during an outage this raises and the next round puts it again.
            await self.store.put(thread, key, _message(f["channel"], f.get("thread_ts"), text, then_blocks),
                                 due=time.time())
        await self.store.patch(thread, record.key, {"then_put": True})
        f["then_put"] = True  # this round's copy too

    async def turn(self, method: str, channel: str | None) -> None:
        """Wait for the call's turn at Slack's pace; in a delivery round, only a few seconds ahead
        (:class:`~bot.slack.outbound.pacer.NotYet` otherwise, see :data:`HORIZON_S`)."""
        await self.pacer.wait(method, channel, within_s=HORIZON_S if self.hold is not None else None)

    async def call(self, method: str, channel: str | None, call: Any, refusals: bool = False,
                    paced: bool = True) -> Any:
        """The call's response; :class:`Retry` when it may succeed later; None when it never can (or, with
        ``refusals``, :class:`StreamRefused` saying why). ``paced``: False when the caller reserved its slot."""
        if paced:
            await self.turn(method, channel)
        if self.hold is not None:  # checked after the wait for its turn, which may be long
            self.hold.check()
        try:
            answer = await call()
        except SLACK_FAILURES as exc:  # a refusal, a 5xx (JSON or not), a 429, a dropped connection, a hang
            self.metrics.inc("opspilot_slack_api_errors_total", method=method)
            error = slack_error(exc)
            if not transient(exc):
                if refusals:
                    raise StreamRefused(error) from exc
                if method == "chat.delete" and error == "message_not_found":  # gone: deleted (an earlier try whose
                    return None  # answer was lost, or by someone), which is what was asked — not an error
                log.error("Slack %s refused a message for good (%s): dropped", method, error)
                self.metrics.inc("opspilot_outbox_dropped_total")
                return None
            if rate_limited(exc):
                self.metrics.inc("opspilot_slack_rate_limited_total")
            else:  # an outage is told once, then a summary a minute (core/outages.py)
                SLACK.failed(f"{method}: {error}")
            log.debug("Slack %s failed (%s): will retry", method, error)
            raise Retry(retry_after(exc)) from exc
        SLACK.ok()
        return answer
