"""What the local Slack refuses and how it misbehaves on purpose: Block Kit limits (blocks per message,
text lengths, unique ids, elements per block, options, confirm dialogs) and a test's fault switches."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any


def _text_len(obj: dict[str, Any] | None) -> int:
    return len(str((obj or {}).get("text", "")))


def _check_confirm(confirm: dict[str, Any], where: str, errors: list[str]) -> None:
    for key, limit in (("title", 100), ("text", 300), ("confirm", 30), ("deny", 30)):
        if key in confirm and _text_len(confirm[key]) > limit:
            errors.append(f"{where}.confirm.{key} must be at most {limit} characters")


def _check_element(el: dict[str, Any], where: str, errors: list[str], action_ids: set[str]) -> None:
    action_id = el.get("action_id")
    if action_id is not None:
        if len(action_id) > 255:
            errors.append(f"{where}.action_id too long")
        if action_id in action_ids:
            errors.append(f"{where}.action_id {action_id!r} is not unique")
        action_ids.add(action_id)
    if el.get("type") == "button":
        if _text_len(el.get("text")) > 75:
            errors.append(f"{where}.text must be at most 75 characters")
        if len(str(el.get("value", ""))) > 2000:
            errors.append(f"{where}.value must be at most 2000 characters")
        if el.get("style") not in (None, "primary", "danger"):
            errors.append(f"{where}.style is invalid")
    if el.get("type") in ("static_select", "multi_static_select"):
        options = el.get("options") or []
        if not options or len(options) > 100:
            errors.append(f"{where}.options must have 1 to 100 items")
        for i, option in enumerate(options):
            if _text_len(option.get("text")) > 75 or len(str(option.get("value", ""))) > 150:
                errors.append(f"{where}.options[{i}] text/value too long")
    if "confirm" in el:
        _check_confirm(el["confirm"], where, errors)


def block_problems(blocks: list[dict[str, Any]]) -> list[str]:
    errors: list[str] = []
    if len(blocks) > 50:
        errors.append(f"no more than 50 items allowed [json-pointer:/blocks] (got {len(blocks)})")
    block_ids: set[str] = set()
    action_ids: set[str] = set()
    for i, block in enumerate(blocks):
        where = f"/blocks/{i}"
        kind = block.get("type")
        block_id = block.get("block_id")
        if block_id is not None:
            if len(block_id) > 255 or block_id in block_ids:
                errors.append(f"{where}.block_id is too long or not unique")
            block_ids.add(block_id)
        if kind == "section":
            if block.get("text") is None and not block.get("fields"):
                errors.append(f"{where} needs text or fields")
            if _text_len(block.get("text")) > 3000:
                errors.append(f"must be less than 3001 characters [json-pointer:{where}/text/text]")
            fields = block.get("fields") or []
            if len(fields) > 10 or any(_text_len(f) > 2000 for f in fields):
                errors.append(f"{where}.fields: at most 10, each at most 2000 characters")
            if block.get("accessory"):
                _check_element(block["accessory"], f"{where}.accessory", errors, action_ids)
        elif kind == "header":
            if _text_len(block.get("text")) > 150:
                errors.append(f"{where}.text must be at most 150 characters")
        elif kind == "context":
            elements = block.get("elements") or []
            if not elements or len(elements) > 10:
                errors.append(f"{where}.elements must have 1 to 10 items")
            if any(_text_len(e) > 3000 for e in elements):
                errors.append(f"{where}.elements text too long")
        elif kind == "actions":
            elements = block.get("elements") or []
            if not elements or len(elements) > 25:
                errors.append(f"{where}.elements must have 1 to 25 items")
            for j, el in enumerate(elements):
                _check_element(el, f"{where}/elements/{j}", errors, action_ids)
        elif kind == "input":
            if _text_len(block.get("label")) > 2000 or "element" not in block:
                errors.append(f"{where}: an input needs a label (≤2000) and an element")
            else:
                _check_element(block["element"], f"{where}/element", errors, set())
        elif kind not in ("divider", "image", "rich_text", "markdown", "file", "video"):
            errors.append(f"{where}.type {kind!r} is not a valid block type")
        for key in ("text",):
            value = block.get(key)
            if isinstance(value, dict) and value.get("type") == "mrkdwn" and not str(value.get("text", "")).strip():
                errors.append(f"{where}.text must not be empty")
    return errors


@dataclass
class Fault:
    """A test's fault switch: Slack failing some methods for a while or a number of times.

    ``error``: answer ``status`` without doing anything. ``hang``: answer only after ``hang_s`` (the
    client has given up by then), without doing anything. ``lost``: do it, then answer ``status`` —
    the message landed but the caller cannot know. ``refuse``: answer 200 with ``ok: false`` and
    ``error`` (Slack refusing this one message, e.g. a locked thread). ``text``: answer ``status`` with a
    plain-text body, as a proxy in front of Slack does (not JSON)."""

    kind: str
    methods: frozenset[str]
    until: float = float("inf")
    times: float = float("inf")
    status: int = 500
    hang_s: float = 30.0
    error: str = "fatal_error"
    rate: float = 1.0
    """The share of matching calls it hits (``mixed`` faults: each hit picks one of :data:`MIXED`)."""
    rng: random.Random = field(default_factory=lambda: random.Random(7))

    def applies(self, method: str) -> bool:
        return (not self.methods or method in self.methods) and self.times > 0 and time.monotonic() < self.until \
            and (self.rate >= 1.0 or self.rng.random() < self.rate)

    def pick(self) -> tuple[str, int]:
        """What this hit does: the fault's own kind, or for ``mixed`` one of :data:`MIXED` at random."""
        return self.rng.choice(MIXED) if self.kind == "mixed" else (self.kind, self.status)


MIXED: tuple[tuple[str, int], ...] = (("error", 500), ("error", 503), ("limited", 429), ("reset", 0),
                                      ("hang", 500), ("lost", 500), ("text", 502))
"""What a proxy between us and Slack does under mixed faults: a 5xx (JSON or a plain-text page), a 429, a reset
connection, no answer in time, or the answer lost after Slack did the work."""
