"""Who may use the bot, where changes may run, and who may confirm them."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import SlackConfig
from bot.slack.metrics import slack_error

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""
    zh: str = ""
    """The reason in Chinese, for a Chinese thread."""

    def words(self, lang: str) -> str:
        return self.zh if lang == "zh" and self.zh else self.reason


ALLOW = Verdict(True)


class AccessPolicy:
    def __init__(self, config: SlackConfig, client: AsyncWebClient, *, cache_s: float = 60.0) -> None:
        self.config = config
        self.client = client
        self.cache_s = cache_s
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}

    async def members(self, usergroup: str) -> frozenset[str]:
        cached = self._groups.get(usergroup)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        try:
            response = await self.client.usergroups_users_list(usergroup=usergroup)
            users = frozenset(response.get("users") or [])
        except SlackApiError as exc:
            log.warning("could not read user group %s: %s", usergroup, slack_error(exc))
            users = cached[1] if cached else frozenset()
        self._groups[usergroup] = (time.monotonic() + self.cache_s, users)
        return users

    async def _in_any_group(self, user: str, groups: list[str]) -> bool:
        for group in groups:
            if user in await self.members(group):
                return True
        return False

    async def may_use(self, user: str, channel: str, *, direct: bool = False) -> Verdict:
        c = self.config
        if c.allowed_channels and not direct and channel not in c.allowed_channels:
            return Verdict(False, "I am not enabled in this channel. Ask your Slack admin to add it to "
                                  "`slack.allowed_channels`.",
                           "这个频道没有启用我。请 Slack 管理员把它加到 `slack.allowed_channels`。")
        if c.allowed_users or c.allowed_usergroups:
            if user in c.allowed_users or await self._in_any_group(user, c.allowed_usergroups):
                return ALLOW
            return Verdict(False, "You are not on the list of people who may use OpsPilot "
                                  "(`slack.allowed_users` / `slack.allowed_usergroups`).",
                           "你不在可以使用 OpsPilot 的名单里（`slack.allowed_users` / `slack.allowed_usergroups`）。")
        return ALLOW

    def may_change_in(self, channel: str, *, direct: bool = False) -> Verdict:
        allowed = self.config.mutating_channels
        if allowed and (direct or channel not in allowed):
            where = ", ".join(f"<#{c}>" for c in allowed)
            return Verdict(False, f"Changes can only be confirmed in {where}.", f"变更只能在 {where} 确认。")
        return ALLOW

    async def may_confirm(self, user: str, tool: str, environment: str | None, requester: str | None) -> Verdict:
        env = (environment or "").lower()
        if requester and user == requester and env in {e.lower() for e in self.config.two_person_rule}:
            return Verdict(False, f"Two-person rule: the person who asked cannot approve a `{tool}` in `{env}`. "
                                  "Ask another approver.",
                           f"双人规则：发起人不能批准自己在 `{env}` 的 `{tool}`。请另一位批准人确认。")
        rules = self.config.approvers.get(tool, {})
        rule = rules.get(env) or rules.get("*")
        if rule is None:
            return ALLOW  # no approvers configured for this tool/environment: anyone allowed to use the bot
        if user in rule.users or await self._in_any_group(user, rule.usergroups):
            return ALLOW
        return Verdict(False, f"You are not an approver for `{tool}` in `{env or 'any environment'}`. "
                              "Nothing was changed.",
                       f"你不是 `{env or '任何环境'}` 中 `{tool}` 的批准人。什么都没有改变。")
