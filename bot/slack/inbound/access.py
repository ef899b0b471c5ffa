"""Who may use the bot, where changes may run, and who may confirm them."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from bot.config import Approvers, SlackConfig
from bot.slack.inbound.accounts import Accounts
from bot.slack.outbound.api_errors import SLACK_FAILURES, retried, slack_error
from bot.slack.outbound.blocks import bare, escape, is_user
from bot.slack.outbound.people import People
from bot.slack.outbound.words import say
from core.envs import environment_name
from state.records import Ticket

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    key: str = ""
    """Why not: the catalog's words (:mod:`bot.slack.outbound.words`), said in the thread's language."""
    values: tuple[tuple[str, str], ...] = ()

    def words(self, lang: str) -> str:
        return say(lang, self.key, **dict(self.values)) if self.key else ""

    @property
    def unpostable(self) -> bool:
        """OpsPilot cannot post in the conversation: told through the request's response URL, if at all."""
        return self.key in ("not_my_dm", "dm_unknown") or self.key.startswith("cannot_post")


def refusal(key: str, **values: str) -> Verdict:
    """Its values as they are, hidden characters included (the outbox shows those, at the one choke point), but
    never a backtick: the catalog puts them in code spans (`` `{env}` ``) that one would close."""
    return Verdict(False, key, tuple((k, v.replace("`", "'")) for k, v in values.items()))


ALLOW = Verdict(True)
LIKE_A_RESTART = {"rollback_service": "restart_service", "scale_service": "restart_service"}
"""Changes to a running service that fall under ``restart_service``'s approvers where they have none of their own."""
INFO_S = 3.0
"""How long a command waits for Slack to say whether OpsPilot is in the channel: past it, not known (let through)."""
_LISTED = 10  # people (and groups) named before "N more"


class AccessPolicy:
    """Fails closed: a rule that cannot be matched (an environment nobody knows, an approver group Slack would
    not list) lets nobody confirm and says why — "no rule" means anyone only for a known environment."""

    def __init__(self, config: SlackConfig, client: AsyncWebClient, *, cache_s: float = 60.0,
                 environments: list[str] | None = None) -> None:
        self.config = config
        self.client = client
        self.cache_s = cache_s
        self.environments = environments  # the catalog's; None: not known here (nothing is judged unknown)
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}
        self._dms: dict[str, bool] = {}  # whether a D… conversation is OpsPilot's own (it never changes)
        self._inside: dict[str, float] = {}  # channels OpsPilot was seen in, until when that is kept
        self._unread: set[str] = set()  # groups Slack would not list, with nothing cached to fall back on
        self.accounts = Accounts(client, ttl_s=cache_s)

    async def members(self, usergroup: str) -> frozenset[str]:
        cached = self._groups.get(usergroup)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        try:
            response = await retried("usergroups.users.list",
                                     lambda: self.client.usergroups_users_list(usergroup=usergroup))
            users = frozenset(response.get("users") or [])
            self._unread.discard(usergroup)
        except SLACK_FAILURES as exc:  # a hang or a dropped connection too: never out of a card's rendering
            log.warning("could not read user group %s: %s", usergroup, slack_error(exc))
            if not cached:
                self._unread.add(usergroup)
                return frozenset()  # not cached: asked again next time
            users = cached[1]
        self._groups[usergroup] = (time.monotonic() + self.cache_s, users)
        return users

    def rules(self, tool: str) -> dict[str, Approvers]:
        """``tool``'s approvers rules; a rollback's or a scaling's are a restart's unless it has its own (a config
        written before they existed must not leave the riskier changes to anyone)."""
        return self.config.approvers.get(tool) or self.config.approvers.get(LIKE_A_RESTART.get(tool, ""), {})

    def known(self, environment: str) -> bool:
        """Whether the catalog has it, both folded as the rules are (a catalog saying ``Prod`` has ``prod``)."""
        if self.environments is None or not environment:
            return True
        return environment_name(environment) in {environment_name(e) for e in self.environments}

    def unmatched(self, tool: str, environment: str) -> bool:
        """Rules exist for ``tool`` but none can match ``environment``, which no catalog service has."""
        rules = self.rules(tool)
        return bool(rules) and environment not in rules and "*" not in rules and not self.known(environment)

    def unnamed(self, tool: str, environment: str) -> bool:
        """The call names no environment (an MCP tool on ``confirm: always`` that leaves it to its server), yet
        who may confirm ``tool`` depends on one: its approvers are set per environment. Fails closed."""
        return not environment and any(e != "*" for e in self.rules(tool))

    def confirmable(self, tool: str, environment: str | None, requester: str | None) -> bool:
        """Whether anyone at all may confirm ``tool`` in ``environment`` under the config (False: a card shows no
        Confirm button). An approver group counts as someone: who is in it is Slack's to say, at the click."""
        env = environment_name(environment or "")
        if env is None or self.unmatched(tool, env) or self.unnamed(tool, env):
            return False
        rule = self.approvers_for(tool, env)
        if rule is None or rule.usergroups:
            return True
        return any(u != requester or not self.two_person(env) for u in rule.users)

    def unsure(self) -> bool:
        """Whether a refusal just now may be Slack's failing, not the person: an allowed user group could not be
        listed, with nothing cached (asked again next time)."""
        return bool(self._unread & set(self.config.allowed_usergroups))

    async def _in_any_group(self, user: str, groups: list[str]) -> bool:
        for group in groups:
            if user in await self.members(group):
                return True
        return False

    async def may_use(self, user: str, channel: str, *, direct: bool = False) -> Verdict:
        c = self.config
        if c.allowed_channels and not direct and channel not in c.allowed_channels:
            return refusal("no_channel")
        if c.allowed_users or c.allowed_usergroups:
            if user in c.allowed_users or await self._in_any_group(user, c.allowed_usergroups):
                return ALLOW
            return refusal("no_user")
        # Nobody is named: anyone of this workspace, not a guest or another organisation's account (a shared
        # channel's), who would otherwise read our systems and confirm our changes. Not known (Slack failing): let
        # through, as a member — Slack failing mid-incident must not lock the on-call out.
        if not c.allow_outsiders and await self.accounts.outsider(user, within_s=INFO_S):  # hanging: not known
            return refusal("outsider")
        return ALLOW

    async def may_start(self, user: str, channel: str) -> Verdict:
        """:meth:`may_use` for a door whose conversation Slack names, any direct message included (a command, a
        shortcut): only OpsPilot's own DM counts as one; a DM between people is refused (OpsPilot is not in it)."""
        if not channel.startswith("D"):
            inside = await self.bot_in(channel)
            if isinstance(inside, str):
                return refusal(inside)  # nothing it starts could be shown there
            return await self.may_use(user, channel)
        own = await self.own_dm(channel)
        if own is None:
            return refusal("dm_unknown")
        if not own:
            return refusal("not_my_dm")
        return await self.may_use(user, channel, direct=True)

    async def own_dm(self, channel: str) -> bool | None:
        """Whether ``channel`` is a direct message with OpsPilot: one it can read (``im:history``; a DM between
        people is ``channel_not_found`` to it). None: Slack failing, not known (asked again next time)."""
        if channel in self._dms:
            return self._dms[channel]
        try:
            await retried("conversations.history", lambda: self.client.conversations_history(channel=channel,
                                                                                             limit=1), attempts=2)
            own = True
        except SLACK_FAILURES as exc:
            if "channel_not_found" not in slack_error(exc):
                log.warning("whether %s is OpsPilot's DM is not known: %s", channel, slack_error(exc))
                return None
            own = False
        if len(self._dms) > 10_000:
            self._dms.clear()
        self._dms[channel] = own
        return own

    async def bot_in(self, channel: str, *, fresh: bool = False) -> bool | str | None:
        """Whether OpsPilot is in a channel (it can post there): True, or the words' key for why not
        (``cannot_post_not_in_channel``, ``cannot_post_channel_not_found`` — a private channel it is not in —,
        ``cannot_post_is_archived``);
        None: Slack failing, not known (let through: the post says). Only a yes is kept, a minute."""
        if not fresh and self._inside.get(channel, 0.0) > time.monotonic():
            return True
        try:
            async with asyncio.timeout(INFO_S):  # a slow Slack must not hold every command for a minute: unknown
                answer = await self.client.conversations_info(channel=channel)
        except SLACK_FAILURES as exc:
            if "channel_not_found" in slack_error(exc):
                return "cannot_post_channel_not_found"
            log.warning("whether OpsPilot is in %s is not known: %s", channel, slack_error(exc))
            return None
        info = answer.get("channel") or {}
        if info.get("is_archived"):  # its members are kept, and every post is refused (is_archived)
            return "cannot_post_is_archived"
        if info.get("is_member") is False and not info.get("is_im"):
            return "cannot_post_not_in_channel"
        if len(self._inside) > 10_000:
            self._inside.clear()
        self._inside[channel] = time.monotonic() + self.cache_s
        return True

    def may_change_in(self, channel: str, *, direct: bool = False) -> Verdict:
        allowed = self.config.mutating_channels
        if allowed and (direct or channel not in allowed):
            where = ", ".join(f"<#{c}>" for c in allowed)
            return refusal("no_change_here", where=where)
        return ALLOW

    def approvers_for(self, tool: str, environment: str | None) -> Approvers | None:
        """Who may confirm ``tool`` in ``environment``; None: no rule (anyone allowed to use the bot)."""
        rules = self.rules(tool)
        return rules.get(environment_name(environment or "") or "*") or rules.get("*")

    def two_person(self, environment: str | None) -> bool:
        """Fails closed: a name with hidden or look-alike characters counts as one the rule names, and so does no
        name at all (a change whose environment is its server's to pick may be in one the rule names)."""
        env = environment_name(environment or "")
        rule = {environment_name(e) for e in self.config.two_person_rule}
        return env is None or env in rule or (not env and bool(rule))

    async def may_confirm(self, user: str, tool: str, environment: str | None, requester: str | None) -> Verdict:
        env = environment_name(environment or "")
        if env is None:  # the runtime refuses such a name before any card; a stored one is still not judged
            return refusal("no_env", tool=tool, env=environment or "", known=", ".join(self.environments or []))
        if requester and user == requester and self.two_person(env):
            return refusal("no_own_approval", tool=tool, env=env)
        if self.unmatched(tool, env):
            known = ", ".join(self.environments or [])
            return refusal("no_env", tool=tool, env=env, known=known)
        if self.unnamed(tool, env):
            return refusal("no_env_unknown", tool=tool)
        rule = self.approvers_for(tool, env)
        if rule is None:
            return ALLOW  # no approvers configured for this tool in this known environment: anyone who may use it
        if user in rule.users or await self._in_any_group(user, rule.usergroups):
            return ALLOW
        unread = [g for g in rule.usergroups if g in self._unread]
        if unread:
            return refusal("no_group_read")
        return refusal("no_approver_in" if env else "no_approver", tool=tool, env=env)

    async def may_decline(self, user: str, ticket: Ticket) -> Verdict:
        """Who may turn a card down, by its button or by a reply in its thread that sets it aside: whoever asked
        for the change, or whoever may confirm it. A form is answered by anyone who may use OpsPilot there."""
        pending = ticket.pending
        if user == ticket.requester or pending.interrupt_type != "confirm_risky":
            return ALLOW
        return await self.may_confirm(user, pending.call.name, pending.environment, None)

    async def who_may_confirm(self, people: People, *, tool: str, environment: str | None, requester: str | None,
                              channel: str, lang: str) -> list[str]:
        """What a confirm card says about who may confirm it, before anyone clicks: the same rules
        :meth:`may_confirm` and :meth:`may_change_in` apply to the click, from the config as it stands."""
        env = environment_name(environment or "")
        if env is None:
            return [say(lang, "unknown_env_confirms", env=bare(environment or ""),
                        known=", ".join(self.environments or []))]
        rule = self.approvers_for(tool, env)
        if self.unmatched(tool, env):
            lines = [say(lang, "unknown_env_confirms", env=bare(env), known=", ".join(self.environments or []))]
        elif self.unnamed(tool, env):
            lines, requester = [say(lang, "unnamed_env_confirms", tool=bare(tool))], None
        elif rule is None:
            lines = [say(lang, "anyone_confirms")]
        elif not rule.users and not rule.usergroups:
            lines = [say(lang, "nobody_confirms", tool=bare(tool), env=bare(env or "*"))]
        elif not self.confirmable(tool, env, requester) and requester:  # the requester was the only approver
            lines = [say(lang, "only_requester_confirms", tool=bare(tool), env=bare(env),
                         name=escape(await people.name(requester)))]
            requester = None  # said: not again as the two-person rule's "someone else must confirm"
        else:
            if requester and self.two_person(env):  # the requester cannot approve their own request
                rule = rule.model_copy(update={"users": [u for u in rule.users if u != requester]})
            await asyncio.gather(*(self.members(g) for g in rule.usergroups))  # which can be read right now
            unread = [g for g in rule.usergroups if g in self._unread]
            if unread:
                readable = [g for g in rule.usergroups if g not in unread]
                names = await self._names(people, rule.users, readable, lang) or say(lang, "no_one")
                groups = say(lang, "comma").join(escape(g) for g in await asyncio.gather(*map(people.group, unread)))
                lines = [say(lang, "unread_group_confirms", names=names, groups=groups)]
            else:
                names = await self._names(people, rule.users, rule.usergroups, lang) or say(lang, "no_one")
                lines = [say(lang, "who_confirms", names=names)]
        if requester and is_user(requester) and self.two_person(env):
            name = escape(await people.name(requester))
            lines.append(say(lang, "two_person", env=bare(env), name=name) if env else
                         say(lang, "two_person_unnamed", name=name))
        where = self.may_change_in(channel, direct=channel.startswith("D"))
        if not where.allowed:
            lines.append(where.words(lang))
        return lines

    async def who_may_use(self, people: People, lang: str) -> str:
        """Whom OpsPilot answers, by name (empty: anyone)."""
        return await self._names(people, self.config.allowed_users, self.config.allowed_usergroups, lang)

    @staticmethod
    async def _names(people: People, users: list[str], groups: list[str], lang: str) -> str:
        """Names, not mentions: a card must not notify everyone it lists. Looked up at once (each is cached; a
        slow users.info costs one timeout, not one per name)."""
        found = await asyncio.gather(*(people.name(u) for u in users[:_LISTED]),
                                     *(people.group(g) for g in groups[:_LISTED]))
        names = [escape(n) for n in found[:len(users[:_LISTED])]]
        names += [say(lang, "group_members", group=escape(g)) for g in found[len(users[:_LISTED]):]]
        extra = max(len(users) - _LISTED, 0) + max(len(groups) - _LISTED, 0)
        return say(lang, "comma").join([*names, *([say(lang, "more", n=extra)] if extra else [])])
