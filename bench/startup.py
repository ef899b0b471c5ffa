"""Start-up: a worker process from spawn to its first read of the work queue, and `opspilot serve` from start to
its first answered question through the local fake Slack (one process, and a front with one worker); then what
a worker's heaviest imports cost (its entry module `bot.cli`, then `bot.slack.serve`), and what each optional
integration — MCP, Kubernetes, the OpenAI and Anthropic SDKs, OpenTelemetry tracing — would add: a process loads
one only where it is configured. Each process is fresh; the median of the rounds is reported.

The code is byte-compiled first, as the image is (the Dockerfile's ``compileall``; pip compiles the dependencies):
a process that compiles every module from source at each start (``PYTHONDONTWRITEBYTECODE`` on a checkout that was
never compiled) measures the compiler, ~0.2 s of it, which no deployed worker pays."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from bench.ack_latency import _stop
from bench.common import Table, alive, children, free_port, isolated_redis, verdict
from bot.demo.sender import SlackSender, mention
from bot.demo.workspace import LocalSlack
from state import connect

SECRET = "bench-secret"
ENTRY = "bot.cli"  # what `opspilot serve` runs each worker process as (python -m bot.cli worker)
IMPORTS = ("bot.cli", "bot.slack.serve")  # what a worker imports before it starts: the entry, then its command
INTEGRATIONS = {
    "MCP (mcp SDK, jsonschema)": "tools.mcp.session, tools.mcp.toolset",
    "Kubernetes (kubernetes_asyncio)": "kubernetes_asyncio.config",
    "OpenAI SDK": "bot.agent.models.openai",
    "Anthropic SDK": "bot.agent.models.anthropic",
    "OpenTelemetry tracing (SDK, OTLP exporter)":
        "bot.telemetry, opentelemetry.exporter.otlp.proto.http.trace_exporter",
}
WORKER_GOAL_S = 0.5  # a worker that KEDA starts from zero takes work within half a second (issue 39)
SERVE_GOAL_S = 1.5  # `serve --workers 1` answers its first question within a second and a half
# The default model, as a deployment configures it (the key is never used: no question is asked, and its address
# is a closed local port).
ANTHROPIC = {"ANTHROPIC_API_KEY": "sk-ant-bench-unused", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
_ROW = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def _env(slack: LocalSlack, url: str, port: int) -> dict[str, str]:
    """A clean environment: no API key (the offline demo model), no config file, this run's own key prefix."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith(("OPSPILOT_",
                                                                                                    "SLACK_"))}
    return env | {"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.api_url,
                  "PORT": str(port), "REDIS_URL": url, "OPSPILOT_KEY_PREFIX": f"bench-{uuid.uuid4().hex[:6]}",
                  "OPSPILOT_SLACK__POSTS_PER_SECOND": "0", "OPSPILOT_SLACK__PROGRESS": "update",
                  "OPSPILOT_SLACK__LANGUAGE": "en", "OPSPILOT_DEMO_DATA": "1"}


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 60.0) -> float:
    """Seconds until ``check()`` holds, polled every 5 ms."""
    start = time.perf_counter()
    while not await check():
        if time.perf_counter() - start > timeout_s:
            raise RuntimeError(f"{what}: not within {timeout_s:g} s")
        await asyncio.sleep(0.005)
    return time.perf_counter() - start


async def worker_start(slack: LocalSlack, url: str, command: str = "worker", model: dict[str, str] | None = None
                       ) -> float:
    """Spawn → the worker's first read of the queue: one of its connections waits in XREADGROUP (this Redis
    serves nobody else; a consumer joins the group only once it is handed an entry, so that cannot tell).
    ``command``: ``worker`` (a worker started alone) or ``serve`` (the worker that ``serve --workers 1`` forks).
    ``model``: the environment that configures a model (none: the offline demo model)."""
    env = _env(slack, url, free_port(2)) | (model or {})
    client = connect(url)

    async def reading() -> bool:
        return any(c.get("cmd") == "xreadgroup" for c in await client.client_list())

    async def gone() -> bool:
        return not await reading()

    start = time.perf_counter()
    args = ["--port", env["PORT"]] + (["--workers", "1"] if command == "serve" else [])
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", ENTRY, command, *args,
                                                env=env, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.DEVNULL)
    try:
        await _until(reading, "a worker reading the queue")
        return time.perf_counter() - start
    finally:
        await _stop(proc)
        # A front stopped this early may not have its handlers yet: it dies at once and its worker follows
        # within tether.GRACE_S; the next round must not see this one's worker reading.
        with contextlib.suppress(RuntimeError):
            await _until(gone, "the worker gone", 10.0)
        await client.aclose()


async def serve_start(slack: LocalSlack, url: str, workers: int, model: dict[str, str] | None = None
                      ) -> tuple[float, float, float]:
    """Start → the first HTTP answer, the first 200 (Slack's retries until then, as Slack sends them) and the
    final answer in the question's thread (with ``model``, whose key is never used: nan, nothing is answered)."""
    port = free_port(workers + 1)
    channel, ts = f"C{uuid.uuid4().hex[:8].upper()}", "100.1"
    sender = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    event_id, attempts, heard = f"Ev{uuid.uuid4().hex[:10]}", 0, 0.0
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", ENTRY, "serve", "--workers", str(workers),
                                                env=_env(slack, url, port) | (model or {}),
                                                stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.DEVNULL)

    async def acknowledged() -> bool:
        nonlocal attempts, heard
        try:
            status, _ = await sender.event(mention(channel, "UREQ", "payments errors", ts), event_id=event_id,
                                           retry_num=attempts or None)
        except aiohttp.ClientConnectionError:  # not listening yet
            return False
        attempts += 1
        heard = heard or time.perf_counter() - start
        return status == 200

    async def answered() -> bool:
        return any(str(((m.get("metadata") or {}).get("event_payload") or {}).get("key", "")).startswith("answer:")
                   for m in slack.thread(channel, ts))

    try:
        await _until(acknowledged, "serve acknowledging a question")
        ack = time.perf_counter() - start
        if model:
            return heard, ack, math.nan
        await _until(answered, "the first answer")
        return heard, ack, time.perf_counter() - start
    finally:
        forked = children(proc.pid)  # its worker processes (``workers`` is how many were asked for)
        await _stop(proc)

        async def gone() -> bool:
            return not any(alive(pid) for pid in forked)

        # A worker still importing when its front is stopped outlives it a moment: not into the next round.
        with contextlib.suppress(RuntimeError):
            await _until(gone, "the workers gone", 10.0)


Row = tuple[int, int, int, str]
"""One module in ``-X importtime``'s report: its own µs, cumulative µs, nesting depth, name."""


async def _importtime(code: str, startup: frozenset[str] = frozenset()) -> list[Row]:
    """``python -X importtime -c code`` in a fresh process, without what the interpreter imports to start."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-X", "importtime", "-c", code,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"python -c {code!r} failed: {err.decode()[-500:]}")
    rows = [(int(m[1]), int(m[2]), len(m[3]) // 2, m[4]) for m in map(_ROW.match, err.decode().splitlines()) if m]
    return [row for row in rows if row[3] not in startup]


def _ms(rows: list[Row], after: str | None = None) -> float:
    """What the code's own imports cost (cumulative), or only those after the import of ``after``."""
    top = [(name, cum) for _, cum, depth, name in rows if depth == 0]
    skip = [name for name, _ in top].index(after) + 1 if after else 0
    return sum(cum for _, cum in top[skip:]) / 1000


OWN = frozenset({"bot", "core", "state", "tools"})  # OpsPilot's packages; the rest is libraries and the stdlib


async def import_costs(rounds: int) -> tuple[list[list[object]], list[list[object]], float, float, float]:
    startup = frozenset(name for *_, name in await _importtime("pass"))  # never imported again: not the code's
    entries = [await _importtime(f"import {', '.join(IMPORTS)}", startup) for _ in range(rounds)]
    entry_ms = statistics.median(_ms(rows) for rows in entries)
    by_package: dict[str, list[float]] = {}
    for rows in entries:
        totals: dict[str, float] = {}
        for own, _, _, name in rows:
            totals[name.split(".")[0]] = totals.get(name.split(".")[0], 0.0) + own / 1000
        for package, ms in totals.items():
            by_package.setdefault(package, []).append(ms)
    heaviest = sorted(((p, statistics.median(v)) for p, v in by_package.items()), key=lambda pv: -pv[1])[:10]
    own_ms = statistics.median(sum(own for own, _, _, name in rows if name.split(".")[0] in OWN) / 1000
                               for rows in entries)
    packages: list[list[object]] = [[p, ms, f"{ms / entry_ms:.0%}"] for p, ms in heaviest]
    extras: list[list[object]] = []
    for label, modules in INTEGRATIONS.items():
        code = f"import {', '.join(IMPORTS)}; import {modules}"
        ms = statistics.median([_ms(await _importtime(code, startup), IMPORTS[-1]) for _ in range(rounds)])
        extras.append([label, ms, ms / entry_ms])
    everything = statistics.median(
        [_ms(await _importtime(f"import {', '.join(IMPORTS)}; import {', '.join(INTEGRATIONS.values())}", startup))
         for _ in range(rounds)])
    return packages, extras, entry_ms, everything, own_ms


def compiled() -> None:
    """OpsPilot's packages byte-compiled as the image's are (what is already compiled is left as it is)."""
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in ("bot", "core", "state", "tools"):
        compileall.compile_dir(str(root / package), quiet=1)


async def run(rounds: int = 5) -> list[Table]:
    await asyncio.to_thread(compiled)
    slack = LocalSlack(token="xoxb-test-token")
    await slack.server.start()
    try:
        async with isolated_redis() as url:
            worker = [await worker_start(slack, url) for _ in range(rounds)]
            forked = [await worker_start(slack, url, "serve") for _ in range(rounds)]
            deployed = [await worker_start(slack, url, model=ANTHROPIC) for _ in range(rounds)]
            serves = {w: [await serve_start(slack, url, w) for _ in range(rounds)] for w in (0, 1)}
            fronts = [await serve_start(slack, url, 1, ANTHROPIC) for _ in range(rounds)]
    finally:
        await slack.server.stop()
    packages, extras, entry_ms, everything, own_ms = await import_costs(rounds)
    start_rows: list[list[object]] = [["worker process: spawn → first read of the work queue", "", "",
                                       statistics.median(worker) * 1000],
                                      ["`opspilot serve --workers 1`: start → its worker's first read of the queue "
                                       "(forked from the front)", "", "", statistics.median(forked) * 1000],
                                      ["worker process with the default model configured (`ANTHROPIC_API_KEY`: the "
                                       "Anthropic SDK is imported at start): spawn → first read of the work queue",
                                       "", "", statistics.median(deployed) * 1000]]
    for workers, runs in serves.items():
        shape = "one process (`--workers 0`)" if workers == 0 else "a front and one worker (`--workers 1`)"
        start_rows.append([f"`opspilot serve`, {shape}: start → first answered question",
                           statistics.median(r[0] for r in runs) * 1000, statistics.median(r[1] for r in runs) * 1000,
                           statistics.median(r[2] for r in runs) * 1000])
    start_rows.append(["`opspilot serve --workers 1` with the default model configured (`ANTHROPIC_API_KEY`; the "
                       "front does not import its SDK, its worker does): start → the front's first answers",
                       statistics.median(r[0] for r in fronts) * 1000, statistics.median(r[1] for r in fronts) * 1000,
                       ""])
    worker_ms = statistics.median(worker) * 1000
    answer_s = statistics.median(r[2] for r in serves[1])
    what = ", then ".join(f"`{m}`" for m in IMPORTS)
    return [
        Table(f"Start-up (ms), median of {rounds} fresh processes; real Redis, the local fake Slack, the offline "
              "demo model, no integration configured, the code byte-compiled as in the image",
              ["what", "first HTTP answer", "first 200", "queue read / answered"], start_rows,
              [f"a worker's imports ({what}) take {entry_ms:,.0f} ms of its {worker_ms:,.0f} ms",
               verdict("worker spawn → reading the queue", worker_ms / 1000, WORKER_GOAL_S, " s"),
               f"a worker with the default model configured reads the queue after "
               f"{statistics.median(deployed):.2f} s: as deployed, the model's SDK is imported before the first "
               "read, since the first item needs it (the goal above is measured on the demo model, as since the "
               "issue was filed; the SDK's own import is in the integrations' table below)",
               verdict("`serve --workers 1` start → its first answer", answer_s, SERVE_GOAL_S, " s")]),
        Table(f"Import cost (ms) of a worker ({what}): the heaviest packages (own time, median of {rounds})",
              ["package", "ms", "share of the worker's imports"], packages,
              [f"the whole import: {entry_ms:,.0f} ms, of which OpsPilot's own packages ({', '.join(sorted(OWN))}) "
               f"{own_ms:,.0f} ms and the libraries and the standard library {entry_ms - own_ms:,.0f} ms"]),
        Table(f"Import cost (ms) each optional integration adds to a worker when it is configured (median of "
              f"{rounds}); unconfigured, none is imported", ["integration", "ms", "× the worker's imports"], extras,
              [verdict("a worker's imports / the same with every integration loaded", entry_ms / everything, 0.5),
               f"with every integration loaded: {everything:,.0f} ms"]),
    ]


if __name__ == "__main__":
    for table in asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 5)):
        print(table.render())
