"""A run's progress as a Slack stream (``chat.startStream`` / ``appendStream`` / ``stopStream``), and the
"is investigating…" status (``assistant.threads.setStatus``).

The outbox keeps the desired state of a streamed message like any other: every task with its status,
the plan's title, and at the end the markdown to close with. Delivering sends only what Slack has not
seen (a task whose state changed since the last call), so a newer state coalesces with an older one,
and a call repeated after a lost reply changes nothing: a ``task_update`` replaces its task in place.
Text is sent only with ``chat.stopStream``; a stop repeated after a lost reply meets a stream no
longer streaming and the message falls back, so no text is ever shown twice.

Whenever streaming does not work — the workspace has no such methods, Slack refused a call, the stream
timed out (``message_not_in_streaming_state``), the answer to ``startStream`` was lost (whether it
landed cannot be known: no metadata to look for) — :class:`StreamRefused` tells the outbox to show the
same state as a plain message instead (``chat.update`` on the stream's ts, or a new post), so no step is
lost or repeated. A stream that landed unseen after a lost start answer ends by Slack's timeout.

A stream cannot take back what it showed, so a control that is only true while it streams (Stop) is a small
message of its own under it (``control``), recorded once the stream started and deleted once it stops or falls
back (the plain message carries its own Stop). A stopped stream's message can still be edited (``chat.update``
replaces its content, task cards included): ``closed_out`` brings a stretch the run moved on from to its last
word.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.metrics import Metrics
from bot.slack.pacer import Pacer
from state.outbox import OutboxRecord
from state.store import Outbox

log = logging.getLogger(__name__)

Progress = Literal["stream", "update", "auto"]
Call = Callable[..., Awaitable[Any]]

# Refusals that mean this workspace (or token) has no streaming at all: in ``auto`` mode, stop trying.
UNSUPPORTED = frozenset({"unknown_method", "not_allowed_token_type", "missing_scope", "method_deprecated",
                         "feature_not_enabled", "no_permission", "not_allowed"})
_START_WAIT_S = 1.0  # auto: a start that would wait longer than this for Slack's Tier 2 budget goes as a message
# auto: at most this many streams open at once per process. Every stream must also be stopped, at Tier 2
# (~20 a minute): more open streams would make answers queue for that budget under a burst; the rest of a
# burst gets edited messages, whose Tier-3 edits coalesce.
_AUTO_MAX_OPEN = 3
_STREAM_LIFETIME_S = 300.0  # Slack ends a stream nobody appends to within minutes


class StreamRefused(Exception):
    """Streaming this message does not work (``error`` says why): show it as a plain message."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def control_key(key: str) -> str:
    """The outbox key of the Stop message under stream ``key``."""
    return f"{key}:control"


def _digest(task: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(task, sort_keys=True).encode(), usedforsecurity=False).hexdigest()[:12]


class Streams:
    def __init__(self, *, client: AsyncWebClient, pacer: Pacer, metrics: Metrics, mode: Progress = "auto") -> None:
        self.client = client
        self.pacer = pacer
        self.metrics = metrics
        self.mode = mode
        self.available = True
        """False once the workspace said it has no streaming (``auto`` stops trying; ``stream`` keeps trying)."""
        self.status_available = True
        # Streams this process started and has not seen stopped, with when: a stream stopped by another
        # instance (or never, its run gone) stops counting once Slack would have timed it out.
        self._open: dict[str, float] = {}
        self._team: str | None = None
        self._status_want: dict[tuple[str, str], str] = {}
        self._status_tasks: dict[tuple[str, str], asyncio.Task[None]] = {}

    async def send(self, thread: str, record: OutboxRecord, call: Call, store: Outbox) -> None:
        """Bring the streamed message to the record's state, or raise :class:`StreamRefused`."""
        f = record.fields
        if f.get("stopped"):  # no stream call changes a stopped stream: only its last word (an edit) remains
            await self._after_stop(thread, record, call, store, str(f["ts"]))
            return
        opened = f"{thread}/{record.key}"
        tasks: list[dict[str, Any]] = json.loads(f.get("tasks") or "[]")
        sent: dict[str, str] = dict(json.loads(f.get("streamed") or "{}"))
        chunks: list[dict[str, Any]] = []
        if f.get("plan") and f.get("plan") != f.get("plan_sent"):
            chunks.append({"type": "plan_update", "title": f["plan"]})
        for task in tasks:
            if sent.get(task["id"]) != _digest(task):
                chunks.append({"type": "task_update", **task})
                sent[task["id"]] = _digest(task)
        progress = {"streamed": json.dumps(sent), "plan_sent": f.get("plan") or "", "sent_at": time.time()}
        ts = f.get("ts")
        if not ts:
            ts = await self._start(thread, record, call, store, chunks)
            await store.patch(thread, record.key, {"ts": ts, "attempted": False, **progress})
            chunks = []
            if not f.get("final") and json.loads(f.get("control") or "[]"):
                await store.put(thread, control_key(record.key), {
                    "kind": "message", "channel": f["channel"], "thread_ts": f["thread_ts"],
                    "text": f.get("control_text") or " ", "blocks": f["control"]}, due=time.time())
                await store.patch(thread, record.key, {"control_put": True})
                f["control_put"] = True
        if f.get("final"):
            await call("chat.stopStream", f["channel"], lambda: self.client.chat_stopStream(
                channel=f["channel"], ts=ts, chunks=chunks or None, markdown_text=f.get("final_md") or None,
                blocks=json.loads(f.get("final_blocks") or "[]") or None), refusals=True)
            await store.patch(thread, record.key, {"stopped": True, **progress})
            self._open.pop(opened, None)
            await self._after_stop(thread, record, call, store, ts)
            return
        if chunks:
            await call("chat.appendStream", f["channel"], lambda: self.client.chat_appendStream(
                channel=f["channel"], ts=ts, chunks=chunks), refusals=True)
        await store.patch(thread, record.key, progress, delivered=record.version)

    async def _after_stop(self, thread: str, record: OutboxRecord, call: Call, store: Outbox, ts: str) -> None:
        """Once stopped: its Stop message taken back, and its content replaced if the run has moved on."""
        f = record.fields
        await self._retire_control(thread, record, store)
        if f.get("closed_out") and f.get("blocks"):
            await call("chat.update", f["channel"], lambda: self.client.chat_update(
                channel=f["channel"], ts=ts, text=f.get("text") or " ", blocks=json.loads(f["blocks"])))
        await store.patch(thread, record.key, {}, delivered=record.version)

    @staticmethod
    async def _retire_control(thread: str, record: OutboxRecord, store: Outbox) -> None:
        f = record.fields
        if f.get("control_put") and not f.get("control_gone"):
            await store.put(thread, control_key(record.key), {"gone": True}, due=time.time())
            await store.patch(thread, record.key, {"control_gone": True})
            f["control_gone"] = True

    async def _start(self, thread: str, record: OutboxRecord, call: Call, store: Outbox,
                     chunks: list[dict[str, Any]]) -> str:
        f = record.fields
        if f.get("attempted"):
            raise StreamRefused("start_answer_lost")
        if self.mode == "update" or not self.available:
            raise StreamRefused("streaming_unavailable")
        if not f.get("recipient"):
            raise StreamRefused("no_recipient")  # nobody asked (an alert did): Slack streams to one person
        team = await self._team_id(call)
        wait = self.pacer.try_reserve("chat.startStream", _START_WAIT_S if self.mode == "auto" else float("inf"))
        if self.mode == "auto" and (wait is None or self._open_now() >= _AUTO_MAX_OPEN):
            raise StreamRefused("busy")  # a burst: plain messages rather than a wait for Tier-2 budget
        await asyncio.sleep(wait or 0.0)
        await store.patch(thread, record.key, {"attempted": True})
        try:
            answer = await call("chat.startStream", f["channel"], lambda: self.client.chat_startStream(
                channel=f["channel"], thread_ts=f["thread_ts"], recipient_user_id=f["recipient"],
                recipient_team_id=team, task_display_mode="timeline", chunks=chunks or None), refusals=True,
                paced=False)  # (reserved above)
        except StreamRefused as exc:
            if exc.error in UNSUPPORTED and self.mode == "auto":
                log.warning("Slack streaming is not available (%s): progress as edited messages from now on",
                            exc.error)
                self.available = False
            await store.patch(thread, record.key, {"attempted": False})  # refused: it did not land
            raise
        self.metrics.inc("opspilot_streams_started_total")
        self._open[f"{thread}/{record.key}"] = time.monotonic()
        return str(answer["ts"])

    def _open_now(self) -> int:
        cutoff = time.monotonic() - _STREAM_LIFETIME_S
        for key in [k for k, started in self._open.items() if started < cutoff]:
            del self._open[key]
        return len(self._open)

    async def _team_id(self, call: Call) -> str:
        if self._team is None:
            answer = await call("auth.test", None, self.client.auth_test, refusals=True)
            self._team = str(answer.get("team_id") or "")
        return self._team

    async def abandon(self, thread: str, record: OutboxRecord, store: Outbox) -> None:
        """End a stream that is being replaced by a plain message, if it still streams (one try); the plain
        message carries its own Stop, so the stream's goes."""
        self._open.pop(f"{thread}/{record.key}", None)
        await self._retire_control(thread, record, store)
        f = record.fields
        if not f.get("ts") or f.get("stopped"):
            return
        with contextlib.suppress(Exception):
            await self.client.chat_stopStream(channel=f["channel"], ts=f["ts"])

    # --- "is investigating…" ---------------------------------------------------------------------------------

    def status(self, channel: str, thread_ts: str, text: str) -> None:
        """Show (``""``: clear) the thread's status. Cosmetic, so not durable: the latest wins, one try each;
        skipped when its budget is spent (a burst), so it never costs a message its place."""
        if not self.status_available or self.mode == "update" or self.pacer.ready_in("assistant.threads.setStatus"):
            return
        where = (channel, thread_ts)
        self._status_want[where] = text
        if where not in self._status_tasks:
            self._status_tasks[where] = asyncio.create_task(self._set_status(where), name=f"status-{thread_ts}")

    async def _set_status(self, where: tuple[str, str]) -> None:
        try:
            while where in self._status_want and self.status_available:
                text = self._status_want.pop(where)
                await self.pacer.wait("assistant.threads.setStatus")
                try:
                    await self.client.assistant_threads_setStatus(channel_id=where[0], thread_ts=where[1], status=text)
                except Exception as exc:
                    error = getattr(getattr(exc, "response", None), "data", {}) or {}
                    code = error.get("error") if isinstance(error, dict) else None
                    if code in UNSUPPORTED or code in ("channel_not_found", "invalid_arguments"):
                        log.info("assistant.threads.setStatus is not available here (%s): no status", code)
                        self.status_available = False
        finally:
            self._status_tasks.pop(where, None)

    async def stop(self) -> None:
        for task in list(self._status_tasks.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
