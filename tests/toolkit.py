"""Small tools for tests, declared through the public @tool API."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from tools import ParamsRequired, ToolContext, confirm_in, tool
from tools.registry import ToolSpec


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid")
    q: str = "x"


class Change(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target: str
    environment: str = "staging"


@dataclass
class Probe:
    """Counts and orders what the test tools did."""

    log: list[str] = field(default_factory=list)
    started: dict[str, asyncio.Event] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def mark(self, name: str) -> None:
        self.log.append(name)
        self.started.setdefault(name, asyncio.Event()).set()

    def count(self, name: str) -> int:
        return self.log.count(name)


def toolkit(probe: Probe, *, slow_s: float = 0.0) -> dict[str, ToolSpec]:
    @tool(description="Read-only lookup A.")
    async def lookup_a(args: Query, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("lookup_a")
        await asyncio.sleep(slow_s)
        return {"a": args.q}

    @tool(description="Read-only lookup B.")
    async def lookup_b(args: Query, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("lookup_b")
        await asyncio.sleep(slow_s)
        return {"b": args.q}

    @tool(description="Always raises.")
    async def broken(args: Query, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("broken")
        raise RuntimeError("db password=hunter2 at /srv/app.py line 3")

    @tool(description="Asks the user for an environment.")
    async def needs_env(args: Query, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("needs_env")
        raise ParamsRequired("pick an environment", {"environment": ["prod", "staging"]})

    @tool(description="Waits until released.", timeout_s=30)
    async def blocker(args: Query, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("blocker")
        await probe.release.wait()
        return {"released": True}

    @tool(description="Changes something; prod needs confirmation.", mutating=True, confirm=confirm_in("prod"))
    async def change(args: Change, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("change")
        await asyncio.sleep(slow_s)
        return {"changed": args.target, "environment": args.environment, "by": ctx.confirmed_by}

    @tool(description="Another change.", mutating=True)
    async def change_b(args: Change, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("change_b")
        return {"changed": args.target}

    @tool(description="Times out.", timeout_s=0.05)
    async def sleepy(args: Query, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("sleepy")
        await asyncio.sleep(5)
        return {}

    return {s.name: s for s in (lookup_a, lookup_b, broken, needs_env, blocker, change, change_b, sleepy)}
