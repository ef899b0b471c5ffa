"""A local stand-in for the Anthropic Messages API that enforces its tool-use rules.

Every request is checked the way the real API checks it (see shared/reference/platform-facts.md):
each ``tool_use`` answered by a ``tool_result`` in the very next user message, results first,
no orphan ids, tools defined whenever tool blocks appear, no empty text blocks. A violation
gets the API's 400. Replies come from a queue the test fills.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable
from typing import Any

from aiohttp import web

from bot.demo.local_server import LocalServer

Reply = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]] | tuple[int, dict[str, Any]]
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_ids = itertools.count(1)


def text(t: str, stop: str = "end_turn") -> dict[str, Any]:
    return {"content": [{"type": "text", "text": t}], "stop_reason": stop}


def tool_use(*calls: tuple[str, dict[str, Any]], say: str = "", stop: str = "tool_use") -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": say}] if say else []
    content += [{"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": n, "input": a} for n, a in calls]
    return {"content": content, "stop_reason": stop}


def error(status: int, kind: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"type": "error", "error": {"type": kind, "message": message}}


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def violations(body: dict[str, Any]) -> str | None:
    """The 400 message the real API would give, or None."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    tools = body.get("tools") or []
    for t in tools:
        if not _NAME.match(str(t.get("name", ""))):
            return f"tools: name {t.get('name')!r} does not match ^[a-zA-Z0-9_-]{{1,128}}$"
        if (t.get("input_schema") or {}).get("type") != "object":
            return f"tools.{t.get('name')}.input_schema: type must be object"
    uses_tools = False
    for i, m in enumerate(messages):
        if m.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        blocks = _blocks(m)
        last_assistant = i == len(messages) - 1 and m["role"] == "assistant"
        for b in blocks:
            if b.get("type") == "text" and not str(b.get("text", "")).strip() and not last_assistant:
                return f"messages.{i}: text content blocks must be non-empty"
            if b.get("type") in ("tool_use", "tool_result"):
                uses_tools = True
        if m["role"] == "assistant":
            ids = [b["id"] for b in blocks if b.get("type") == "tool_use"]
            if not ids:
                continue
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            answered = [b.get("tool_use_id") for b in _blocks(nxt)] if nxt and nxt["role"] == "user" else []
            missing = [x for x in ids if x not in answered]
            if missing:
                return (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                        f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` "
                        "block in the next message.")
        else:
            prev = messages[i - 1] if i > 0 else None
            prev_ids = {b["id"] for b in _blocks(prev) if b.get("type") == "tool_use"} if prev else set()
            seen_text = False
            for b in blocks:
                if b.get("type") == "text":
                    seen_text = True
                elif b.get("type") == "tool_result":
                    if seen_text:
                        return f"messages.{i}: `tool_result` blocks must come before any other content"
                    if b.get("tool_use_id") not in prev_ids:
                        return (f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                                f"{b.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                                "`tool_use` block in the previous message.")
    marks = _breakpoints(body)
    if len(marks) > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {len(marks)}."
    if any(m.get("type") != "ephemeral" for m in marks):
        return "cache_control.type: Input should be 'ephemeral'"
    if uses_tools and not tools:
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    return None


def _breakpoints(body: dict[str, Any]) -> list[dict[str, Any]]:
    system = body.get("system")
    blocks = [*(body.get("tools") or []), *(system if isinstance(system, list) else []),
              *(b for m in body.get("messages") or [] for b in _blocks(m))]
    return [b["cache_control"] for b in blocks if isinstance(b, dict) and b.get("cache_control")]


MIN_CACHEABLE = 1024  # tokens: a shorter prefix is not cached (Sonnet's minimum), silently, as the API does


def _tokens(part: Any) -> int:
    return max(len(json.dumps(part, ensure_ascii=False, sort_keys=True)) // 4, 1)


class PromptCache:
    """Anthropic's prompt cache as the API bills it: the prefix (tools, then system, then messages) up to a
    ``cache_control`` breakpoint is written at that breakpoint and read by a later request whose prefix up to a
    breakpoint is identical; ``input_tokens`` is only what was neither read nor written."""

    def __init__(self) -> None:
        self.prefixes: set[str] = set()

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        system = body.get("system")
        parts: list[tuple[Any, bool]] = [(t, bool(t.get("cache_control"))) for t in body.get("tools") or []]
        parts += [(b, bool(b.get("cache_control"))) for b in (system if isinstance(system, list)
                                                                 else [{"text": system}] if system else [])]
        parts += [(b, isinstance(b, dict) and bool(b.get("cache_control")))
                  for m in body["messages"] for b in _blocks(m)]
        total, running = 0, hashlib.sha256()
        marks: list[tuple[int, str]] = []  # (tokens up to here, prefix hash) at each breakpoint
        for part, mark in parts:
            clean = {k: v for k, v in part.items() if k != "cache_control"} if isinstance(part, dict) else part
            running.update(json.dumps(clean, sort_keys=True).encode())
            total += _tokens(clean)
            if mark:
                marks.append((total, running.copy().hexdigest()))
        read = max((n for n, h in marks if h in self.prefixes), default=0)
        written = 0
        for n, h in marks:
            if n > read and n >= MIN_CACHEABLE:
                self.prefixes.add(h)
                written = n - read
        return {"input_tokens": total - read - written, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written}


class FakeAnthropic:
    def __init__(self, *, max_output: int | None = None) -> None:
        self.max_output = max_output
        """The model's output limit: a larger ``max_tokens`` gets the API's 400, as a real model's limit does."""
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.rejections: list[str] = []
        self.cache = PromptCache()
        self.usages: list[dict[str, int]] = []
        self.models: list[Any] = []
        """Models a test made against this server: their SDK clients are closed with it, on the test's loop."""
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        self.server = LocalServer(app)

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def _messages(self, request: web.Request) -> web.Response:
        if not (request.headers.get("x-api-key") or request.headers.get("authorization")):
            return web.json_response(error(401, "authentication_error", "missing credentials")[1], status=401)
        body = await request.json()
        self.requests.append(body)
        problem = violations(body)
        if problem is None and self.max_output is not None and body["max_tokens"] > self.max_output:
            problem = (f"max_tokens: {body['max_tokens']} > {self.max_output}, which is the maximum allowed number "
                       f"of output tokens for {body.get('model')}")
        if problem is not None:
            self.rejections.append(problem)
            return web.json_response(error(400, "invalid_request_error", problem)[1], status=400)
        if not self.replies:
            return web.json_response(error(500, "api_error", "fake: no reply queued")[1], status=500)
        reply = self.replies.pop(0)
        if isinstance(reply, tuple):
            status, payload = reply
            return web.json_response(payload, status=status, headers={"retry-after-ms": "5"})
        if callable(reply):
            reply = reply(body)
        usage = self.cache.usage(body)
        self.usages.append(usage)
        message = {
            "id": f"msg_{next(_ids):06d}", "type": "message", "role": "assistant", "model": body["model"],
            "content": reply["content"], "stop_reason": reply["stop_reason"], "stop_sequence": None,
            "usage": {**usage, "output_tokens": 5},
        }
        return web.json_response(message)
