"""Every message OpsPilot shows in Slack goes through here: recorded in the store before it is sent,
then delivered in order per thread, retried with backoff until Slack accepts it, a newer state of
the same message (a progress edit, a card closing) superseding one not yet sent.

A post whose answer never came (a timeout, a 5xx, a dropped connection) may have landed: before
posting it again we look for it, in its thread or its channel, by the outbox key every post carries in
Slack message ``metadata`` (:mod:`bot.slack.outbound.landed`). Ephemerals leave no trace to look for, so one that
timed out may be shown twice; that is the only duplicate this allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import time
import uuid
from collections.abc import Sequence
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound import blocks as kit
from bot.slack.outbound.api_errors import SLACK_FAILURES, rate_limited, retry_after, slack_error, transient
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.landed import METADATA_TYPE as METADATA_TYPE  # where history.py reads it from too
from bot.slack.outbound.landed import find_posted
from bot.slack.outbound.outgoing import message_fields as _message
from bot.slack.outbound.outgoing import redact, redact_blocks
from bot.slack.outbound.pacer import Pacer, low_priority
from bot.slack.outbound.streams import StreamRefused, Streams, control_key
from bot.slack.outbound.words import say
from core.outages import outage
from state.outbox_store import OutboxRecord
from state.store import Outbox
from state.store_errors import StoreError, StoreUnavailable

log = logging.getLogger(__name__)
SLACK = outage("Slack")

_LEASE_MS = 20_000
_STREAM_SPACING_S = 0.2


class _Retry(Exception):
    def __init__(self, after_s: float | None = None) -> None:
        super().__init__(after_s)
        self.after_s = after_s


class SlackOutbox:
    def __init__(self, *, store: Outbox, client: AsyncWebClient, pacer: Pacer, metrics: Metrics,
                 update_interval_s: float = 1.0, poll_s: float = 1.0, max_backoff_s: float = 30.0,
                 streams: Streams | None = None) -> None:
        self.store = store
        self.client = client
        self.pacer = pacer
        self.streams = streams or Streams(client=client, pacer=pacer, metrics=metrics, mode="update")
        self.metrics = metrics
        self.update_interval_s = update_interval_s
        self.poll_s = poll_s
        self.max_backoff_s = max_backoff_s
        self.owner = uuid.uuid4().hex[:12]
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures: dict[str, int] = {}
        self._busy: dict[str, asyncio.Task[None]] = {}
        self._stopping = False

    # --- what front ends call ------------------------------------------------------------------------

    async def message(self, key: str, channel: str, thread_ts: str | None, text: str,
                      blocks: list[kit.Block]) -> None:
        """Post message ``key`` in the thread, or, if it was posted already, edit it to this state.
        Everything that reaches Slack (and the outbox in Redis) is redacted here, whatever composed it."""
        await self._put(channel, thread_ts, key, _message(channel, thread_ts, text, blocks))

    async def stream(self, key: str, channel: str, thread_ts: str, *, recipient: str | None, text: str,
                     blocks: list[kit.Block], tasks: list[dict[str, Any]], plan: str = "",
                     control: tuple[str, list[kit.Block]] | None = None, final: bool = False, final_md: str = "",
                     final_blocks: Sequence[kit.Block] = (),
                     then: Sequence[tuple[str, str, list[kit.Block]]] = ()) -> None:
        """Message ``key`` as a stream of ``tasks`` (see :mod:`bot.slack.outbound.streams`); ``text``/``blocks`` are the
        same state as a plain message, shown if streaming does not work. ``control``: (text, blocks) of a
        message shown under the stream only while it streams; ``final``: stop it with ``final_md`` and
        ``final_blocks``; ``then``: messages (key, text, blocks) to post after it if it had to fall back by
        then (what ``final_md`` would have said)."""
        await self._put(channel, thread_ts, key, {
            "kind": "stream", "channel": channel, "thread_ts": thread_ts, "recipient": recipient or "",
            "text": redact(text), "blocks": json.dumps(redact_blocks(blocks), ensure_ascii=False),
            "tasks": json.dumps([{k: redact(v) if isinstance(v, str) else v for k, v in t.items()} for t in tasks],
                                ensure_ascii=False),
            "plan": redact(plan), "control_text": redact(control[0]) if control else "",
            "control": json.dumps(redact_blocks(control[1]) if control else [], ensure_ascii=False),
            "final": final, "final_md": redact(final_md),
            "final_blocks": json.dumps(redact_blocks(list(final_blocks)), ensure_ascii=False),
            "then": json.dumps([[k, redact(t), redact_blocks(b)] for k, t, b in then], ensure_ascii=False)})

    async def close_stream(self, key: str, channel: str, thread_ts: str, text: str, blocks: list[kit.Block]) -> None:
        """A stopped stream's last word: its message edited to ``text``/``blocks`` (a stretch of work the run
        has moved on from)."""
        await self._put(channel, thread_ts, key, {"text": redact(text), "closed_out": True,
                                                  "blocks": json.dumps(redact_blocks(blocks), ensure_ascii=False)})

    def status(self, channel: str, thread_ts: str, text: str) -> None:
        """The thread's "is working…" status, where Slack shows one (cosmetic: not recorded)."""
        self.streams.status(channel, thread_ts, redact(text))

    async def say(self, channel: str, thread_ts: str | None, text: str, key: str | None = None) -> None:
        await self.message(key or f"say:{uuid.uuid4().hex}", channel, thread_ts, kit.fallback_text(text),
                           [kit.mrkdwn(text)])

    async def tell(self, channel: str, user: str, text: str, thread_ts: str | None = None) -> None:
        """An ephemeral message only ``user`` sees."""
        await self._put(channel, thread_ts, f"tell:{uuid.uuid4().hex}",
                        {"kind": "ephemeral", "channel": channel, "thread_ts": thread_ts, "user": user,
                         "text": redact(text)})

    async def store_down(self, channel: str, text: str, *, ref: str, thread_ts: str | None = None,
                         user: str | None = None, lang: str = "en") -> None:
        """The message that says the store is down: sent directly, once (recording it would wait out the very
        outage it reports). To ``user`` only, when given. ``ref`` ties it to the operator's log line."""
        text = say(lang, "ref", text=text, ref=ref)
        fields: dict[str, Any] = {"kind": "ephemeral" if user else "message", "channel": channel,
                                  "thread_ts": thread_ts, "user": user, "text": text,
                                  "blocks": json.dumps([kit.mrkdwn(text)], ensure_ascii=False)}
        with contextlib.suppress(_Retry):
            await self._send_direct(fields)

    async def post_now(self, channel: str, text: str) -> tuple[str | None, str]:
        """A new top-level message whose ts is needed at once (the thread a slash command answers in).
        One attempt: its ts, or None and why not (Slack's error code, or "unavailable")."""
        await self.pacer.wait("chat.postMessage", channel)
        try:
            answer = await self.client.chat_postMessage(channel=channel, text=redact(text))
        except SlackApiError as exc:
            self.metrics.inc("opspilot_slack_api_errors_total", method="chat.postMessage")
            return None, slack_error(exc)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None, "unavailable"
        return str(answer["ts"]), ""

    async def _put(self, channel: str, thread_ts: str | None, key: str, fields: dict[str, Any]) -> None:
        try:
            await self.store.put(f"{channel}:{thread_ts or '-'}", key, fields, due=time.time(),
                                 urgent=not low_priority(key))  # a card need not wait out a progress edit's turn
        except StoreError as exc:
            # The store is down, so this cannot be kept for later: one direct attempt (typically the very
            # message that tells the user the store is down).
            log.warning("outbox unavailable (%s): sending %s directly, once", exc, key)
            with contextlib.suppress(_Retry):
                await self._send_direct(fields)
            return
        self._wake.set()

    async def _send_direct(self, f: dict[str, Any]) -> None:
        blocks = json.loads(f["blocks"]) if f.get("blocks") else None
        if f["kind"] == "ephemeral":
            await self._call("chat.postEphemeral", f["channel"], lambda: self.client.chat_postEphemeral(
                channel=f["channel"], user=f["user"], text=f["text"], thread_ts=f.get("thread_ts")))
        else:
            await self._call("chat.postMessage", f["channel"], lambda: self.client.chat_postMessage(
                channel=f["channel"], thread_ts=f.get("thread_ts"), text=f["text"], blocks=blocks))

    # --- delivery ------------------------------------------------------------------------------------

    def start(self) -> None:
        self._stopping = False
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._forever(), name="slack-outbox")

    async def stop(self) -> None:
        await self.streams.stop()
        # Asked to end, then cancelled only if it does not: on Python 3.11 a cancel that lands as wait_for's wait
        # ends is swallowed, and the loop would go on for ever.
        self._stopping = True
        self._wake.set()
        if self._task is not None and not (await asyncio.wait({self._task}, timeout=5))[0]:
            self._task.cancel()
        for task in [self._task, *self._busy.values()]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = None

    async def backlog(self) -> int:
        return await self.store.backlog()

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Deliver until nothing is due (tests, graceful shutdown); gives up quietly at ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            await self.deliver_due()
            if self._busy:
                await asyncio.wait(list(self._busy.values()), timeout=max(deadline - time.monotonic(), 0.01))
                continue
            if not await self.store.backlog():
                return
            await asyncio.sleep(0.02)

    async def _forever(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)
            self._wake.clear()
            if self._stopping:
                return
            try:
                await self.deliver_due()
            except StoreUnavailable as exc:  # told once by the outage log (core/outages.py), not every round
                log.debug("outbox: the store is unavailable (%s); retrying", exc)
            except StoreError as exc:
                log.warning("outbox: the store refused a round (%s); retrying", exc)
            except Exception:
                log.exception("outbox delivery round failed")

    async def deliver_due(self) -> None:
        """One round: every thread that is due, each in its own task, its messages in order."""
        due = await self.store.due(time.time(), limit=64 + len(self._busy))  # our busy ones must not crowd out
        threads = [t for t in due if t not in self._busy]
        for thread in threads:
            task = self._busy[thread] = asyncio.create_task(self._deliver_thread(thread), name=f"outbox-{thread}")
            task.add_done_callback(functools.partial(self._done, thread))

    def _done(self, thread: str, _task: asyncio.Task[None]) -> None:
        self._busy.pop(thread, None)

    async def _deliver_thread(self, thread: str) -> None:
        try:
            if not await self.store.lease(thread, self.owner, _LEASE_MS):
                return  # another instance delivers this thread right now
            renewer = asyncio.create_task(self._renew(thread))
            try:
                retry_at = await self._deliver_records(thread)
                if await self.store.settle(thread, retry_at=retry_at) and retry_at <= time.time():
                    self._wake.set()  # a newer state arrived while we were sending
            finally:
                renewer.cancel()
                await self.store.release(thread, self.owner)
        except StoreError as exc:
            log.warning("outbox: thread %s not delivered this round: %s", thread, exc)
        except Exception:
            log.exception("outbox: delivering thread %s failed", thread)

    async def _renew(self, thread: str) -> None:
        """Hold the thread while delivering, however long Slack's pacing or a slow answer takes: a lapsed lease
        would let another instance send the same message."""
        while True:
            await asyncio.sleep(_LEASE_MS / 3000)
            with contextlib.suppress(StoreError):
                await self.store.lease(thread, self.owner, _LEASE_MS)

    async def _deliver_records(self, thread: str) -> float:
        """Send what is undelivered, posts strictly in order; returns when to come back if anything is left."""
        retry_at, sent = float("inf"), False
        skip: set[str] = set()
        for record in await self.store.records(thread):
            if not record.dirty or record.key in skip:
                continue
            if record.get("kind") == "stream" and record.get("fallback") and record.get("final"):
                await self._put_then(thread, record)  # the answer never waits behind the edit's budget
            wait = await self._edit_wait(record)
            if wait > 0:  # an edit waits for its interval; later posts need not wait for it
                retry_at = min(retry_at, time.time() + wait)
                continue
            try:
                await self._send(thread, record)
                sent = True
                if record.get("control_gone"):  # this round's copy of its Stop message is stale: read it again
                    skip.add(control_key(record.key))
            except _Retry as retry:
                # Failures in a row grow the backoff; a round that delivered something starts it over (busy threads).
                failures = self._failures[thread] = 1 if sent else self._failures.get(thread, 0) + 1
                backoff = min(2 ** failures * 0.25, self.max_backoff_s) * (0.75 + random.random() / 2)
                self.metrics.inc("opspilot_outbox_retries_total")
                return time.time() + (retry.after_s if retry.after_s is not None else backoff)
        self._failures.pop(thread, None)
        return retry_at if retry_at != float("inf") else time.time()

    async def _edit_wait(self, record: OutboxRecord) -> float:
        """Edits of one message are spaced by ``update_interval_s``; a progress edit never queues for Slack's edit
        budget ahead of cards and answers (:meth:`Pacer.edit_slot`): what changes meanwhile coalesces into the next
        edit. A stream's appends are spaced less (they show every step; Tier 4) and coalesce the same way."""
        if record.get("kind") == "ephemeral" or not record.get("ts"):
            return 0.0
        method, spacing_s = "chat.update", self.update_interval_s
        if record.get("kind") == "stream" and not record.get("fallback"):
            if record.get("final") or record.get("stopped"):
                return 0.0
            method, spacing_s = "chat.appendStream", _STREAM_SPACING_S
        spacing = float(record.get("sent_at", 0.0)) + spacing_s - time.time()
        return spacing if spacing > 0 else await self.pacer.edit_slot(record.key, method)

    async def _send(self, thread: str, record: OutboxRecord) -> None:
        f = record.fields
        if f.get("gone"):
            await self._remove(thread, record)
            return
        if f["kind"] == "stream" and not f.get("fallback"):
            try:
                await self.streams.send(thread, record, self._call, self.store)
                return
            except StreamRefused as exc:
                log.info("progress %s as a plain message (%s)", record.key, exc.error)
                self.metrics.inc("opspilot_stream_fallbacks_total", reason=exc.error)
                await self.streams.abandon(thread, record, self.store)
                await self.store.patch(thread, record.key, {"fallback": exc.error})
        blocks = json.loads(f["blocks"]) if f.get("blocks") else None
        if f["kind"] == "ephemeral":
            await self._call("chat.postEphemeral", f["channel"], lambda: self.client.chat_postEphemeral(
                channel=f["channel"], user=f["user"], text=f["text"], thread_ts=f.get("thread_ts")))
            ts = None
        elif f.get("ts"):
            await self._call("chat.update", f["channel"], lambda: self.client.chat_update(
                channel=f["channel"], ts=f["ts"], text=f["text"], blocks=blocks))
            ts = f["ts"]
        else:
            landed = await self._find_posted(record) if f.get("attempted") else None
            if landed is None:
                # The first attempt's time stays: a look in the channel reads from just before it.
                await self.store.patch(thread, record.key, {"attempted": True,
                                                            "attempted_at": f.get("attempted_at") or time.time()})
                answer = await self._call("chat.postMessage", f["channel"], lambda: self.client.chat_postMessage(
                    channel=f["channel"], thread_ts=f.get("thread_ts"), text=f["text"], blocks=blocks,
                    metadata={"event_type": METADATA_TYPE, "event_payload": {"key": record.key}}))
                ts = str(answer["ts"]) if answer is not None else None
            else:
                # An earlier attempt landed after all: bring it to the current state instead of posting again.
                ts = landed
                await self.store.patch(thread, record.key, {"ts": ts, "attempted": False})
                await self._call("chat.update", f["channel"], lambda: self.client.chat_update(
                    channel=f["channel"], ts=landed, text=f["text"], blocks=blocks))
        if f["kind"] == "stream" and f.get("final"):
            await self._put_then(thread, record)
        await self.store.patch(thread, record.key, {"ts": ts, "attempted": False, "sent_at": time.time()},
                               delivered=record.version)

    async def _remove(self, thread: str, record: OutboxRecord) -> None:
        """A message taken back: deleted if it was posted (or landed unseen), never posted if not yet."""
        f = record.fields
        ts = f.get("ts") or (await self._find_posted(record) if f.get("attempted") else None)
        if ts:
            await self._call("chat.delete", f["channel"], lambda: self.client.chat_delete(channel=f["channel"], ts=ts))
        await self.store.patch(thread, record.key, {"ts": None, "attempted": False}, delivered=record.version)

    async def _put_then(self, thread: str, record: OutboxRecord) -> None:
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

    async def _find_posted(self, record: OutboxRecord) -> str | None:
        """The ts of an earlier attempt of this post that landed after all, or None (in a thread or not)."""
        return await find_posted(self._call, self.client, record, self.metrics)

    async def _call(self, method: str, channel: str | None, call: Any, refusals: bool = False,
                    paced: bool = True) -> Any:
        """The call's response; :class:`_Retry` when it may succeed later; None when it never can (or, with
        ``refusals``, :class:`StreamRefused` saying why). ``paced``: False when the caller reserved its slot."""
        if paced:
            await self.pacer.wait(method, channel)
        try:
            answer = await call()
        except SLACK_FAILURES as exc:  # a refusal, a 5xx (JSON or not), a 429, a dropped connection, a hang
            self.metrics.inc("opspilot_slack_api_errors_total", method=method)
            error = slack_error(exc)
            if not transient(exc):
                if refusals:
                    raise StreamRefused(error) from exc
                log.error("Slack %s refused a message for good (%s): dropped", method, error)
                self.metrics.inc("opspilot_outbox_dropped_total")
                return None
            if not rate_limited(exc):  # an outage is told once, then a summary a minute (core/outages.py)
                SLACK.failed(f"{method}: {error}")
            log.debug("Slack %s failed (%s): will retry", method, error)
            raise _Retry(retry_after(exc)) from exc
        SLACK.ok()
        return answer
