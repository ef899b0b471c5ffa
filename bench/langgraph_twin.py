"""The same agent in LangGraph as people build it today (langchain 1.x ``create_agent`` + a checkpointer), with
the same scripted model and tools, for side-by-side figures. Installed only through the ``bench`` extra."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

_ids = itertools.count()


class ScriptedChat(BaseChatModel):
    """``tool_steps`` steps of two tool calls after each human message, then an answer."""

    tool_steps: int = 1
    latency_s: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _reply(self, messages: Sequence[BaseMessage]) -> AIMessage:
        since = 0
        for m in reversed(messages):
            if isinstance(m, HumanMessage):
                break
            if isinstance(m, AIMessage):
                since += 1
        if since < self.tool_steps:
            calls = [{"name": name, "args": {"q": str(since)}, "id": f"lg{next(_ids)}", "type": "tool_call"}
                     for name in ("lookup_a", "lookup_b")]
            return AIMessage(content="", tool_calls=calls)
        return AIMessage(content="done")

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return self._generate(messages)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        return self


def tools(result_bytes: int, latency_s: float = 0.0) -> list[BaseTool]:
    counter = itertools.count()

    def make(name: str) -> BaseTool:
        async def run(q: str = "x") -> str:
            if latency_s:
                await asyncio.sleep(latency_s)
            seed = f"{name}-{next(counter)}-"
            return (seed * (result_bytes // len(seed) + 1))[:result_bytes]
        return StructuredTool.from_function(coroutine=run, name=name, description=f"Look up {name}.")

    return [make("lookup_a"), make("lookup_b")]


def agent(result_bytes: int, *, tool_steps: int = 1, model_latency_s: float = 0.0, tool_latency_s: float = 0.0,
          checkpointer: InMemorySaver | None = None) -> tuple[Any, InMemorySaver]:
    saver = checkpointer or InMemorySaver()
    graph = create_agent(ScriptedChat(tool_steps=tool_steps, latency_s=model_latency_s),
                         tools(result_bytes, tool_latency_s), checkpointer=saver)
    return graph, saver


def saver_bytes(saver: InMemorySaver) -> int:
    """Everything the in-memory checkpointer holds (it keeps every checkpoint; nothing is overwritten)."""
    total = sum(len(blob[1]) for blob in saver.blobs.values())
    for namespaces in saver.storage.values():
        for checkpoints in namespaces.values():
            for checkpoint, metadata, _parent in checkpoints.values():
                total += len(checkpoint[1]) + len(metadata[1])
    for writes in saver.writes.values():
        total += sum(len(w[2][1]) for w in writes.values())
    return total


async def turn(graph: Any, thread: str, text: str) -> None:
    await graph.ainvoke({"messages": [("user", text)]}, {"configurable": {"thread_id": thread},
                                                          "recursion_limit": 1000})
