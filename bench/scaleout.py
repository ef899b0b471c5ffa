"""Scaling out: runs/s through the work stream with 1, 2, … worker processes (each ``python -m bench.scaleout
child URL PREFIX CAP``: reads the stream, runs the engine, acknowledges), on one Redis and on a 3-master Redis
Cluster. Same runs as the concurrency benchmark (3 model steps: 50 ms model, 20 ms tools, real Redis).

Each point keeps the stream at a steady depth (every worker full, ``CAP`` runs at a time, and half as many
waiting) and stops after ``seconds`` or after ``runs`` completions, whichever comes first, after a warm-up.
Completions are entries added minus the growth of the stream (a run's entry is deleted when it is acknowledged).
Around the measured window each server's ``INFO cpu`` (main thread) and ``INFO commandstats`` are sampled: the
commands per run are what the servers executed in the window (inside scripts included), less the driver's own
polls (one XLEN each, counted) and the sampling (INFO, excluded by name), over the runs completed."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from bench.common import (
    ServerUse,
    Table,
    engine,
    isolated_cluster,
    isolated_redis,
    payload_tools,
    redis_store,
    server_sample,
    steps_script,
    verdict,
)
from bot.agent.models.scripted import ScriptedModel

MODEL_S, TOOL_S, TOOL_STEPS = 0.050, 0.020, 2
STEPS = TOOL_STEPS + 1
POLL_S = 0.02


@dataclass(frozen=True)
class Options:
    workers: tuple[int, ...] = (1, 2)
    seconds: float = 20.0
    """Each point's measured window, at most."""
    runs: int = 0
    """Each point stops after this many completions too (0: by time only)."""
    cap: int = 100
    """Runs one worker runs at a time (a worker's concurrency)."""
    cluster: bool = True
    """Also the series on a 3-master Redis Cluster."""
    warmup_s: float = 2.0


SMALL = Options(seconds=1.0, runs=40, cap=10, cluster=False, warmup_s=0.5)


async def child(url: str, prefix: str, cap: int) -> None:
    """A worker: take entries while fewer than ``cap`` run, run each as its own task, ack when done."""
    store = redis_store(url, prefix)
    model = ScriptedModel(steps_script(TOOL_STEPS), latency_s=MODEL_S, strict=False, keep_requests=False)
    eng = engine(store, model, payload_tools(256, latency_s=TOOL_S))
    await eng.ask(f"warmup-{uuid.uuid4().hex[:6]}", "go")
    name, running = f"w-{uuid.uuid4().hex[:6]}", set[asyncio.Task[None]]()

    async def work(entry_id: str, thread: str) -> None:
        outcome = await eng.ask(thread, "go")
        assert outcome.stop_reason == "final_answer", outcome.stop_reason
        await store.queue.ack(entry_id)

    print("ready", flush=True)
    while True:
        if len(running) >= cap:
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            continue
        for entry in await store.queue.take(name, count=cap - len(running), block_ms=200):
            task = asyncio.create_task(work(entry.id, entry.body))
            running.add(task)
            task.add_done_callback(running.discard)


@dataclass
class Point:
    workers: int
    runs: int
    seconds: float
    use: ServerUse
    polls: int
    calls: Counter[str] = field(default_factory=Counter)

    @property
    def per_second(self) -> float:
        return self.runs / self.seconds

    @property
    def commands_per_run(self) -> float:
        return sum(self.calls.values()) / max(self.runs, 1)


async def _point(url: str, workers: int, opts: Options) -> Point:
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.scaleout", "child", url, prefix, str(opts.cap),
        stdout=asyncio.subprocess.PIPE) for _ in range(workers)]
    store = redis_store(url, prefix)
    key, target = store.keys.queue(), workers * (opts.cap + max(opts.cap // 2, 1))
    puts, polls = 0, 0

    async def length() -> int:
        nonlocal polls
        polls += 1
        return int(await store.client.xlen(key))

    async def top_up(now: int) -> None:
        nonlocal puts
        missing = target - now
        await asyncio.gather(*(store.queue.put(f"{prefix}-t{puts + i}") for i in range(missing)))
        puts += max(missing, 0)

    try:
        for proc in procs:
            assert proc.stdout is not None
            if (await asyncio.wait_for(proc.stdout.readline(), 120)).strip() != b"ready":
                raise RuntimeError("a bench worker did not start")
        await store.queue.put(f"{prefix}-first")  # makes the group once, before the concurrent puts
        puts += 1
        warm_until = time.perf_counter() + opts.warmup_s
        while time.perf_counter() < warm_until:
            await top_up(await length())
            await asyncio.sleep(POLL_S)
        before = await server_sample(url)
        polls = 0  # from here every XLEN is the driver's, subtracted below
        start, puts_at, first = time.perf_counter(), puts, await length()
        while True:
            now = await length()
            elapsed = time.perf_counter() - start
            done = (puts - puts_at) - (now - first)
            if elapsed >= opts.seconds or (opts.runs and done >= opts.runs):
                break
            await top_up(now)
            await asyncio.sleep(POLL_S)
        use = (await server_sample(url)).since(before)
    finally:
        for proc in procs:
            proc.kill()
            await proc.wait()
        await store.close()
    calls = Counter(use.calls)
    calls["xlen"] -= polls
    return Point(workers, done, elapsed, use, polls, +calls)


async def _series(url: str, opts: Options) -> list[Point]:
    return [await _point(url, n, opts) for n in opts.workers]


def _table(where: str, points: list[Point], opts: Options) -> Table:
    base = points[0]
    rows = []
    for p in points:
        efficiency = p.per_second / (base.per_second * p.workers / base.workers)
        rows.append([p.workers, p.runs, p.seconds, p.per_second, efficiency, max(p.use.cores), sum(p.use.cores),
                     p.commands_per_run, p.commands_per_run * p.per_second])
    cpus = os.cpu_count() or 1
    stop = f"{opts.seconds:g} s" + (f" or {opts.runs} runs" if opts.runs else "")
    notes = [f"efficiency: runs/s ÷ (runs/s at {base.workers} worker{'s' if base.workers > 1 else ''} × "
             f"workers ÷ {base.workers}); below ~0.9 something shared saturates (cores here, Redis on a big machine)",
             "Redis main thread: CPU seconds per second of the thread that executes commands, from INFO cpu "
             "(busiest server, and summed over all); a single Redis tops out at 1 core",
             "commands per run: INFO commandstats over the window, commands inside scripts included, the driver's "
             "polls and INFO excluded, enqueueing (XADD, EXPIRE) and the workers' reads included; "
             "× runs/s = Redis commands/s",
             f"each point: {opts.warmup_s:g} s warm-up, then {stop}, whichever first; stream kept at "
             f"{opts.cap} running + {max(opts.cap // 2, 1)} waiting per worker",
             f"this machine has {cpus} core{'s' if cpus > 1 else ''}: points above {cpus} workers measure core "
             "sharing, not scaling, and the workers share even these with Redis and the driver"]
    two = next((r for r in rows if r[0] == 2 * base.workers), None)
    if two is not None:
        notes.insert(0, verdict(f"efficiency at {two[0]} workers", float(two[4]), 0.8, "", lower_is_better=False))
    return Table(f"Scale-out: runs/s by worker processes, {where} (3 model steps: 50 ms model, 20 ms tools)",
                 ["workers", "runs", "seconds", "runs/s", "efficiency", "Redis main thread (cores, busiest)",
                  "Redis main threads (cores, all)", "commands per run", "Redis commands/s"], rows, notes)


def _breakdown(point: Point) -> Table:
    rows: list[list[object]] = [[name.upper(), n / point.runs, n / point.runs / STEPS]
                                for name, n in point.calls.most_common()]
    rows.append(["total", point.commands_per_run, point.commands_per_run / STEPS])
    stream = sum(n for name, n in point.calls.items() if name.lower().startswith("x")) / point.runs
    return Table(f"Redis commands per {STEPS}-step run, by command (one Redis, {point.workers} worker"
                 f"{'s' if point.workers > 1 else ''})", ["command", "per run", "per model step"], rows,
                 [verdict("Redis commands per model step, the work stream's included", point.commands_per_run / STEPS,
                          8, ""),
                  f"the engine's alone (the stream's XADD, XREADGROUP, XACK, XDEL… left out): "
                  f"{(point.commands_per_run - stream) / STEPS:.2f} per model step",
                  "INFO commandstats over the measured window: commands called inside scripts (EVALSHA) are counted "
                  "under their own names as well; the per-run figure includes enqueueing and the worker's reads"])


async def run(opts: Options | None = None) -> list[Table]:
    opts = opts or Options()
    async with isolated_redis() as url:
        single = await _series(url, opts)
    tables = [_table("one Redis", single, opts), _breakdown(single[0])]
    if opts.cluster:
        async with isolated_cluster() as url:
            tables.insert(1, _table("Redis Cluster of 3 masters", await _series(url, opts), opts))
    return tables


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        asyncio.run(child(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    else:
        for table in asyncio.run(run()):
            print(table.render())
