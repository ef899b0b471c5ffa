"""query_metrics backends: the Prometheus HTTP API and YAML fixtures (described by ``tools.ops.series``)."""

from __future__ import annotations

import asyncio
import math
import string
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import yaml

from tools.ops.catalog import Service
from tools.ops.http import Http
from tools.tool_errors import InvalidArguments, NotFound, UpstreamError

Series = list[tuple[float, float]]


class Points(list[tuple[float, float]]):
    """A series with what its backend warned about it (Prometheus' ``warnings``: a partial response, a store
    unavailable): the figures stand on part of the data, and the answer says so."""

    warnings: tuple[str, ...] = ()


class Reading(float):
    """One value with what its backend warned about it (as :class:`Points`)."""

    warnings: tuple[str, ...] = ()


def _warnings(body: dict[str, Any]) -> tuple[str, ...]:
    warned = body.get("warnings")
    return tuple(w[:200] for w in (warned if isinstance(warned, list) else [warned])[:3]
                 if isinstance(w, str) and w.strip())


_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class MetricsBackend(Protocol):
    names: list[str]

    def is_counter(self, metric: str) -> bool: ...

    def describe(self, service: Service, environment: str, metric: str) -> str: ...

    async def series(self, service: Service, environment: str, metric: str, minutes: int) -> Series: ...

    async def current(self, service: Service, environment: str, metric: str) -> float | None: ...

    def span(self, minutes: int) -> tuple[float, float, float] | None:
        """The window a series of ``minutes`` is asked for (start, end, step), so that points missing at its
        edges are counted; None where the data is its own window (fixtures)."""


class PrometheusBackend:
    def __init__(self, http: Http, *, queries: dict[str, str], env_label: str = "env", step_s: int = 60,
                 counters: list[str] | None = None) -> None:
        self.http = http
        self.queries = queries
        self.names = list(queries)
        self.env_label = env_label
        self.step_s = step_s
        self.counters = set(counters or ())

    def is_counter(self, metric: str) -> bool:
        return metric in self.counters or metric.endswith("_total")

    def describe(self, service: Service, environment: str, metric: str) -> str:
        template = self.queries.get(metric)
        if template is None:
            raise InvalidArguments(f"unknown metric {metric!r}; configured: {', '.join(self.queries)}")
        return self.render(template, service, environment)

    def render(self, template: str, service: Service, environment: str) -> str:
        """A PromQL template with the service's and the environment's labels put in."""
        labels = {**service.metric_labels, self.env_label: environment}
        k8s = service.kubernetes
        return string.Template(template).safe_substitute(
            labels=",".join(f'{k}="{v}"' for k, v in labels.items()), env=environment, service=service.id,
            namespace=k8s.namespace if k8s else service.id, deployment=k8s.deployment if k8s else service.id)

    def span(self, minutes: int) -> tuple[float, float, float]:
        end = time.time()
        return end - minutes * 60, end, float(self.step_s)

    async def series(self, service: Service, environment: str, metric: str, minutes: int) -> Series:
        start, end, _ = self.span(minutes)
        body = await self.http.get("/api/v1/query_range", {
            "query": self.describe(service, environment, metric), "start": f"{start:.3f}",
            "end": f"{end:.3f}", "step": f"{self.step_s}s"})
        result = _one(_result(body, "matrix"), metric)
        points = Points()
        points.warnings = _warnings(body)
        try:
            points.extend((float(t), _number(v)) for t, v in (result or {}).get("values") or [])
        except (TypeError, ValueError) as exc:
            raise UpstreamError(f"Prometheus answered with a matrix this client cannot read ({exc})") from exc
        return points

    async def instant(self, query: str) -> list[dict[str, Any]]:
        """An instant query's series (``opspilot check``'s questions about the data itself)."""
        return _result(await self.http.get("/api/v1/query", {"query": query}), "vector")

    async def current(self, service: Service, environment: str, metric: str) -> float | None:
        body = await self.http.get("/api/v1/query", {"query": self.describe(service, environment, metric)})
        result = _one(_result(body, "vector"), metric)
        value = result.get("value") if result is not None else None
        if result is None:
            return None
        if not isinstance(value, list) or len(value) != 2:
            raise UpstreamError(f"Prometheus answered with a vector this client cannot read ({str(value)[:80]})")
        reading = Reading(_number(value[1]))
        reading.warnings = _warnings(body)
        return reading


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _result(body: Any, kind: str) -> list[dict[str, Any]]:
    if not isinstance(body, dict) or body.get("status") != "success":
        raise UpstreamError(f"Prometheus answered without success: {str(body)[:200]}")
    data = body.get("data")
    if not isinstance(data, dict):
        raise UpstreamError(f"Prometheus answered without a data object: {str(data)[:80]}")
    if data.get("resultType") != kind:
        raise InvalidArguments(f"expected a {kind} result from Prometheus, got {data.get('resultType')!r}")
    result = data.get("result") or []
    if not isinstance(result, list) or not all(isinstance(r, dict) for r in result):
        raise UpstreamError(f"Prometheus answered with a {kind} this client cannot read: {str(result)[:80]}")
    return result


def _one(result: list[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """The one series a metric's query must return: of several, any one alone would be a wrong figure."""
    if len(result) > 1:
        labels = ", ".join(str(r.get("metric") or {}) for r in result[:3])
        raise InvalidArguments(f"the query for {metric} returns {len(result)} series ({labels}…), not one: aggregate "
                               "it in toolbox.metrics (e.g. sum(…) or max(…))")
    return result[0] if result else None


class FixtureBackend:
    """``metrics.yml``: ``<service>: <env>: <metric>: [values…]`` at one-minute steps ending now; an optional
    ``after_restart:`` block gives what the series reads once the demo restart backend restarted that service: its
    last value becomes now's point. (A replayed clock stands still: the restart happened "now", so only now's point
    can be after it, and the rest of the window — the errors' onset too — is as it was.) A metric named ``*_total``
    is a raw counter. The last point is at ``now()`` (a replayed dataset's clock)."""

    def __init__(self, path: Path, now: Callable[[], float] = time.time) -> None:
        self.path = path
        self.now = now
        try:
            # libyaml's safe loader where PyYAML has it: the fixtures are the bulk of a demo worker's start (~35 ms)
            self.data: dict[str, Any] = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"cannot load metrics fixtures {path}: {exc}") from exc
        self.names = sorted({m for envs in self.data.values() for env in envs.values() for m in env
                             if m != "after_restart"})
        self.restarted: set[tuple[str, str]] = set()

    def is_counter(self, metric: str) -> bool:
        return metric.endswith("_total")

    def describe(self, service: Service, environment: str, metric: str) -> str:
        return f"fixture {self.path.name}: {service.id}/{environment}/{metric}"

    def _values(self, service: Service, environment: str, metric: str) -> list[float]:
        env = (self.data.get(service.id) or {}).get(environment)
        if env is None:
            raise NotFound(f"no metrics for {service.id} in {environment}")
        if metric not in env:
            raise InvalidArguments(f"unknown metric {metric!r}; known: {', '.join(self.names)}")
        values = [float(v) for v in env[metric]]
        after = (env.get("after_restart") or {}).get(metric) if (service.id, environment) in self.restarted else None
        return [*values[:-1], float(after[-1])] if after else values

    async def series(self, service: Service, environment: str, metric: str, minutes: int) -> Series:
        values = self._values(service, environment, metric)[-minutes:]
        now = self.now()
        await asyncio.sleep(0)
        return [(now - (len(values) - 1 - i) * 60, v) for i, v in enumerate(values)]

    async def current(self, service: Service, environment: str, metric: str) -> float | None:
        values = self._values(service, environment, metric)
        return values[-1] if values else None

    def span(self, minutes: int) -> None:
        return None
