"""2. Engine overhead per step: a zero-latency scripted model, no-op tools, real Redis persistence.
CPU time of this process per model step, early and late in a long thread; LangGraph side by side."""

from __future__ import annotations

import asyncio
import uuid

from bench import langgraph_twin as lg
from bench.common import Table, cpu, engine, isolated_redis, payload_tools, redis_store, steps_script, verdict
from bot.agent.models.scripted import ScriptedModel

STEPS_PER_TURN = 2  # one step asking for two calls, one step answering


async def ours(url: str, turns: int, window: int) -> tuple[float, float]:
    """CPU ms per step over the first and the last ``window`` turns of a ``turns``-turn thread."""
    store = redis_store(url, f"bench-{uuid.uuid4().hex[:6]}")
    eng = engine(store, ScriptedModel(steps_script(1), strict=False, keep_requests=False), payload_tools(64))
    await eng.ask("warmup", "hi")
    marks: list[float] = []
    for i in range(turns):
        start = cpu()
        await eng.ask("thread", f"question {i}")
        marks.append(cpu() - start)
    await store.close()
    per_step = [m * 1000 / STEPS_PER_TURN for m in marks]
    return sum(per_step[:window]) / window, sum(per_step[-window:]) / window


async def langgraph(turns: int, window: int) -> tuple[float, float]:
    graph, _ = lg.agent(64)
    await lg.turn(graph, "warmup", "hi")
    marks: list[float] = []
    for i in range(turns):
        start = cpu()
        await lg.turn(graph, "thread", f"question {i}")
        marks.append(cpu() - start)
    per_step = [m * 1000 / STEPS_PER_TURN for m in marks]
    return sum(per_step[:window]) / window, sum(per_step[-window:]) / window


async def run(turns: int = 50, window: int = 5) -> list[Table]:
    async with isolated_redis() as url:
        mine = await ours(url, turns, window)
    theirs = await langgraph(turns, window)
    rows = [[f"turns 1–{window}", mine[0], theirs[0], theirs[0] / mine[0]],
            [f"turns {turns - window + 1}–{turns}", mine[1], theirs[1], theirs[1] / mine[1]]]
    notes = [verdict("OpsPilot CPU per model step", max(mine), 0.25, " ms"),
             verdict("OpsPilot late / early in the thread", mine[1] / mine[0], 1.1)]
    return [Table(f"CPU per model step (ms), {turns}-turn thread, Redis persistence included for OpsPilot",
                  ["where in the thread", "OpsPilot", "LangGraph (in-memory checkpointer)", "LangGraph / OpsPilot"],
                  rows, notes)]


if __name__ == "__main__":
    for table in asyncio.run(run()):
        print(table.render())
