"""The local Slack's surfaces beside messages: ``views.publish`` (App Home), ``views.open`` (a modal, opened with
a click's ``trigger_id``) and ``chat.getPermalink``, with the limits a real workspace enforces."""

from __future__ import annotations

import json
from typing import Any

from bot.demo.block_limits import block_problems

VIEW_TITLE = 24  # a modal's title, submit and close texts
PRIVATE_METADATA = 3000
VIEW_BLOCKS = 100


def _view(body: dict[str, Any]) -> Any:
    view = body.get("view")
    try:
        return json.loads(view) if isinstance(view, str) else view
    except ValueError:
        return None


def _problems(view: dict[str, Any]) -> list[str]:
    blocks = view.get("blocks") or []
    problems = [] if len(blocks) <= VIEW_BLOCKS else [f"no more than {VIEW_BLOCKS} blocks in a view"]
    return problems + block_problems(blocks[:50])  # (block_problems counts a message's 50)


class ViewMethods:
    """Mixed into the local Slack (which owns ``messages`` and these records)."""

    messages: dict[tuple[str, str], dict[str, Any]]
    homes: dict[str, dict[str, Any]]
    modals: list[dict[str, Any]]
    """Every modal opened, in order, with the ``trigger_id`` that opened it (and who, where it is known)."""
    triggers: dict[str, str]
    """Who clicked, by trigger id, where the clicker is known (the demo page): a modal shows to them."""

    def _views_publish(self, body: dict[str, Any]) -> dict[str, Any]:
        view = _view(body)
        if not isinstance(view, dict) or view.get("type") != "home" or not body.get("user_id"):
            return {"ok": False, "error": "invalid_arguments"}
        problems = _problems(view)
        if problems:
            return {"ok": False, "error": "invalid_blocks: " + "; ".join(problems)}
        self.homes[str(body["user_id"])] = view
        return {"ok": True, "view": {"id": f"V{len(self.homes):04d}", **view}}

    def _views_open(self, body: dict[str, Any]) -> dict[str, Any]:
        view, trigger = _view(body), str(body.get("trigger_id") or "")
        if not trigger:
            return {"ok": False, "error": "invalid_arguments"}
        if not isinstance(view, dict) or view.get("type") != "modal":
            return {"ok": False, "error": "invalid_arguments"}
        problems = _problems(view)
        for key in ("title", "submit", "close"):
            text = str((view.get(key) or {}).get("text") or "")
            if (key == "title" and not text) or len(text) > VIEW_TITLE:
                problems.append(f"{key} must be 1 to {VIEW_TITLE} characters")
        if len(str(view.get("private_metadata") or "")) > PRIVATE_METADATA:
            problems.append(f"private_metadata must be at most {PRIVATE_METADATA} characters")
        if problems:
            return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": problems}}
        opened = {"id": f"VM{len(self.modals) + 1:04d}", "hash": f"{len(self.modals) + 1}.h", **view}
        self.modals.append({"trigger_id": trigger, "user": self.triggers.get(trigger), "view": opened})
        return {"ok": True, "view": opened}

    def _chat_getPermalink(self, body: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(body.get("channel") or ""), str(body.get("message_ts") or "")
        message = self.messages.get((channel, ts))
        if message is None:
            return {"ok": False, "error": "message_not_found" if channel else "channel_not_found"}
        link = f"https://fake.slack.test/archives/{channel}/p{ts.replace('.', '')}"
        parent = message.get("thread_ts")
        if parent and parent != ts:
            link += f"?thread_ts={parent}&cid={channel}"
        return {"ok": True, "channel": channel, "permalink": link}
