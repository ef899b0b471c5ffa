"""1. Storage growth: one thread of N turns, two ~2 KB tool results per turn. Bytes written to Redis and
held in it, against the thread's unique content; LangGraph's checkpointer side by side."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from bench import langgraph_twin as lg
from bench.common import (
    Table,
    engine,
    isolated_redis,
    payload_tools,
    redis_store,
    steps_script,
    unique_bytes,
    verdict,
)
from bot.agent.models.scripted import ScriptedModel
from state import RedisStore


async def _bytes_in(store: RedisStore) -> int:
    """Bytes the Redis server has received (our writes; the isolated server has no other client)."""
    return int((await store.client.info("stats"))["total_net_input_bytes"])


async def _held(store: RedisStore, prefix: str) -> int:
    held = 0
    async for key in store.client.scan_iter(match=f"{prefix}:*"):
        held += int(await store.client.memory_usage(key, samples=0) or 0)
    return held


async def ours(url: str, turns: int, result_bytes: int) -> list[dict[str, Any]]:
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    store = redis_store(url, prefix)
    eng = engine(store, ScriptedModel(steps_script(1)), payload_tools(result_bytes))
    rows = []
    written_total, last_held = 0, 0
    for i in range(turns):
        before = await _bytes_in(store)
        await eng.ask("thread", f"question {i}")
        written = await _bytes_in(store) - before  # measured before our own inspection below
        written_total += written
        held = await _held(store, prefix)
        content = unique_bytes(await store.load_transcript("thread"))
        rows.append({"turn": i + 1, "written": written, "held": held, "held_delta": held - last_held,
                     "written_total": written_total, "content": content})
        last_held = held
    await store.close()
    return rows


async def langgraph(turns: int, result_bytes: int) -> list[dict[str, Any]]:
    graph, saver = lg.agent(result_bytes)
    rows, last = [], 0
    for i in range(turns):
        await lg.turn(graph, "thread", f"question {i}")
        held = lg.saver_bytes(saver)
        rows.append({"turn": i + 1, "held": held, "held_delta": held - last})
        last = held
    return rows


async def run(sizes: tuple[int, ...] = (10, 20, 40), result_bytes: int = 2048) -> list[Table]:
    rows: list[list[Any]] = []
    per_turn: list[list[Any]] = []
    async with isolated_redis() as url:
        for n in sizes:
            mine = await ours(url, n, result_bytes)
            theirs = await langgraph(n, result_bytes)
            last, content = mine[-1], mine[-1]["content"]
            rows.append([n, content, last["written_total"], last["held"],
                         last["held"] / content, theirs[-1]["held"], theirs[-1]["held"] / content,
                         theirs[-1]["held"] / last["held"]])
            if n == max(sizes):
                per_turn = [[r["turn"], r["written"], r["held_delta"], t["held_delta"],
                             t["held_delta"] / r["held_delta"]]
                            for r, t in zip(mine, theirs, strict=True) if r["turn"] in (1, 2, n // 2, n)]
    biggest = rows[-1]
    growth = per_turn[-1][2] / per_turn[0][2] if per_turn else 1.0
    notes = [verdict(f"stored bytes / unique content at {biggest[0]} turns", biggest[4], 1.3),
             verdict("held growth per turn, last turn / first turn", growth, 1.1)]
    return [
        Table("Storage after N turns (bytes)", ["turns", "unique content", "OpsPilot written", "OpsPilot held",
                                                "held / content", "LangGraph held", "LangGraph / content",
                                                "LangGraph / OpsPilot"], rows, notes),
        Table(f"Growth per turn, {max(sizes)}-turn thread (bytes)", ["turn", "OpsPilot written", "OpsPilot held +",
                                                                     "LangGraph held +", "LangGraph / OpsPilot"],
              per_turn),
    ]


if __name__ == "__main__":
    for table in asyncio.run(run()):
        print(table.render())
