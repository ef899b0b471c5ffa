"""Scaling out: 500 concurrent runs through the work stream, done by 1 and then 2 worker processes
(each ``python -m bench.scaleout child URL PREFIX``: reads the stream, runs the engine, acknowledges).
Same runs as the concurrency benchmark (3 model steps: 50 ms model, 20 ms tools, real Redis); the clock
starts before the first entry is added and stops when the stream has nothing left, pending or not."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

from bench.common import Table, engine, isolated_redis, payload_tools, redis_store, steps_script, verdict
from bot.agent.models.scripted import ScriptedModel

MODEL_S, TOOL_S, TOOL_STEPS = 0.050, 0.020, 2


async def child(url: str, prefix: str) -> None:
    """A worker: take entries as they come (up to 100 at a time), run each as its own task, ack when done."""
    store = redis_store(url, prefix)
    model = ScriptedModel(steps_script(TOOL_STEPS), latency_s=MODEL_S, strict=False, keep_requests=False)
    eng = engine(store, model, payload_tools(256, latency_s=TOOL_S))
    await eng.ask(f"warmup-{uuid.uuid4().hex[:6]}", "go")
    name, running = f"w-{uuid.uuid4().hex[:6]}", set()

    async def work(entry_id: str, thread: str) -> None:
        outcome = await eng.ask(thread, "go")
        assert outcome.stop_reason == "final_answer", outcome.stop_reason
        await store.queue.ack(entry_id)

    print("ready", flush=True)
    while True:
        for entry in await store.queue.take(name, count=100, block_ms=200):
            task = asyncio.create_task(work(entry.id, entry.body))
            running.add(task)
            task.add_done_callback(running.discard)


async def _batch(url: str, runs: int, workers: int) -> float:
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.scaleout", "child", url, prefix,
                                                  stdout=asyncio.subprocess.PIPE) for _ in range(workers)]
    store = redis_store(url, prefix)
    try:
        for proc in procs:
            assert proc.stdout is not None
            if (await asyncio.wait_for(proc.stdout.readline(), 60)).strip() != b"ready":
                raise RuntimeError("a bench worker did not start")
        start = time.perf_counter()
        for i in range(runs):
            await store.queue.put(f"t{i}")
        while True:
            stats = await store.queue.stats()
            if stats.length == 0 and stats.pending == 0:
                return time.perf_counter() - start
            if time.perf_counter() - start > 600:
                raise RuntimeError(f"{stats.length} entries left after 600 s")
            await asyncio.sleep(0.01)
    finally:
        for proc in procs:
            proc.kill()
            await proc.wait()
        await store.close()


async def run(runs: int = 500) -> list[Table]:
    ideal = 3 * MODEL_S + TOOL_STEPS * TOOL_S
    async with isolated_redis() as url:
        one = await _batch(url, runs, 1)
        two = await _batch(url, runs, 2)
    rows = [[1, runs, ideal * 1000, one * 1000, one / ideal], [2, runs, ideal * 1000, two * 1000, two / ideal]]
    return [Table(f"{runs} concurrent runs through the work stream, 1 vs 2 worker processes "
                  "(3 model steps: 50 ms model, 20 ms tools, real Redis)",
                  ["workers", "runs", "ideal critical path (ms)", "wall time (ms)", "wall / ideal"], rows,
                  [verdict("wall / ideal with 2 workers, as a share of 1 worker's", two / one, 0.6)])]


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        asyncio.run(child(sys.argv[2], sys.argv[3]))
    else:
        for table in asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 500)):
            print(table.render())
