"""3. Concurrency: many runs in one process (model 50 ms, tools 20 ms, 3 steps each) on real Redis.
Wall time against the ideal critical path, event-loop lag p99, peak memory per run."""

from __future__ import annotations

import asyncio
import statistics
import time
import tracemalloc
import uuid

from bench.common import Table, engine, isolated_redis, payload_tools, redis_store, steps_script, verdict
from bot.agent.models.scripted import ScriptedModel

MODEL_S, TOOL_S, TOOL_STEPS = 0.050, 0.020, 2  # 3 model steps: two with tools, one answering


async def _lag_monitor(stop: asyncio.Event, lags: list[float], period: float = 0.005) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(period)
        lags.append(max(time.perf_counter() - start - period, 0.0) * 1000)


async def _batch(url: str, runs: int) -> tuple[float, list[float]]:
    store = redis_store(url, f"bench-{uuid.uuid4().hex[:6]}")
    model = ScriptedModel(steps_script(TOOL_STEPS), latency_s=MODEL_S, strict=False, keep_requests=False)
    eng = engine(store, model, payload_tools(256, latency_s=TOOL_S))
    await eng.ask("warmup", "go")
    stop, lags = asyncio.Event(), list[float]()
    monitor = asyncio.create_task(_lag_monitor(stop, lags))
    start = time.perf_counter()
    outcomes = await asyncio.gather(*(eng.ask(f"t{i}", "go") for i in range(runs)))
    wall = time.perf_counter() - start
    stop.set()
    await monitor
    assert all(o.stop_reason == "final_answer" for o in outcomes), "every run must answer"
    await store.close()
    return wall, lags


async def run(runs: int = 500) -> list[Table]:
    ideal = 3 * MODEL_S + TOOL_STEPS * TOOL_S
    async with isolated_redis() as url:
        wall, lags = await _batch(url, runs)
        tracemalloc.start()
        await _batch(url, runs)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    p99 = statistics.quantiles(lags, n=100)[98] if len(lags) >= 100 else max(lags)
    rows = [[runs, ideal * 1000, wall * 1000, wall / ideal, p99, peak / runs / 1024]]
    return [Table(f"{runs} concurrent runs in one process (3 model steps: 50 ms model, 20 ms tools, real Redis)",
                  ["runs", "ideal critical path (ms)", "wall time (ms)", "wall / ideal", "event-loop lag p99 (ms)",
                   "peak memory per run (KiB)"], rows, [verdict("wall / ideal", wall / ideal, 1.2)])]


if __name__ == "__main__":
    for table in asyncio.run(run()):
        print(table.render())
