"""Keeping the transcript valid and inside the context budget.

``repair`` enforces the providers' pairing rule before every request: each tool
call id has exactly one result, directly after its assistant turn, and no result
is orphaned. ``fit`` trims a long thread to a token budget, condensing old tool
outputs first, then dropping whole old turns, so a call and its result always
stay or go together. ``sendable`` does both for one request, remembering per thread what
it already checked and measured (:class:`ThreadMemo`) so a step costs the same late in a long thread.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    error_result,
)
from core.redact import redact, redact_value

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Repair:
    messages: list[Message]
    problems: list[str]


def violations(messages: Sequence[Message]) -> list[str]:
    """Every way ``messages`` breaks the pairing rule; empty when the providers would accept it."""
    problems: list[str] = []
    issued: set[str] = set()
    i = 0
    while i < len(messages):
        m = messages[i]
        i += 1
        if isinstance(m, ToolResultMessage):
            where = "does not directly follow its call's turn" if m.call_id in issued else "is an orphan"
            problems.append(f"result {m.call_id} {where}")
        elif isinstance(m, AssistantMessage) and m.tool_calls:
            expected = {c.id for c in m.tool_calls}
            if len(expected) != len(m.tool_calls) or expected & issued:
                problems.append("a call id was issued twice")
            issued |= expected
            seen: set[str] = set()
            while i < len(messages) and isinstance(messages[i], ToolResultMessage):
                result = messages[i]
                assert isinstance(result, ToolResultMessage)
                if result.call_id not in expected or result.call_id in seen:
                    problems.append(f"result {result.call_id} is orphaned or duplicated")
                seen.add(result.call_id)
                i += 1
            problems.extend(f"call {cid} had no result" for cid in sorted(expected - seen))
    return problems


def repair(messages: Sequence[Message]) -> Repair:
    """Re-place every result right after its call's turn; answer missing ids; drop orphans."""
    problems = violations(messages)
    if not problems:
        return Repair(list(messages), [])
    results: dict[str, ToolResultMessage] = {}
    for m in messages:
        if isinstance(m, ToolResultMessage):
            results.setdefault(m.call_id, m)
    out: list[Message] = []
    used: set[str] = set()
    for m in messages:
        if isinstance(m, ToolResultMessage):
            continue
        if isinstance(m, AssistantMessage) and any(c.id in used for c in m.tool_calls):
            m = m.model_copy(update={"tool_calls": tuple(c for c in m.tool_calls if c.id not in used)})
        out.append(m)
        if isinstance(m, AssistantMessage):
            for call in m.tool_calls:
                used.add(call.id)
                out.append(results.get(call.id)
                           or error_result(call, "missing_result", "this call produced no result"))
    return Repair(out, problems)


def checked(messages: Sequence[Message], *, run_id: str = "?", start: int = 0) -> list[Message]:
    """The transcript to send; a repair is a bug in our code and is logged loudly.

    ``start`` (the beginning of a turn already known to be preceded by a valid transcript) limits the
    check to the current turn, so a long thread is not walked again at every step."""
    if start and not violations(messages[start:]):
        return list(messages)
    fixed = repair(messages)
    if fixed.problems:
        log.error("BUG: transcript of run %s violated tool pairing, repaired: %s", run_id, fixed.problems)
    return fixed.messages


def estimate_tokens(text: str) -> int:
    """Cheap and conservative: ~4 ASCII characters per token, one per other character (CJK)."""
    ascii_chars = len(text.encode("ascii", "ignore"))  # counted in C, not character by character
    return ascii_chars // 4 + (len(text) - ascii_chars) + 4


def message_tokens(m: Message) -> int:
    if isinstance(m, AssistantMessage):
        calls = sum(estimate_tokens(c.name + json.dumps(c.arguments, ensure_ascii=False)) for c in m.tool_calls)
        return estimate_tokens(m.content) + calls
    return estimate_tokens(m.content)


def _condensed(m: ToolResultMessage) -> ToolResultMessage:
    preview = m.content[:160]
    note = f"[older output condensed to save context; {len(m.content)} characters, began: {preview}]"
    return m.model_copy(update={"content": json.dumps({"ok": not m.is_error, "condensed": note},
                                                       ensure_ascii=False)})


def _turn_starts(messages: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if isinstance(m, UserMessage)] or [0]


def fit(messages: Sequence[Message], budget_tokens: int, sizes: Sequence[int] | None = None) -> list[Message]:
    """The newest part of the thread that fits ``budget_tokens`` (best effort for one huge turn).

    ``sizes`` are the messages' token estimates when the caller keeps them (they never change)."""
    out = list(messages)
    sizes = list(sizes) if sizes is not None and len(sizes) == len(out) else [message_tokens(m) for m in out]
    total = sum(sizes)
    if total <= budget_tokens:
        return out
    last_turn = _turn_starts(out)[-1]
    # 1. Condense the oldest tool outputs, leaving the current turn's for last.
    for protect_current in (True, False):
        for i, m in enumerate(out):
            if total <= budget_tokens:
                return out
            if isinstance(m, ToolResultMessage) and (i < last_turn or not protect_current):
                if '"condensed"' in m.content:
                    continue
                small = _condensed(m)
                total += message_tokens(small) - sizes[i]
                out[i], sizes[i] = small, message_tokens(small)
        if total <= budget_tokens:
            return out
        # 2. Drop whole old turns (a turn starts at a user message, so pairs stay together).
        starts = _turn_starts(out)
        dropped = 0
        while len(starts) > 1 and total > budget_tokens:
            cut = starts[1]
            total -= sum(sizes[:cut])
            dropped += cut
            out, sizes = out[cut:], sizes[cut:]
            starts = [s - cut for s in starts[1:]]
        if dropped and isinstance(out[0], UserMessage):
            note = f"[{dropped} earlier messages of this thread were left out to fit the context window]\n"
            out[0] = out[0].model_copy(update={"content": note + out[0].content})
        last_turn = 0
    return out


@dataclass
class ThreadMemo:
    """What an engine remembers about a thread between turns (transcripts only grow): each message's token
    estimate, and how far the pairing check has already looked. Keeps a step's cost flat in long threads."""

    sizes: list[int]
    checked: int = 0
    ids: set[str] = field(default_factory=set)
    """The call ids the thread's transcript holds, up to ``scanned`` messages."""
    scanned: int = 0


def _turn_before(transcript: Sequence[Message], index: int) -> int:
    """The start of the turn that contains ``index`` (a user message), for re-checking from a safe point."""
    for i in range(min(index, len(transcript)) - 1, -1, -1):
        if isinstance(transcript[i], UserMessage):
            return i
    return 0


def sendable(transcript: Sequence[Message], memo: ThreadMemo, *, turn_start: int, budget: int,
             run_id: str) -> list[Message]:
    """The transcript to send: pairing checked from the first turn not yet checked (the whole thread the
    first time this engine sees it), and fitted to the budget only when it does not fit as it is."""
    start = min(turn_start, _turn_before(transcript, memo.checked)) if memo.checked else 0
    valid = checked(transcript, run_id=run_id, start=start)
    if len(valid) != len(transcript) or len(memo.sizes) > len(valid):
        memo.sizes.clear()  # repaired: recount
    memo.sizes.extend(message_tokens(m) for m in valid[len(memo.sizes):])
    memo.checked = len(valid)
    if sum(memo.sizes) <= budget:
        return valid
    return fit(valid, budget, memo.sizes)


def unanswered(transcript: Sequence[Message], waiting: set[str]) -> list[ToolCall]:
    """Calls of the latest tool-using turn that have neither a result nor a pending question (``waiting``)."""
    for i in range(len(transcript) - 1, -1, -1):
        m = transcript[i]
        if isinstance(m, AssistantMessage) and m.tool_calls:
            # Only this turn's results count: an earlier turn may have used the same id.
            answered = {r.call_id for r in transcript[i + 1:] if isinstance(r, ToolResultMessage)}
            return [c for c in m.tool_calls if c.id not in answered and c.id not in waiting]
    return []


def received(message: AssistantMessage, transcript: Sequence[Message], memo: ThreadMemo) -> AssistantMessage:
    """What the model wrote, as stored, shown and run: never a secret, and every call id new to the thread. A model
    that repeats an id (some OpenAI-compatible servers start at ``call_0`` every time) would otherwise pair two
    calls with one result, and a change's id is its idempotency key: a repeat becomes ``call_0_2``."""
    if memo.scanned > len(transcript):  # read afresh, shorter (expired and recreated)
        memo.ids, memo.scanned = set(), 0
    for m in transcript[memo.scanned:]:
        if isinstance(m, AssistantMessage):
            memo.ids.update(c.id for c in m.tool_calls)
    memo.scanned = len(transcript)
    calls = []
    for c in message.tool_calls:
        base = c.id or "call"
        new, n = base, 1
        while new in memo.ids:
            n += 1
            new = f"{base}_{n}"
        memo.ids.add(new)
        calls.append(c.model_copy(update={"id": new, "arguments": redact_value(c.arguments),
                                          "raw_arguments": redact(c.raw_arguments) if c.raw_arguments else None}))
    return message.model_copy(update={"content": redact(message.content), "tool_calls": tuple(calls)})
