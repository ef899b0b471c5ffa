"""A local stand-in for OpenAI-compatible Chat Completions that enforces the ``role: tool`` rules."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from aiohttp import web

from bot.demo.local_server import LocalServer

_ids = itertools.count(1)


def text(t: str, finish: str = "stop") -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": t}, "finish_reason": finish}


def tool_calls(*calls: tuple[str, dict[str, Any] | str], finish: str = "tool_calls") -> dict[str, Any]:
    made = [{"id": f"call_{next(_ids):06d}", "type": "function",
             "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)}} for n, a in calls]
    return {"message": {"role": "assistant", "content": None, "tool_calls": made}, "finish_reason": finish}


def violations(body: dict[str, Any]) -> str | None:
    messages = body.get("messages") or []
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            following: list[str] = []
            j = i + 1
            while j < len(messages) and messages[j].get("role") == "tool":
                following.append(messages[j].get("tool_call_id"))
                j += 1
            missing = [x for x in ids if x not in following]
            if missing:
                return ("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                        f"each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                        f"{', '.join(missing)}")
        if m.get("role") == "tool":
            j = i - 1
            while j >= 0 and messages[j].get("role") == "tool":
                j -= 1
            owner = messages[j] if j >= 0 else {}
            ids = {c["id"] for c in owner.get("tool_calls") or []}
            if m.get("tool_call_id") not in ids:
                return ("Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                        "with 'tool_calls'.")
    return None


class FakeOpenAI:
    """``new_models``: models that take only ``max_completion_tokens`` (OpenAI's newer ones); ``compatible``: a
    compatible server (older vLLM, Ollama) that knows only ``max_tokens``; ``max_output``: the model's output limit
    (more is the API's 400); ``tools``: False for a server started without tool calling (vLLM's 400 on any tools)."""

    def __init__(self, *, new_models: frozenset[str] = frozenset(), compatible: bool = False,
                 max_output: int | None = None, tools: bool = True) -> None:
        self.new_models = new_models
        self.compatible = compatible
        self.max_output = max_output
        self.tools = tools
        self.replies: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.rejections: list[str] = []
        self.models: list[Any] = []
        """Models a test made against this server: their SDK clients are closed with it, on the test's loop."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        self.server = LocalServer(app)

    def queue(self, *replies: dict[str, Any]) -> None:
        self.replies.extend(replies)

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        problem = violations(body)
        if body.get("model") in self.new_models and "max_tokens" in body:
            problem = ("Unsupported parameter: 'max_tokens' is not supported with this model. "
                       "Use 'max_completion_tokens' instead.")
        if self.compatible and "max_completion_tokens" in body:
            problem = "Unrecognized request argument supplied: max_completion_tokens"
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
        if self.max_output is not None and isinstance(asked, int) and asked > self.max_output:
            problem = (f"max_tokens is too large: {asked}. This model supports at most {self.max_output} completion "
                       f"tokens, whereas you provided {asked}.")
        if not self.tools and body.get("tools"):
            problem = '"auto" tool choice requires --enable-auto-tool-choice and --tool-parser to be set'
        if problem is not None:
            self.rejections.append(problem)
            return web.json_response({"error": {"message": problem, "type": "invalid_request_error"}}, status=400)
        if not self.replies:
            return web.json_response({"error": {"message": "fake: no reply queued"}}, status=500)
        choice = self.replies.pop(0)
        if "refuse" in choice:  # an error answer, as the API sends it: {"refuse": (status, error object)}
            status, error = choice["refuse"]
            return web.json_response({"error": error}, status=status)
        return web.json_response({
            "id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"], "choices": [{"index": 0, **choice}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })
