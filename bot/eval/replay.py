"""Record a real model's turns in an eval and replay them offline: ``--record DIR`` keeps every request and
response per scenario (JSON lines); ``--replay DIR`` answers from them, checking that each request is the one
recorded (a changed prompt, tool description or tool result shows as a divergence at that model call, not as
a silently different run) and that every transcript keeps the providers' tool-use rules."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bot.agent.models.base import AUTO, ChatModel, Completion, ModelError, ToolChoice, Usage
from bot.agent.transcript import violations
from core.messages import AssistantMessage, Message, SystemMessage
from tools.registry import ToolDefinition


def digest(messages: Sequence[Message], tools: Sequence[ToolDefinition], tool_choice: ToolChoice) -> str:
    # Its own form, not the store's (core.messages.dump_message may change): recorded digests stay valid.
    body = {"messages": [m.model_dump(mode="json", exclude_none=True) for m in messages],
            "tools": sorted(t.name for t in tools), "tool_choice": [tool_choice.mode, tool_choice.name]}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


class _PerScenario:
    scenario = ""
    calls = 0

    async def begin(self, scenario: str) -> None:
        self.scenario, self.calls = scenario, 0


class Recorder(_PerScenario):
    """Wraps a real model; writes ``DIR/<scenario>.jsonl``, one line per model call."""

    def __init__(self, inner: ChatModel, directory: Path) -> None:
        self.inner, self.directory = inner, directory
        self.label, self.scripted = inner.label, inner.scripted
        directory.mkdir(parents=True, exist_ok=True)

    async def begin(self, scenario: str) -> None:
        await super().begin(scenario)
        await asyncio.to_thread((self.directory / f"{scenario}.jsonl").write_text, "")

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolDefinition], *,
                       tool_choice: ToolChoice = AUTO, max_tokens: int | None = None) -> Completion:
        completion = await self.inner.complete(messages, tools, tool_choice=tool_choice, max_tokens=max_tokens)
        self.calls += 1
        u = completion.usage
        line = {"call": self.calls, "model": self.inner.label, "request": digest(messages, tools, tool_choice),
                "question": next((m.content[:200] for m in messages if not isinstance(m, SystemMessage)), ""),
                "message": completion.message.model_dump(mode="json", exclude_none=True), "stop": completion.stop,
                "usage": [u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens],
                "latency_ms": completion.latency_ms}
        await asyncio.to_thread(self._append, self.directory / f"{self.scenario}.jsonl", line)
        return completion

    @staticmethod
    def _append(path: Path, line: dict[str, Any]) -> None:
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line, ensure_ascii=False) + "\n")


class Replayer(_PerScenario):
    """Answers from a recording; refuses (a model error the run reports) when the run diverges from it."""

    scripted = True

    def __init__(self, directory: Path) -> None:
        if not directory.is_dir():
            raise FileNotFoundError(f"{directory}: no recording here (record one with --record)")
        self.directory = directory
        self.label = "replay of a recorded model"
        self._lines: list[dict[str, Any]] = []

    async def aclose(self) -> None:
        """Nothing held."""

    async def begin(self, scenario: str) -> None:
        await super().begin(scenario)
        self._lines = await asyncio.to_thread(self._read, self.directory / f"{scenario}.jsonl")
        if self._lines:
            self.label = f"replay of {self._lines[0].get('model', 'a recorded model')}"

    @staticmethod
    def _read(path: Path) -> list[dict[str, Any]]:
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolDefinition], *,
                       tool_choice: ToolChoice = AUTO, max_tokens: int | None = None) -> Completion:
        broken = violations([m for m in messages if not isinstance(m, SystemMessage)])
        if broken:
            raise ModelError("bad_request", f"the provider would refuse this request: {broken[0]}")
        if self.calls >= len(self._lines):
            raise ModelError("bad_response", f"the recording of {self.scenario} has only {len(self._lines)} "
                                             "model calls: this run asked for more")
        line = self._lines[self.calls]
        self.calls += 1
        if line["request"] != digest(messages, tools, tool_choice):
            raise ModelError("bad_request", f"diverged from the recording at model call {self.calls}: the "
                                            "request differs (prompt, tools or a tool result changed)")
        usage = Usage(*line["usage"])
        message = AssistantMessage.model_validate(line["message"])
        return Completion(message, line["stop"], usage, float(line["latency_ms"]))
