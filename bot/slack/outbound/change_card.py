"""The card a change waits on: what would run, in full and as it is (``tool``, target, environment, what it will
change, every argument), so that what a person confirms is what runs.

Every value is data in a code span on one line (:func:`blocks.code`): a newline or a backtick in an argument (a
model's ``reason`` an injected log line steered) cannot forge a line of the card ("*Environment:* `prod`"). A long
value is cut and says how much is not shown; what the change is and where come first, in a block of their own, so
that no argument's length pushes them out of what Slack shows."""

from __future__ import annotations

import json
from typing import Any, get_args

from bot.slack.outbound.blocks import (
    SECTION_TEXT,
    Block,
    _calls_on,
    _cut,
    bare,
    button,
    code,
    escape,
    form_fields,
    gate,
    mrkdwn,
    quoted,
)
from bot.slack.outbound.words import has_word, say
from core.text import hides_any
from tools.registry import Provenance

VALUE_SHOWN = 300
"""An argument's characters shown on the card; the rest is counted ("… (1,204 more characters)")."""


def _value(value: object, lang: str, limit: int = VALUE_SHOWN) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    more = len(text) - limit
    return code(text[:limit]) + (f" {say(lang, 'more_chars', n=more)}" if more > 0 else "")


def what_runs(payload: dict[str, Any], lang: str = "en") -> list[str]:
    """What the change is, where, what it will change and the warnings (first), then its arguments: one text each,
    the arguments in as many as their length needs."""
    args = payload.get("arguments") or {}
    lines = [f"*{say(lang, 'tool')}:* {code(payload.get('tool'))}"]
    if payload.get("target"):
        lines.append(f"*{say(lang, 'target')}:* {code(payload['target'])}")
    if payload.get("environment"):
        lines.append(f"*{say(lang, 'environment')}:* {code(payload['environment'])}")
    if hides_any([payload.get("tool"), payload.get("target"), payload.get("environment"), args]):
        lines.append(f":warning: {say(lang, 'hidden_chars')}")
    # Only the payload's provenance is said: an older payload's bare ``destructive: true`` also stood for an
    # unannotated tool, so it is left unsaid rather than guessed.
    provenance = payload.get("provenance")
    if isinstance(provenance, str) and provenance in get_args(Provenance):
        icon = {"server_destructive": ":rotating_light:", "unannotated": ":grey_question:"}.get(
            provenance, ":information_source:")
        lines.append(f"{icon} {say(lang, 'provenance_' + provenance)}")
    lines += plan_lines(payload, lang)
    shown = [f"{escape(k)}={_value(v, lang)}" for k, v in args.items() if v not in (None, "")]
    parts, part = ["\n".join(lines)], f"*{say(lang, 'arguments')}:* " + ("" if shown else say(lang, "none"))
    for i, item in enumerate(shown):  # each part within a section's limit: no argument of them is cut off
        if len(part) + 2 + len(item) > SECTION_TEXT:
            parts, part = [*parts, part.rstrip(", ")], ""
        part += item + (", " if i < len(shown) - 1 else "")
    reason = f"*{say(lang, 'model_reason')}:* {quoted(payload['model_reason'])}" if payload.get("model_reason") else ""
    if reason and len(part) + 1 + len(reason) > SECTION_TEXT:
        parts, part = [*parts, part], ""
    return [*parts, f"{part}\n{reason}".strip("\n") if reason else part]


def plan_rows(payload: dict[str, Any], lang: str) -> list[tuple[str, str, str]]:
    """What the change will do (``ToolSpec.plan``) as (label, from, to): the card shows it before anyone
    confirms — a rollback's revision, images, change cause and when each was deployed; a scale's replicas."""
    plan = payload.get("plan")
    changes = plan.get("changes") if isinstance(plan, dict) else None
    rows = []
    for change in changes if isinstance(changes, list) else []:
        if not isinstance(change, dict) or not change.get("field"):
            continue
        key = f"plan_{change['field']}"
        label = say(lang, key) if has_word(key) else str(change["field"])
        old, new = (say(lang, "plan_unknown") if v == "unknown" else v
                    for v in (str(change.get(side) or "—") for side in ("from", "to")))
        rows.append((label, old, new))
    return rows[:8]


def plan_lines(payload: dict[str, Any], lang: str) -> list[str]:
    rows = plan_rows(payload, lang)
    if not rows:
        return []
    return [f"*{say(lang, 'plan_will_change')}:*"] + [
        f"• *{escape(label)}:* {_value(old, lang, 120)} → {_value(new, lang, 120)}" for label, old, new in rows]


def confirm_card(token: str, reason: str, payload: dict[str, Any], lang: str = "en",
                 who: list[str] | None = None, confirmable: bool = True) -> list[Block]:
    """The card asking for a change: what would run, who may confirm it (``who``: said before anyone clicks),
    Confirm and Cancel; Cancel only where nobody may ever confirm it (``confirmable``: no button nobody can use)."""
    env = str(payload.get("environment") or "")
    text = say(lang, "live_change", tool=bare(payload.get("tool")), target=bare(payload.get("target")),
               env=bare(env or "n/a"))
    dialog = {
        "title": {"type": "plain_text", "text": say(lang, "run_this")},
        "text": {"type": "mrkdwn", "text": _cut(text, 300)},
        "confirm": {"type": "plain_text", "text": say(lang, "confirm")},
        "deny": {"type": "plain_text", "text": say(lang, "back")},
        "style": "danger",
    }
    return [
        mrkdwn(f":warning: *{say(lang, 'confirmation_needed')}* — {gate(reason, payload, lang)}"),
        *(mrkdwn(part) for part in what_runs(payload, lang)),
        *([mrkdwn("\n".join(f":bust_in_silhouette: {line}" for line in who))] if who else []),
        {"type": "actions", "block_id": "opspilot_decide", "elements": [
            *([button(say(lang, "confirm"), "opspilot_confirm", token, style="danger", confirm=dialog)]
              if confirmable else []),
            button(say(lang, "cancel"), "opspilot_decline", token),
        ]},
    ]


def card_summary(interrupt_type: str, reason: str, payload: dict[str, Any], lang: str = "en",
                 tools: list[str] | None = None, arguments: dict[str, Any] | None = None) -> str:
    """What a card asks, kept once it is decided: the change and where, or the fields and what for."""
    if interrupt_type == "confirm_risky":
        return f"*{say(lang, 'confirmation')}* — {gate(reason, payload, lang)}\n" + "\n".join(what_runs(payload, lang))
    calls, on = _calls_on(tools or [str(payload.get("tool") or "?")], arguments or {}, lang)
    return say(lang, "form_needed", fields=form_fields(payload, lang), calls=calls, on=on)
