"""What goes to Slack, as it goes: every text scrubbed (core.redact) and its hidden characters shown, before
it is stored in the outbox or sent."""

from __future__ import annotations

import json
from typing import Any

from bot.slack.outbound import blocks as kit
from core import redact as scrub
from core.text import reveal, reveal_blocks


def redact(text: str) -> str:
    """Every text bound for Slack passes here: scrubbed (core.redact), and its hidden characters (bidi controls,
    zero-width) shown as markers, written escaped since Slack reads these texts as mrkdwn."""
    return reveal(scrub.redact(text), escaped=True)


def redact_blocks(blocks: Any) -> Any:
    """Every Block Kit ``text`` bound for Slack: scrubbed, hidden characters shown (see :func:`redact`)."""
    return reveal_blocks(scrub.redact_blocks(blocks))


def message_fields(channel: str, thread_ts: str | None, text: str, blocks: list[kit.Block]) -> dict[str, Any]:
    """A message record's fields; everything bound for Slack (and the outbox in Redis) redacted here."""
    return {"kind": "message", "channel": channel, "thread_ts": thread_ts, "text": redact(text),
            "blocks": json.dumps(redact_blocks(blocks), ensure_ascii=False)}
