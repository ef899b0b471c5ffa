"""What becomes of a start once a worker knows whether its thread took the question: an offer pressed (a "Roll
back to …" under an answer, an alert's Investigate) is shown as taken only then, and a question the thread did
not take (busy, its card someone else's, refused by the engine) leaves the offer free and its button where it
was, and gives back the run windows it was counted in (:attr:`bot.slack.inbound.work_items.Converse.slots`)."""

from __future__ import annotations

from bot.slack.inbound.work_items import Converse
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.words import say
from state.store import MetaStore


class Offers:
    """:attr:`bot.slack.inbound.work.Executor.offers`."""

    def __init__(self, *, meta: MetaStore, outbox: SlackOutbox) -> None:
        self.meta, self.outbox = meta, outbox

    async def taken(self, item: Converse, lang: str) -> None:
        """The offer says who asked, its button gone. Each edit is the offer's own outbox record (the answer's, the
        alert offer's), so it is made once, whichever instance delivers it."""
        if (offered := item.offered) is None:
            return
        if offered.kind == "investigate":
            taken = say(lang, "alert_taken", who=kit.who(item.user))
            await self.outbox.message(f"alert-offer:{item.thread_ts}", item.channel, item.thread_ts, taken,
                                      [kit.mrkdwn(taken)])
            return
        key = await self.outbox.key_at(item.channel, str(item.thread_ts), offered.answer_ts,
                                       f"answer:{offered.run}:")
        if key is None:  # not the answer's own message (already checked: a forged value acts on nothing)
            return
        blocks = [b for b in offered.blocks if b.get("block_id") != f"rollback:{offered.run}"]
        said = say(lang, "rollback_taken", who=kit.who(item.user), release=kit.escape(offered.release))
        blocks.append(kit.context(said))
        await self.outbox.message(key, item.channel, item.thread_ts, offered.text, blocks)

    async def not_taken(self, item: Converse) -> None:
        """Nothing started: the offer is free again, and the windows the start was counted in get their slot
        back."""
        if item.offered is not None:
            await self.meta.unclaim(item.offered.claim, item.offered.holder)
        if item.slots is not None:
            for window in item.slots.windows:
                await self.meta.withdraw(window, item.slots.member)
