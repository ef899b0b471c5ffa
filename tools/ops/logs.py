"""query_logs backends: Grafana Loki (``/loki/api/v1/query_range``) and local JSONL/text files.

Both return error lines; :func:`group` folds them into message patterns with counts and samples.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from tools.ops.catalog import Service
from tools.ops.http import Http
from tools.tool_errors import InvalidArguments, NotFound, UpstreamError

ERROR_LEVELS = {"error", "err", "fatal", "critical", "crit", "panic", "alert", "emerg"}
_TEXT_LINE = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\S+)\s+(?P<level>[A-Za-z]+)\s+(?P<msg>.*)$")
_NORMALISE = (
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"\b(?:0x)?[0-9a-f]{12,}\b", re.I), "<hex>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"\b\d+(?:\.\d+)?(?:ms|s|m|h|%)?\b"), "<n>"),
)


@dataclass(frozen=True)
class LogQuery:
    service: Service
    environment: str
    minutes: int
    contains: str | None = None
    limit: int = 1000


@dataclass(frozen=True)
class LogLine:
    ts: float
    level: str
    message: str
    labels: dict[str, str] = field(default_factory=dict)


class LogBackend(Protocol):
    def describe(self, q: LogQuery) -> str:
        """The query as the team would type it (LogQL, or the file read)."""

    async def errors(self, q: LogQuery) -> list[LogLine]: ...


def pattern(message: str) -> str:
    for regex, placeholder in _NORMALISE:
        message = regex.sub(placeholder, message)
    return message[:200]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def group(lines: Iterable[LogLine], samples: int = 3) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for line in sorted(lines, key=lambda ln: ln.ts):
        key = pattern(line.message)
        g = groups.setdefault(key, {"pattern": key, "count": 0, "first_seen": _iso(line.ts), "samples": []})
        g["count"] += 1
        g["last_seen"] = _iso(line.ts)
        if len(g["samples"]) < samples:
            g["samples"].append(line.message[:300])
    return sorted(groups.values(), key=lambda g: -int(g["count"]))


LAST_TS = 253_402_300_799.0  # 9999-12-31T23:59:59Z: a later time cannot be written as a date


def _parse_ts(value: Any) -> float | None:
    if isinstance(value, int | float):
        ts = float(value) / (1e9 if value > 1e15 else 1e3 if value > 1e11 else 1)
        return ts if 0 <= ts <= LAST_TS else None  # not a time: the line's own (Loki's) stands instead
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _loki_ts(ts_ns: Any) -> float:
    ts = int(ts_ns) / 1e9
    if not 0 <= ts <= LAST_TS:
        raise ValueError(f"a line's time {str(ts_ns)[:30]} ns is no date")
    return ts


def parse_line(raw: str, fallback_ts: float | None = None) -> LogLine | None:
    """A JSON log line ({ts|time|timestamp, level, msg|message}) or a text line ("<iso> LEVEL message")."""
    raw = raw.strip()
    if not raw:
        return None
    if raw.startswith("{"):
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if isinstance(body, dict):
            ts = _parse_ts(body.get("ts") or body.get("time") or body.get("timestamp")) or fallback_ts
            message = body.get("msg") or body.get("message") or raw
            level = str(body.get("level") or body.get("severity") or "").lower()
            return LogLine(ts or 0.0, level, str(message))
    match = _TEXT_LINE.match(raw)
    if match:
        ts = _parse_ts(match["ts"]) or fallback_ts or 0.0
        return LogLine(ts, match["level"].lower(), match["msg"])
    return LogLine(fallback_ts or 0.0, "", raw)


class LokiBackend:
    def __init__(self, http: Http, *, env_label: str = "env", error_filter: str = "(?i)(error|exception)") -> None:
        self.http = http
        self.env_label = env_label
        self.error_filter = error_filter

    def logql(self, q: LogQuery) -> str:
        selector = q.service.log_selector.strip() or f'{{app="{q.service.id}"}}'
        if not (selector.startswith("{") and selector.endswith("}")):
            raise InvalidArguments(f"the catalog's log selector for {q.service.id} is not a LogQL selector")
        inner = selector[1:-1].strip()
        env = f'{self.env_label}="{q.environment}"'
        query = "{" + (f"{inner}, {env}" if inner else env) + "}"
        query += f' |~ "{self.error_filter.replace(chr(34), chr(92) + chr(34))}"'
        if q.contains:
            query += ' |= "' + q.contains.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return query

    def describe(self, q: LogQuery) -> str:
        return self.logql(q)

    async def errors(self, q: LogQuery) -> list[LogLine]:
        end = time.time()
        params = {"query": self.logql(q), "start": str(int((end - q.minutes * 60) * 1e9)), "end": str(int(end * 1e9)),
                  "limit": str(q.limit), "direction": "backward"}
        body = await self.http.get("/loki/api/v1/query_range", params)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict):
            raise UpstreamError(f"Loki answered without a data object: {str(body)[:80]}")
        if data.get("resultType") != "streams":
            raise InvalidArguments("Loki answered without a streams result; is the query a log query?")
        lines: list[LogLine] = []
        try:
            for stream in data.get("result") or []:
                labels = {str(k): str(v) for k, v in (stream.get("stream") or {}).items()}
                for ts_ns, raw in stream.get("values") or []:
                    line = parse_line(str(raw), fallback_ts=_loki_ts(ts_ns))
                    if line is not None:
                        lines.append(LogLine(_loki_ts(ts_ns), line.level, line.message, labels))
        except (AttributeError, TypeError, ValueError) as exc:  # JSON, but not Loki's shape
            raise UpstreamError(f"Loki answered with streams this client cannot read ({exc})") from exc
        return lines


class FileBackend:
    """``<dir>/<service>-<env>.jsonl`` or ``.log``; reads at most the last 16 MiB of a file."""

    max_bytes = 16 * 1024 * 1024

    def __init__(self, root: Path, *, anchor: str = "latest") -> None:
        self.root = root
        self.anchor = anchor

    def _file(self, q: LogQuery) -> Path:
        for suffix in (".jsonl", ".log"):
            path = self.root / f"{q.service.id}-{q.environment}{suffix}"
            if path.is_file():
                return path
        raise NotFound(f"no log file for {q.service.id} in {q.environment} under {self.root}")

    def describe(self, q: LogQuery) -> str:
        where = self._file(q).name
        extra = f' containing "{q.contains}"' if q.contains else ""
        return f"error lines of {where} in the last {q.minutes} min{extra}"

    def _read(self, q: LogQuery) -> list[LogLine]:
        path = self._file(q)
        with path.open("rb") as handle:
            size = path.stat().st_size
            handle.seek(max(size - self.max_bytes, 0))
            text = handle.read().decode("utf-8", errors="replace")
        lines = [ln for ln in (parse_line(raw) for raw in text.splitlines()) if ln is not None]
        if not lines:
            return []
        end = max(ln.ts for ln in lines) if self.anchor == "latest" else time.time()
        start = end - q.minutes * 60
        picked = [ln for ln in lines if start <= ln.ts <= end and ln.level in ERROR_LEVELS]
        if q.contains:
            picked = [ln for ln in picked if q.contains.lower() in ln.message.lower()]
        return picked[-q.limit:]

    async def errors(self, q: LogQuery) -> list[LogLine]:
        return await asyncio.to_thread(self._read, q)
