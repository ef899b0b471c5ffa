"""A Slack workspace in a box for tests: the fake Web API, the real app over HTTP, signed requests."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bot.agent.deps import RunDeps
from bot.agent.engine import Engine, EngineOptions
from bot.agent.events import EventBus
from bot.agent.limits import Limits
from bot.agent.models.base import ChatModel
from bot.assembly import Assembly
from bot.config import Settings, SlackConfig, SweepConfig
from bot.demo.local_server import LocalServer
from bot.demo.sender import SlackSender, block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.run_limits import UNLIMITED, RunLimits
from bot.slack.service import Role, SlackService, build_service
from core.messages import ToolResultMessage
from state import Keys, RedisStore, Ttls, connect
from tools import ops
from tools.registry import Registry, ToolSpec

log = logging.getLogger(__name__)

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0OPS"


@dataclass
class Workspace:
    slack: FakeSlack
    service: SlackService
    server: LocalServer
    sender: SlackSender
    toolbox: ops.Toolbox
    extra: list[Any] = field(default_factory=list)

    @property
    def store(self) -> RedisStore:
        store = self.service.core.store
        assert isinstance(store, RedisStore)
        return store

    async def settle(self, timeout_s: float = 20.0) -> None:
        """Wait until the app has no background work left (listeners run after the ack)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        quiet = 0
        while quiet < 3 and loop.time() < deadline:
            await asyncio.sleep(0.03)
            if self.service.busy() or await self.service.outbox.backlog():
                quiet = 0
                await self.service.drain(max(deadline - loop.time(), 0.1))
            else:
                quiet += 1
        await self.service.drain(1)

    async def stop(self) -> None:
        """Each step bounded: a test that passed never hangs in its teardown (one full run once did, after an
        outage test); a step that does not finish is logged with every task's stack and left behind."""
        steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [("settle", self.settle)]
        if self.service.worker is not None:
            steps.append(("worker", self.service.worker.stop))
        steps += [("outbox", self.service.outbox.stop), ("sessions", self.service.close_sessions),
                  ("server", self.server.stop), ("store", self.store.close)]
        for name, step in steps:
            task = asyncio.ensure_future(step())
            done, _ = await asyncio.wait({task}, timeout=90)
            if not done:
                stacks = "\n".join(f"{t.get_name()}: {t.get_stack(limit=8)}" for t in asyncio.all_tasks())
                log.error("workspace stop: %s did not finish in 90 s; tasks:\n%s", name, stacks)
            elif (error := task.exception()) is not None:
                raise error


def slack_settings(redis_url: str, prefix: str, api_url: str, **slack: Any) -> Settings:
    slack.setdefault("posts_per_second", 0)  # pacing has its own tests; here it would only slow things down
    slack.setdefault("progress", "update")  # streamed progress has its own tests (test_streaming.py)
    slack.setdefault("language", "en")  # the UI language has its own tests (test_language.py); others read English
    slack.setdefault("limits", UNLIMITED)  # run limits have their own tests (test_run_limits.py)
    slack.setdefault("progress_interval_s", 0.05)
    config = SlackConfig(bot_token="xoxb-test-token", signing_secret=SECRET, api_url=api_url, **slack)
    return Settings(redis_url=redis_url, key_prefix=prefix, slack=config)


async def open_workspace(redis_url: str, prefix: str, slack: FakeSlack, *, model: ChatModel | None = None,
                         specs: list[ToolSpec] | None = None, toolbox: ops.Toolbox | None = None,
                         limits: Limits | None = None, outage_grace_s: float = 30.0, role: Role = "all",
                         lease_ttl_ms: int = 30_000, stale_after_s: float = 45.0, run_limits: RunLimits | None = None,
                         **slack_config: Any) -> Workspace:
    if run_limits is not None:  # slack.limits (``limits`` is the engine's)
        slack_config["limits"] = run_limits
    settings = slack_settings(redis_url, prefix, slack.api_url, **slack_config)
    settings = settings.model_copy(update={"redis_outage_grace_s": outage_grace_s,
                                           "sweeps": SweepConfig(stale_after_s=stale_after_s)})
    toolbox = toolbox or ops.build()
    core: Assembly | None = None
    if model is not None:
        store = RedisStore(connect(redis_url, timeout_s=2.0), keys=Keys(prefix),
                           ttls=Ttls(interrupt_s=settings.interrupt_ttl_s), outage_grace_s=outage_grace_s)
        await store.ping()
        bus = EventBus()
        registry = Registry.of(specs if specs is not None else toolbox.specs)
        registry.know_environments(toolbox.catalog.environments)  # as build_registry does
        deps = RunDeps(model=model, registry=registry, store=store, bus=bus, limits=limits or Limits())
        options = EngineOptions(lease_wait_s=5, cancel_poll_s=0.05, lease_ttl_ms=lease_ttl_ms)
        core = Assembly.around(Engine(deps, options), store, model, toolbox)
    else:
        from bot.assembly import assemble

        core = await assemble(settings, fallback_store=False)
        core.toolbox.restarts.done.clear()
        toolbox = core.toolbox
    service = await build_service(settings, core=core, role=role)
    service.outbox.start()  # delivery runs as in production; sweeps and reminders are driven by the tests
    if service.worker is not None:
        service.worker.start()
    server = await LocalServer(service.web_app).start()
    return Workspace(slack, service, server, SlackSender(f"{server.url}/slack/events", SECRET), toolbox)


QUESTION = "看看支付服务最近报错，顺便对照一下文档里的处理建议"


def progress_of(slack: FakeSlack, thread_ts: str) -> dict:
    return copy.deepcopy(next(m for m in slack.thread(CHANNEL, thread_ts) if "step" in all_text(m)))


def card_of(slack: FakeSlack, thread_ts: str) -> dict:
    """A snapshot of the question card, as the clicking user's Slack client shows it."""
    return copy.deepcopy(next(m for m in slack.thread(CHANNEL, thread_ts)
                if any(b["action_id"] in ("opspilot_confirm", "opspilot_submit") for b in buttons(m))
                or "Confirmation" in all_text(m) or "I need a bit more" in all_text(m) or "Needed" in all_text(m)))


async def ask_restart(ws: Workspace, thread: str = "100.1", user: str = "UREQ", question: str = QUESTION) -> dict:
    await ws.sender.event(mention(CHANNEL, user, question, thread))
    await ws.settle()
    await ws.sender.event(message(CHANNEL, user, "restart it in prod", f"{thread}9", thread_ts=thread))
    await ws.settle()
    return card_of(ws.slack, thread)


def confirm(card: dict, user: str) -> dict:
    token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
    return block_action(user=user, channel=CHANNEL, message=card, action_id="opspilot_confirm", value=token)


async def restarted(ws: Workspace, thread: str = "100.1") -> dict[str, Any]:
    """The demo incident: a question, "restart it in prod", UAPPROVER confirms, the restart is verified."""
    ws.slack.post_as_user(CHANNEL, "UREQ", QUESTION, ts=thread)  # so that permalinks to it exist
    card = await ask_restart(ws, thread=thread)
    await ws.sender.action(confirm(card, "UAPPROVER"))
    await ws.settle()
    assert len(ws.toolbox.restarts.done) == 1
    transcript = await ws.store.load_transcript(f"slack:{CHANNEL}:{thread}")
    result = next(m for m in transcript if isinstance(m, ToolResultMessage) and m.name == "restart_service")
    data: dict[str, Any] = json.loads(result.content)["data"]
    return data
