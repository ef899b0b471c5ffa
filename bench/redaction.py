"""Redaction of a tool result: CPU per result, every pattern run against the gated run (a pattern runs only where
its gate says it could match: a literal it needs, a secret word in any case, a base64 run, a phone number's
shape). Tool results are what an ops bot reads all day — log lines, a metrics query's JSON, a runbook — and
every one is redacted before the model, Redis or Slack sees it. The two runs must give the same text: a
difference is a bug in a gate, and the benchmark stops on it."""

from __future__ import annotations

import json
import random
import statistics
import time

from bench.common import Table
from core.redact import _redact

_PODS = ("payments-api-7d9f8b6c5-x2k9p", "orders-6c8d9f7b4-qq7lm", "ledger-5b7c9d8f6-zt4kp", "gateway-84f6b7c9d-m2n8r")
_MESSAGES = ("upstream timeout after {n}ms calling ledger-svc.prod.svc.cluster.local:8443 status=504 retry=2",
             "GET /api/v1/orders/{n} 200 {m}ms", "connection pool exhausted (active=64, idle=0, waiting={m})",
             "slow query took {n}ms: SELECT * FROM charges WHERE id = {m}", "circuit breaker opened for ledger-svc",
             "deploy payments@3f786850e387550fdab836ed7e6dc881de23001b rolled out ({m}/{m} pods ready)")


def _log(rng: random.Random, size: int, secret_every: int = 0) -> str:
    lines: list[str] = []
    while sum(map(len, lines)) < size:
        message = rng.choice(_MESSAGES).format(n=rng.randint(100, 99_999), m=rng.randint(1, 500))
        lines.append(f"2026-12-04T09:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z "
                     f"{rng.choice(('INFO ', 'WARN ', 'ERROR'))} {rng.choice(_PODS)} "
                     f"[req-{rng.getrandbits(64):016x}] {message}")
        if secret_every and len(lines) % secret_every == 0:
            lines.append("2026-12-04T09:12:00.000Z ERROR payments-api boto: aws_secret_access_key="
                         "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY rejected")
    return "\n".join(lines)


def _metrics(rng: random.Random, size: int) -> str:
    series: list[dict[str, object]] = []
    while len(json.dumps(series)) < size:
        series.append({"metric": {"__name__": "http_requests_total", "service": "payments-api", "env": "prod",
                                  "code": rng.choice(("200", "500", "503")), "pod": rng.choice(_PODS)},
                       "value": [1796394142.553 + len(series), f"{rng.random() * 100:.4f}"]})
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": series}})


def _runbook(size: int) -> str:
    para = ("支付服务报错时，先看最近一次发布和数据库连接池。若错误率超过 5%，按第 3 节回滚；"
            "不要在高峰期重启 ledger，先联系值班 DBA。")
    return (para * (size // len(para.encode()) + 1))[: size // 3]


def _cpu_ms(text: str, gated: bool, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        _redact(text, gated=gated)
        samples.append((time.process_time() - start) * 1000)
    return float(statistics.median(samples))


async def run(size: int = 20_000, repeats: int = 40) -> list[Table]:
    rng = random.Random(39)
    contents = {
        "log lines": _log(rng, size),
        "log lines, a secret every 20 lines": _log(rng, size, secret_every=20),
        "a metrics query's JSON": _metrics(rng, size),
        "a runbook in Chinese": _runbook(size),
    }
    rows = []
    for name, text in contents.items():
        if _redact(text) != _redact(text, gated=False):
            raise AssertionError(f"redaction with gates differs from every pattern on {name!r}: a gate is wrong")
        every, gated = _cpu_ms(text, False, repeats), _cpu_ms(text, True, repeats)
        rows.append([name, len(text.encode()), every, gated, every / gated])
    notes = [f"CPU time per result (ms), median of {repeats} (each content with every pattern, then gated); the "
             "same text comes out of both (checked on each content before timing)",
             "a result of 200 characters or less (names, ids, arguments) is looked up in a cache first: not timed here"]
    return [Table(f"Redaction of one tool result (~{size // 1000} KB), every pattern against the gated run",
                  ["content", "bytes", "every pattern (ms)", "gated (ms)", "every / gated"], rows, notes)]
