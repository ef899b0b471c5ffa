"""A real Prometheus and a real Alertmanager (Debian's packages, installed by scripts/system-deps.sh), each on
free ports in a temporary directory, and a metrics target the test controls."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from bot.demo.local_server import LocalServer
from tests.conftest import free_port

RULES = """groups:
  - name: payments
    interval: 1s
    rules:
      - alert: PaymentsHighErrorRate
        expr: >-
          sum by (service, env) (rate(http_requests_total{code=~"5.."}[5s]))
          / sum by (service, env) (rate(http_requests_total[5s])) > 0.02
        labels: {severity: critical}
        annotations:
          summary: "{{ $labels.service }} answers more than 2% 5xx"
"""

# A common Slack template: the default title, then every label and annotation as "name: value" lines.
SLACK_TEXT = """{{ range .Alerts }}*Labels:*
{{ range .Labels.SortedPairs }}• {{ .Name }}: `{{ .Value }}`
{{ end }}*Annotations:*
{{ range .Annotations.SortedPairs }}• {{ .Name }}: {{ .Value }}
{{ end }}{{ end }}"""


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: apt-get install {name} (scripts/system-deps.sh does this)")
    return path


@dataclass
class MetricsTarget:
    """payments-api's request counters in prod, growing linearly: ``errors_per_s`` 5xx per 100 2xx."""

    errors_per_s: float = 5.0
    _errors: float = 0.0
    _last: float = field(default_factory=time.monotonic)
    server: LocalServer | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self.server = await LocalServer(app).start()
        return self.server.url.removeprefix("http://")

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()

    def _advance(self) -> float:
        now = time.monotonic()
        self._errors += (now - self._last) * self.errors_per_s
        self._last = now
        return now

    async def _metrics(self, request: web.Request) -> web.Response:
        now = self._advance()
        # Unrounded (a counter may be fractional): both series grow linearly, so any two scrapes give Prometheus
        # exactly 5 errors per 100 successes, however few and however spaced (whole numbers made it 4.5–5.5 %).
        body = ("# TYPE http_requests_total counter\n"
                f'http_requests_total{{service="payments-api",env="prod",code="200"}} {now * 100:.3f}\n'
                f'http_requests_total{{service="payments-api",env="prod",code="500"}} {self._errors:.3f}\n')
        return web.Response(text=body, content_type="text/plain")

    def heal(self) -> None:
        self._advance()
        self.errors_per_s = 0.0


class _Process:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="opspilot-monitoring-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, args: list[str]) -> None:
        log = (self.dir / "log").open("wb")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)

    async def ready(self, path: str) -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(self.url + path) as response:
                        if response.status == 200:
                            return
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.proc.args[0]} exited: {(self.dir / 'log').read_text()[-2000:]}")
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.url} did not become ready: {(self.dir / 'log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Alertmanager(_Process):
    async def start(self, slack_webhook: str) -> None:
        (self.dir / "alertmanager.yml").write_text(f"""route:
  receiver: slack
  group_by: [alertname, service]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 4s
receivers:
  - name: slack
    slack_configs:
      - api_url: {slack_webhook}
        send_resolved: true
        username: Alertmanager
        text: '{SLACK_TEXT.replace("'", "''")}'
""")
        self._spawn([binary("prometheus-alertmanager"), f"--config.file={self.dir / 'alertmanager.yml'}",
                     f"--storage.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                     "--cluster.listen-address="])
        await self.ready("/-/ready")


class Prometheus(_Process):
    async def start(self, target: str, alertmanager: str) -> None:
        (self.dir / "rules.yml").write_text(RULES)
        (self.dir / "prometheus.yml").write_text(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [{self.dir / 'rules.yml'}]
alerting:
  alertmanagers:
    - static_configs: [{{targets: ['{alertmanager.removeprefix("http://")}']}}]
scrape_configs:
  - job_name: payments
    static_configs: [{{targets: ['{target}']}}]
""")
        self._spawn([binary("prometheus"), f"--config.file={self.dir / 'prometheus.yml'}",
                     f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"])
        await self.ready("/-/ready")

    async def has_points(self, query: str, timeout_s: float = 60.0) -> None:
        """Wait until ``query`` returns a sample: a rate needs two scrapes, and a busy machine scrapes late."""
        async with aiohttp.ClientSession() as session:
            for _ in range(int(timeout_s / 0.2)):
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(self.url + "/api/v1/query", params={"query": query}) as response:
                        if response.status == 200 and (await response.json())["data"]["result"]:
                            return
                await asyncio.sleep(0.2)
        raise AssertionError(f"Prometheus has no points for {query} after {timeout_s} s")
