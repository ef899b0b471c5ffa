"""A run's progress as a Slack stream (``chat.startStream`` / ``appendStream`` / ``stopStream``), and the
"is investigating…" status (``assistant.threads.setStatus``).

The outbox keeps the desired state of a streamed message like any other: every task with its status,
the plan's title, and at the end the markdown to close with. Delivering sends only what Slack has not
seen (a task whose state changed since the last call), so a newer state coalesces with an older one,
and a call repeated after a lost reply changes nothing: a ``task_update`` replaces its task in place.
Text is sent only with ``chat.stopStream``, once: a stop repeated after a lost reply meets a stream no
longer streaming (see below for how ours is told from Slack's timeout).

Whenever streaming does not work — the workspace has no such methods, Slack refused a call, the stream
timed out (``message_not_in_streaming_state``) — :class:`StreamRefused` tells the outbox to show the same
state as a plain message instead (``chat.update`` on the stream's ts, or a new post), so no step is lost
or repeated.

Every stream Slack started is stopped, once, whichever answer was lost. A start is recorded (``attempted``,
``start_tried_at``) before it is sent. A start sent again finds first whether the last one landed: a stream
carries nothing to look for until it stops (``chat.startStream`` takes no metadata), so it is the message
by this app in the thread, from the attempt on, that no outbox record knows (``stream_lookup.strangers``);
found, it becomes this stream (what its start said is sent again: a task card replaces itself), else the
start goes out again. A start that lands only after that look (Slack slower than our retry) is a stray: when
a stream whose start answer was ever lost ends, the thread is read once more and every such stranger still
streaming is stopped and deleted (one that is not streaming was never a stream of ours and is left alone).
A stop carries our mark, so a stop repeated after a lost answer that meets a stream no longer streaming
tells ours (it landed: done) from Slack's timeout (fall back).

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
from typing import Any, Literal

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.pacer import Pacer
from bot.slack.outbound.stream_lookup import Call, mark, marked, replies, strangers
from state.outbox_store import OutboxRecord
from state.store import Outbox

log = logging.getLogger(__name__)

Progress = Literal["stream", "update", "auto"]

# Refusals that mean this workspace (or token) has no streaming at all: in ``auto`` mode, stop trying.
UNSUPPORTED = frozenset({"unknown_method", "not_allowed_token_type", "missing_scope", "method_deprecated",
                         "feature_not_enabled", "no_permission", "not_allowed"})
_START_WAIT_S = 1.0  # auto: a start that would wait longer than this for Slack's Tier 2 budget goes as a message
# auto: at most this many streams open at once per process. Every stream must also be stopped, at Tier 2
# (~20 a minute): more open streams would make answers queue for that budget under a burst; the rest of a
# burst gets edited messages, whose Tier-3 edits coalesce.
_AUTO_MAX_OPEN = 3
_STREAM_LIFETIME_S = 300.0  # Slack ends a stream nobody appends to within minutes
_CLOCK_SKEW_S = 5.0  # a message's ts is Slack's clock, an attempt's time ours: look a little earlier


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
        self._me: dict[str, Any] | None = None
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
            ts, started = await self._start(thread, record, call, store, chunks)
            control = not f.get("final") and bool(json.loads(f.get("control") or "[]"))
            if control:  # recorded before the stream's ts, so a stream known to have started has its Stop known
                await store.put(thread, control_key(record.key), {
                    "kind": "message", "channel": f["channel"], "thread_ts": f["thread_ts"],
                    "text": f.get("control_text") or " ", "blocks": f["control"]}, due=time.time())
            # A stream found again may show less than this record: everything goes again with the next call.
            await store.patch(thread, record.key, {"ts": ts, "attempted": False, "control_put": control,
                                                   **(progress if started else {})})
            f["control_put"], f["ts"] = control, ts  # a refusal below is then handled as one of a known stream
            chunks = [] if started else chunks
        if f.get("final"):
            try:
                await call("chat.stopStream", f["channel"], lambda: self.client.chat_stopStream(
                    channel=f["channel"], ts=ts, chunks=chunks or None, markdown_text=f.get("final_md") or None,
                    blocks=json.loads(f.get("final_blocks") or "[]") or None, metadata=mark(record.key)),
                    refusals=True)
            except StreamRefused as exc:
                if exc.error != "message_not_in_streaming_state" or not await self._stopped(record, ts, call):
                    raise
            await store.patch(thread, record.key, {"stopped": True, **progress})
            self._open.pop(opened, None)
            await self._end_strays(thread, record, call, store)
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
        # Once a start was tried its Stop may have been recorded, even where the flag saying so was not (the
        # process died, or Redis went away, in between): taking back a Stop never posted costs nothing.
        if (f.get("control_put") or f.get("start_tried_at")) and not f.get("control_gone"):
            await store.put(thread, control_key(record.key), {"gone": True}, due=time.time())
            await store.patch(thread, record.key, {"control_gone": True})
            f["control_gone"] = True

    async def _start(self, thread: str, record: OutboxRecord, call: Call, store: Outbox,
                     chunks: list[dict[str, Any]]) -> tuple[str, bool]:
        """The stream's ts, and whether it was started now (False: an earlier start's stream, found again)."""
        f = record.fields
        if f.get("attempted"):  # the last start's answer was lost: it may have started a stream
            found = (await self._strangers(thread, record, call, store))[:1]
            await store.patch(thread, record.key, {"start_lost": True, "attempted": bool(found)})
            f["start_lost"] = True
            if found:
                log.info("stream %s: found the stream a start with a lost answer began (%s)", record.key, found[0])
                self.metrics.inc("opspilot_streams_found_total")
                self._open[f"{thread}/{record.key}"] = time.monotonic()
                return found[0], False
        if self.mode == "update" or not self.available:
            raise StreamRefused("streaming_unavailable")
        if not f.get("recipient"):
            raise StreamRefused("no_recipient")  # nobody asked (an alert did): Slack streams to one person
        team = str((await self._auth(call)).get("team_id") or "")
        wait = await self.pacer.try_reserve("chat.startStream", _START_WAIT_S if self.mode == "auto" else float("inf"))
        if self.mode == "auto" and (wait is None or self._open_now() >= _AUTO_MAX_OPEN):
            raise StreamRefused("busy")  # a burst: plain messages rather than a wait for Tier-2 budget
        await asyncio.sleep(wait or 0.0)
        f["start_tried_at"] = f.get("start_tried_at") or time.time()  # the first: strays are looked for from it
        await store.patch(thread, record.key, {"attempted": True, "start_tried_at": f["start_tried_at"]})
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
        return str(answer["ts"]), True

    async def _strangers(self, thread: str, record: OutboxRecord, call: Call, store: Outbox) -> list[str]:
        """Messages of this app in the thread since this record's first start attempt that no record knows."""
        f = record.fields
        known = {str(r.get("ts")) for r in await store.records(thread) if r.get("ts")}
        return await strangers(call, self.client, f["channel"], f["thread_ts"], me=await self._auth(call),
                               around=float(f.get("start_tried_at") or time.time()), skew_s=_CLOCK_SKEW_S,
                               known=known)

    async def _stopped(self, record: OutboxRecord, ts: str, call: Call) -> bool:
        """Whether the stream at ``ts`` carries our stop's mark: a stop whose answer was lost landed."""
        f = record.fields
        async for message in replies(call, self.client, f["channel"], f["thread_ts"], oldest=ts):
            if message.get("ts") == ts:
                return marked(message) == record.key
        return False

    async def _end_strays(self, thread: str, record: OutboxRecord, call: Call, store: Outbox) -> None:
        """Stop and delete the streams a start with a lost answer began after we had looked (see the module's
        docstring). A stop Slack fails for now comes back with the round; a delete that fails leaves that stray
        (stopped) as it is."""
        if not record.get("start_lost"):
            return
        channel = record.fields["channel"]
        try:
            strays = await self._strangers(thread, record, call, store)
        except Exception as exc:  # whatever failed, the stream itself is done
            log.warning("stream %s: could not look for strays (%r)", record.key, exc)
            return
        for ts in strays:
            try:
                await call("chat.stopStream", channel, lambda t=ts: self.client.chat_stopStream(channel=channel, ts=t),
                           refusals=True)
            except StreamRefused:  # not streaming (never a stream of ours): left alone; Slack failing for now or
                continue  # its budget busy: raised, and the round comes back (paced, it must not skip the stray)
            try:  # stopped, so it was ours: it must not show its steps twice
                await call("chat.delete", channel, lambda t=ts: self.client.chat_delete(channel=channel, ts=t),
                           refusals=True)
            except Exception as exc:  # whatever it was, said: steps shown twice then have a reason in the log
                log.warning("a stray stream %s/%s was stopped but not deleted: %s", channel, ts, exc)
            self.metrics.inc("opspilot_streams_strays_stopped_total")

    def _open_now(self) -> int:
        cutoff = time.monotonic() - _STREAM_LIFETIME_S
        for key in [k for k, started in self._open.items() if started < cutoff]:
            del self._open[key]
        return len(self._open)

    async def _auth(self, call: Call) -> dict[str, Any]:
        """This app's identity (``auth.test``: team_id, user_id, bot_id), asked once."""
        if self._me is None:
            answer = await call("auth.test", None, self.client.auth_test, refusals=True)
            self._me = {k: answer.get(k) for k in ("team_id", "user_id", "bot_id")}
        return self._me

    async def abandon(self, thread: str, record: OutboxRecord, store: Outbox, call: Call) -> None:
        """End a stream that is being replaced by a plain message, if it still streams, and any stray a lost start
        answer left; the plain message carries its own Stop, so the stream's goes. The stop goes at Slack's pace
        and, when Slack fails it for now, raises ``Retry`` (the round comes back): a message still streaming
        takes no edit, and every later state of the run would be lost."""
        self._open.pop(f"{thread}/{record.key}", None)
        await self._retire_control(thread, record, store)
        f = record.fields
        await self._end_strays(thread, record, call, store)
        if not f.get("ts") or f.get("stopped"):
            return
        with contextlib.suppress(StreamRefused):  # refused for good: its edit says so, and is dropped (sending)
            await self.stop_streaming(f["channel"], f["ts"], call)

    async def stop_streaming(self, channel: str, ts: str, call: Call) -> None:
        """Stop a message's stream (``Retry`` while Slack fails); not streaming any more is stopped; any other
        refusal raises :class:`StreamRefused` (it will not stop: tried again, it would only hold the thread)."""
        try:
            await call("chat.stopStream", channel, lambda: self.client.chat_stopStream(channel=channel, ts=ts),
                       refusals=True)
        except StreamRefused as exc:
            if exc.error != "message_not_in_streaming_state":
                raise

    # --- "is investigating…" ---------------------------------------------------------------------------------

    def status(self, channel: str, thread_ts: str, text: str) -> None:
        """Show (``""``: clear) the thread's status. Cosmetic, so not durable: the latest wins, one try each;
        skipped when its budget is spent (a burst), so it never costs a message its place."""
        if not self.status_available or self.mode == "update" or \
                (text and self.pacer.ready_in("assistant.threads.setStatus")):
            return  # a clear is never skipped: a "working…" left after the answer would say what is not so
        where = (channel, thread_ts)
        self._status_want[where] = text
        if where not in self._status_tasks:
            self._status_tasks[where] = asyncio.create_task(self._set_status(where), name=f"status-{thread_ts}")

    async def _set_status(self, where: tuple[str, str]) -> None:
        try:
            while where in self._status_want and self.status_available:
                await self.pacer.wait("assistant.threads.setStatus")
                text = self._status_want.pop(where, None)  # the latest, read once its slot is granted
                if text is None:
                    continue
                try:
                    await self.client.assistant_threads_setStatus(channel_id=where[0], thread_ts=where[1], status=text)
                except Exception as exc:
                    error = getattr(getattr(exc, "response", None), "data", {}) or {}
                    code = error.get("error") if isinstance(error, dict) else None
                    if code in UNSUPPORTED or code in ("channel_not_found", "invalid_arguments"):
                        log.info("assistant.threads.setStatus is not available here (%s): no status", code)
                        self.status_available = False
                    else:  # a status is a nicety: never the run's failure, but never silent either
                        log.warning("assistant.threads.setStatus failed: %s", code or repr(exc))
        finally:
            self._status_tasks.pop(where, None)

    async def stop(self) -> None:
        for task in list(self._status_tasks.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
