""""Roll back to …" pressed: the offer is taken once — by the first press of anyone, a double click included —
its button leaves the answer (which then says who asked), and the question goes to the thread in the presser's
name, where the rollback waits on its card. A later press is told who asked already."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from bot.slack.inbound.run_gate import Admitted
from bot.slack.inbound.work_items import Converse, WorkItem
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.words import say
from bot.slack.rollbacks.offer import question
from state.store import MetaStore

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
        holder = await self.meta.claim(f"rollback-offer:{channel}:{thread_ts}:{target['run']}", member, OFFER_S)
        if holder != member:  # pressed before: one question per offer (it gave its button up then)
            await self.give_back(admitted)
            first = holder.split(":")[3] if holder.count(":") >= 4 else ""
            await self.outbox.tell(channel, user, say(lang, "rollback_on_it", who=kit.who(first or user)), thread_ts)
            return
        await self.dispatch(Converse(channel=channel, thread_ts=str(thread_ts), user=user, request_id=member,
                                     text=question(target, user, lang)))
        await self._taken(body, target, user, channel, thread_ts, lang)

    async def _taken(self, body: dict[str, Any], target: dict[str, str], user: str, channel: str,
                     thread_ts: str | None, lang: str) -> None:
        """The answer that offered it, edited: its button gone, who asked said in its place (the edit is the
        answer's own outbox record, so it is made once, whichever instance delivers it)."""
        message = body.get("message") or {}
        key = await self.outbox.key_at(channel, str(thread_ts), str(message.get("ts") or ""),
                                       f"answer:{target['run']}:")
        if key is None:  # not the answer's own message (already checked: a forged value acts on nothing)
            return
        blocks = [b for b in message.get("blocks") or [] if isinstance(b, dict)
                  and b.get("block_id") != f"rollback:{target['run']}"]
        taken = say(lang, "rollback_taken", who=kit.who(user), release=kit.escape(target["release"]))
        blocks.append(kit.context(taken))
        await self.outbox.message(key, channel, thread_ts, str(message.get("text") or ""), blocks)
