"""A click's receipt on its card, when recording the decision is slow (Redis away: the store waits out the outage
for up to ``redis_outage_grace_s``). Whoever clicked sees at once that the click arrived and that nothing has run
yet; the buttons go meanwhile, so nobody clicks again into the same wait. Said through the click's response URL,
which needs no Redis.

Then, once the front knows: the decision recorded (queued for a worker), the receipt stays until the worker closes
the card with the outcome; not recorded (refused, no longer pending, the store still away past its grace), the card
is put back as it was — or as it ended — so a button never stays hidden for a decision nobody will make.

The worker does the same around recording the decision (Redis may go away after the front queued it). Its receipt
is registered under the card's token: the card's close (``render.close_card``, in the same process) waits for a
receipt on its way, so the outcome always lands last.

(The "front" here is whoever handles the click: the process Slack sent it to, or in ``serve`` the worker that read
the forwarded request; the decision then goes to the queue as its own work item.)

Between the two (queued, not yet read by a worker: Redis went away meanwhile) the front follows the click
(:meth:`Receipt.follow`): if the store does not answer 1.5 s after the click, the receipt goes out; once it answers,
the card shows how it ended (a close that landed before the receipt goes back on top) or, not decided yet, is put
back as it was — a worker on it closes it after, and one that failed must not leave it without its buttons (a form
refused for a bad value, a work item that failed for good).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from bot.slack.outbound import blocks as kit
from bot.slack.outbound.responses import ResponseFailed, replace_original, usable
from bot.slack.outbound.thread_meta import CARD
from bot.slack.outbound.words import language_of, say
from state.store import MetaStore
from state.store_errors import StoreError

log = logging.getLogger(__name__)

SLOW_S = 1.5
"""How long a decision may take to be recorded before the card says the click arrived."""
_TIMEOUT_S = 5.0
_VERBS = {"opspilot_confirm": "confirm", "opspilot_decline": "cancel", "opspilot_submit": "submit",
          "confirm": "confirm", "decline": "cancel", "submit": "submit"}
_OPEN: dict[str, Receipt] = {}  # the worker's receipts by card token, until settled
_FOLLOWING: set[asyncio.Task[None]] = set()
FOLLOW_S = 120.0
"""How long the front looks for how a card it put a receipt on ended (beyond any outage the store waits out)."""
_LOOK_S = 1.0  # how long a look at the card's record may take before the store counts as away


class Receipt:
    def __init__(self, response_url: str, message: dict[str, Any], user: str, action_id: str, *,
                 language: str = "auto", after_s: float = SLOW_S, token: str = "") -> None:
        """``message``: the card as clicked (its blocks and text); ``token``: the card's, to register under."""
        self.url, self.user, self.action_id, self.language, self.token = response_url, user, action_id, language, token
        self.blocks: list[kit.Block] = list(message.get("blocks") or [])
        self.text = str(message.get("text") or "")
        self.restore: list[kit.Block] | None = None
        """What the card shows if the decision is not recorded (None: as it was before the click)."""
        self._replace = False  # shown in place of the card whether or not a receipt went out
        self._posting = asyncio.Event()  # a receipt went out (and may have landed, whatever its answer)
        self._at = time.monotonic() + after_s
        self._task = asyncio.create_task(self._show(after_s)) if usable(response_url) and self.blocks else None
        if token and self._task is not None:
            _OPEN[token] = self

    def unknown(self, note: str) -> None:
        """The card names a question OpsPilot holds no record of (its state lost): shown without its buttons, and
        ``note``, rather than put back to be pressed in vain."""
        self.restore = [b for b in self.blocks if b.get("type") != "actions"] + [kit.context(note)]
        self._replace = True

    @staticmethod
    def of(token: str) -> Receipt | None:
        """The receipt this process may be showing on card ``token`` (its close must wait for it)."""
        return _OPEN.get(token)

    async def _show(self, after_s: float) -> None:
        await asyncio.sleep(after_s)
        self._posting.set()
        await self._post(*self._receipt())

    def _receipt(self) -> tuple[list[kit.Block], str]:
        lang = language_of(kit.shown({"blocks": self.blocks}), self.language)
        note = say(lang, "click_received", who=f"<@{self.user}>",
                   what=say(lang, _VERBS.get(self.action_id, "confirm")))
        return [b for b in self.blocks if b.get("type") not in ("actions", "input")] + [kit.context(note)], note

    def follow(self, meta: MetaStore, token: str, grace_s: float = FOLLOW_S) -> None:
        """After the decision was queued (the front): the receipt, if the card has not closed by its time."""
        if self._task is None or self._posting.is_set():
            return  # no URL, or the receipt is out already (and landed before the decision was queued)
        task = asyncio.create_task(self._follow(meta, token, grace_s))
        _FOLLOWING.add(task)
        task.add_done_callback(_FOLLOWING.discard)

    async def _follow(self, meta: MetaStore, token: str, grace_s: float) -> None:
        await asyncio.sleep(max(self._at - time.monotonic(), 0))
        if await ended_as(meta, token) is not None:
            return  # the store answers: the card is closed, or a worker closes it (or says why not)
        self._posting.set()  # the store is away: nobody can record the decision now
        await self._post(*self._receipt())
        deadline = time.monotonic() + grace_s
        ended = await _answered(meta, token, deadline)
        await self._post(*(ended or (self.blocks, self.text or "OpsPilot")))  # how it ended, or as it was
        # Put back: a close sent since that look may have landed first. Look again, now that ours is in.
        if ended == () and (again := await _answered(meta, token, deadline)):
            await self._post(*again)

    async def hold(self) -> None:
        """Before the decision is queued: a receipt not sent yet never will be, one on its way lands first (the
        worker's close must come after it)."""
        if self._task is None:
            return
        if not self._posting.is_set():
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def settle(self, recorded: bool, meta: MetaStore | None = None, token: str = "") -> None:
        """The click's work is over: ``recorded``, the worker closes the card; otherwise put it back. With ``meta``:
        looked at once more after the put-back, so a close sent meanwhile (another person's click) stays on top."""
        await self.hold()
        if _OPEN.get(self.token) is self:
            del _OPEN[self.token]
        if not recorded and (self._posting.is_set() or self._replace):
            await self._post(self.restore or self.blocks, self.text or "OpsPilot")
            if meta is not None and token and (ended := await ended_as(meta, token)) \
                    and ended[0] != self.restore:
                await self._post(*ended)

    @property
    def shown(self) -> bool:
        """Whether a receipt went out (it may then need putting back)."""
        return self._posting.is_set()

    async def _post(self, blocks: list[kit.Block], text: str) -> None:
        """Replace the clicked card (a few tries; a receipt that never lands is only a receipt missed)."""
        for attempt in range(3):
            try:
                await replace_original(self.url, text, blocks, timeout_s=_TIMEOUT_S)
                return
            except ResponseFailed as exc:
                if not exc.transient or attempt == 2:
                    log.warning("a click's card could not be updated through its response URL: %s", exc.error)
                    return
                await asyncio.sleep(0.5)


async def _answered(meta: MetaStore, token: str, deadline: float) -> tuple[list[kit.Block], str] | tuple[()] | None:
    """:func:`ended_as` once the store answers (None: not by ``deadline``)."""
    while time.monotonic() < deadline:
        await asyncio.sleep(_LOOK_S)
        if (ended := await ended_as(meta, token)) is not None:
            return ended
    return None


async def ended_as(meta: MetaStore, token: str) -> tuple[list[kit.Block], str] | tuple[()] | None:
    """How card ``token`` ended, as its record says: its blocks and text; () while it has not; None when the store
    does not answer in a second."""
    try:
        async with asyncio.timeout(_LOOK_S):
            card = await meta.get(CARD, token)
    except (StoreError, TimeoutError):
        return None
    decided = str(card.get("decided") or "")
    if not decided:
        return ()
    return kit.decided_card(str(card.get("summary") or ""), decided), decided
