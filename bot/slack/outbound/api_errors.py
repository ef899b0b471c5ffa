"""A failed Slack Web API call, whatever shape the failure took: one place that reads it.

Slack fails in more ways than ``SlackApiError`` with a JSON body: a 5xx from a proxy carries HTML or plain text
(slack-sdk then holds a ``str``, and ``exc.response.get(...)`` raises ``AttributeError``), a dropped connection
is an ``aiohttp`` error (``ServerDisconnectedError`` is not an ``OSError``), a hang is a ``TimeoutError``. Every
path that calls Slack catches :data:`SLACK_FAILURES` and reads the failure with :func:`slack_error`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

log = logging.getLogger(__name__)

T = TypeVar("T")

SLACK_FAILURES: tuple[type[BaseException], ...] = (SlackClientError, aiohttp.ClientError, OSError, TimeoutError)
"""Everything a Web API call raises when Slack refused, failed or never answered."""

TRANSIENT = frozenset({"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout",
                       "team_added_to_org"})
"""Slack's error codes worth another try (any other refusal is final)."""


TOKEN_REFUSED = frozenset({"invalid_auth", "not_authed", "not_allowed_token_type", "token_revoked",
                           "account_inactive", "token_expired", "missing_scope"})
"""Errors trying again will not cure: the token itself is wrong (a configuration to fix, not a moment to wait)."""


class TokenRefused(Exception):
    """Slack refused a token (the app-level token in Socket Mode, the bot token at a front's start): nothing can
    work until the configuration changes."""


def slack_error(exc: BaseException) -> str:
    """The failure as a short code: Slack's ``error``, ``http_<status>`` when the body was not JSON, or the
    exception's class name when no answer came (``ServerDisconnectedError``, ``TimeoutError``)."""
    if isinstance(exc, SlackApiError):
        data = getattr(exc.response, "data", None)
        if isinstance(data, dict) and data.get("error"):
            return str(data["error"])
        status = getattr(exc.response, "status_code", None)
        return f"http_{status}" if status else "unknown_error"
    return type(exc).__name__


def transient(exc: BaseException) -> bool:
    """Whether the same call may succeed later: no answer, a 429 or 5xx, or one of :data:`TRANSIENT`."""
    if not isinstance(exc, SlackApiError):
        return isinstance(exc, SLACK_FAILURES)
    status = int(getattr(exc.response, "status_code", 0) or 0)
    return status == 429 or status >= 500 or slack_error(exc) in TRANSIENT


def may_have_acted(exc: BaseException) -> bool:
    """Whether Slack may have done what it was asked all the same: no answer (a hang, a dropped connection) or a
    failure of its own (a 5xx, ``internal_error``…) — never a refusal, a 429 included (it does nothing it refuses)."""
    return transient(exc) and not rate_limited(exc) and slack_error(exc) != "ratelimited"


def rate_limited(exc: BaseException) -> bool:
    """A 429: Slack answered, and asked us to slow down — pacing, not an outage."""
    return isinstance(exc, SlackApiError) and int(getattr(exc.response, "status_code", 0) or 0) == 429


def retry_after(exc: BaseException) -> float | None:
    """Slack's ``Retry-After`` on a 429, in seconds, when it gave one."""
    if not isinstance(exc, SlackApiError) or getattr(exc.response, "status_code", 0) != 429:
        return None
    headers = getattr(exc.response, "headers", None) or {}
    try:
        return float(headers.get("Retry-After") or headers.get("retry-after") or "")
    except ValueError:
        return None


async def retried(what: str, call: Callable[[], Awaitable[T]], *, attempts: int = 4, first_s: float = 0.25,
                  max_s: float = 4.0) -> T:
    """``call()``, tried again with jittered backoff while Slack's failure is transient; the last failure (or a
    final refusal) is raised to the caller, which decides what the person is told."""
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except SLACK_FAILURES as exc:
            if attempt == attempts or not transient(exc):
                raise
            wait = retry_after(exc) or min(first_s * 2 ** (attempt - 1), max_s) * (0.75 + random.random() / 2)
            log.info("Slack %s failed (%s): attempt %d of %d in %.1fs", what, slack_error(exc), attempt + 1,
                     attempts, wait)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")  # the loop returns or raises
