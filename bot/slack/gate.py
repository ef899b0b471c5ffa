"""The gate every Slack request passes before anything reads it: the signature, checked on the raw bytes
(so a forged body is never even parsed), then a well-formed body, then the workspace it comes from.

Refusals are short plain answers (401 for anything about the signature or its timestamp, 400 for a signed
body that does not parse) and one warning line in the log: never a stack trace, never a detail.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.signature import SignatureVerifier

log = logging.getLogger(__name__)


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
        _parse(body, content_type)
    except (ValueError, UnicodeDecodeError) as exc:
        log.warning("a signed Slack request with a malformed body was refused: %s", exc)
        return 400, "malformed body"
    return None


def _parse(body: bytes, content_type: str) -> None:
    text = body.decode("utf-8")
    if content_type == "application/json":
        if not isinstance(json.loads(text), dict):
            raise ValueError("not a JSON object")
        return
    form = parse_qs(text, strict_parsing=bool(text), keep_blank_values=True)
    if "payload" in form and not isinstance(json.loads(form["payload"][0]), dict):
        raise ValueError("payload is not a JSON object")


def foreign(context: AsyncBoltContext, body: dict[str, Any]) -> str | None:
    """Why a request comes from somewhere else than the workspace (and organisation) this token is installed
    in, or None. The installed ones come from ``auth.test``; the request's from its payload."""
    installed = context.authorize_result
    if installed is None:
        return None
    team = context.team_id or (body.get("team") or {}).get("id") or body.get("team_id")
    if installed.team_id and team and team != installed.team_id:
        return f"workspace {team} (installed in {installed.team_id})"
    enterprise = context.enterprise_id or (body.get("enterprise") or {}).get("id") or body.get("enterprise_id")
    if installed.enterprise_id and enterprise and enterprise != installed.enterprise_id:
        return f"organisation {enterprise} (installed in {installed.enterprise_id})"
    if enterprise and not installed.enterprise_id:
        return f"organisation {enterprise} (installed in a workspace outside any organisation)"
    return None
