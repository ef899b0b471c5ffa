"""An example plugin, as a team would write one: module-level tools plus an optional factory."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from tools import NotFound, ToolContext, ToolSpec, tool

ROTA = {"payments": "alice", "orders": "bob"}


class WhoArgs(BaseModel):
    service_id: str


@tool(description="Who is on call for a service.")
async def who_is_on_call(args: WhoArgs, ctx: ToolContext) -> dict[str, str]:
    if args.service_id not in ROTA:
        raise NotFound(f"no rota for {args.service_id}")
    return {"service_id": args.service_id, "on_call": ROTA[args.service_id]}


def opspilot_tools(config: dict[str, Any]) -> Iterable[ToolSpec]:
    @tool(name="page_oncall", description="Page the on-call engineer.", mutating=True, args=WhoArgs)
    async def page(args: WhoArgs, ctx: ToolContext) -> dict[str, str]:
        return {"paged": ROTA.get(args.service_id, "nobody")}

    return [page]
