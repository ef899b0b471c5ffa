"""recent_changes backends: what changed for a service, when — Kubernetes rollout history (the deployment's
ReplicaSets) and CI/CD deploy events (a JSONL file or a URL answering JSON).

A change record is the same whatever its source, so the tool can merge sources and sort by time. A record that
cannot be read is counted, never guessed at; an unconfigured or unreachable source is reported as such, so
"nothing changed" is only ever said about sources that answered."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from tools.ops.catalog import Service
from tools.ops.http import Http
from tools.ops.series import iso
from tools.tool_errors import ToolError

_AT = ("at", "ts", "time", "timestamp", "created_at", "finished_at")
_SERVICE = ("service", "service_id", "app")
_ENV = ("environment", "env")
# A CI/CD record's kind, lower-cased; these other spellings are read as the kinds Kubernetes history uses too.
_KINDS = {"deployment": "deploy", "release": "deploy", "revert": "rollback", "undo": "rollback",
          "scaling": "scale", "configuration": "config", "redeploy": "restart"}


class NotConfigured(ToolError):
    code = "not_configured"


@dataclass(frozen=True)
class Change:
    at: float
    kind: str
    source: str
    version: str | None = None
    description: str | None = None
    author: str | None = None
    images: tuple[str, ...] = ()
    environment: str | None = None
    url: str | None = None
    note: str | None = None
    from_version: str | None = None
    to_version: str | None = None
    """A rollback's target revision, a scaling's replica count."""
    from_images: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    """What differs from the previous revision, by name ("env LOG_LEVEL changed") — never a value."""
    dated: str | None = None
    """``approximate`` or ``unknown`` when ``at`` is not the exact time the change took effect."""
    unscoped: bool = False
    """Its record names no environment: listed for every environment asked about, never known to be this one's."""
    status: str | None = None
    """How the event says it ended, when it says it did not succeed (``failed``, ``cancelled``…): whether any of it
    took effect is not known."""

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"at": iso(self.at), "kind": self.kind, "version": self.version,
                               "from_version": self.from_version, "to_version": self.to_version,
                               "description": self.description, "author": self.author,
                               "from_images": list(self.from_images), "images": list(self.images),
                               "changed": list(self.changed), "time": self.dated,
                               "environment": self.environment, "url": self.url, "note": self.note,
                               "status": self.status, "scope": "environment not stated" if self.unscoped else None,
                               "source": self.source}
        return {k: v for k, v in out.items() if v not in (None, [], "")}


@dataclass
class Found:
    """One source's answer: its changes for the service (any time: the tool picks the window) and how many of
    its records could not be read."""

    changes: list[Change] = field(default_factory=list)
    unreadable: int = 0
    notes: list[str] = field(default_factory=list)
    """What the answer needs said beside its changes (a paused deployment)."""


class ChangeSource(Protocol):
    name: str

    def serves(self, environment: str) -> bool: ...

    async def changes(self, service: Service, environment: str, start: float, end: float) -> Found: ...


def timestamp(value: Any) -> float | None:
    """Seconds since the epoch from an ISO 8601 time with its zone, or a number: seconds, or (as CI systems write
    them) milliseconds, microseconds or nanoseconds, told apart by size. None when it is no time."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if not math.isfinite(number) or number <= 0:
            return None
        for scale in (1e18, 1e15, 1e12):  # ns, µs, ms: a count of seconds that large is past the year 30,000
            if number >= scale:
                return number / (scale / 1e9)
        return number
    if not isinstance(value, str) or not value:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp.timestamp() if stamp.tzinfo is not None else None  # a time without a zone is not a time


def _first(record: dict[str, Any], keys: Iterable[str]) -> Any:
    return next((record[k] for k in keys if record.get(k) not in (None, "")), None)


def _text(value: Any, limit: int = 300) -> str | None:
    return None if value in (None, "") else str(value)[:limit]


def from_record(record: Any, service: Service, environment: str, source: str) -> Change | bool | None:
    """A CI/CD event as a change; ``False`` when it is not about this service and environment, ``None`` when
    it cannot be read (no time, no service)."""
    if not isinstance(record, dict):
        return None
    at, named = timestamp(_first(record, _AT)), _first(record, _SERVICE)
    if at is None or named is None:
        return None
    if str(named).lower() != service.id.lower():
        return False
    env = _first(record, _ENV)
    if env is not None and str(env).lower() != environment.lower():
        return False
    images = record.get("images") or ([record["image"]] if record.get("image") else [])
    kind = str(record.get("kind") or "deploy").strip().lower()[:40] or "deploy"
    changed = record.get("changed")
    return Change(at=at, kind=_KINDS.get(kind, kind), source=source,
                  from_version=_text(record.get("from_version"), 100),
                  to_version=_text(record.get("to_version"), 100),
                  changed=tuple(str(c)[:100] for c in changed if isinstance(c, str))[:20]
                  if isinstance(changed, list) else (),
                  version=_text(_first(record, ("version", "release", "revision", "tag")), 100),
                  description=_text(_first(record, ("description", "summary", "message", "title"))),
                  author=_text(_first(record, ("author", "by", "user", "actor")), 100),
                  images=tuple(str(i)[:200] for i in images if isinstance(i, str))[:10],
                  environment=_text(env, 50), url=_text(record.get("url"), 500), status=_unsuccessful(record),
                  unscoped=env is None)


_UNSUCCESSFUL = ("fail", "error", "cancel", "abort", "timed_out", "timeout", "rejected", "skipped")


def _unsuccessful(record: dict[str, Any]) -> str | None:
    """A CI event's own word that it did not succeed (GitHub's ``conclusion: failure``, GitLab's ``status:
    canceled``, Argo's ``phase: Error``); None when it says nothing of the kind."""
    for name in ("conclusion", "result", "outcome", "status", "state", "phase"):  # GitHub: status "completed" too
        said = record.get(name)
        word = said.strip().lower()[:40] if isinstance(said, str) else ""
        if any(w in word for w in _UNSUCCESSFUL):
            return word
    return None


def _collect(records: Iterable[Any], service: Service, environment: str, source: str) -> Found:
    found = Found()
    for record in records:
        change = from_record(record, service, environment, source)
        if change is None:
            found.unreadable += 1
        elif isinstance(change, Change):
            found.changes.append(change)
    return found


class Scoped:
    environments: list[str] | None = None

    def serves(self, environment: str) -> bool:
        return self.environments is None or environment.lower() in (e.lower() for e in self.environments)


class FileChanges(Scoped):
    """One JSON object per line: ``{"at": "2026-12-02T09:10:01Z", "service": "orders", "environment":
    "staging", "kind": "deploy", "version": "2026.12.02-1", "description": …, "author": …, "images": […]}``."""

    def __init__(self, path: Path, environments: list[str] | None = None) -> None:
        self.path = path
        self.name = f"deploy events ({path.name})"
        self.environments = environments

    async def changes(self, service: Service, environment: str, start: float, end: float) -> Found:
        try:
            text = await asyncio.to_thread(self.path.read_text, encoding="utf-8")
        except FileNotFoundError as exc:
            raise NotConfigured(f"no change history file at {self.path}") from exc
        except OSError as exc:
            raise ToolError(f"cannot read {self.path.name}: {exc.strerror}", code="upstream_error") from exc
        records: list[Any] = []
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    records.append(None)
        return _collect(records, service, environment, self.name)


class HttpChanges(Scoped):
    """``GET <url>?service=…&environment=…&since=…&until=…`` answering a JSON list of events, or an object with
    them under ``changes``, ``events`` or ``items``. The answer is filtered here too (a service may ignore the
    parameters)."""

    def __init__(self, http: Http, environments: list[str] | None = None) -> None:
        self.http = http
        self.name = f"deploy events ({http.name})"
        self.environments = environments

    async def changes(self, service: Service, environment: str, start: float, end: float) -> Found:
        body = await self.http.get("", {"service": service.id, "environment": environment,
                                        "since": iso(start) or "", "until": iso(end) or ""})
        if isinstance(body, dict):
            if any(body.get(k) not in (None, False, "", [], {}) for k in ("has_more", "next", "next_page",
                                                                         "next_cursor", "nextPageToken")):
                raise ToolError(f"{self.http.name} answered one page of several (it says there is more): OpsPilot "
                                "reads the window whole, in one answer", code="upstream_error")
            body = next((body[k] for k in ("changes", "events", "items") if isinstance(body.get(k), list)), None)
        if not isinstance(body, list):
            raise ToolError(f"{self.http.name} answered without a list of changes", code="upstream_error")
        return _collect(body, service, environment, self.name)


class DemoMade(Scoped):
    """What the demo's own backends did (restarts, rollbacks, scaling), in the change history as a real
    deployment's would show them: asked "what changed?" after a demo rollback, the answer has it. Times on the
    demo's clock (``now``), so they fall in the replayed window."""

    name = "OpsPilot's own changes (demo backends)"

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.made: list[tuple[str, str, Change]] = []

    def add(self, service_id: str, environment: str, kind: str, **fields: Any) -> None:
        self.made.append((service_id, environment, Change(at=self.now(), kind=kind, source=self.name,
                                                          environment=environment, author="OpsPilot", **fields)))

    async def changes(self, service: Service, environment: str, start: float, end: float) -> Found:
        # Newest first: the demo's clock may stand still, and a stable sort keeps ties in this order.
        return Found([c for sid, env, c in reversed(self.made)
                      if sid == service.id and env.lower() == environment.lower()])
