"""Alerts in the formats alerting tools post (real payloads in tests/fixtures/alerts/, sources in its README):
each read to its name, status, service, environment and severity, and investigated through the signed Bolt
endpoint; and the per-channel limit on automatic runs as a sliding window, on a real Redis and a Redis Cluster."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from bot.agent.models.scripted import ScriptedModel
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.alerts.parsing import parse
from bot.slack.inbound.thread_reader import message_text
from state import Keys, RedisStore
from state.meta_store import MemoryMeta
from tests.slack_harness import open_workspace
from tests.test_alerts import ALERTS, fire, notification, source
from tests.test_threads import answer, user_texts

FIXTURES = Path(__file__).parent / "fixtures" / "alerts"
FORMATS = ["alertmanager_default", "prometheus_docs", "grafana"]
EXPECTED = ("PaymentsHighErrorRate", "payments", "prod", "critical")  # name, service, environment, severity


def payload(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return body


def as_message(body: dict[str, Any]) -> dict[str, Any]:
    """The bot message Slack makes of a webhook body."""
    return {"text": body.get("text", ""), "attachments": body.get("attachments") or [],
            "username": body.get("username")}


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_is_read_to_name_status_service_environment_and_severity(fmt: str) -> None:
    firing = parse(as_message(payload(f"{fmt}_firing")), services={"payments", "orders"})
    resolved = parse(as_message(payload(f"{fmt}_resolved")), services={"payments", "orders"})
    assert firing is not None and resolved is not None
    assert (firing.status, resolved.status) == ("firing", "resolved")
    assert (firing.name, firing.service, firing.environment, firing.severity) == EXPECTED
    assert (resolved.name, resolved.service, resolved.environment, resolved.severity) == EXPECTED
    assert firing.key == resolved.key  # the resolution finds the firing alert's thread
    assert "It is about service `payments` and environment `prod`." in firing.question()


def test_bare_title_values_are_only_read_as_what_they_surely_are() -> None:
    body = as_message(payload("alertmanager_default_firing"))
    # The default title has values without their names: a service only when the toolbox knows it by that name.
    unknown = parse(body)
    assert unknown is not None
    assert (unknown.name, unknown.service, unknown.environment, unknown.severity) == \
        ("PaymentsHighErrorRate", None, "prod", "critical")
    two_envs = parse({"attachments": [{"title": "[FIRING:2] DiskFull (prod staging warning)"}]})
    assert two_envs is not None and two_envs.environment is None and two_envs.severity == "warning"
    custom = parse({"attachments": [{"title": "[FIRING:2] Monitoring Event Notification"}]})
    assert custom is not None and custom.name is None  # a custom title's first word is not an alert name
    grafana = as_message(payload("grafana_firing"))
    grafana["attachments"][0]["title"] = "[FIRING:1, RESOLVED:1] PaymentsHighErrorRate Payments (prod payments)"
    mixed = parse(grafana)
    assert mixed is not None and mixed.status == "firing" and mixed.count == 1


@pytest.mark.parametrize("fmt", FORMATS)
async def test_each_format_is_investigated_and_resolved_in_its_thread(redis_url: str, prefix: str,
                                                                      slack: FakeSlack, fmt: str) -> None:
    model = ScriptedModel(answer)
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[], alert_sources=[source()])
    slack.deliver = ws.sender.event
    try:
        hook = slack.add_webhook(ALERTS, username=payload(f"{fmt}_firing").get("username") or "Alertmanager")
        alert_ts = await fire(slack, hook, payload(f"{fmt}_firing"))
        await ws.settle()
        [asked] = user_texts(model)
        assert "It is about service `payments` and environment `prod`." in asked
        assert "Looked at it." in all_text(slack.thread(ALERTS, alert_ts)[-1])
        await fire(slack, hook, payload(f"{fmt}_resolved"))
        await ws.settle()
        assert "Resolved at" in all_text(slack.thread(ALERTS, alert_ts)[-1])
    finally:
        await ws.stop()


async def test_the_rate_limit_is_a_sliding_window(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """Two runs per 600 s: two just before a clock boundary (1200 s) and one just after it must not make three."""
    ws = await open_workspace(redis_url, prefix, slack, alert_sources=[source(max_runs=2, rate_window_s=600)])
    slack.deliver = ws.sender.event
    now = [1199.0]
    assert ws.service.inbound.alerts is not None
    ws.service.inbound.alerts.clock = lambda: now[0]
    try:
        hook = slack.add_webhook(ALERTS)

        async def alert(i: int, at: float) -> str:
            now[0] = at
            ts = await fire(slack, hook, notification("firing", name=f"Alert{i}"))
            await ws.settle()
            return ts

        def held(ts: str) -> bool:
            return any(b["action_id"] == "opspilot_investigate" for m in slack.thread(ALERTS, ts) for b in buttons(m))

        def storms() -> list[str]:
            return [str(m.get("text")) for m in slack.called("chat.postMessage") if "Many alerts" in str(m.get("text"))]

        first = [await alert(0, 1199.0), await alert(1, 1199.5)]
        assert (await ws.store.stats(3600)).runs == 2 and not any(map(held, first))
        assert held(await alert(2, 1201.0))  # a new clock window, but two started in the last 600 s
        assert len(storms()) == 1 and "until 00:29 UTC" in storms()[0]  # when the 1199 s start leaves the window
        assert held(await alert(3, 1798.9))
        assert not held(await alert(4, 1799.0)) and (await ws.store.stats(3600)).runs == 3  # 1199 s has left
        assert held(await alert(5, 1799.4)) and len(storms()) == 1  # told once per window, not per alert
    finally:
        await ws.stop()


async def test_no_window_ever_holds_more_than_the_limit(store: RedisStore) -> None:
    """Random start attempts against Redis and the in-memory store: the same answers, and in every window of
    ``window_s`` at most ``limit`` admitted; a retried member counts once."""
    rng = random.Random(25)
    memory = MemoryMeta()
    times = sorted(round(rng.uniform(0, 100), 3) for _ in range(120))
    admitted: list[float] = []
    for i, at in enumerate(times):
        kwargs: dict[str, Any] = {"limit": 3, "window_s": 10.0, "now": at}
        got, mem = await store.meta.admit("w", f"m{i}", **kwargs), await memory.admit("w", f"m{i}", **kwargs)
        assert (got.admitted, got.first_refusal) == (mem.admitted, mem.first_refusal)
        assert got.free_at == pytest.approx(mem.free_at)
        if got.admitted:
            admitted.append(at)
            assert (await store.meta.admit("w", f"m{i}", **kwargs)).admitted  # a retry: the same start
            assert (await memory.admit("w", f"m{i}", **kwargs)).admitted
        else:
            assert at < got.free_at <= at + 10.0
    assert all(sum(1 for t in admitted if start <= t < start + 10.0) <= 3 for start in admitted)
    assert len(admitted) > 3 * 5  # the window reopens as time goes on


async def test_the_window_lives_in_one_slot_of_a_cluster(cluster_store: RedisStore) -> None:
    keys = Keys(cluster_store.keys.prefix)
    assert key_slot(keys.window("alert-runs:C0ALERTS").encode()) == \
        key_slot(keys.window_held("alert-runs:C0ALERTS").encode())
    answers = [await cluster_store.meta.admit("alert-runs:C0ALERTS", f"m{i}", limit=2, window_s=60, now=1000.0 + i)
               for i in range(4)]
    assert [a.admitted for a in answers] == [True, True, False, False]
    assert [a.first_refusal for a in answers] == [False, False, True, False] and answers[2].free_at == 1060.0
    assert await cluster_store.client.pttl(keys.window("alert-runs:C0ALERTS")) > 0  # it expires by itself


def test_a_huge_alert_is_read_in_linear_time() -> None:
    """One 40,000-character word in an annotation held the event loop 10 s (every server's request waiting), and
    each redelivery again: a name=\"value\" pair was looked for at every position inside the word."""
    for word in ("x", "错", " "):  # (a run of spaces inside a value was cubic: 2,500 held the loop 13 s)
        text = "[FIRING:1] PaymentsHighErrorRate\n*Labels:*\n• service: payments\n*Annotations:*\n• description: "
        small, large = ({"text": text + "see " + word * n + "end"} for n in (4_000, 40_000))
        start = time.process_time()
        parse(small)
        base = time.process_time() - start
        start = time.process_time()
        alert = parse(large)
        assert alert is not None and alert.service == "payments"
        assert time.process_time() - start < max(50 * base, 0.5)  # linear: ~10×; quadratic was ~100×
    for title in ("[FIRING:1] ", "ALERT firing: "):  # a title line of unclosed "(": every one tried again, ~2 s
        small, large = ({"text": title + "(" * n + "\n• service: payments"} for n in (4_000, 40_000))
        start = time.process_time()
        parse(small)
        base = time.process_time() - start
        start = time.process_time()
        parse(large)
        assert time.process_time() - start < max(50 * base, 0.5), title


def test_an_alert_laid_out_in_blocks_is_read() -> None:
    """Blocks are what Slack shows (its text only the notification's fallback), in the message or in a coloured
    attachment: their service and environment were never read, the investigation's question naming neither."""
    detail = [{"type": "header", "text": {"type": "plain_text", "text": "[FIRING:1] PaymentsHighErrorRate"}},
              {"type": "section", "text": {"type": "mrkdwn", "text": "• service: `payments`\n• environment: `prod`"},
               "accessory": {"type": "button", "text": {"type": "plain_text", "text": "Silence"}}}]
    for message in ({"text": "Alert firing: PaymentsHighErrorRate", "blocks": detail},
                    {"attachments": [{"color": "#D63232", "fallback": "firing", "blocks": detail}]}):
        alert = parse(message, services={"payments"})
        assert alert is not None and (alert.status, alert.service, alert.environment) == ("firing", "payments", "prod")
        assert "Silence" not in message_text(message)  # a button's label is not what the message says


def test_typed_text_beside_a_footer_is_read() -> None:
    """Rich text (a client's, Workflow Builder's) with a context footer was read as the footer alone."""
    body = "payments-api in prod: 502s since 10:02"
    section = {"type": "rich_text_section", "elements": [{"type": "text", "text": body}]}
    message = {"text": body, "blocks": [
        {"type": "rich_text", "elements": [section]},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "Sent with Workflow Builder"}]}]}
    assert message_text(message) == f"{body}\nSent with Workflow Builder"
    assert message_text({**message, "text": ""}).startswith(body)


def test_a_chinese_template_s_recovery_is_a_resolution_of_the_same_alert() -> None:
    """"【恢复】…" was read as firing (its 告警级别: critical a firing word, 恢复 none), in a group of its own: a
    second investigation started for an alert that had just recovered, and "已恢复" was never said."""
    firing = parse({"text": "【告警】支付服务错误率过高\n告警级别: critical\n服务: payments"})
    recovered = parse({"text": "【恢复】支付服务错误率过高\n告警级别: critical\n服务: payments"})
    assert firing is not None and recovered is not None
    assert (firing.status, recovered.status) == ("firing", "resolved") and firing.group == recovered.group


def test_a_grouped_notification_of_two_services_names_neither_as_its_one() -> None:
    """Two alerts of one group, payments and orders: read as about payments (the first listed), and a later
    "restart it" proposed payments."""
    grouped = {"username": "Alertmanager", "attachments": [{
        "title": "[FIRING:2] HighErrorRate (prod critical)", "fallback": "[FIRING:2] HighErrorRate (prod critical)",
        "text": "*Alert:* 5xx above 2% - `critical`\n*Details:*\n • *alertname:* `HighErrorRate`\n"
                " • *service:* `payments`\n • *environment:* `prod`\n"
                "*Alert:* 5xx above 2% - `critical`\n*Details:*\n • *alertname:* `HighErrorRate`\n"
                " • *service:* `orders`\n • *environment:* `prod`\n"}]}
    alert = parse(grouped)
    assert alert is not None and alert.service is None and alert.environment == "prod"  # the same in both: kept


def test_grafana_s_resolved_count_is_read() -> None:
    alert = parse({"text": "[FIRING:1, RESOLVED:1] PaymentsHighErrorRate (payments prod)"})
    assert alert is not None and (alert.status, alert.count, alert.resolved) == ("firing", 1, 1)
    assert alert.group == parse({"text": "[FIRING:2] PaymentsHighErrorRate (payments prod)"}).group  # type: ignore[union-attr]


@pytest.mark.parametrize("text", [
    "【告警】数据库主从同步未恢复", "Triggered: Replica not recovered after failover on db1",
    "Triggered: High latency on payments\nsummary: was [RESOLVED] yesterday, back since"])
def test_a_firing_alert_that_names_a_resolution_is_still_firing(text: str) -> None:
    """"Not recovered" / "未恢复", or "[RESOLVED]" quoted in its summary, made a firing alert resolved: nobody looked
    into it, and a group that had a thread was told "Resolved at"."""
    alert = parse({"text": text, "bot_id": "B0ALERTS"})
    assert alert is not None and alert.status == "firing", alert
    assert "未恢复" in alert.group or "not recovered" in alert.group or "latency" in alert.group, alert.group
