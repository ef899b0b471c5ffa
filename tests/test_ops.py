"""The ops toolbox: each tool against its real-protocol test server and against the demo dataset."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from core.messages import ToolCall
from state import MemoryStore
from tests.fakes.ops_servers import OpsFakes, loki_line
from tools import ops
from tools.ops import toolbox_config as cfg
from tools.registry import Registry, ToolContext
from tools.runtime import Observation, execute_one


@pytest.fixture
async def fakes() -> AsyncIterator[OpsFakes]:
    f = OpsFakes()
    await f.server.start()
    yield f
    await f.server.stop()


async def run(toolbox: ops.Toolbox, name: str, confirmed_by: str | None = None, **args: Any) -> Observation:
    ctx = ToolContext(run_id="r", thread_id="t", user_id="UREQ", call_id=f"c-{time.time_ns()}",
                      confirmed_by=confirmed_by)
    try:
        return await execute_one(ToolCall(id=ctx.call_id, name=name, arguments=args),
                                 registry=Registry.of(toolbox.specs), ctx=ctx, journal=MemoryStore().journal)
    finally:  # its Kubernetes connections, on this test's loop (a later call opens them again)
        await toolbox.aclose()


def data(obs: Observation) -> dict[str, Any]:
    assert obs.result is not None, obs.interrupt
    body = json.loads(obs.result.content)
    assert body["ok"], body
    return dict(body["data"])


def error_code(obs: Observation) -> str:
    assert obs.result is not None
    return str(json.loads(obs.result.content)["errorCode"])


def live(fakes: OpsFakes, **overrides: Any) -> ops.Toolbox:
    parts: dict[str, Any] = {
        "logs": cfg.LokiLogs(backend="loki", url=fakes.url, token_env="OPS_TOKEN", timeout_s=2),
        "metrics": cfg.PrometheusMetrics(backend="prometheus", url=fakes.url),
        "restart": cfg.KubernetesRestarts(backend="kubernetes", api_url=fakes.url, token_env="OPS_TOKEN"),
        "verify": cfg.Verification(timeout_s=2, poll_s=0.05, settle_s=0)}
    return ops.build(cfg.OpsConfig(**(parts | overrides)))


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_TOKEN", "secret-token")


# --- catalog and runbooks ------------------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["支付服务", "payments", "pay-svc", "Payment Service", "看看支付服务最近报错"])
async def test_catalog_matching_is_forgiving(query: str) -> None:
    found = data(await run(ops.build(), "search_resource", query=query))
    assert found["candidates"][0]["id"] == "payments"
    assert found["candidates"][0]["kubernetes"] == {"namespace": "payments", "deployment": "payments-api"}


async def test_an_ambiguous_name_returns_the_candidates(tmp_path: Path) -> None:
    shutil.copytree(ops.DEMO_DATA, tmp_path / "demo")
    catalog = tmp_path / "demo" / "catalog.yml"
    catalog.write_text(catalog.read_text() + "  - {id: payments-batch, name: Payments Batch, aliases: [pay-svc]}\n")
    found = data(await run(ops.build(cfg.OpsConfig(data_dir=tmp_path / "demo")), "search_resource", query="pay-svc"))
    assert found["ambiguous"] is True
    assert {c["id"] for c in found["candidates"]} == {"payments", "payments-batch"}
    assert error_code(await run(ops.build(), "search_resource", query="kafka")) == "not_found"


@pytest.mark.parametrize(("query", "suggested"), [
    ("billing-ledger", None),  # "ledger" holds the gateway's alias "edge": not a match, not even a suggestion
    ("看看 billing-ledger 服务最近报错", None), ("ledger", None), ("账单服务", None), ("订餐服务", None),
    ("api", None), ("service", None),
    ("gatway", "gateway"), ("paymnets", "payments"), ("payments-db", "payments"), ("支付宝", "payments"),
])
async def test_a_near_miss_is_not_found_and_says_what_was_meant_perhaps(query: str, suggested: str | None) -> None:
    obs = await run(ops.build(), "search_resource", query=query)
    assert error_code(obs) == "not_found"
    message = json.loads(obs.result.content)["message"] if obs.result else ""
    assert "known services: payments, orders, gateway" in message
    if suggested:
        assert "did you mean" in message and f"({suggested})" in message
    else:
        assert "did you mean" not in message


@pytest.mark.parametrize(("query", "expected", "score"), [
    ("payments", "payments", 1.0), ("网关超时了", "gateway", 0.9), ("订单系统最近报错", "orders", 0.9),
    ("why are orders failing after the deploy?", "orders", 0.9), ("restart payments in prod", "payments", 0.9),
    ("gateway", "gateway", 1.0), ("gw", "gateway", 1.0),
])
async def test_a_match_is_a_whole_word_or_phrase_and_carries_its_score(query: str, expected: str,
                                                                       score: float) -> None:
    found = data(await run(ops.build(), "search_resource", query=query))
    assert [c["id"] for c in found["candidates"]] == [expected]
    assert found["candidates"][0]["score"] == score and found["candidates"][0]["matched"]


async def test_runbook_search_ranks_in_chinese_and_english() -> None:
    toolbox = ops.build()
    zh = data(await run(toolbox, "search_docs", query="数据库连接池耗尽怎么处理"))["results"]
    assert zh[0]["path"] == "docs/payments-db-timeouts.md" and zh[0]["title"] == "支付服务数据库超时处理手册"
    en = data(await run(toolbox, "search_docs", query="roll back a bad release after a deploy"))["results"]
    assert en[0]["path"] == "docs/deploy-5xx-rollback.md"
    rate = data(await run(toolbox, "search_docs", query="gateway 429 rate limit"))["results"]
    assert rate[0]["path"] == "docs/gateway-rate-limits.md"
    assert zh[0]["score"] > 0 and [h["score"] for h in zh] == sorted((h["score"] for h in zh), reverse=True)


async def test_the_runbook_index_follows_file_changes(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Disk full\n\n## Fix\nDelete old journald logs.\n", encoding="utf-8")
    index = ops.DocIndex(docs, link_base="https://git.example.com/runbooks/blob/main")
    assert (await index.search("journald"))[0].path == "https://git.example.com/runbooks/blob/main/a.md"
    assert await index.search("证书过期") == []
    (docs / "b.md").write_text("# 证书过期\n\n## 处理\n更新 TLS 证书并重载网关。\n", encoding="utf-8")
    assert (await index.search("证书过期怎么办"))[0].title == "证书过期"
    (docs / "a.md").unlink()
    assert await index.search("journald") == []


# --- logs -------------------------------------------------------------------------------------------------------

async def test_demo_logs_are_grouped_by_pattern() -> None:
    found = data(await run(ops.build(), "query_logs", service_id="payments", environment="prod", minutes=30))
    top = found["patterns"][0]
    assert top["pattern"].startswith("timeout acquiring connection from pool <str> after <n>")
    assert top["count"] > 50 and len(top["samples"]) == 3
    assert found["error_lines"] == sum(p["count"] for p in found["patterns"])
    assert "hunter2" not in json.dumps(found)  # scrubbed on the way to the model
    staging = data(await run(ops.build(), "query_logs", service_id="orders", environment="staging"))
    assert "NullPointerException in OrderMapper.toDto" in staging["patterns"][0]["pattern"]


async def test_missing_service_or_environment_asks_with_choices_from_the_catalog() -> None:
    asked = await run(ops.build(), "query_logs")
    assert asked.interrupt is not None and asked.interrupt.interrupt_type == "params_required"
    fields = {f["name"]: f["choices"] for f in asked.interrupt.payload["fields"]}
    assert fields == {"service_id": ["payments", "orders", "gateway"], "environment": ["prod", "staging"]}
    env_only = await run(ops.build(), "query_metrics", service_id="payments")
    assert env_only.interrupt is not None
    assert env_only.interrupt.payload["fields"] == [{"name": "environment", "choices": ["prod", "staging"]}]
    assert error_code(await run(ops.build(), "query_logs", service_id="payments", environment="qa")) == \
        "validation_error"


async def test_loki_query_range(fakes: OpsFakes) -> None:
    now = time.time()
    fakes.loki_lines = [loki_line(now - 60 * i, "error", f"timeout acquiring connection after {3000 + i}ms")
                        for i in range(5)] + [loki_line(now - 30, "error", "disk full on /var/lib/app")]
    found = data(await run(live(fakes), "query_logs", service_id="payments", environment="prod", minutes=30,
                           contains="timeout"))
    _, _, params = next(r for r in fakes.requests if r[0] == "loki")
    assert params["query"].startswith('{app="payments-api", env="prod"} |~ "(?i)(error|exception|fatal|panic|timeout)"')
    assert params["query"].endswith('|= "timeout"') and params["direction"] == "backward"
    assert int(params["end"]) - int(params["start"]) == pytest.approx(30 * 60 * 1e9, rel=0.01)
    assert found["query"] == params["query"]
    assert found["patterns"][0] == {**found["patterns"][0], "pattern": "timeout acquiring connection after <n>",
                                    "count": 5}


@pytest.mark.parametrize(("status", "code"), [(400, "validation_error"), (401, "permission_denied"),
                                              (404, "not_found"), (502, "upstream_error")])
async def test_loki_errors_are_classified(fakes: OpsFakes, status: int, code: str) -> None:
    fakes.loki_status = status
    obs = await run(live(fakes), "query_logs", service_id="payments", environment="prod")
    assert error_code(obs) == code
    assert obs.result is not None and f"HTTP {status}" in json.loads(obs.result.content)["message"]


async def test_a_time_that_is_no_date_is_not_an_internal_error(fakes: OpsFakes) -> None:
    """Loki answering a line at 10^23 ns (year out of range) ended query_logs in internal_error with a stack trace;
    a JSON line's own absurd time gave way to Loki's."""
    fakes.loki_raw = {"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"app": "payments-api"}, "values": [["99999999999999999999999", "error boom"]]}]}}
    assert error_code(await run(live(fakes), "query_logs", service_id="payments", environment="prod")) == \
        "upstream_error"
    now = time.time()
    fakes.loki_raw = {"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"app": "payments-api"}, "values": [[str(int(now * 1e9)), json.dumps(
            {"ts": 10**30, "level": "error", "msg": "boom"})]]}]}}
    found = data(await run(live(fakes), "query_logs", service_id="payments", environment="prod"))
    assert found["patterns"][0]["first_seen"][:16] == datetime.fromtimestamp(now).astimezone().isoformat()[:16]


async def test_loki_timeout_wrong_token_and_unreachable(fakes: OpsFakes, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes.loki_delay_s = 3
    assert error_code(await run(live(fakes), "query_logs", service_id="payments", environment="prod")) == "timeout"
    fakes.loki_delay_s = 0
    monkeypatch.setenv("OPS_TOKEN", "wrong")
    assert error_code(await run(live(fakes), "query_logs", service_id="payments", environment="prod")) == \
        "permission_denied"
    dead = ops.build(cfg.OpsConfig(logs=cfg.LokiLogs(backend="loki", url="http://127.0.0.1:9", timeout_s=2)))
    assert error_code(await run(dead, "query_logs", service_id="payments", environment="prod")) == "upstream_error"


# --- metrics ----------------------------------------------------------------------------------------------------

async def test_prometheus_range_queries_are_summarised_with_a_trend(fakes: OpsFakes) -> None:
    fakes.prom_series = {"error_rate": [0.002, 0.003, 0.02, 0.04], "p95_latency_ms": [180, 185, 181, 183],
                         "restarts": [0, 0, 1, 1]}
    found = data(await run(live(fakes), "query_metrics", service_id="payments", environment="prod", minutes=15))
    m = found["metrics"]
    assert m["error_rate"]["current"] == 0.04 and m["error_rate"]["trend"] == "rising"
    assert m["p95_latency_ms"]["trend"] == "flat" and m["p95_latency_ms"]["max"] == 185
    assert 'http_requests_total{service="payments-api",env="prod",code=~"5.."}' in m["error_rate"]["query"]
    sent = [r[2] for r in fakes.requests if r[0] == "prom_range"]
    assert {p["step"] for p in sent} == {"60s"} and len(sent) == 3
    assert float(sent[0]["end"]) - float(sent[0]["start"]) == pytest.approx(900, abs=1)


async def test_prometheus_bad_query_and_demo_fixtures(fakes: OpsFakes) -> None:
    broken = cfg.PrometheusMetrics(backend="prometheus", url=fakes.url, queries={"error_rate": "not promql"})
    obs = await run(live(fakes, metrics=broken), "query_metrics", service_id="payments", environment="prod")
    assert error_code(obs) == "validation_error"
    demo = data(await run(ops.build(), "query_metrics", service_id="payments", environment="prod"))
    rate = demo["metrics"]["error_rate"]
    assert (rate["trend"], rate["current"], rate["onset_at"]) == ("steady high", 0.043, "2026-12-02T09:43:00Z")
    assert error_code(await run(ops.build(), "query_metrics", service_id="payments", environment="prod",
                                metrics=["cpu"])) == "validation_error"


# --- restarts ---------------------------------------------------------------------------------------------------

async def test_kubernetes_restart_patches_waits_and_compares_the_error_rate(fakes: OpsFakes) -> None:
    fakes.prom_series = {"error_rate": [0.01, 0.04]}
    fakes.prom_after_restart = {"error_rate": 0.002}
    result = data(await run(live(fakes), "restart_service", confirmed_by="UAPPROVER", service_id="payments",
                            environment="prod", reason="pool exhausted"))
    patch = next(r for r in fakes.requests if r[0] == "k8s_PATCH")
    assert patch[1] == "/apis/apps/v1/namespaces/payments/deployments/payments-api"
    assert "kubectl.kubernetes.io/restartedAt" in patch[2]["spec"]["template"]["metadata"]["annotations"]
    assert result["rollout"] == "complete" and result["action"]["generation"] == 8
    assert (result["error_rate_before"], result["error_rate_after"]) == (0.04, 0.002)
    assert result["verdict"] == "restarted; the error rate fell from 4.0% to 0.20%"
    assert result["confirmed_by"] == "UAPPROVER"
    assert sum(1 for r in fakes.requests if r[0] == "k8s_GET") >= 2


async def test_a_restart_compared_on_partial_data_says_so(fakes: OpsFakes) -> None:
    """Prometheus answered the error rate after the restart from part of its stores: "the error rate fell from
    4.00% to 0.20%" was said as a sure thing."""
    fakes.prom_series = {"error_rate": [0.01, 0.04]}
    fakes.prom_after_restart = {"error_rate": 0.002}
    fakes.prom_instant_warnings = ["partial response: store eu-1 unavailable"]
    result = data(await run(live(fakes), "restart_service", confirmed_by="U", service_id="payments",
                            environment="prod"))
    assert result["error_rate_warnings"] == ["partial response: store eu-1 unavailable"]
    assert result["verdict"] == ("restarted; the error rate fell from 4.0% to 0.20% (from partial data, Prometheus "
                                 "warned: partial response: store eu-1 unavailable; not a sure comparison)")


async def test_an_error_rate_given_as_a_percentage_is_not_compared(fakes: OpsFakes) -> None:
    """A query giving 4 for 4% read as "the error rate fell from 400.00% to 20.00%"."""
    fakes.prom_series = {"error_rate": [1, 4]}
    fakes.prom_after_restart = {"error_rate": 0.2}
    result = data(await run(live(fakes), "restart_service", confirmed_by="U", service_id="payments",
                            environment="prod"))
    assert str(result["error_rate_before"]).startswith("unavailable: the error_rate query returned 4, not a ratio")
    assert result["verdict"] == "restarted; the error rate could not be compared"


async def test_a_rollout_that_never_finishes_is_reported_unverified(fakes: OpsFakes) -> None:
    fakes.deployment_ready_after_polls = None
    result = data(await run(live(fakes), "restart_service", confirmed_by="U", service_id="payments",
                            environment="prod"))
    assert result["rollout"] == "timed_out" and "NOT verified" in result["verdict"]
    assert "1/3 updated" in result["rollout_detail"] and result["error_rate_after"] is None


async def test_kubernetes_errors_are_classified(fakes: OpsFakes, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_TOKEN", "nope")
    obs = await run(live(fakes), "restart_service", confirmed_by="U", service_id="payments", environment="prod")
    assert error_code(obs) == "permission_denied"
    monkeypatch.setenv("OPS_TOKEN", "secret-token")
    fakes.deployment["metadata"]["name"] = "something-else"
    obs = await run(live(fakes), "restart_service", confirmed_by="U", service_id="payments", environment="prod")
    assert error_code(obs) == "not_found"


async def test_a_kubeconfig_with_a_token_user(fakes: OpsFakes, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(f"""
apiVersion: v1
kind: Config
current-context: ops
contexts: [{{name: ops, context: {{cluster: c1, user: bot}}}}]
clusters: [{{name: c1, cluster: {{server: "{fakes.url}"}}}}]
users: [{{name: bot, user: {{token: secret-token}}}}]
""")
    restart = cfg.KubernetesRestarts(backend="kubernetes", kubeconfig=kubeconfig)
    result = data(await run(live(fakes, restart=restart), "restart_service", confirmed_by="U",
                            service_id="payments", environment="prod"))
    assert result["rollout"] == "complete"


async def test_webhook_restart_follows_the_job(fakes: OpsFakes) -> None:
    hook = cfg.WebhookRestarts(backend="webhook", url=f"{fakes.url}/hooks/restart", token_env="OPS_TOKEN")
    result = data(await run(live(fakes, restart=hook), "restart_service", confirmed_by="UAPPROVER",
                            service_id="payments", environment="prod"))
    posted = next(r for r in fakes.requests if r[0] == "webhook")[2]
    assert posted["service_id"] == "payments" and posted["confirmed_by"] == "UAPPROVER"
    assert posted["deployment"] == "payments-api" and posted["idempotency_key"].startswith("r:c-")  # run id and call id
    assert result["rollout"] == "complete" and result["action"]["status_url"].endswith("/hooks/jobs/job-42")
    fakes.webhook_states = ["failed"]
    failed = data(await run(live(fakes, restart=hook), "restart_service", confirmed_by="U",
                            service_id="payments", environment="prod"))
    assert failed["rollout"] == "failed" and "job failed" in failed["verdict"]


async def test_restart_is_gated_in_prod_and_the_demo_verifies() -> None:
    toolbox = ops.build()
    gated = await run(toolbox, "restart_service", service_id="payments", environment="prod")
    assert gated.interrupt is not None and gated.interrupt.interrupt_type == "confirm_risky"
    done = data(await run(toolbox, "restart_service", confirmed_by="U", service_id="payments", environment="prod"))
    assert done["verdict"] == "restarted; the error rate fell from 4.3% to 0.30%"
    assert len(toolbox.restarts.done) == 1


async def test_a_broken_catalog_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "catalog.yml").write_text("services:\n  - {id: Bad Id, name: x}\n")
    with pytest.raises(ops.CatalogError, match=r"invalid at services\[0\]\.id: String should match pattern"):
        ops.build(cfg.OpsConfig(catalog=tmp_path / "catalog.yml"))


async def test_the_demo_s_errors_still_began_when_they_did_after_its_restart() -> None:
    """After the README's restart the demo's error rate was four points of after-restart values: "the error rate did
    not clearly rise in this window", beside 90 error lines from 09:42."""
    toolbox = ops.build()
    args = {"service_id": "payments", "environment": "prod"}
    before = data(await run(toolbox, "query_metrics", **args, metrics=["error_rate"], minutes=60))
    await run(toolbox, "restart_service", confirmed_by="UAPPROVER", **args, reason="pool exhausted")
    after = data(await run(toolbox, "query_metrics", **args, metrics=["error_rate"], minutes=60))
    was, now = before["metrics"]["error_rate"], after["metrics"]["error_rate"]
    assert now["onset_at"] == was["onset_at"] == "2026-12-02T09:43:00Z", (was, now)
    assert now["current"] < was["current"]  # the restart shows, at now's point


async def test_a_partial_answer_from_prometheus_is_said(fakes: OpsFakes) -> None:
    """Prometheus answered success with a warning (a store unavailable: part of the data only): "error_rate 0.001
    (flat)", the warning nowhere."""
    now = time.time()
    fakes.prom_raw = {"error_rate": {"status": "success", "warnings": ["partial response: store eu-1 unavailable"],
                                     "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [
                                         [now - 60 * (29 - i), "0.001"] for i in range(30)]}]}}}
    found = data(await run(live(fakes), "query_metrics", service_id="payments", environment="prod",
                           metrics=["error_rate"], minutes=30))
    assert found["metrics"]["error_rate"]["backend_warnings"] == ["partial response: store eu-1 unavailable"]
    assert "partial data: partial response: store eu-1 unavailable" in found["summary"], found["summary"]


@pytest.mark.parametrize(("warnings", "said"), [("partial response: store eu-1 unavailable",
                                                  ["partial response: store eu-1 unavailable"]),
                                                 ([""], None), ({"odd": 1}, None), (None, None)])
async def test_prometheus_warnings_of_any_shape_are_read_or_left(fakes: OpsFakes, warnings: Any,
                                                                 said: list[str] | None) -> None:
    """A string was sliced into characters ("partial data: p"); an object was a traceback and internal_error."""
    now = time.time()
    fakes.prom_raw = {"error_rate": {"status": "success", "warnings": warnings,
                                     "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [
                                         [now - 60 * (9 - i), "0.001"] for i in range(10)]}]}}}
    found = data(await run(live(fakes), "query_metrics", service_id="payments", environment="prod",
                           metrics=["error_rate"], minutes=10))
    assert found["metrics"]["error_rate"].get("backend_warnings") == said, found


def test_a_change_s_line_in_slack_says_its_figures_are_partial() -> None:
    from bot.slack.outbound.outputs import output

    body = {"ok": True, "data": {"rollout": "complete", "verdict": "restarted", "error_rate_before": 0.04,
                                 "error_rate_after": 0.002, "error_rate_warnings": ["store `eu-1` unavailable"]}}
    line = output("ok", None, body, "en")
    assert "4.0% → 0.20%" in line and "partial data" in line and "eu-1" in line, line
    assert "数据不完整" in output("ok", None, body, "zh")
    del body["data"]["error_rate_warnings"]  # type: ignore[attr-defined]
    assert "partial" not in output("ok", None, body, "en")


async def test_a_catalog_without_prod_asks_for_every_restart_and_says_so(tmp_path: Path) -> None:
    """A catalog calling its production `production`: restart_service's built-in confirm_in("prod") never matched,
    so a restart there ran with nobody's confirmation, and neither serve nor `opspilot check` said a word."""
    from bot.assembly import validate
    from bot.config import Settings
    from core.messages import ToolCall
    from state import MemoryStore
    from tools.ops import toolbox_config as cfg
    from tools.registry import ToolContext
    from tools.runtime import execute_one

    (tmp_path / "catalog.yml").write_text("services:\n  - id: payments\n    name: Payment Service\n"
                                          "    environments: [production, staging]\n", encoding="utf-8")
    conf = cfg.OpsConfig(catalog=tmp_path / "catalog.yml")
    toolbox = ops.build(conf)
    registry, warnings = validate(Settings(toolbox=conf), toolbox)
    assert any("restart_service asks for a person's confirmation in every environment" in w
               and "tools.restart_service.confirm_in" in w for w in warnings), warnings
    for env in ("production", "staging"):
        ctx = ToolContext(run_id="r1", thread_id="t", user_id="UREQ", call_id=f"c-{env}")
        obs = await execute_one(ToolCall(id=f"c-{env}", name="restart_service",
                                         arguments={"service_id": "payments", "environment": env}),
                                registry=registry, ctx=ctx, journal=MemoryStore().journal)
        assert obs.interrupt is not None and obs.interrupt.interrupt_type == "confirm_risky", env
    assert toolbox.restarts.done == []
