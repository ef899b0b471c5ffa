"""2. Engine overhead per step: a zero-latency scripted model, no-op tools, real Redis persistence.

CPU time per model step, early and late in a long thread, for each side in a fresh process of its own (so
neither warms the other's imports and caches), in alternating order over the rounds; the median per side:

* ``opspilot``         the engine with the Redis store (and, on a few more turns, its round trips counted at the
                       client and the commands the server executed, from ``INFO commandstats``);
* ``floor``            what no engine can go below: per step one script call (EVALSHA) and one dump of a message;
* ``opspilot-memory``  the same engine with the in-process store (no Redis): what the engine's own work costs, so
                       that the difference is what persisting each step in Redis costs;
* ``langgraph``        langchain 1.x ``create_agent`` with ``InMemorySaver``, same tools and payloads;
* ``opspilot-uvloop``  the engine again under uvloop (when installed), to see whether it pays.

``python -m bench.overhead --side S --url U`` is what each process runs (it prints one JSON line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from bench.common import (
    Table,
    counting_store,
    cpu,
    engine,
    isolated_redis,
    payload_tools,
    redis_store,
    server_sample,
    steps_script,
    verdict,
)
from bot.agent.models.scripted import ScriptedModel
from core.messages import ToolResultMessage, dump_message
from state import MemoryStore
from state.store import Store

STEPS_PER_TURN = 2  # one step asking for two calls, one step answering
SIDES = ("opspilot", "floor", "opspilot-memory", "langgraph", "opspilot-uvloop")


def _per_step(marks: list[float], window: int) -> tuple[float, float]:
    per_step = [m * 1000 / STEPS_PER_TURN for m in marks]
    return sum(per_step[:window]) / window, sum(per_step[-window:]) / window


async def _thread(store: Store, turns: int, window: int) -> tuple[float, float]:
    """CPU per step early and late in a ``turns``-turn thread, the engine on ``store``."""
    eng = engine(store, ScriptedModel(steps_script(1), strict=False, keep_requests=False), payload_tools(64))
    await eng.ask("warmup", "hi")
    marks: list[float] = []
    for i in range(turns):
        start = cpu()
        await eng.ask("thread", f"question {i}")
        marks.append(cpu() - start)
    return _per_step(marks, window)


async def ours(url: str, turns: int, window: int) -> dict[str, Any]:
    store = redis_store(url, f"bench-{uuid.uuid4().hex[:6]}")
    early, late = await _thread(store, turns, window)
    await store.close()
    counted, trips = counting_store(url, f"bench-{uuid.uuid4().hex[:6]}")
    eng = engine(counted, ScriptedModel(steps_script(1), strict=False, keep_requests=False), payload_tools(64))
    await eng.ask("thread", "warm up")
    trips.clear()
    # What the server executed, beside what the client sent: a script's inner commands are work too.
    before = await server_sample(url)
    for i in range(5):
        await eng.ask("thread", f"question {i}")
    calls = (await server_sample(url)).since(before).calls
    await counted.close()
    steps = 5 * STEPS_PER_TURN
    return {"early": early, "late": late, "round_trips_per_step": len(trips) / steps,
            "commands_per_step": sum(calls.values()) / steps,
            "commands_by_name": {name: n / steps for name, n in calls.most_common()}}


async def in_memory(turns: int, window: int) -> dict[str, float]:
    """The engine alone: the in-process store (nothing persisted, no round trip), same model, tools and turns."""
    early, late = await _thread(MemoryStore(), turns, window)
    return {"early": early, "late": late}


async def floor(url: str, turns: int, window: int) -> dict[str, float]:
    """One EVALSHA (append the step's message, set its TTL) and one message dump per step, nothing else."""
    store = redis_store(url, f"bench-{uuid.uuid4().hex[:6]}")
    script = store.client.register_script(
        "redis.call('RPUSH', KEYS[1], ARGV[1]) redis.call('EXPIRE', KEYS[1], 3600) return 1")
    key = store.keys.transcript("floor")
    body = ("lookup_a-0-" * 7)[:64]
    await script(keys=[key], args=["warm"])
    marks: list[float] = []
    for i in range(turns):
        start = cpu()
        for step in range(STEPS_PER_TURN):
            message = ToolResultMessage(call_id=f"c{i}-{step}", name="lookup_a", content=body, status="ok")
            await script(keys=[key], args=[dump_message(message)])
        marks.append(cpu() - start)
    await store.close()
    early, late = _per_step(marks, window)
    return {"early": early, "late": late}


async def langgraph(turns: int, window: int) -> dict[str, float]:
    from bench import langgraph_twin as lg

    graph, _ = lg.agent(64)
    await lg.turn(graph, "warmup", "hi")
    marks: list[float] = []
    for i in range(turns):
        start = cpu()
        await lg.turn(graph, "thread", f"question {i}")
        marks.append(cpu() - start)
    early, late = _per_step(marks, window)
    return {"early": early, "late": late}


def side_main(side: str, url: str, turns: int, window: int) -> dict[str, Any]:
    if side == "opspilot-uvloop":
        try:
            import uvloop
        except ImportError:
            return {"skipped": "uvloop is not installed"}
        return dict(uvloop.run(ours(url, turns, window)))
    runs: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
        "opspilot": lambda: ours(url, turns, window), "floor": lambda: floor(url, turns, window),
        "opspilot-memory": lambda: in_memory(turns, window), "langgraph": lambda: langgraph(turns, window)}
    return dict(asyncio.run(runs[side]()))


async def _fresh_process(side: str, url: str, turns: int, window: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.overhead", "--side", side, "--url", url, "--turns", str(turns),
        "--window", str(window), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bench side {side} failed: {err.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def run(turns: int = 50, window: int = 5, rounds: int = 3) -> list[Table]:
    measured: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    orders = []
    async with isolated_redis() as url:
        for r in range(rounds):
            order = SIDES if r % 2 == 0 else tuple(reversed(SIDES))
            orders.append(" → ".join(order))
            for side in order:
                measured[side].append(await _fresh_process(side, url, turns, window))

    def median(side: str, figure: str) -> float:
        return float(statistics.median(m[figure] for m in measured[side]))

    mine = (median("opspilot", "early"), median("opspilot", "late"))
    base = (median("floor", "early"), median("floor", "late"))
    theirs = (median("langgraph", "early"), median("langgraph", "late"))
    rows = [[f"turns {a}–{b}", mine[i], base[i], mine[i] / base[i], theirs[i], theirs[i] / mine[i]]
            for i, (a, b) in enumerate(((1, window), (turns - window + 1, turns)))]
    trips = median("opspilot", "round_trips_per_step")
    alone = (median("opspilot-memory", "early"), median("opspilot-memory", "late"))
    persisting = mine[1] - alone[1]
    left = 2.5 - alone[1] / base[1]  # what the 2.5× goal leaves for Redis, in floors
    notes = [verdict("OpsPilot / floor, CPU per model step", max(mine[0] / base[0], mine[1] / base[1]), 2.5),
             verdict("OpsPilot late / early in the thread", mine[1] / mine[0], 1.1),
             verdict("LangGraph create_agent / OpsPilot late in the thread", theirs[1] / mine[1], 5,
                     lower_is_better=False),
             verdict("Redis round trips per model step", trips, 2, ""),
             verdict("Redis commands per model step (INFO commandstats, inside scripts included)",
                     median("opspilot", "commands_per_step"), 8, ""),
             "Redis commands per model step by command: " + ", ".join(
                 f"{name.upper()} {n:.1f}" for name, n in measured["opspilot"][0]["commands_by_name"].items()),
             f"where a step's CPU goes late in the thread: the engine's own work (the same engine, model, tools and "
             f"turns on the in-process store: nothing persisted) {alone[1]:.3f} ms, {alone[1] / base[1]:.1f}× the "
             f"floor (early: {alone[0]:.3f} ms); persisting each step in Redis {persisting:.3f} ms more, "
             f"{persisting / base[1]:.1f}× the floor, at {trips:.1f} round trips a step",
             "what the 2.5× goal leaves for Redis with the engine's own work as it is: " + (
                 f"{left:.1f}× the floor for {trips:.1f} round trips a step, {left / trips:.2f}× the floor each (the "
                 "floor's whole step is one round trip and one dump)" if left > 0 else
                 f"nothing (the engine alone is {alone[1] / base[1]:.1f}× the floor in this run)"),
             f"floor: one EVALSHA + one message dump per step, measured in the same run ({base[1]:.3f} ms here); "
             f"each side in a fresh process, median of {rounds} rounds in alternating order ({'; '.join(orders)})"]
    notes.append("LangGraph's Redis checkpointer (langgraph-checkpoint-redis 0.5.2) installs but needs the RediSearch "
                 "and RedisJSON modules (Redis 8 or Redis Stack); Debian's redis-server 7.0 answers "
                 "`unknown command 'FT.INFO'`: not measured")
    if all("skipped" not in m for m in measured["opspilot-uvloop"]):
        fast = (median("opspilot-uvloop", "early"), median("opspilot-uvloop", "late"))
        gain = (mine[0] + mine[1]) / (fast[0] + fast[1])
        notes.append(f"under uvloop: {fast[0]:.3f} / {fast[1]:.3f} ms per step (early / late), "
                     f"{gain:.2f}× the default event loop's speed")
    else:
        notes.append(f"uvloop: {measured['opspilot-uvloop'][0]['skipped']}")
    return [Table(f"CPU per model step (ms), {turns}-turn thread, Redis persistence included for OpsPilot",
                  ["where in the thread", "OpsPilot", "floor", "OpsPilot / floor",
                   "LangGraph create_agent (InMemorySaver)", "LangGraph / OpsPilot"], rows, notes)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.overhead")
    parser.add_argument("--side", choices=SIDES)
    parser.add_argument("--url", default="")
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--window", type=int, default=5)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(side_main(args.side, args.url, args.turns, args.window)))
    else:
        for table in asyncio.run(run(args.turns, args.window)):
            print(table.render())
