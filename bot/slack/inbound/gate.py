"""The gate every Slack request passes before anything reads it: the signature, checked on the raw bytes
(so a forged body is never even parsed), then a well-formed body, then the workspace it comes from.

Refusals are short plain answers (401 for anything about the signature or its timestamp, 400 for a signed
body that does not parse, nests deeper than :data:`MAX_DEPTH`, or is not shaped as Bolt and our listeners read
it — :mod:`bot.slack.inbound.shapes`) and one warning line in the log: never a stack trace, never a detail.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, parse_qsl

from pydantic import ValidationError
from slack_sdk.signature import SignatureVerifier

from bot.slack.inbound import shapes

if TYPE_CHECKING:  # Bolt is imported where a request is read: a worker starts reading the queue without it
    from slack_bolt.context.async_context import AsyncBoltContext

log = logging.getLogger(__name__)

MAX_DEPTH = 64
"""Deepest JSON nesting taken (Slack's deepest, rich text in a message in a payload, is about a dozen): json.loads
and every walk after it recurse."""
# A JSON string, escapes and all; an unterminated one runs to the end, so every attempt matches and the scan is linear.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_UTF8 = {"charset=utf-8", "charset=utf8", 'charset="utf-8"', 'charset="utf8"'}


def refusal(secret: str, body: bytes, headers: Mapping[str, str], content_type: str) -> tuple[int, str] | None:
    """Why this request must be refused (status, text), or None when it may go on to Bolt."""
    try:
        signed = SignatureVerifier(secret).is_valid(body, headers.get("X-Slack-Request-Timestamp"),
                                                    headers.get("X-Slack-Signature"))
    except (ValueError, TypeError):  # a timestamp that is not a number
        signed = False
    if not signed:
        return 401, "invalid or missing signature"
    try:
        shapes.check(_parse(body, headers, content_type))
    except ValueError as exc:  # pydantic's ValidationError and UnicodeDecodeError are ValueErrors too
        log.warning("a signed Slack request with a malformed body was refused: %s", _one_line(exc))
        return 400, "malformed body"
    return None


def _parse(body: bytes, headers: Mapping[str, str], content_type: str) -> dict[str, Any]:
    """The body as Bolt will read it (at the front, or in a worker from the stored request): its own parse_body,
    after the checks that keep that from failing."""
    given = [value for name, value in headers.items() if name.lower() == "content-type"]
    if len(given) > 1:  # aiohttp decodes by the first, Bolt parses by the last
        raise ValueError("more than one Content-Type")
    mime, *params = (given[0] if given else content_type).split(";")
    if any(p.strip().lower() not in _UTF8 for p in params):  # aiohttp decodes Bolt's copy by the charset
        raise ValueError("a Content-Type parameter other than charset=utf-8")
    if mime != content_type:  # Bolt reads the header as sent, a worker the stored request by aiohttp's reading
        raise ValueError("a Content-Type not in the form Slack sends it")
    text = body.decode("utf-8")
    if mime == "application/json" or text.startswith("{"):  # how parse_body tells JSON from a form
        if not text:
            raise ValueError("empty body")
        _shallow(text)
    else:
        for payload in parse_qs(text, strict_parsing=bool(text), keep_blank_values=True).get("payload", []):
            _shallow(payload)
    from slack_bolt.request.internals import parse_body

    parsed = parse_body(bolt_text(text, mime), mime or None)
    if not isinstance(parsed, dict):
        raise ValueError("not a JSON object")
    return parsed


def bolt_text(text: str, mime: str) -> str:
    """The body as handed to Bolt. Bolt's parse_body takes any form whose text contains "payload" for an
    interactive payload and reads ``{}`` when there is none, so `/opspilot why is the payload API slow` would
    vanish: the word is percent-encoded in such a form, which decodes to the same text."""
    if mime == "application/json" or text.startswith("{") or "payload" not in text:
        return text
    if any(key == "payload" for key, _ in parse_qsl(text, keep_blank_values=True)):
        return text
    return text.replace("payload", "p%61yload")


def _shallow(text: str) -> None:
    """Refuses JSON nested deeper than MAX_DEPTH, counting brackets outside strings, in linear time."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:  # too few to nest that deep (most bodies): no scan
        return
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH}")


def _one_line(exc: ValueError) -> str:
    """What was wrong, on one line, naming no value (a body may hold a secret)."""
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False, include_input=False)
        where = ".".join(str(part) for part in errors[0]["loc"])
        text = f"{where}: {errors[0]['msg']}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
    else:
        text = str(exc)
    return text.encode("unicode_escape").decode("ascii")[:200]  # keys come from the body: no line breaks


def foreign(context: AsyncBoltContext, body: dict[str, Any]) -> str | None:
    """Why a request comes from somewhere else than the workspace (and organisation) this token is installed
    in, or None. The installed ones come from ``auth.test``; the request's from its payload."""
    installed = context.authorize_result
    if installed is None:
        return None
    team = context.team_id or _id(body.get("team")) or body.get("team_id")
    if installed.team_id and team and team != installed.team_id:
        return f"workspace {team} (installed in {installed.team_id})"
    enterprise = context.enterprise_id or _id(body.get("enterprise")) or body.get("enterprise_id")
    if installed.enterprise_id and enterprise and enterprise != installed.enterprise_id:
        return f"organisation {enterprise} (installed in {installed.enterprise_id})"
    if enterprise and not installed.enterprise_id:
        return f"organisation {enterprise} (installed in a workspace outside any organisation)"
    return None


def _id(ref: Any) -> Any:
    """A ``team`` or ``enterprise`` field's id: Slack sends an object or the bare id."""
    return ref.get("id") if isinstance(ref, dict) else ref
