"""End to end with the real thing: a metrics target scraped by a real Prometheus whose alerting rule fires into a
real Alertmanager, which posts to the fake Slack's incoming webhook; Slack sends the bot message to
`opspilot serve` (a real process, its toolbox's metrics backend that same Prometheus), which investigates in the
alert's thread."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.demo.sender import SlackSender, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from tests.conftest import free_port
from tests.monitoring import Alertmanager, MetricsTarget, Prometheus
from tests.slack_harness import SECRET

ALERTS = "C0ALERTS"
ERROR_RATE = 'sum(rate(http_requests_total{$labels,code=~"5.."}[5m])) / sum(rate(http_requests_total{$labels}[5m]))'


async def eventually(predicate: Any, timeout_s: float, shows: Any) -> None:
    for _ in range(int(timeout_s / 0.2)):
        if predicate():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"condition not met in {timeout_s:g}s: {shows()}")


@pytest.fixture
async def target() -> AsyncIterator[MetricsTarget]:
    metrics = MetricsTarget()
    await metrics.start()
    yield metrics
    await metrics.stop()


async def serve(slack: FakeSlack, redis_url: str, prefix: str, prometheus: str,
                cwd: Path) -> tuple[asyncio.subprocess.Process, int]:
    (cwd / "opspilot.yml").write_text(f"""toolbox:
  metrics:
    backend: prometheus
    url: {prometheus}
    queries: {{error_rate: '{ERROR_RATE}'}}
slack:
  alert_sources:
    - {{channel: {ALERTS}, bot_ids: [B0ALERTS], mode: investigate}}
""")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith(("OPSPILOT_",
                                                                                                    "SLACK_"))}
    env |= {"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.api_url,
            "PORT": str(port), "REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix, "OPSPILOT_DEMO_DATA": "1"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", env=env, cwd=cwd,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    await asyncio.wait_for(proc.stdout.readline(), 30)
    return proc, port


async def test_an_alert_from_prometheus_is_investigated_in_its_thread(
        slack: FakeSlack, redis_url: str, prefix: str, target: MetricsTarget, tmp_path: Path) -> None:
    alertmanager, prometheus = Alertmanager(), Prometheus()
    proc: asyncio.subprocess.Process | None = None
    try:
        await alertmanager.start(slack.add_webhook(ALERTS))
        await prometheus.start(target.server.url.removeprefix("http://") if target.server else "",
                               alertmanager.url)
        proc, port = await serve(slack, redis_url, prefix, prometheus.url, tmp_path)
        sender = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
        slack.deliver = sender.event

        def alerts() -> list[dict[str, Any]]:
            return [m for (c, _), m in sorted(slack.messages.items()) if c == ALERTS and m.get("bot_id") == "B0ALERTS"]

        def channel() -> str:
            return "\n---\n".join(f"{m['ts']} {m.get('thread_ts')}: {all_text(m)}"
                                  for (c, _), m in sorted(slack.messages.items()) if c == ALERTS)

        await eventually(lambda: any("[FIRING:1] PaymentsHighErrorRate" in _text(m) for m in alerts()), 60, channel)
        first = alerts()[0]
        thread = first["ts"]

        def replies() -> list[str]:
            return [all_text(m) for m in slack.thread(ALERTS, thread) if m["ts"] != thread]

        # The investigation: the alert's service found from its labels, its error rate read from Prometheus.
        await eventually(lambda: any("Payment Service" in r and "error rate" in r for r in replies()), 60, channel)
        answer = next(r for r in replies() if "Payment Service" in r and "error rate" in r)
        # 5 errors per 100 requests as the target serves them (4.76%); Prometheus' rate over a few scrapes of a
        # busy machine reads it a little either side: the figure is Prometheus', not the demo data's 4.3%.
        assert re.search(r"\b4\.[6-9]%", answer), answer
        # Alertmanager repeats the group while it fires: no second run, a line in the thread.
        await eventually(lambda: any("Fired again" in r for r in replies()), 60, channel)
        investigations = [r for r in replies() if "Payment Service" in r and "error rate" in r]
        assert len(investigations) == 1

        target.heal()  # the errors stop: the rule resolves, Alertmanager says so, the thread hears it
        await eventually(lambda: any("Resolved at" in r for r in replies()), 90, channel)
        assert any("[RESOLVED] PaymentsHighErrorRate" in _text(m) for m in alerts())

        # A person in the thread asks for the fix: proposed for the alert's service and environment, waiting.
        await sender.event(mention(ALERTS, "UONCALL", "restart it", f"{float(thread) + 50:.6f}", thread_ts=thread))
        await eventually(lambda: any(b["action_id"] == "opspilot_confirm" for m in slack.thread(ALERTS, thread)
                                     for b in buttons(m)), 60, channel)
        card = next(m for m in slack.thread(ALERTS, thread) if any(b["action_id"] == "opspilot_confirm"
                                                                    for b in buttons(m)))
        assert "restart_service" in all_text(card) and "`payments`" in all_text(card) and "`prod`" in all_text(card)
        assert [m for m in slack.thread(ALERTS, thread) if "Restarted" in all_text(m)] == []
    finally:
        if proc is not None and proc.returncode is None:
            proc.terminate()
            await proc.wait()
        prometheus.stop()
        alertmanager.stop()


def _text(message: dict[str, Any]) -> str:
    return " ".join(str(a.get("title") or a.get("fallback") or "") for a in message.get("attachments") or [])
