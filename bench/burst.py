"""A burst, as during an incident: N mentions over a few seconds across many channels, Slack's limits
enforced by the stand-in (about one post per second per channel, Tier-3 edits) and OpsPilot's default
client-side pacing. Every question must be answered, none may run out of time while it only waits for
Slack, and we report how long people wait for the first sign of life and for the answer."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

from bench.common import Table, isolated_redis, payload_tools, steps_script, verdict
from bot.agent.deps import RunDeps
from bot.agent.engine import Engine, EngineOptions
from bot.agent.events import EventBus
from bot.agent.limits import Limits
from bot.agent.models.scripted import ScriptedModel
from bot.assembly import Assembly
from bot.config import Settings, SlackConfig
from bot.demo.local_server import LocalServer
from bot.demo.sender import SlackSender, mention
from bot.demo.workspace import LocalSlack
from bot.run_limits import UNLIMITED
from bot.slack.service import build_service
from state import Keys, RedisStore, connect
from tools import ops
from tools.registry import Registry

SECRET = "bench-secret"


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


async def run(mentions: int = 200, over_s: float = 10.0, channels: int = 20) -> list[Table]:
    slack = LocalSlack()
    slack.per_minute("chat.update", 50)
    slack.posts_per_channel(2, 2.0)
    first_seen: dict[str, float] = {}
    answered: dict[str, float] = {}

    async def watch(change: dict[str, Any]) -> None:
        message = change.get("message") or {}
        thread = str(message.get("thread_ts") or "")
        if thread and message.get("bot"):
            first_seen.setdefault(thread, time.perf_counter())
            if message.get("text") == "done":
                answered.setdefault(thread, time.perf_counter())

    slack.watchers.append(watch)
    await slack.server.start()
    async with isolated_redis() as url:
        prefix = f"bench-{uuid.uuid4().hex[:6]}"
        config = SlackConfig(bot_token=slack.token, signing_secret=SECRET, api_url=slack.api_url,
                             limits=UNLIMITED)  # default pacing; a burst of runs on purpose
        store = RedisStore(connect(url, timeout_s=60, max_connections=128), keys=Keys(prefix))
        model = ScriptedModel(steps_script(2), latency_s=0.05, strict=False, keep_requests=False)
        deps = RunDeps(model=model, registry=Registry.of(payload_tools(256, latency_s=0.02)), store=store,
                       bus=EventBus(), limits=Limits())  # the default 180 s of active time
        core = Assembly.around(Engine(deps, EngineOptions(lease_wait_s=60)), store, model, ops.build())
        service = await build_service(Settings(redis_url=url, key_prefix=prefix, slack=config), core=core)
        service.outbox.start()
        server = await LocalServer(service.web_app).start()
        sender = SlackSender(f"{server.url}/slack/events", SECRET)
        sent: dict[str, float] = {}
        start = time.perf_counter()
        for i in range(mentions):
            ts = f"{2000 + i}.0001"
            sent[ts] = time.perf_counter()
            await sender.event(mention(f"C{i % channels:03d}", f"U{i}", "two lookups please", ts))
            await asyncio.sleep(max(start + over_s * (i + 1) / mentions - time.perf_counter(), 0))
        await service.drain(120 + mentions)
        wall = time.perf_counter() - start
        stops = (await store.stats(3600)).stop_reasons
        await service.outbox.stop()
        await service.close_sessions()
        await server.stop()
        await store.close()
    await slack.server.stop()
    first = [first_seen[t] - sent[t] for t in sent if t in first_seen]
    done = [answered[t] - sent[t] for t in sent if t in answered]
    timeouts = stops.get("timeout", 0)
    return [Table(f"A burst: {mentions} mentions in {over_s:g} s over {channels} channels, default pacing, "
                  "Slack's limits enforced",
                  ["mentions", "answered", "timeouts", "first sign p50 (s)", "first sign p99 (s)",
                   "answer p50 (s)", "answer p99 (s)", "429s", "wall (s)"],
                  [[mentions, f"{len(answered)}/{mentions}", timeouts, statistics.median(first) if first else 0.0,
                    _p(first, 0.99), statistics.median(done) if done else 0.0, _p(done, 0.99), slack.rate_limited,
                    wall]],
                  [verdict("questions answered", len(answered), mentions, "", lower_is_better=False),
                   verdict("runs stopped by the time limit", timeouts, 0, "")])]


if __name__ == "__main__":
    for table in asyncio.run(run()):
        print(table.render())
