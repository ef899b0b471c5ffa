"""The demo service catalog: forgiving lookup by id, name or alias, in any language."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from tools.demo.text import terms


class Service(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    name: str
    aliases: list[str] = Field(default_factory=list)
    team: str = ""
    environments: list[str] = Field(default_factory=list)
    runbooks: list[str] = Field(default_factory=list)
    recent_alerts: list[dict[str, Any]] = Field(default_factory=list)


class Catalog:
    def __init__(self, services: list[Service]) -> None:
        self.services = services

    @classmethod
    def load(cls, path: Path) -> Catalog:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return cls([Service.model_validate(s) for s in raw.get("services", [])])

    def get(self, service_id: str) -> Service | None:
        return next((s for s in self.services if s.id == service_id), None)

    def search(self, query: str) -> list[tuple[float, Service]]:
        q = query.strip().lower()
        q_terms = set(terms(q))
        scored: list[tuple[float, Service]] = []
        for service in self.services:
            names = [service.id, service.name, *service.aliases]
            best = 0.0
            for name in (n.lower() for n in names):
                if q == name:
                    best = max(best, 1.0)
                elif name in q or q in name:
                    best = max(best, 0.8)
                else:
                    name_terms = set(terms(name))
                    if name_terms and q_terms:
                        best = max(best, 0.6 * len(name_terms & q_terms) / len(name_terms))
            if best >= 0.3:
                scored.append((round(best, 2), service))
        return sorted(scored, key=lambda pair: -pair[0])
