""""Roll back to …" pressed: the offer is claimed once — by the first press of anyone, a double click included —
and the question goes to the thread in the presser's name, where the rollback waits on its card. Once the
question is taken as a turn (:mod:`bot.slack.inbound.offers`, on the worker that runs it) the button leaves the
answer, which then says who asked; a question the thread does not take (busy, its card someone else's) gives the
claim back and leaves the button as it was. A press while the claim is held is told who asked already."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from bot.slack.inbound.run_gate import Admitted
from bot.slack.inbound.work_items import Converse, Offered, WorkItem
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.words import say
from bot.slack.rollbacks.offer import question
from state.store import MetaStore
from state.store_errors import StoreError

OFFER_S = 7 * 24 * 3600  # as long as the answer's thread is kept


class RollbackPress:
    def __init__(self, *, meta: MetaStore, outbox: SlackOutbox, dispatch: Callable[[WorkItem], Awaitable[None]],
                 admit: Callable[[str, str, str, str | None], Awaitable[Admitted | None]],
                 give_back: Callable[[Admitted], Awaitable[None]],
                 lang: Callable[[str, str | None], Awaitable[str]]) -> None:
        self.meta, self.outbox, self.dispatch = meta, outbox, dispatch
        self.admit, self.give_back, self.lang = admit, give_back, lang

    async def __call__(self, body: dict[str, Any], target: dict[str, str], user: str, channel: str,
                       thread_ts: str | None) -> None:
        """``target``: the button's value, already checked to be of this thread's run."""
        press = str((body.get("actions") or [{}])[0].get("action_ts") or body.get("trigger_id") or "")
        member = f"rollback:{channel}:{thread_ts}:{user}:{press}"
        if not press or not await self.meta.first_time(member):  # the same press delivered again: once
            return
        if not (admitted := await self.admit(user, channel, member, thread_ts)):
            return
        lang = await self.lang(channel, thread_ts)
        claim = f"rollback-offer:{channel}:{thread_ts}:{target['run']}"
        holder = await self.meta.claim(claim, member, OFFER_S)
        if holder != member:  # pressed before: one question per offer (taken, or on its way to the thread)
            await self.give_back(admitted)
            first = holder.split(":")[3] if holder.count(":") >= 4 else ""
            await self.outbox.tell(channel, user, say(lang, "rollback_on_it", who=kit.who(first or user)), thread_ts)
            return
        message = body.get("message") or {}
        offered = Offered(claim=claim, holder=member, run=target["run"], release=target["release"],
                          answer_ts=str(message.get("ts") or ""), text=str(message.get("text") or ""),
                          blocks=[b for b in message.get("blocks") or [] if isinstance(b, dict)])
        try:
            await self.dispatch(Converse(channel=channel, thread_ts=str(thread_ts), user=user, request_id=member,
                                         text=question(target, user, lang), offered=offered,
                                         slots=admitted.slots()))
        except BaseException:  # not handed on: nobody asked, so the offer stays free
            with contextlib.suppress(StoreError):
                await self.meta.unclaim(claim, member)
            raise
