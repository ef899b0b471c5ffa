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
from collections.abc import Mapping, Sequence
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.periodic import cancelled
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.hold import Hold, LeaseLost
from bot.slack.outbound.landed import METADATA_TYPE as METADATA_TYPE  # where history.py reads it from too
from bot.slack.outbound.outgoing import message_fields as _message
from bot.slack.outbound.outgoing import redact, redact_blocks
from bot.slack.outbound.pacer import NotYet, Pacer, first_in_line, low_priority
from bot.slack.outbound.responses import ResponseFailed, replace_original, usable
from bot.slack.outbound.sending import Retry, Sender, plain_edit
from bot.slack.outbound.streams import Streams, control_key
from bot.slack.outbound.words import say
from state.outbox_store import Due, OutboxRecord
from state.store import Outbox
from state.store_errors import StoreError, StoreUnavailable

log = logging.getLogger(__name__)

_LEASE_S = 20.0  # at least; longer where a Slack call may take longer (Hold.lease_for)
_CARD_BACKOFF_S = 1.0  # the longest a card waits between attempts while Slack fails: someone just clicked it


class SlackOutbox:
    def __init__(self, *, store: Outbox, client: AsyncWebClient, pacer: Pacer, metrics: Metrics,
                 update_interval_s: float = 1.0, poll_s: float = 1.0, max_backoff_s: float = 30.0,
                 streams: Streams | None = None, lease_s: float = _LEASE_S, takeover_after_s: float = 0.0) -> None:
        self.store = store
        self.takeover_after_s = takeover_after_s  # a thread due this long before this process's scan takes it
        self.client = client
        self.pacer = pacer
        self.streams = streams or Streams(client=client, pacer=pacer, metrics=metrics, mode="update")
        self.metrics = metrics
        self.update_interval_s = update_interval_s
        self.poll_s = poll_s
        self.max_backoff_s = max_backoff_s
        self.sender = Sender(store=store, client=client, pacer=pacer, streams=self.streams, metrics=metrics,
                             update_interval_s=update_interval_s)
        self.owner = uuid.uuid4().hex[:12]
        self.lease_s = Hold.lease_for(float(client.timeout), lease_s)
        self._lease_ms = int(self.lease_s * 1000)
        self._wake = asyncio.Event()
        # Threads written to since the last round: the next round reads only them. Each with the time by which it
        # is due for sure, as its write found (None: not known, the round asks the due index).
        self._nudged: dict[str, float | None] = {}
        # Every poll_s at least, a round reads every shard's due index (others' writes, and theirs to take over);
        # every round does while the last such read found more than a round takes (a backlog: as before).
        self._scanned_at, self._backlog = 0.0, False
        self._task: asyncio.Task[None] | None = None
        self._failures: dict[str, int] = {}
        self._busy: dict[str, asyncio.Task[None]] = {}
        self._direct: set[asyncio.Task[None]] = set()  # clicked cards edited at once
        self._stopping = False

    # --- what front ends call ------------------------------------------------------------------------

    async def message(self, key: str, channel: str, thread_ts: str | None, text: str,
                      blocks: list[kit.Block], *, response_url: str = "", settled: bool = False,
                      state: tuple[str, str] | None = None) -> None:
        """Post message ``key`` in the thread, or, if it was posted already, edit it to this state.
        Everything that reaches Slack (and the outbox in Redis) is redacted here, whatever composed it.
        ``response_url``: a click's on this message, to edit it through (see :mod:`.responses`). ``settled``: a
        progress message's last state, edited ahead of progress still moving (:meth:`Pacer.edit_slot`). ``state``:
        what a run shows (run id, JSON), saved in the same write (:meth:`shown_state`)."""
        fields = _message(channel, thread_ts, text, blocks) | {"settled": settled}
        if not usable(response_url):
            await self._put(channel, thread_ts, key, fields, state=state)
            return
        fields |= {"response_url": response_url, "response_tries": 0}
        version = await self._put(channel, thread_ts, key, fields, direct=False, state=state)
        # A clicked card goes at once, from here, not behind its thread's delivery (which another process may hold,
        # or have died holding, for its lease's 20 s). The edit is idempotent: the outbox may send it again.
        task = asyncio.create_task(self._in_place_now(_thread(channel, thread_ts), key, version, fields))
        self._direct.add(task)
        task.add_done_callback(self._direct.discard)

    async def _in_place_now(self, thread: str, key: str, version: int | None, fields: dict[str, Any]) -> None:
        try:
            await replace_original(fields["response_url"], fields["text"], json.loads(fields["blocks"] or "[]"),
                                   session=self.client.session, timeout_s=float(self.client.timeout))
        except ResponseFailed as exc:
            log.debug("%s: its response URL did not take it at once (%s): the outbox goes on", key, exc.error)
            return
        if version is not None:
            with contextlib.suppress(StoreError):
                await self.store.patch(thread, key, {"sent_at": time.time()}, delivered=version)

    async def stream(self, key: str, channel: str, thread_ts: str, *, recipient: str | None, text: str,
                     blocks: list[kit.Block], tasks: list[dict[str, Any]], plan: str = "",
                     control: tuple[str, list[kit.Block]] | None = None, final: bool = False, final_md: str = "",
                     final_blocks: Sequence[kit.Block] = (), then: Sequence[tuple[str, str, list[kit.Block]]] = (),
                     state: tuple[str, str] | None = None) -> None:
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
            "final": final, "settled": final, "final_md": redact(final_md),
            "final_blocks": json.dumps(redact_blocks(list(final_blocks)), ensure_ascii=False),
            "then": json.dumps([[k, redact(t), redact_blocks(b)] for k, t, b in then], ensure_ascii=False)},
            state=state)

    async def close_stream(self, key: str, channel: str, thread_ts: str, text: str, blocks: list[kit.Block]) -> None:
        """A stopped stream's last word: its message edited to ``text``/``blocks`` (a stretch of work the run
        has moved on from)."""
        await self._put(channel, thread_ts, key, {"text": redact(text), "closed_out": True,
                                                  "blocks": json.dumps(redact_blocks(blocks), ensure_ascii=False)},
                        direct=False)  # an edit of a stream: nothing to post on its own

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
        with contextlib.suppress(Retry):
            await self.sender.direct(fields)

    async def save_state(self, channel: str, thread_ts: str, run_id: str, state: str) -> None:
        """What a run shows, saved alone (no message changes with it)."""
        await self.store.save_state(_thread(channel, thread_ts), run_id, state)

    async def shown_state(self, channel: str, thread_ts: str, run_id: str) -> str | None:
        """What a run shows in the thread (saved with its messages), if anything."""
        return await self.store.shown_state(_thread(channel, thread_ts), run_id)

    async def key_at(self, channel: str, thread_ts: str, ts: str, prefix: str) -> str | None:
        """The key of our message at ``ts`` in the thread (its record's), of those starting with ``prefix``."""
        return next((r.key for r in await self.store.records(_thread(channel, thread_ts))
                     if r.key.startswith(prefix) and r.get("ts") == ts), None)

    async def _put(self, channel: str, thread_ts: str | None, key: str, fields: dict[str, Any], *,
                   direct: bool = True, state: tuple[str, str] | None = None) -> int | None:
        """Record it; its version, or None when the store is down (then, with ``direct``, one attempt now)."""
        started = time.time()
        if direct and state is None and fields.get("kind") == "message":  # it may be sent directly, below
            fields = {**fields, "put_at": round(started, 3)}
        try:
            put = await self.store.put(_thread(channel, thread_ts), key, fields, due=time.time(),
                                       # a card need not wait out a progress edit, nor a run's end (a stream's
                                       # carries its answer when it fell back) the edits of progress still moving
                                       urgent=not low_priority(key) or bool(fields.get("settled")),
                                       state=state)
        except StoreError as exc:
            if state is not None:  # a run's progress: nothing shown now; once the store is back, catch-up shows the
                raise  # run once (a direct post now would be a second message, and its state would be lost)
            if not direct:  # a clicked card (edited through its response URL, which needs no store) or a stream's edit
                log.warning("outbox unavailable (%s): %s not recorded", exc, key)
                return None
            # The store is down, so this cannot be kept for later: one direct attempt (typically the very
            # message that tells the user the store is down).
            log.warning("outbox unavailable (%s): sending %s directly, once", exc, key)
            with contextlib.suppress(Retry):
                await self.sender.direct(fields, key=key, since=started)
            return None
        self._nudge(_thread(channel, thread_ts), put.due_by)
        return put.version

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
        for task in [self._task, *self._busy.values(), *self._direct]:
            if task is not None:
                await cancelled(task)
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

    def _nudge(self, thread: str, due_by: float | None = None) -> None:
        if thread in self._nudged:  # known only if every write since the last round knew it
            known = self._nudged[thread]
            due_by = None if known is None or due_by is None else min(known, due_by)
        self._nudged[thread] = due_by
        self._wake.set()

    async def _forever(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)
            self._wake.clear()
            if self._stopping:
                return
            try:
                if not self._backlog and time.monotonic() - self._scanned_at < self.poll_s:
                    await self.deliver_due(self._take_nudged())
                else:
                    await self.deliver_due()
            except StoreUnavailable as exc:  # told once by the outage log (core/outages.py), not every round
                log.debug("outbox: the store is unavailable (%s); retrying", exc)
            except StoreError as exc:
                log.warning("outbox: the store refused a round (%s); retrying", exc)
            except Exception:
                log.exception("outbox delivery round failed")

    def _take_nudged(self) -> dict[str, float | None]:
        nudged, self._nudged = self._nudged, {}
        return nudged

    async def deliver_due(self, among: Mapping[str, float | None] | None = None) -> None:
        """One round: every thread that is due (of ``among`` only, when given: those whose writes found them due by
        now need no look in the due index), each in its own task, its messages in order."""
        if among is None:
            self._scanned_at = time.monotonic()
            self._nudged.clear()  # written to before this read: it finds them if they are due
            limit = 64 + len(self._busy)  # our busy ones must not crowd out the others
            due = await self.store.due(time.time() - self.takeover_after_s, limit=limit)
            self._backlog = len(due) >= limit
        else:
            now = time.time()
            known = [t for t, by in among.items() if by is not None and by <= now]
            due = known + await self.store.due_among([t for t, by in among.items() if by is None or by > now], now)
        threads = [t for t in due if t not in self._busy]
        for thread in threads:
            task = self._busy[thread] = asyncio.create_task(self._deliver_thread(thread), name=f"outbox-{thread}")
            task.add_done_callback(functools.partial(self._done, thread))

    def _done(self, thread: str, _task: asyncio.Task[None]) -> None:
        self._busy.pop(thread, None)

    async def _deliver_thread(self, thread: str) -> None:
        try:
            hold = Hold(self.lease_s, float(self.client.timeout))
            if not await self.store.lease(thread, self.owner, self._lease_ms):
                return  # another instance delivers this thread right now
            renewer, released = asyncio.create_task(self._renew(thread, hold)), False
            sender = self.sender.holding(hold)
            try:
                records = await self.store.records(thread)
                retry_at = await self._deliver_records(thread, records, sender)
                renewer.cancel()
                # The settle saves what was sent and lets go of the lease (one script); if it fails, the
                # finally below does both again.
                still_due = await self.store.settle(thread, retry_at=retry_at, release=self.owner,
                                                    delivered=sender.delivered or (),
                                                    seen={r.key: r.version for r in records})
                released = True
                # A newer state arrived while we were sending, or a retry waits: come back for it (from the loop,
                # once this round's task is done). An answer or a card put meanwhile goes now.
                if still_due is Due.NOW:
                    asyncio.get_running_loop().call_soon(self._nudge, thread, time.time())
                elif still_due:
                    wait_s = min(max(retry_at - time.time(), 0.0), self.max_backoff_s)
                    asyncio.get_running_loop().call_later(wait_s, self._nudge, thread)
            finally:
                renewer.cancel()
                if not released:
                    with contextlib.suppress(StoreError):  # what Slack took before the round stopped
                        await sender.save_delivered(thread)
                    await self.store.release(thread, self.owner)
        except LeaseLost as exc:  # what is left stays due: the thread's holder, or our next round, sends it
            log.debug("outbox: thread %s: round stopped (%s)", thread, exc)
        except StoreError as exc:  # an outage is told once by the outage log (core/outages.py), not per thread
            (log.debug if isinstance(exc, StoreUnavailable) else log.warning)(
                "outbox: thread %s not delivered this round: %s", thread, exc)
        except Exception:
            log.exception("outbox: delivering thread %s failed", thread)

    async def _renew(self, thread: str, hold: Hold) -> None:
        """Hold the thread while delivering, however long Slack's pacing or a slow answer takes: a lapsed lease
        would let another instance send the same message (see :mod:`.hold`)."""
        while not hold.lost:
            await asyncio.sleep(hold.renew_every_s)
            sent_at = time.monotonic()
            with contextlib.suppress(StoreError):
                hold.renewed(sent_at, await self.store.renew(thread, self.owner, self._lease_ms))

    async def _deliver_records(self, thread: str, records: list[OutboxRecord], sender: Sender) -> float:
        """Send what is undelivered, posts strictly in order; returns when to come back if anything is left. A
        failed edit holds back later chat.update edits only; a failed post (or stream) everything after it but a
        card edited through its click's response URL (a progress edit meeting a 429, or an answer's post backing
        off while Slack fails, must not keep a clicked card open)."""
        retry_at, sent, failed, post_failed = float("inf"), False, False, False
        skip: set[str] = set()
        for record in records:
            if not record.dirty or record.key in skip or (failed and plain_edit(record)) or \
                    (post_failed and not (record.get("ts") and record.get("response_url"))):
                continue
            await sender.save_delivered(thread)  # the last message's, before this one's pace or call
            if record.get("kind") == "stream" and record.get("fallback") and record.get("final"):
                await sender.put_then(thread, record)  # the answer never waits behind the edit's budget
            wait = await sender.edit_wait(record)
            if wait > 0:  # an edit waits for its interval; later posts need not wait for it
                retry_at = min(retry_at, time.time() + wait)
                continue
            try:
                await sender.send(thread, record)
                sent = True
                if record.get("control_gone"):  # this round's copy of its Stop message is stale: read it again
                    skip.add(control_key(record.key))
            except NotYet as later:  # not tried: its turn at Slack's pace is further off (sending.HORIZON_S)
                retry_at, failed = min(retry_at, time.time() + later.wait_s), True
                post_failed = post_failed or not (plain_edit(record) or record.get("response_url"))
            except Retry as retry:
                # Failures in a row grow the backoff; a round that delivered something starts it over (busy threads).
                failures = self._failures[thread] = 1 if sent else self._failures.get(thread, 0) + 1
                cap = min(self.max_backoff_s, _CARD_BACKOFF_S) if first_in_line(record.key) else self.max_backoff_s
                backoff = min(2 ** failures * 0.25, cap) * (0.75 + random.random() / 2)
                self.metrics.inc("opspilot_outbox_retries_total")
                retry_at = min(retry_at, time.time() + (retry.after_s if retry.after_s is not None else backoff))
                failed = True
                post_failed = post_failed or not (plain_edit(record) or record.get("response_url"))
        if failed:
            return retry_at
        self._failures.pop(thread, None)
        return retry_at if retry_at != float("inf") else time.time()


def _thread(channel: str, thread_ts: str | None) -> str:
    """The outbox's name for a Slack thread (or, without a thread, a channel's top level)."""
    return f"{channel}:{thread_ts or '-'}"
