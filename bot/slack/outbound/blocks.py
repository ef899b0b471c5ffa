"""Block Kit for OpsPilot's messages, built within Slack's limits.

Action ids start with ``opspilot_``; button values carry only an opaque token (or a run id):
what a click does is always read back from Redis, never from the payload.

Text we did not write ourselves — what people asked, tool arguments and results, the model's words — goes
through :func:`escape` before it is put into mrkdwn, so it can never mention anyone (``<!channel>``,
``<@U…>``, ``<!subteam^…>``) nor show a link whose text hides its target. Only the mentions our own
templates compose stay live.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from bot.agent.models.base import DEMO_LABEL
from bot.slack.outbound.markdown import TICK
from bot.slack.outbound.words import plural, say
from core.split import split
from core.text import reveal

SECTION_TEXT = 3000
MESSAGE_TEXT = 40_000
MAX_BLOCKS = 50
STREAM_TEXT = 12_000  # markdown per streaming call
BUTTON_TEXT = 75
OPTION_TEXT = 75
OPTION_VALUE = 150
MAX_OPTIONS = 100
HEADER_TEXT = 150

Block = dict[str, Any]


def escape(text: object) -> str:
    """Slack's three control characters, escaped as its formatting rules say, and hidden characters (bidi controls,
    zero-width) shown as ``<U+202E>``: the text shows as written, and all of it."""
    return reveal(str(text)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_TOKEN_LIKE = re.compile(r"&lt;(?![@!#])")


def unescape(text: str) -> str:
    """Text as a person wrote it, from Slack's ``text`` field (which escapes ``&``, ``<``, ``>``: quoted back
    escaped again, ``p95 > 500ms`` read ``p95 &gt; 500ms``). Tokens (``<@U1>``, links) are read before this; a
    ``<`` typed before ``@``, ``!`` or ``#`` stays escaped, so typed text never turns into a mention later."""
    return _TOKEN_LIKE.sub("<", text).replace("&gt;", ">").replace("&amp;", "&")


def quoted(text: object) -> str:
    """Someone's words inside one of our lines (a schedule's question in a list): :func:`escape`d, on one line,
    and a backtick shown as ``ˋ`` — two fences in two questions turned the list between them into one code block."""
    return " ".join(escape(text).replace("`", TICK).split())


def code(text: object) -> str:
    """Quoted data (an alert's title, a tool's words) as an inline code span: shown as written, in no language."""
    return f"`{bare(text)}`"


def bare(text: object) -> str:
    """What :func:`code` shows between its backticks, for a catalog sentence that puts a value in a code span of
    its own (`` `{env}` ``): a backtick in the value would close the span and let the rest pass as our words."""
    return escape(" ".join(str(text).replace("`", "'").split()))


def model_name(label: str, lang: str, quote: Callable[[str], str] = code) -> str:
    """Which model wrote something: the scripted demo model in the reader's words, any other by its label, quoted
    as data (mrkdwn by default; a Markdown document passes its own quoting)."""
    return say(lang, "demo_model_name") if label == DEMO_LABEL else quote(label)


_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")


def is_user(user_id: str) -> bool:
    return bool(_USER_ID.match(user_id))


def who(user_id: str) -> str:
    """A live mention only of what is shaped like a Slack user id (an alert source's bot id is shown as is)."""
    return f"<@{user_id}>" if _USER_ID.match(user_id) else escape(user_id)


FEEDBACK = "opspilot_feedback"


def feedback(run_id: str, lang: str = "en") -> Block:
    """Two buttons under an answer: was it useful? (Counted in /metrics and `opspilot stats`.)"""
    return {"type": "actions", "block_id": f"feedback:{run_id}"[:255], "elements": [
        button(say(lang, "helpful"), f"{FEEDBACK}_up", f"up:{run_id}"),  # action ids: unique within a message
        button(say(lang, "not_helpful"), f"{FEEDBACK}_down", f"down:{run_id}")]}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def mrkdwn(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, SECTION_TEXT) or " "}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(text, SECTION_TEXT) or " "}]}


def button(text: str, action_id: str, value: str, style: str | None = None,
           confirm: dict[str, Any] | None = None) -> dict[str, Any]:
    element: dict[str, Any] = {"type": "button", "text": {"type": "plain_text", "text": _cut(text, BUTTON_TEXT)},
                               "action_id": action_id, "value": value}
    if style:
        element["style"] = style
    if confirm:
        element["confirm"] = confirm
    return element


def hhmm(ts: float | None = None, now: float | None = None) -> str:
    """``09:14 UTC``; ``12-05 09:14 UTC`` when not today (a handover spans days, a card may expire tomorrow)."""
    moment, today = time.gmtime(ts or time.time()), time.gmtime(now or time.time())
    return time.strftime("%H:%M UTC" if moment[:3] == today[:3] else "%m-%d %H:%M UTC", moment)


def split_answer(text: str, lang: str = "en") -> list[list[Block]]:
    """An answer as one or more messages: sections of ≤3000 characters cut between paragraphs, lines,
    sentences or words (code blocks kept whole or closed and reopened), each after the first marked as
    continuing; ≤50 blocks per message."""
    parts = split(text, SECTION_TEXT, mark=f"_{say(lang, 'continued')}_")
    blocks = [mrkdwn(p.text) for p in parts] or [mrkdwn(say(lang, "no_answer"))]
    return [blocks[i:i + MAX_BLOCKS] for i in range(0, len(blocks), MAX_BLOCKS)]


def fallback_text(text: str) -> str:
    return _cut(text, 3000)


# --- interrupts ---------------------------------------------------------------------------------------

def gate(reason: str, payload: dict[str, Any], lang: str) -> str:
    """The card's headline: the gate's own words in the thread's language (the tool is named, not quoted)."""
    if payload.get("tool") and payload.get("environment"):
        return say(lang, "gate", tool=bare(payload["tool"]), env=bare(payload["environment"]))
    return escape(reason)


def params_form(token: str, reason: str, payload: dict[str, Any], error: str | None = None,
                subject: str = "", lang: str = "en") -> list[Block]:
    # What is asked for, in the thread's words: the tool's own reason is written for the model.
    blocks: list[Block] = [mrkdwn(f":pencil: *{say(lang, 'need_more')}* — {form_ask(payload, lang)}")]
    if subject:
        blocks.append(context(subject))
    for field in payload.get("fields", []):
        name = str(field["name"])
        choices = [str(c) for c in (field.get("choices") or [])][:MAX_OPTIONS]
        if choices:
            element: dict[str, Any] = {
                "type": "static_select", "action_id": "value",
                "placeholder": {"type": "plain_text", "text": say(lang, "choose", name=field_label(name, lang))[:150]},
                "options": [{"text": {"type": "plain_text", "text": _cut(c, OPTION_TEXT)},
                             "value": c[:OPTION_VALUE]} for c in choices],
            }
        else:
            element = {"type": "plain_text_input", "action_id": "value"}
        blocks.append({"type": "input", "block_id": f"opspilot_field:{name}"[:255],
                       "label": {"type": "plain_text", "text": field_label(name, lang)[:2000]}, "element": element})
    if error:
        blocks.append(context(f":x: {escape(error)}"))
    blocks.append({"type": "actions", "block_id": "opspilot_form", "elements": [
        button(say(lang, "submit"), "opspilot_submit", token, style="primary"),
        button(say(lang, "cancel"), "opspilot_decline", token),
    ]})
    return blocks


def field_label(name: str, lang: str) -> str:
    """A form field's name in words where the catalog has it (``environment``), else as the tool names it."""
    return say(lang, f"field_{name}") if f"field_{name}" in _FIELDS else name


_FIELDS = {"field_environment", "field_service_id"}


def form_fields(payload: dict[str, Any], lang: str) -> str:
    names = [str(f.get("name")) for f in payload.get("fields", [])]
    return say(lang, "and").join(field_label(n, lang) if f"field_{n}" in _FIELDS else code(n)
                                 for n in names)


def form_ask(payload: dict[str, Any], lang: str) -> str:
    """``choose environment``: a form's question, from its fields."""
    return say(lang, "form_choose", fields=form_fields(payload, lang))


def form_subject(tools: list[str], arguments: dict[str, Any], lang: str = "en") -> str:
    """What a form is for: the calls it answers and their target, so nobody has to guess."""
    calls, on = _calls_on(tools, arguments, lang)
    return say(lang, "form_for_many" if len(tools) > 1 else "form_for_one", calls=calls, on=on)


def _calls_on(tools: list[str], arguments: dict[str, Any], lang: str) -> tuple[str, str]:
    target = "/".join(str(arguments[k]) for k in ("service_id", "environment") if arguments.get(k))
    calls = say(lang, "and").join(code(t) for t in tools)
    return calls, say(lang, "on", target=bare(target)) if target else ""


def form_values(state: dict[str, Any]) -> dict[str, str]:
    """The submitted values from a block_actions payload's ``state.values``."""
    values: dict[str, str] = {}
    for block_id, actions in (state.get("values") or {}).items():
        if not str(block_id).startswith("opspilot_field:"):
            continue
        item = (actions or {}).get("value") or {}
        chosen = (item.get("selected_option") or {}).get("value") if item.get("type") == "static_select" \
            else item.get("value")
        if chosen not in (None, ""):
            values[str(block_id).split(":", 1)[1]] = str(chosen)
    return values


def decided_card(summary: str, outcome: str) -> list[Block]:
    """A card after its decision: what it was about and who decided, with no buttons left."""
    return [mrkdwn(summary), context(outcome)]


# --- the progress message ---------------------------------------------------------------------------------

_ICONS = {"running": ":hourglass_flowing_sand:", "ok": ":white_check_mark:", "error": ":x:",
          "waiting": ":raised_hand:", "cancelled": ":no_entry_sign:", "skipped": ":fast_forward:",
          "expired": ":hourglass:", "declined": ":no_entry_sign:", "unknown": ":grey_question:"}


_TASK_STATUS = {"running": "in_progress", "ok": "complete", "waiting": "pending", "skipped": "complete"}
_LINK = re.compile(r"<((?:https?|mailto):[^|>]+)\|([^>]+)>")
_BOLD = re.compile(r"(?<![*\w])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![*\w])")
_STRIKE = re.compile(r"(?<![~\w])~(?=\S)([^~\n]+?)(?<=\S)~(?![~\w])")


def task(line: dict[str, Any]) -> dict[str, Any]:
    """A progress line as a stream's ``task_update``: one card per call, its status moving in place."""
    # A title is shown as written (not mrkdwn): hidden characters as raw markers, before the outbox sees it.
    title = reveal(str(line["tool"]) + (f" · {line['target']}" if line.get("target") else ""))
    status = _TASK_STATUS.get(line["status"], "error")
    chunk = {"id": line["call_id"], "title": _cut(title, 256), "status": status}
    if line.get("detail"):
        # Tool output is not ours: escaped like every such text, so it can neither mention nor link.
        chunk["output" if status in ("complete", "error") else "details"] = _cut(escape(line["detail"]), 256)
    return chunk


_MD_LINK = re.compile(r"!?\[([^\]\n]*)\]\(([^)\s]*)\)")


def unlinked(text: str) -> str:
    """The model's Markdown links and images as words and their target, side by side: a streamed answer is
    Markdown, and ``[https://grafana.internal](https://evil.example)`` would be a live link whose label hides where
    it goes (in mrkdwn the same text was never a link). Code stays as written."""
    parts = re.split(r"(```.*?```|`[^`\n]*`)", text, flags=re.S)
    for i in range(0, len(parts), 2):
        parts[i] = _MD_LINK.sub(lambda m: f"{m.group(1)} ({m.group(2)})" if m.group(1) else f"({m.group(2)})",
                                parts[i])
    return "".join(parts)


def to_markdown(text: str) -> str:
    """Our mrkdwn as the markdown a stream takes: ``*bold*`` → ``**bold**``, ``~x~`` → ``~~x~~``, ``<url|label>``
    → ``[label](url)``. Escapes (``&lt;``) stay: markdown shows them as the characters."""
    parts = re.split(r"(```.*?```|`[^`\n]*`)", text, flags=re.S)  # code stays as written
    for i in range(0, len(parts), 2):
        part = _LINK.sub(lambda m: f"[{m.group(2)}]({m.group(1)})", parts[i])
        parts[i] = _STRIKE.sub(r"~~\1~~", _BOLD.sub(r"**\1**", part))
    return "".join(parts)


def progress_blocks(state: dict[str, Any]) -> list[Block]:
    lines = state.get("lines", [])
    lang = str(state.get("lang") or "en")
    header = state.get("header") or f":mag: {say(lang, 'working')}"
    step = say(lang, "paren", text=say(lang, "step", n=state.get("step", 0))).strip()
    blocks: list[Block] = [mrkdwn(f"{header}  _{step}_")]
    body = []
    for line in lines[-40:]:
        icon = _ICONS.get(line["status"], ":grey_question:")
        detail = f" — {escape(line['detail'])}" if line.get("detail") else ""
        body.append(f"{icon} {code(line['tool'])}{detail}")
    if len(lines) > 40:
        body.insert(0, plural(lang, "earlier_calls", len(lines) - 40))
    if body:
        blocks.append(mrkdwn("\n".join(body)))
    if state.get("note"):
        blocks.append(context(state["note"]))
    actions = []
    if state.get("stoppable"):
        actions.append(button(say(lang, "stop"), "opspilot_stop", state["run_id"], style="danger"))
    if state.get("resumable"):
        actions.append(button(say(lang, "resume"), "opspilot_resume", state["run_id"], style="primary"))
    if actions:
        blocks.append({"type": "actions", "block_id": "opspilot_run", "elements": actions})
    return blocks


def shown(message: dict[str, Any]) -> str:
    """A message's words as Slack shows them, its text and its blocks' (what its language is read from)."""
    blocks = [b for b in message.get("blocks") or [] if isinstance(b, dict)]
    return " ".join([str(message.get("text") or ""), *(str((b.get("text") or {}).get("text") or "") for b in blocks)])


def carries(blocks: list[Block], token: str) -> bool:
    """Whether a clicked message's blocks show a button with ``token`` (Slack sends a click with the message's
    blocks: a token carried to another of the bot's messages would close that one and leave its card live)."""
    if not blocks:
        return True  # nothing to compare with (a click sent without the message's blocks)
    return any(isinstance(el, dict) and el.get("value") == token
               for b in blocks if isinstance(b, dict) and b.get("type") == "actions" for el in b.get("elements") or [])
