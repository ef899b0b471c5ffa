"""One small JSON-over-HTTP client for every backend: timeout, bounded body, classified errors.

    unreachable / 5xx / 429 / not JSON  → UpstreamError   (upstream_error; no connection made: Unreachable)
    … of a request that changes things  → OutcomeUnknown  (outcome_unknown: it was sent; no connection: as above)
    401, 403                            → PermissionDenied (permission_denied)
    404                                 → NotFound         (not_found)
    400, 422                            → InvalidArguments (validation_error: the query was bad)
    no answer in time                   → ToolTimeout      (timeout)
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp

from tools.tool_errors import (
    InvalidArguments,
    NotFound,
    OutcomeUnknown,
    PermissionDenied,
    Throttled,
    ToolTimeout,
    Unreachable,
    UpstreamError,
)

MAX_BODY = 8 * 1024 * 1024


class Http:
    def __init__(self, base_url: str, *, name: str, token: str | None = None, timeout_s: float = 10.0,
                 headers: Mapping[str, str] | None = None, ssl_context: ssl.SSLContext | bool | None = None,
                 max_body: int = MAX_BODY) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = name
        self.timeout_s = timeout_s
        self.max_body = max_body
        self.ssl_context = ssl_context
        self.headers = dict(headers or {})
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: Any = None, content_type: str = "application/json") -> Any:
        """The answer's JSON. A request that changes something (anything but GET) that was sent and whose answer
        was lost or unreadable (no answer in time, a 5xx, a body that is not JSON) may have been carried out:
        :class:`OutcomeUnknown`, never a failure that would invite doing it twice."""
        try:
            return await self._request(method, path, params=params, body=body, content_type=content_type)
        except (ToolTimeout, UpstreamError) as exc:
            if method == "GET" or isinstance(exc, Unreachable | Throttled):  # not sent, or refused before acting
                raise
            raise OutcomeUnknown(f"the request was sent to {self.name}, but {exc.message}: it may or may not have "
                                 "been carried out; check before retrying") from exc

    async def _request(self, method: str, path: str, *, params: Mapping[str, str] | None,
                       body: Any, content_type: str) -> Any:
        if path.startswith(("http://", "https://")):
            url = path
        else:
            url = f"{self.base_url}/{path.lstrip('/')}" if path else self.base_url
        headers = dict(self.headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session, session.request(
                    method, url, params=params, data=data, headers=headers,
                    ssl=self.ssl_context if self.ssl_context is not None else True) as response:
                raw = await self._body(response)
                status = response.status
        except TimeoutError as exc:
            raise ToolTimeout(f"{self.name} did not answer within {self.timeout_s:g}s") from exc
        except aiohttp.ClientConnectorError as exc:
            raise Unreachable(f"{self.name} is unreachable ({type(exc).__name__})") from exc
        except aiohttp.ClientPayloadError as exc:
            raise UpstreamError(f"{self.name}'s answer was cut short ({type(exc).__name__})") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamError(f"{self.name} is unreachable ({type(exc).__name__})") from exc
        text = raw.decode("utf-8", errors="replace")
        if status >= 400:
            raise _classify(self.name, status, text)
        try:
            return json.loads(text) if text.strip() else {}
        except ValueError as exc:
            raise UpstreamError(f"{self.name} answered with something that is not JSON") from exc

    async def _body(self, response: aiohttp.ClientResponse) -> bytes:
        """The whole body, to its end (one read returns only what has arrived so far), at most ``max_body``."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > self.max_body:
                raise UpstreamError(f"{self.name} answered with more than {self.max_body} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return await self.request("GET", path, params=params)


def _detail(text: str) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        if text.lstrip().startswith("<"):  # an error page: its words, not its markup
            title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
            words = title.group(1) if title else re.sub(r"<[^>]+>", " ", text)
            return " ".join(words.split())[:300]
        return text.strip()[:300]
    if isinstance(body, dict):
        for key in ("error", "message", "detail", "reason"):
            if isinstance(body.get(key), str):
                return str(body[key])[:300]
    return text.strip()[:300]


def _classify(name: str, status: int, text: str) -> Exception:
    detail = _detail(text)
    if status in (401, 403):
        return PermissionDenied(f"{name} refused our credentials (HTTP {status}): {detail}")
    if status == 404:
        return NotFound(f"{name} has no such resource (HTTP 404): {detail}")
    if status in (400, 422):
        return InvalidArguments(f"{name} rejected the query (HTTP {status}): {detail}")
    if status == 429:
        return Throttled(f"{name} is refusing requests for now (HTTP 429): nothing was done; try again later")
    return UpstreamError(f"{name} failed (HTTP {status}): {detail}")

