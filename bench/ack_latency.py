"""5. Ack latency: how fast the app answers Slack's HTTP requests (events and button clicks) while many runs
are active, against a bare Bolt app that only acknowledges. Measured from the sender, one request at a time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from typing import Any

from bench.common import (
    Table,
    children,
    core_split,
    free_port,
    isolated_redis,
    payload_tools,
    pin,
    steps_script,
    verdict,
)
from bench.processes import bare_bolt_app
from bot.agent.deps import RunDeps
from bot.agent.engine import Engine, EngineOptions
from bot.agent.events import EventBus
from bot.agent.limits import Limits
from bot.agent.models.scripted import ScriptedModel
from bot.assembly import Assembly
from bot.config import Settings, SlackConfig
from bot.demo.local_server import LocalServer
from bot.demo.sender import SlackSender, block_action, mention
from bot.demo.stream_api import TIERS
from bot.demo.workspace import LocalSlack
from bot.run_limits import UNLIMITED
from bot.slack.service import build_service
from state import Keys, RedisStore, connect
from tools import ops
from tools.registry import Registry

SECRET = "bench-secret"
TOKEN = "xoxb-test-token"
Measured = tuple[list[float], list[float]]


async def _latencies(sender: SlackSender, samples: int, tag: str) -> tuple[list[float], list[float]]:
    events, clicks = [], []
    for i in range(samples):
        events.append(await _event(sender, tag, i))
        clicks.append(await _click(sender, i))
    return events, clicks


async def _paired(senders: tuple[SlackSender, SlackSender], samples: int) -> tuple[Measured, Measured]:
    """Both apps' latencies, request by request in turn (which one goes first alternates): a machine that slows
    down for a while slows both, so their ratio measures the apps, not the moment each was measured in."""
    measured: tuple[Measured, Measured] = (([], []), ([], []))
    for i in range(samples):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            measured[side][0].append(await _event(senders[side], "BP"[side], i))
        for side in (1, 0) if i % 2 == 0 else (0, 1):
            measured[side][1].append(await _click(senders[side], i))
    return measured


async def _event(sender: SlackSender, tag: str, i: int) -> float:
    start = time.perf_counter()
    status, _ = await sender.event(mention(f"C{tag}{i}", "UPROBE", "payments errors", f"{9000 + i}.1"))
    assert status == 200
    return (time.perf_counter() - start) * 1000


async def _click(sender: SlackSender, i: int) -> float:
    click = block_action(user="UPROBE", channel="C0X", message={"ts": "1.1"}, action_id="opspilot_confirm",
                         value=f"no-such-token-{i}")
    start = time.perf_counter()
    status, _ = await sender.action(click)
    assert status == 200
    return (time.perf_counter() - start) * 1000


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


async def bare_bolt(slack: LocalSlack, samples: int) -> tuple[list[float], list[float]]:
    server = await LocalServer(bare_bolt_app(slack.api_url, slack.token)).start()
    try:
        return await _latencies(SlackSender(f"{server.url}/slack/events", SECRET), samples, "B")
    finally:
        await server.stop()


async def opspilot(slack: LocalSlack, url: str, active: int, samples: int) -> tuple[list[float], list[float]]:
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    # No pacing here: the fake workspace enforces no limits in this benchmark, and a Tier-3 pace would
    # keep hundreds of runs waiting long after the measurement.
    config = SlackConfig(bot_token=slack.token, signing_secret=SECRET, api_url=slack.api_url, limits=UNLIMITED,
                         posts_per_second=0, updates_per_minute=0)
    store = RedisStore(connect(url, timeout_s=60, max_connections=128), keys=Keys(prefix))
    # The runs stay busy while we probe.
    model = ScriptedModel(steps_script(3), latency_s=1.0, strict=False, keep_requests=False)
    bus = EventBus()
    deps = RunDeps(model=model, registry=Registry.of(payload_tools(256, latency_s=0.2)), store=store, bus=bus,
                   limits=Limits(max_wall_time_s=3600))
    core = Assembly.around(Engine(deps, EngineOptions(lease_wait_s=60)), store, model, ops.build())
    service = await build_service(Settings(redis_url=url, key_prefix=prefix, slack=config), core=core)
    service.outbox.start()
    server = await LocalServer(service.web_app).start()
    sender = SlackSender(f"{server.url}/slack/events", SECRET)
    try:
        # Many runs at work (one channel each, so per-channel pacing does not hold them back).
        await asyncio.gather(*(sender.event(mention(f"C{i:04d}", f"U{i}", "two lookups", f"{100 + i}.1"))
                               for i in range(active)))
        await asyncio.sleep(1.0)
        busy = sum(1 for t in service.inbound.tasks.running if not t.done())
        result = await _latencies(sender, samples, "P")
        assert busy >= active * 0.9, f"only {busy} runs were active while probing"
        return result
    finally:
        await service.drain(120)
        await service.outbox.stop()
        await service.close_sessions()
        await server.stop()
        await store.close()


async def _process(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", *args, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if not line:
        raise RuntimeError(f"{' '.join(args)} did not start")
    return proc


async def _stop(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), 30)


async def split(url: str, active: int, samples: int, workers: int) -> tuple[Measured, Measured]:
    """The layout `opspilot serve` runs: a front and worker processes; the Slack stand-in, a bare Bolt app
    and the sender (this process) each in a process of their own. With two cores or more, the front (and the
    bare Bolt app it is compared with) on the first, everything else (Redis too) on the rest: the ratio measures
    the front, not the workers' runs taking its core. The two apps are asked in turn while the runs work."""
    slack_port, bare_port, front_port = free_port(), free_port(), free_port(workers + 1)
    api_url = f"http://127.0.0.1:{slack_port}/api/"
    stand_in = await _process("bench.processes", "slack", str(slack_port))
    bare = await _process("bench.processes", "bare", str(bare_port), api_url)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith(("OPSPILOT_",
                                                                                                    "SLACK_"))}
    env |= {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": api_url,
            "PORT": str(front_port), "REDIS_URL": url, "OPSPILOT_KEY_PREFIX": f"bench-{uuid.uuid4().hex[:6]}",
            "OPSPILOT_LLM__SCRIPTED_LATENCY_S": "1.0", "OPSPILOT_SLACK__POSTS_PER_SECOND": "0",
            "OPSPILOT_SLACK__UPDATES_PER_MINUTE": "0", "OPSPILOT_DEMO_DATA": "1"}
    front = await _process("bot.cli", "serve", "--workers", str(workers), env=env)
    cores = core_split()
    mine = os.sched_getaffinity(0)
    # Redis too (this process started it): the front's store-first write waits on it, as on a Redis elsewhere
    rest = [pid for pid in children(os.getpid()) if pid not in (front.pid, bare.pid)]
    if cores is not None:  # the front's workers are forked before its banner: all there by now
        pin([front.pid, bare.pid], cores[0])
        pin([*children(front.pid), *rest, os.getpid()], cores[1])
    try:
        sender = SlackSender(f"http://127.0.0.1:{front_port}/slack/events", SECRET)
        await asyncio.gather(*(sender.event(mention(f"C{i:04d}", f"U{i}", "payments errors", f"{100 + i}.1"))
                               for i in range(active)))
        await asyncio.sleep(1.0)  # the runs are at work (each model step takes 1 s)
        return await _paired((SlackSender(f"http://127.0.0.1:{bare_port}/slack/events", SECRET), sender), samples)
    finally:
        pin([os.getpid(), *rest], mine)  # the benchmarks after this one get every core again
        for proc in (front, bare, stand_in):
            await _stop(proc)


async def run(active: int = 200, samples: int = 200, workers: int = 2) -> list[Table]:
    slack = LocalSlack()
    for method in TIERS:  # no limits here (pacing is off, see opspilot()): the streaming tiers included
        slack.per_minute(method, 1_000_000)
    await slack.server.start()
    try:
        async with isolated_redis() as url:
            bare = await bare_bolt(slack, samples)
            ours = await opspilot(slack, url, active, samples)
    finally:
        await slack.server.stop()
    rows: list[list[Any]] = []
    for kind, b, o in (("event", bare[0], ours[0]), ("button click", bare[1], ours[1])):
        rows.append([kind, _p(b, 50), _p(b, 99), _p(o, 50), _p(o, 99), _p(o, 99) / _p(b, 99)])
    notes = [verdict(f"{row[0]} p99 / bare Bolt p99", row[5], 1.2) for row in rows]
    # Three times the samples: a p99 of 200 is the second-worst request, and it moved the ratio by 2× between runs.
    async with isolated_redis() as url:
        bare_split, front = await split(url, active, 3 * samples, workers)
    split_rows: list[list[Any]] = []
    for kind, b, o in (("event", bare_split[0], front[0]), ("button click", bare_split[1], front[1])):
        split_rows.append([kind, _p(b, 50), _p(b, 99), _p(o, 50), _p(o, 99), _p(o, 99) / _p(b, 99)])
    split_notes = [verdict(f"{row[0]} p99 / bare Bolt p99", row[5], 1.5) for row in split_rows]
    header = ["request", "bare Bolt p50", "bare Bolt p99", "OpsPilot p50", "OpsPilot p99", "p99 ratio"]
    return [Table(f"Ack latency (ms) with {active} runs active in one process (`serve --workers 0`), {samples} "
                  "requests each, one at a time", header, rows, notes),
            Table(f"Ack latency (ms) of a front with {workers} worker processes and {active} runs active; the Slack "
                  f"stand-in, a bare Bolt app and the sender each in their own process; {3 * samples} requests each, "
                  f"the two apps asked in turn while the runs work; {_layout()}",
                  header, split_rows, split_notes)]


def _layout() -> str:
    cores = core_split()
    if cores is None:
        return "one core: every process shares it"
    rest = sorted(cores[1])
    return (f"the front and the bare Bolt app on core {min(cores[0])}, its workers, Redis, the stand-in and the "
            f"sender on core{'s' if len(rest) > 1 else ''} {', '.join(map(str, rest))}")


if __name__ == "__main__":
    for table in asyncio.run(run()):
        print(table.render())
