"""A worker that dies (os._exit) in the middle of a mutating call. Run by test_crash.py."""

from __future__ import annotations

import asyncio
import os
import sys

from pydantic import BaseModel

from bot.agent.deps import RunDeps
from bot.agent.engine import Engine, EngineOptions
from bot.agent.events import EventBus
from bot.agent.limits import Limits
from bot.agent.models.scripted import ScriptedModel, call, reply
from state import Keys, RedisStore, connect
from tools import ToolContext, tool
from tools.registry import Registry


class Target(BaseModel):
    service_id: str


@tool(description="Restarts, then the worker dies before it can record the outcome.", mutating=True)
async def restart_service(args: Target, ctx: ToolContext) -> dict[str, str]:
    sys.stdout.write("RESTARTING\n")
    sys.stdout.flush()
    os._exit(17)


async def main(redis_url: str, prefix: str) -> None:
    store = RedisStore(connect(redis_url), keys=Keys(prefix))
    model = ScriptedModel([reply("", call("restart_service", "crash1", service_id="payments"),
                                 call("restart_service", "crash2", service_id="orders"))])
    deps = RunDeps(model=model, registry=Registry.of([restart_service]), store=store, bus=EventBus(), limits=Limits())
    await Engine(deps, EngineOptions(lease_ttl_ms=300)).ask("crash-thread", "restart payments")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
