"""The local Slack's conversations (a mixin of :class:`bot.demo.workspace.LocalSlack`): ``conversations.history``,
a channel's top-level messages (thread parents included, replies not), newest first, paged as Slack pages them;
``conversations.info`` (public, private — ``LocalSlack.private`` — or a DM; ``is_member`` false in ``absent``)
and ``conversations.members``."""

from __future__ import annotations

from typing import Any

_OWN = frozenset({"stream", "was_stream"})  # the fake's bookkeeping of a stream: Slack shows only the message


class ChannelMethods:
    messages: dict[tuple[str, str], dict[str, Any]]
    members: dict[str, set[str]]
    private: set[str]
    absent: set[str]
    archived: set[str]

    def outside(self, channel: str) -> bool:
        """A direct message between people, the bot not in it (its members set without ``UBOT``): Slack answers
        the bot ``channel_not_found`` there."""
        return channel.startswith("D") and channel in self.members and "UBOT" not in self.members[channel]

    def _conversations_history(self, body: dict[str, Any]) -> dict[str, Any]:
        channel = str(body.get("channel"))
        if self.outside(channel):
            return {"ok": False, "error": "channel_not_found"}
        with_metadata = str(body.get("include_all_metadata")).lower() in ("1", "true")
        oldest = float(body.get("oldest") or 0)
        inclusive = str(body.get("inclusive")).lower() in ("1", "true")
        top = sorted((m for (c, ts), m in self.messages.items() if c == channel and m.get("thread_ts") in (None, ts)),
                     key=lambda m: -float(m["ts"]))
        found = [{k: v for k, v in m.items() if k not in _OWN and (k != "metadata" or with_metadata)} for m in top
                 if not oldest or float(m["ts"]) > oldest or (inclusive and float(m["ts"]) == oldest)]
        start, limit = int(body.get("cursor") or 0), int(body.get("limit") or 100)
        more = start + limit < len(found)
        return {"ok": True, "messages": found[start:start + limit], "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _conversations_info(self, body: dict[str, Any]) -> dict[str, Any]:
        """A conversation as Slack describes it: a DM (``is_im``, its ``user``), a private or a public channel."""
        channel = str(body.get("channel") or "")
        if channel.startswith("D"):
            people = sorted(self.members.get(channel, set()) - {"UBOT"})
            if not people:
                return {"ok": False, "error": "channel_not_found"}
            return {"ok": True, "channel": {"id": channel, "is_im": True, "is_channel": False, "is_group": False,
                                            "is_mpim": False, "is_private": True, "user": people[0]}}
        private = channel in self.private
        return {"ok": True, "channel": {"id": channel, "name": channel.lower(), "is_channel": True, "is_group": False,
                                        "is_im": False, "is_mpim": False, "is_private": private,
                                        "is_member": channel not in self.absent,
                                        "is_archived": channel in self.archived}}

    def _conversations_members(self, body: dict[str, Any]) -> dict[str, Any]:
        """Who is in a conversation, paged by ``cursor`` and ``limit`` as Slack pages it."""
        channel = str(body.get("channel") or "")
        everyone = sorted(self.members.get(channel, set()))
        try:
            start, limit = int(body.get("cursor") or 0), int(body.get("limit") or 100)
        except ValueError:
            return {"ok": False, "error": "invalid_cursor"}
        if not 1 <= limit <= 999:
            return {"ok": False, "error": "invalid_limit"}
        more = start + limit < len(everyone)
        return {"ok": True, "members": everyone[start:start + limit],
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}
