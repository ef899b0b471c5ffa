"""4. Slack economy: concurrent runs in ONE channel against a workspace that enforces Tier 3 on chat.update
(50 a minute) and about one chat.postMessage per second per channel. Web API calls per run, 429s, and
whether every final answer arrived and every progress message ended in its final state."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

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
from bot.demo.workspace import LocalSlack, all_text
from bot.run_limits import UNLIMITED
from bot.slack.service import build_service
from state import Keys, RedisStore, connect
from tools import ops
from tools.registry import Registry

CHANNEL, SECRET, TOOL_STEPS = "C0BUSY", "bench-secret", 2


async def run(runs: int = 50) -> list[Table]:
    slack = LocalSlack()
    slack.per_minute("chat.update", 50)
    slack.posts_per_channel(2, 2.0)
    await slack.server.start()
    async with isolated_redis() as url:
        prefix = f"bench-{uuid.uuid4().hex[:6]}"
        config = SlackConfig(bot_token=slack.token, signing_secret=SECRET, api_url=slack.api_url,
                             limits=UNLIMITED)
        settings = Settings(redis_url=url, key_prefix=prefix, slack=config)
        store = RedisStore(connect(url, timeout_s=60, max_connections=128), keys=Keys(prefix))
        model = ScriptedModel(steps_script(TOOL_STEPS), latency_s=0.2, strict=False, keep_requests=False)
        bus = EventBus()
        deps = RunDeps(model=model, registry=Registry.of(payload_tools(256, latency_s=0.05)), store=store,
                       bus=bus, limits=Limits(max_wall_time_s=3600))
        core = Assembly.around(Engine(deps, EngineOptions(lease_wait_s=60)), store, model, ops.build())
        service = await build_service(settings, core=core)
        service.outbox.start()
        server = await LocalServer(service.web_app).start()
        sender = SlackSender(f"{server.url}/slack/events", SECRET)
        start = time.perf_counter()
        threads = [f"{1000 + i}.0001" for i in range(runs)]
        await asyncio.gather(*(sender.event(mention(CHANNEL, f"U{i}", "two lookups please", ts))
                               for i, ts in enumerate(threads)))
        deadline = time.monotonic() + 60 + runs * 6
        while time.monotonic() < deadline:
            answered = sum(1 for ts in threads if any(m["text"] == "done" for m in slack.thread(CHANNEL, ts)))
            if answered == runs and not service.busy():
                break
            await asyncio.sleep(0.5)
        await service.drain(60)
        wall = time.perf_counter() - start
        calls = Counter(method for method, _ in slack.calls if method != "auth.test")
        answered = sum(1 for ts in threads if any(m["text"] == "done" for m in slack.thread(CHANNEL, ts)))
        final = sum(1 for ts in threads for m in slack.thread(CHANNEL, ts) if ":white_check_mark: Done" in all_text(m))
        await server.stop()
        await service.close_sessions()
        await store.close()
    await slack.server.stop()
    per_run = sum(calls.values()) / runs
    steps = TOOL_STEPS + 1
    return [Table(f"{runs} concurrent runs in one channel, Tier-3 chat.update and ~1 post/s/channel enforced",
                  ["runs", "steps per run", "Web API calls per run", "target (steps + 3)", "posts", "updates",
                   "429s", "final answers", "progress messages final", "wall (s)"],
                  [[runs, steps, per_run, steps + 3, calls["chat.postMessage"], calls["chat.update"],
                    slack.rate_limited, f"{answered}/{runs}", f"{final}/{runs}", wall]],
                  [verdict("Web API calls per run", per_run, steps + 3, ""),
                   f"final answers {answered}/{runs}, progress messages final {final}/{runs}"])]


if __name__ == "__main__":
    for table in asyncio.run(run()):
        print(table.render())
