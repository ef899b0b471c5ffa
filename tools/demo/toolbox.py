"""The three demo tools, bound to a catalog, a runbook index and an in-memory restart backend."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.demo.catalog import Catalog
from tools.demo.docs import DocIndex
from tools.errors import NotFound, ParamsRequired
from tools.registry import ToolContext, ToolSpec, confirm_in, tool

DATA = Path(__file__).parent / "data"


class SearchResourceArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, description="service name, id or alias, in any language")


class SearchDocsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, description="what to look for in the runbooks, in any language")
    limit: int = Field(3, ge=1, le=10)


class RestartArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    service_id: str = Field(min_length=1, description="the service id from search_resource")
    environment: Literal["prod", "staging"] | None = Field(None, description="where to restart")
    reason: str = Field("", max_length=500, description="why, in one sentence")


@dataclass
class DemoRestarts:
    """In-memory restart backend: remembers what it restarted, so tests can count executions."""

    delay_s: float = 0.0
    done: list[dict[str, Any]] = field(default_factory=list)

    async def restart(self, service_id: str, environment: str, idempotency_key: str) -> dict[str, Any]:
        if any(d["idempotency_key"] == idempotency_key for d in self.done):
            return next(d for d in self.done if d["idempotency_key"] == idempotency_key)
        await asyncio.sleep(self.delay_s)
        record = {"service_id": service_id, "environment": environment, "rollout": "complete",
                  "restarted_at": time.strftime("%H:%M:%S"), "idempotency_key": idempotency_key}
        self.done.append(record)
        return record


@dataclass
class Toolbox:
    specs: list[ToolSpec]
    restarts: DemoRestarts
    catalog: Catalog


def build(data_dir: Path = DATA, restarts: DemoRestarts | None = None) -> Toolbox:
    catalog = Catalog.load(data_dir / "catalog.yml")
    docs = DocIndex.load(data_dir / "docs")
    backend = restarts or DemoRestarts()

    @tool(timeout_s=5)
    async def search_resource(args: SearchResourceArgs, ctx: ToolContext) -> dict[str, Any]:
        """Find services in the service catalog by name, id or alias (any language). Returns candidates
        with their ids, owning team, environments, runbooks and recent alerts."""
        hits = catalog.search(args.query)
        if not hits:
            known = ", ".join(s.id for s in catalog.services)
            raise NotFound(f"no service matches {args.query!r}; known services: {known}")
        candidates = [{"score": score, **s.model_dump(include={"id", "name", "team", "environments",
                                                               "runbooks", "recent_alerts"})}
                      for score, s in hits]
        return {"ambiguous": len(hits) > 1 and hits[0][0] == hits[1][0], "candidates": candidates}

    @tool(timeout_s=5)
    async def search_docs(args: SearchDocsArgs, ctx: ToolContext) -> dict[str, Any]:
        """Search the runbooks (Chinese and English) and return the best matching sections with
        their title, section heading and path."""
        hits = docs.search(args.query, args.limit)
        return {"results": [{"score": score, "title": s.title, "section": s.heading, "path": s.path,
                             "text": s.text} for score, s in hits]}

    @tool(mutating=True, confirm=confirm_in("prod"), timeout_s=60)
    async def restart_service(args: RestartArgs, ctx: ToolContext) -> dict[str, Any]:
        """Rolling-restart a service's deployment in one environment. Changes production state:
        a person must confirm it in prod."""
        service = catalog.get(args.service_id)
        if service is None:
            raise NotFound(f"unknown service id {args.service_id!r}; use search_resource first")
        if args.environment is None:
            raise ParamsRequired(f"choose the environment to restart {service.id} in",
                                 {"environment": service.environments})
        result = await backend.restart(service.id, args.environment, idempotency_key=ctx.call_id)
        return {**result, "confirmed_by": ctx.confirmed_by}

    return Toolbox([search_resource, search_docs, restart_service], backend, catalog)
