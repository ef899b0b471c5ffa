"""The service catalog (a YAML file): forgiving lookup by id, name or alias, in any language."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.ops.text import terms


class Kubernetes(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace: str
    deployment: str


class Service(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    name: str
    aliases: list[str] = Field(default_factory=list)
    team: str = ""
    environments: list[str] = Field(default_factory=lambda: ["prod"])
    kubernetes: Kubernetes | None = None
    log_selector: str = Field("", description='LogQL stream selector, e.g. {app="payments"}')
    metric_labels: dict[str, str] = Field(default_factory=dict, description="substituted into PromQL templates")
    runbooks: list[str] = Field(default_factory=list)
    recent_alerts: list[dict[str, Any]] = Field(default_factory=list)

    def card(self) -> dict[str, Any]:
        """What the model sees about a service."""
        return self.model_dump(exclude_none=True, exclude_defaults=False)


class CatalogError(Exception):
    pass


class Catalog:
    def __init__(self, services: list[Service]) -> None:
        ids = [s.id for s in services]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise CatalogError(f"duplicate service ids in the catalog: {', '.join(duplicates)}")
        self.services = services

    @classmethod
    def load(cls, path: Path) -> Catalog:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise CatalogError(f"cannot read the service catalog {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise CatalogError(f"the service catalog {path} is not valid YAML: {exc}") from exc
        entries = raw.get("services") if isinstance(raw, dict) else None
        if not isinstance(entries, list):
            raise CatalogError(f"the service catalog {path} needs a top-level 'services:' list")
        services = []
        for i, entry in enumerate(entries):
            try:
                services.append(Service.model_validate(entry))
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                where = ".".join(str(p) for p in err["loc"])
                raise CatalogError(f"the service catalog {path} is invalid at services[{i}].{where}: "
                                   f"{err['msg']}") from exc
        return cls(services)

    def get(self, service_id: str) -> Service | None:
        return next((s for s in self.services if s.id == service_id), None)

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.services]

    @property
    def environments(self) -> list[str]:
        return sorted({e for s in self.services for e in s.environments})

    def search(self, query: str) -> list[tuple[float, Service]]:
        q = query.strip().lower()
        q_terms = set(terms(q))
        scored: list[tuple[float, Service]] = []
        for service in self.services:
            best = 0.0
            for name in (n.lower() for n in [service.id, service.name, *service.aliases]):
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
