"""The local Slack's channel history (a mixin of :class:`bot.demo.workspace.LocalSlack`): ``conversations.history``,
a channel's top-level messages (thread parents included, replies not), newest first, paged as Slack pages them."""

from __future__ import annotations

from typing import Any

_OWN = frozenset({"stream", "was_stream"})  # the fake's bookkeeping of a stream: Slack shows only the message


class ChannelMethods:
    messages: dict[tuple[str, str], dict[str, Any]]

    def _conversations_history(self, body: dict[str, Any]) -> dict[str, Any]:
        channel = str(body.get("channel"))
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
