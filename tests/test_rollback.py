"""rollback_service and scale_service against the Kubernetes API stand-in (its Deployment and ReplicaSets changed
as the deployment controller would: tests/fakes/rollouts.py), the webhook and the demo: the plan on the card,
the refusals before any card, the change the person saw and no other, exactly once."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any

import pytest

from core.messages import ToolCall
from state import MemoryStore
from tests.fakes.ops_servers import OpsFakes
from tests.fakes.rollouts import Rollouts
from tests.test_ops import data, error_code, live
from tools import ops
from tools.ops import toolbox_config as cfg
from tools.ops.catalog import Service
from tools.ops.changes import Change
from tools.ops.releases import release_plan
from tools.ops.rollback import ChangeRequest
from tools.ops.rollouts import template
from tools.registry import Registry, ToolContext
from tools.runtime import MutationJournal, Observation, execute_one
from tools.tool_errors import Conflict, Refused


def three_releases(fakes: OpsFakes) -> Rollouts:
    sim = Rollouts("payments-api:1.4.0", "2026-11-20T08:00:00Z")  # revision 1
    sim.set_image("payments-api:1.4.1", "2026-11-28T08:00:00Z")  # revision 2
    sim.set_image("payments-api:1.4.2", "2026-12-02T08:00:00Z")  # revision 3: running
    fakes.simulate(sim)
    return sim


async def call(toolbox: ops.Toolbox, name: str, *, confirmed_by: str | None = None, plan: dict[str, Any] | None = None,
               unattended: bool = False, call_id: str | None = None, journal: MutationJournal | None = None,
               run_id: str = "r", **args: Any) -> Observation:
    ctx = ToolContext(run_id=run_id, thread_id="t", user_id="UREQ", call_id=call_id or f"c-{time.time_ns()}",
                      confirmed_by=confirmed_by, unattended=unattended, plan=plan)
    try:
        return await execute_one(ToolCall(id=ctx.call_id, name=name, arguments=args),
                                 registry=Registry.of(toolbox.specs), ctx=ctx, journal=journal or MemoryStore().journal)
    finally:  # its Kubernetes connections, on this test's loop (a later call opens them again)
        await toolbox.aclose()


async def card(toolbox: ops.Toolbox, name: str, **args: Any) -> dict[str, Any]:
    """The confirmation card's payload (no person has confirmed yet)."""
    obs = await call(toolbox, name, **args)
    assert obs.interrupt is not None and obs.interrupt.interrupt_type == "confirm_risky", obs.result
    return obs.interrupt.payload


def revision(sim: Rollouts, image: str) -> dict[str, Any]:
    return next(rs for rs in sim.replica_sets if template(rs)["spec"]["containers"][0]["image"] == image)


def patches(fakes: OpsFakes) -> list[tuple[str, str, Any]]:
    return [r for r in fakes.requests if r[0] in ("k8s_PATCH", "k8s_scale_PATCH")]


# --- rollback on Kubernetes -------------------------------------------------------------------------------------

async def test_rollback_to_the_previous_revision_shows_from_to_then_does_exactly_that(fakes: OpsFakes) -> None:
    sim = three_releases(fakes)
    fakes.prom_series, fakes.prom_after_restart = {"error_rate": [0.01, 0.05]}, {"error_rate": 0.004}
    toolbox = live(fakes)
    payload = await card(toolbox, "rollback_service", service_id="payments", environment="prod", reason="bad 1.4.2")
    plan = payload["plan"]
    fields = {c["field"]: (c["from"], c["to"]) for c in plan["changes"]}
    assert fields["revision"] == ("3", "2")
    assert fields["images"] == ("payments-api:1.4.2", "payments-api:1.4.1")
    assert fields["deployed_at"] == ("2026-12-02T08:00:00Z", "2026-11-28T08:00:00Z")
    assert plan["summary"] == "payments prod: revision 3 (payments-api:1.4.2) → revision 2 (payments-api:1.4.1)"
    assert not patches(fakes)  # a plan only reads

    done = data(await call(toolbox, "rollback_service", confirmed_by="UAPPROVER", plan=plan, service_id="payments",
                           environment="prod", reason="bad 1.4.2"))
    target = revision(sim, "payments-api:1.4.1")
    assert template(sim.deployment) == template(target)  # the Deployment runs revision 2's template
    assert target["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "4"  # reused, renumbered
    cause = sim.deployment["metadata"]["annotations"]["kubernetes.io/change-cause"]
    assert cause == "rollback to revision 2 by UAPPROVER via OpsPilot: bad 1.4.2"
    [(_, path, ops_sent)] = patches(fakes)
    assert path == "/apis/apps/v1/namespaces/payments/deployments/payments-api"
    assert ops_sent[0]["op"] == "test" and ops_sent[0]["path"] == "/metadata/generation"
    assert done["from"]["revision"] == "3" and done["to"]["revision"] == "2" and done["backend"] == "kubernetes"
    assert done["rollout"] == "complete" and done["confirmed_by"] == "UAPPROVER"
    assert (done["error_rate_before"], done["error_rate_after"]) == (0.05, 0.004)
    assert done["verdict"] == "rolled back; the error rate fell from 5.0% to 0.40%"


async def test_rollback_to_a_named_revision_or_release(fakes: OpsFakes) -> None:
    sim = three_releases(fakes)
    toolbox = live(fakes)
    by_release = (await card(toolbox, "rollback_service", service_id="payments", environment="prod",
                             to_release="1.4.0"))["plan"]
    assert by_release["changes"][0] == {"field": "revision", "from": "3", "to": "1"}
    plan = (await card(toolbox, "rollback_service", service_id="payments", environment="prod", to_revision=1))["plan"]
    assert plan == by_release
    data(await call(toolbox, "rollback_service", confirmed_by="U", plan=plan, service_id="payments",
                    environment="prod", to_revision=1))
    assert template(sim.deployment) == template(revision(sim, "payments-api:1.4.0"))
    assert sim.deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "payments-api:1.4.0"
    # and forward again: the default target is now the highest revision below the running one (3: 1.4.2)
    again = data(await call(toolbox, "rollback_service", confirmed_by="U", service_id="payments", environment="prod",
                            reason="1.4.0 lacks the fix"))
    assert again["from"]["revision"] == "4" and again["to"]["revision"] == "3"
    assert sim.deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "payments-api:1.4.2"
    assert sim.deployment["metadata"]["annotations"]["kubernetes.io/change-cause"] == \
        "rollback to revision 3 by U via OpsPilot: 1.4.0 lacks the fix"


@pytest.mark.parametrize(("args", "code", "words"), [
    ({"to_revision": 9}, "not_found", "revision 9 of payments/payments-api no longer exists; kept: 1 "),
    ({"to_revision": 3}, "no_change", "revision 3 of payments/payments-api is the template running now"),
    ({"to_release": "9.9.9"}, "not_found", "no earlier revision of payments/payments-api runs '9.9.9'"),
    ({"to_revision": 1, "to_release": "1.4.0"}, "validation_error", "not both"),
])
async def test_refusals_come_before_any_card(fakes: OpsFakes, args: dict[str, Any], code: str, words: str) -> None:
    three_releases(fakes)
    obs = await call(live(fakes), "rollback_service", service_id="payments", environment="prod", **args)
    assert obs.interrupt is None and error_code(obs) == code
    assert words in json.loads(obs.result.content)["message"]  # type: ignore[union-attr]
    assert not patches(fakes)


async def test_a_paused_rollout_is_refused_before_any_card(fakes: OpsFakes) -> None:
    sim = three_releases(fakes)
    sim.pause("2026-12-02T09:00:00Z")
    obs = await call(live(fakes), "rollback_service", service_id="payments", environment="prod")
    assert obs.interrupt is None and error_code(obs) == "paused"


async def test_a_deployment_changed_after_the_card_is_a_conflict_and_left_alone(fakes: OpsFakes) -> None:
    sim = three_releases(fakes)
    toolbox = live(fakes)
    plan = (await card(toolbox, "rollback_service", service_id="payments", environment="prod"))["plan"]
    sim.set_image("payments-api:1.5.0", "2026-12-02T09:30:00Z")  # someone deployed meanwhile: revision 4
    obs = await call(toolbox, "rollback_service", confirmed_by="U", plan=plan, service_id="payments",
                     environment="prod")
    assert error_code(obs) == "conflict"
    assert "revision was 3 → 2 on the card, is 4 → 3 now" in json.loads(obs.result.content)["message"]  # type: ignore[union-attr]
    assert not patches(fakes) and sim.deployment["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "payments-api:1.5.0"


async def test_the_api_server_refuses_a_patch_racing_another_change(fakes: OpsFakes) -> None:
    sim = three_releases(fakes)
    toolbox = live(fakes)
    service = toolbox.catalog.get("payments")
    assert service is not None
    req = ChangeRequest(service, "prod", "c-race", "UREQ", "U")
    plan = await toolbox.rollbacks.plan_rollback(req)
    sim.scale(5, "2026-12-02T09:30:00Z")  # between our read and our write
    with pytest.raises(Conflict):
        await toolbox.rollbacks.rollback(req, plan)
    await toolbox.aclose()
    assert sim.deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "payments-api:1.4.2"


async def test_an_alert_run_never_rolls_back_or_scales(fakes: OpsFakes) -> None:
    three_releases(fakes)
    toolbox = live(fakes)
    for name, extra in (("rollback_service", {}), ("scale_service", {"replicas": 4})):
        obs = await call(toolbox, name, unattended=True, service_id="payments", environment="prod", **extra)
        assert obs.interrupt is None and error_code(obs) == "not_allowed"
    assert not patches(fakes)


# --- scaling ----------------------------------------------------------------------------------------------------

async def test_scale_within_bounds_through_the_scale_subresource(fakes: OpsFakes) -> None:
    sim = three_releases(fakes)
    toolbox = live(fakes, scale_bounds={"payments": {"prod": {"min": 2, "max": 6}}})
    plan = (await card(toolbox, "scale_service", service_id="payments", environment="prod", replicas=5))["plan"]
    assert plan == {"changes": [{"field": "replicas", "from": "3", "to": "5"}],
                    "summary": "payments prod: 3 → 5 replicas"}
    done = data(await call(toolbox, "scale_service", confirmed_by="U", plan=plan, service_id="payments",
                           environment="prod", replicas=5, reason="peak"))
    assert sim.deployment["spec"]["replicas"] == 5 and done["rollout"] == "complete"
    assert done["verdict"].startswith("scaled")
    [(kind, path, _)] = patches(fakes)
    assert kind == "k8s_scale_PATCH" and path.endswith("/deployments/payments-api/scale")
    assert any(e.get("subresource") == "scale" and e["manager"] == "opspilot"
               for e in sim.deployment["metadata"]["managedFields"])  # recent_changes reads it as a scaling


@pytest.mark.parametrize(("service", "replicas", "code", "words"), [
    ("payments", 8, "out_of_bounds", "8 replicas is outside the bounds for payments in prod: 2 to 6"),
    ("payments", 1, "out_of_bounds", "2 to 6"),
    ("payments", 3, "no_change", "runs 3 replicas already"),
    ("orders", 3, "out_of_bounds", "no replica bounds are configured for orders in prod"),
])
async def test_scale_refusals_come_before_any_card(fakes: OpsFakes, service: str, replicas: int, code: str,
                                                   words: str) -> None:
    three_releases(fakes)
    toolbox = live(fakes, scale_bounds={"payments": {"prod": {"min": 2, "max": 6}}})
    obs = await call(toolbox, "scale_service", service_id=service, environment="prod", replicas=replicas)
    assert obs.interrupt is None and error_code(obs) == code
    assert words in json.loads(obs.result.content)["message"]  # type: ignore[union-attr]
    assert not patches(fakes)


@pytest.mark.parametrize(("tool", "arguments"), [("scale_service", {"replicas": True}),
                                                  ("scale_service", {"replicas": "6"}),
                                                  ("scale_service", {"replicas": 6.0}),
                                                  ("rollback_service", {"to_revision": True}),
                                                  ("rollback_service", {"to_revision": " 2 "})])
async def test_a_count_that_is_not_a_whole_number_is_refused_before_any_card(fakes: OpsFakes, tool: str,
                                                                            arguments: dict[str, object]) -> None:
    """``replicas: true`` made a prod card for 3 → 1, ``to_revision: true`` one back to revision 1 (the oldest):
    a confused call is refused, not read as a plausible change."""
    three_releases(fakes)
    toolbox = live(fakes, scale_bounds={"payments": {"prod": {"min": 1, "max": 6}}})
    obs = await call(toolbox, tool, service_id="payments", environment="prod", **arguments)
    assert obs.interrupt is None and error_code(obs) == "validation_error", obs
    assert not patches(fakes)


def test_default_bounds_are_one_to_ten_and_min_may_not_pass_max() -> None:
    assert cfg.OpsConfig().scale_bounds["*"]["*"] == cfg.Bounds(min=1, max=10)
    with pytest.raises(ValueError, match="min"):
        cfg.OpsConfig(scale_bounds={"payments": {"prod": {"min": 5, "max": 2}}})


# --- webhook and demo -------------------------------------------------------------------------------------------

async def test_webhook_rollback_sends_the_idempotency_key_once(fakes: OpsFakes) -> None:
    hook = cfg.WebhookActions(backend="webhook", url=f"{fakes.url}/hooks/change", token_env="OPS_TOKEN")
    toolbox = ops.build(cfg.OpsConfig(rollback=hook, scale=hook, verify=cfg.Verification(timeout_s=2, poll_s=0.05,
                                                                                         settle_s=0)))
    journal = MemoryStore().journal
    args = {"service_id": "orders", "environment": "staging", "reason": "DTO mapper"}
    done = data(await call(toolbox, "rollback_service", call_id="c-1", journal=journal, confirmed_by="UBOB", **args))
    again = await call(toolbox, "rollback_service", call_id="c-1", journal=journal, confirmed_by="UBOB", **args)
    assert error_code(again) == "outcome_unknown"  # the same call never runs twice
    [posted] = [r[2] for r in fakes.requests if r[0] == "webhook"]
    assert posted["action"] == "rollback" and posted["idempotency_key"] == "r:c-1"
    assert (posted["from_release"], posted["to_release"]) == ("2026.12.02-1", "2026.12.01-4")
    assert posted["requested_by"] == "UREQ" and posted["reason"] == "DTO mapper"
    assert done["rollout"] == "complete" and done["to"]["images"] == "orders-api:4.1.9"
    data(await call(toolbox, "scale_service", call_id="c-2", service_id="orders", environment="staging", replicas=4,
                    confirmed_by="UBOB"))
    scaled = [r[2] for r in fakes.requests if r[0] == "webhook"][-1]
    assert scaled["action"] == "scale" and scaled["replicas"] == 4 and scaled["idempotency_key"] == "r:c-2"


async def test_a_restart_webhook_is_never_assumed_to_roll_back(fakes: OpsFakes) -> None:
    restart = cfg.WebhookRestarts(backend="webhook", url=f"{fakes.url}/hooks/restart")
    toolbox = ops.build(cfg.OpsConfig(restart=restart))
    obs = await call(toolbox, "rollback_service", service_id="payments", environment="prod")
    assert obs.interrupt is None and error_code(obs) == "not_configured"
    assert not [r for r in fakes.requests if r[0] == "webhook"]


async def test_the_demo_rolls_orders_staging_back_exactly_once() -> None:
    toolbox = ops.build()
    args = {"service_id": "orders", "environment": "staging"}
    first = data(await call(toolbox, "rollback_service", call_id="c-demo", confirmed_by="UBOB", **args))
    assert first["summary"] == "orders staging: 2026.12.02-1 (orders-api:4.2.0) → 2026.12.01-4 (orders-api:4.1.9)"
    assert first["from"]["release"] == "2026.12.02-1" and first["to"]["release"] == "2026.12.01-4"
    # a second instance with its own journal, the same call: the backend answers with what it did
    data(await call(toolbox, "rollback_service", call_id="c-demo", journal=MemoryStore().journal, confirmed_by="UBOB",
                    **args))
    assert len(toolbox.rollbacks.done) == 1
    nothing_older = await call(toolbox, "rollback_service", **args)  # it runs 2026.12.01-4 now
    assert error_code(nothing_older) == "not_found"
    prod = (await card(toolbox, "rollback_service", service_id="payments", environment="prod"))["plan"]
    assert prod["changes"][0] == {"field": "release", "from": "2026.12.02-2", "to": "2026.12.01-3"}
    back = await call(toolbox, "rollback_service", service_id="orders", environment="staging",
                      to_release="2026.12.01-4")
    assert error_code(back) == "no_change"


async def test_the_same_call_id_in_two_runs_is_two_changes() -> None:
    """A model's call ids repeat across threads (some servers start at ``call_0`` every time): the backend's
    idempotency key is the run's and the call's, so the second run's rollback is done, to its own plan, not
    answered with the first one's."""
    toolbox = ops.build()
    first = data(await call(toolbox, "rollback_service", run_id="r1", call_id="call_0", confirmed_by="UBOB",
                            service_id="payments", environment="prod"))
    second = data(await call(toolbox, "rollback_service", run_id="r2", call_id="call_0", confirmed_by="UBOB",
                             service_id="orders", environment="staging"))
    assert first["summary"].startswith("payments prod") and second["summary"].startswith("orders staging"), second
    assert [(d["service_id"], d["idempotency_key"]) for d in toolbox.rollbacks.done] == [
        ("payments", "r1:call_0"), ("orders", "r2:call_0")]


async def test_what_the_demo_backends_did_is_in_its_change_history() -> None:
    """Asked "what changed?" after a demo rollback, a scale and a restart, the answer has them (it listed the
    deploys only, as if nothing had been done), and the rollback's plan still comes from the releases."""
    toolbox = ops.build()
    args = {"service_id": "orders", "environment": "staging"}
    data(await call(toolbox, "rollback_service", confirmed_by="UBOB", **args))
    data(await call(toolbox, "scale_service", confirmed_by="UBOB", replicas=5, **args))
    data(await call(toolbox, "restart_service", confirmed_by="UBOB", **args))
    found = data(await call(toolbox, "recent_changes", minutes=240, **args))
    kinds = [(c["kind"], c.get("from_version"), c.get("to_version")) for c in found["changes"]]
    assert kinds[:3] == [("restart", None, None), ("scale", "3", "5"), ("rollback", "2026.12.02-1", "2026.12.01-4")]
    assert kinds[3][0] == "deploy" and all(c["author"] == "OpsPilot" for c in found["changes"][:3])
    nothing_older = await call(toolbox, "rollback_service", **args)  # still planned from the releases
    assert error_code(nothing_older) == "not_found"
    prod = data(await call(toolbox, "recent_changes", service_id="payments", environment="prod", minutes=240))
    assert all(c["kind"] == "deploy" for c in prod["changes"])  # another service's: not listed


async def test_opspilot_check_grants_nothing_it_did_not_ask_about(fakes: OpsFakes, tmp_path: Path) -> None:
    """A catalog whose services name no deployment: "granted" for restart, rollback and scale, asked of nothing,
    while every call would fail."""
    from bot.check import kubernetes_checks

    catalog = tmp_path / "catalog.yml"
    catalog.write_text("services:\n  - {id: payments, name: Payments, environments: [prod]}\n")
    toolbox = live(fakes, catalog=catalog)
    checks = await kubernetes_checks(toolbox)
    await toolbox.aclose()
    assert [(c.name, c.status) for c in checks] == [("Kubernetes", "fail")], checks
    assert "no catalog service names its namespace and deployment" in checks[0].says


async def test_opspilot_check_asks_the_api_server_what_each_tool_may_do(fakes: OpsFakes,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.check import kubernetes_checks

    three_releases(fakes)
    toolbox = live(fakes)
    checks = await kubernetes_checks(toolbox)
    await toolbox.aclose()
    assert [(c.name, c.ok) for c in checks] == [("Kubernetes permissions (restart_service)", True),
                                                ("Kubernetes permissions (rollback_service)", True),
                                                ("Kubernetes permissions (scale_service)", True),
                                                ("Kubernetes deployments", False)]
    # RBAC grants on a name whether or not it exists: the API server has payments-api only, the catalog names more
    assert "not found: orders (orders/orders-api), gateway (edge/gateway)" in checks[3].says, checks[3].says
    assert checks[3].status == "warn"
    asked = [r[2] for r in fakes.requests if r[0] == "k8s_access_review"]
    assert {"namespace": "payments", "verb": "patch", "group": "apps", "resource": "deployments",
            "subresource": "scale", "name": "payments-api"} in asked
    monkeypatch.setenv("OPS_TOKEN", "viewer-token")
    viewer = live(fakes)
    scale = (await kubernetes_checks(viewer))[2]
    await viewer.aclose()
    assert not scale.ok and "patch deployments/scale payments/payments-api" in scale.says
    monkeypatch.setenv("OPS_TOKEN", "nobody-s-token")  # refused outright: no Deployment read is "found"
    refused = live(fakes)
    deployments = (await kubernetes_checks(refused))[-1]
    await refused.aclose()
    assert deployments.name == "Kubernetes deployments" and not deployments.ok, deployments
    assert "3 of 3 not read" in deployments.says and "found" not in deployments.says, deployments.says


async def test_the_confirmation_config_applies_by_tool_name() -> None:
    toolbox = ops.build()
    registry = Registry.of(toolbox.specs)
    registry.require_confirmation_in("rollback_service", ["staging"])  # tools.rollback_service.confirm_in
    spec = registry.get("rollback_service")
    assert spec is not None and spec.attended_only and spec.plan is not None
    ctx = ToolContext(run_id="r", thread_id="t", user_id="UREQ", call_id="c-staging")
    obs = await execute_one(ToolCall(id="c-staging", name="rollback_service",
                                     arguments={"service_id": "orders", "environment": "staging"}),
                            registry=registry, ctx=ctx, journal=MemoryStore().journal)
    assert obs.interrupt is not None and obs.interrupt.payload["plan"]["changes"][0] == \
        {"field": "release", "from": "2026.12.02-1", "to": "2026.12.01-4"}
    assert not toolbox.rollbacks.done


async def test_a_closed_toolbox_leaves_no_kubernetes_connection_open(fakes: OpsFakes,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """At shutdown (and after `opspilot check`) the toolbox closes its Kubernetes client on the loop that opened
    it: one left to the garbage collector logs "Unclosed client session" wherever it is collected."""
    three_releases(fakes)
    toolbox = live(fakes)
    service = toolbox.catalog.get("payments")
    assert service is not None
    await toolbox.rollbacks.plan_rollback(ChangeRequest(service, "prod", "c-plan", "UREQ", "U"))  # connects
    await toolbox.aclose()
    del toolbox, service
    gc.collect()
    assert not [r.getMessage() for r in caplog.records if "Unclosed" in r.getMessage()]


async def test_a_change_undone_during_its_rollout_is_not_reported_done(fakes: OpsFakes) -> None:
    """An autoscaler set the replicas back right after OpsPilot's scale; a colleague deployed during the wait after a
    rollback: both were answered "scaled" / "rolled back", rollout complete, to what no longer ran."""
    sim = three_releases(fakes)
    scaled = sim.patch_scale

    def autoscaler(body: Any, content_type: str, at: str, manager: str = "opspilot") -> Any:
        answer = scaled(body, content_type, at, manager)
        sim.scale(3, at, manager="kube-controller-manager")  # an HPA owns the replicas
        return answer

    sim.patch_scale = autoscaler  # type: ignore[method-assign]
    toolbox = live(fakes)
    plan = (await card(toolbox, "scale_service", service_id="payments", environment="prod", replicas=8))["plan"]
    out = data(await call(toolbox, "scale_service", confirmed_by="U", plan=plan, service_id="payments",
                          environment="prod", replicas=8))
    assert out["rollout"] == "superseded" and "asks for 3 replicas now, not 8" in out["verdict"], out

    rolled = sim.patch

    def colleague(body: Any, content_type: str, at: str, manager: str = "opspilot") -> Any:
        answer = rolled(body, content_type, at, manager)
        sim.set_image("payments-api:1.5.0", at)  # deployed while OpsPilot waited for its rollout
        return answer

    sim.patch = colleague  # type: ignore[method-assign]
    plan = (await card(toolbox, "rollback_service", service_id="payments", environment="prod"))["plan"]
    out = data(await call(toolbox, "rollback_service", confirmed_by="U", plan=plan, service_id="payments",
                          environment="prod"))
    assert out["rollout"] == "superseded" and "payments-api:1.5.0" in out["verdict"], out
    await toolbox.aclose()


async def test_the_card_shows_what_else_a_rollback_takes_back_and_when_a_revision_was_first_deployed(
        fakes: OpsFakes) -> None:
    """Across a config-only revision the card said revision 3 → 2, images 1.4.1 → 1.4.1, change cause unknown →
    unknown ("unknown" in English on a Chinese card), and never that env FEATURE_X goes away; a ReplicaSet a rollback
    reused was "Deployed" when first created, days before."""
    from bot.slack.outbound.change_card import plan_rows

    sim = Rollouts("payments-api:1.4.0", "2026-11-20T08:00:00Z")
    sim.set_image("payments-api:1.4.1", "2026-11-28T08:00:00Z")
    sim.set_env("FEATURE_X", "on", "2026-12-02T08:00:00Z")
    fakes.simulate(sim)
    toolbox = live(fakes)
    payload = await card(toolbox, "rollback_service", service_id="payments", environment="prod", to_release="1.4.1")
    rows = {label: (old, new) for label, old, new in plan_rows(payload, "en")}
    assert "env FEATURE_X" in rows["Also takes back"][1], rows
    zh = {label: (old, new) for label, old, new in plan_rows(payload, "zh")}
    assert zh["变更原因"] == ("未知", "未知") and "unknown" not in str(zh), zh
    sim.undo("2026-12-03T08:00:00Z")  # revision 2's ReplicaSet reused: revision 4 now
    payload = await card(toolbox, "rollback_service", service_id="payments", environment="prod")
    rows = {label: (old, new) for label, old, new in plan_rows(payload, "en")}
    assert rows["Deployed"][0].endswith("(first; deployed again since)"), rows
    await toolbox.aclose()


async def test_a_second_card_for_a_rollback_that_ran_is_a_conflict(fakes: OpsFakes) -> None:
    """Two cards for the same rollback: the second, confirmed after the first ran, said "not_found: name the release
    to roll back to" — as if the person had asked wrongly — where the service had changed since its card."""
    for toolbox, where in ((ops.build(), {"service_id": "orders", "environment": "staging"}),  # the demo's releases
                           (live(fakes), {"service_id": "payments", "environment": "prod"})):
        if where["service_id"] == "payments":
            three_releases(fakes)
        first = (await card(toolbox, "rollback_service", **where))["plan"]
        second = (await card(toolbox, "rollback_service", **where))["plan"]
        assert data(await call(toolbox, "rollback_service", confirmed_by="U", plan=first, **where))["rollout"] == \
            "complete"
        again = await call(toolbox, "rollback_service", confirmed_by="U", plan=second, **where)
        assert error_code(again) == "conflict", again.result
        await toolbox.aclose()


def test_a_rollback_to_the_images_running_now_is_refused_as_no_change() -> None:
    """One deploy recorded under two names (CI's release and Kubernetes' revision): a webhook job sent "roll
    back to" the other name redeploys the same images, and OpsPilot reported "Rolled back" over the broken release."""
    service = Service(id="orders", name="Orders", environments=["prod"])
    request = ChangeRequest(service=service, environment="prod", idempotency_key="r1:c1", requested_by="UREQ",
                            confirmed_by="UBOSS", to_release="2026.12.02-1")
    ci = Change(at=1_000.0, kind="deploy", source="ci", version="2026.12.02-1", images=("orders-api:4.2.0",))
    kube = Change(at=1_002.0, kind="image", source="kubernetes", version="revision 2", images=("orders-api:4.2.0",))
    with pytest.raises(Refused) as refused:
        release_plan(request, [ci, kube], kube)
    assert refused.value.code == "no_change" and "orders-api:4.2.0" in str(refused.value)
    older = Change(at=900.0, kind="deploy", source="ci", version="2026.12.01-4", images=("orders-api:4.1.9",))
    plan = release_plan(ChangeRequest(service=service, environment="prod", idempotency_key="r1:c2",
                                      requested_by="UREQ", confirmed_by="UBOSS", to_release="2026.12.01-4"),
                        [older, ci, kube], kube)
    assert plan.target["images"] == ["orders-api:4.1.9"]


def test_a_rollback_before_a_config_only_release_is_a_change() -> None:
    """A Helm values change is a release of its own with the images of the one before: rolling back to that one
    changes the config back, and was refused as "no change"."""
    service = Service(id="orders", name="Orders", environments=["prod"])
    request = ChangeRequest(service=service, environment="prod", idempotency_key="r1:c1", requested_by="UREQ",
                            confirmed_by="UBOSS", to_release="2026.12.02-1")
    morning = Change(at=1_000.0, kind="deploy", source="ci", version="2026.12.02-1", images=("orders-api:4.2.0",))
    values = Change(at=5_000.0, kind="deploy", source="ci", version="2026.12.02-2", images=("orders-api:4.2.0",),
                    description="helm values: DB_POOL_SIZE 50 -> 5")
    assert release_plan(request, [morning, values], None, open_ended=True).target["release"] == "2026.12.02-1"


async def test_a_rollback_never_undoes_a_template_not_rolled_out_yet(fakes: OpsFakes) -> None:
    """A colleague's `kubectl set image` the controller had not turned into a ReplicaSet yet: the plan took the
    newest ReplicaSet as what runs, the re-read at Confirm agreed with the card, and the rollback replaced the new
    template, unseen, reporting "rolled back" from revision 3."""
    sim = Rollouts("payments-api:1.4.0", "2026-11-20T08:00:00Z")
    sim.set_image("payments-api:1.4.1", "2026-11-28T08:00:00Z")
    sim.set_image("payments-api:1.4.2", "2026-12-02T08:00:00Z")
    fakes.simulate(sim)
    toolbox = live(fakes)
    try:
        plan = (await card(toolbox, "rollback_service", service_id="payments", environment="prod"))["plan"]
        sim.deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "payments-api:1.5.0"
        sim.deployment["metadata"]["generation"] += 1  # stored by the API server; the controller has not acted
        obs = await call(toolbox, "rollback_service", confirmed_by="UAPPROVER", plan=plan, service_id="payments",
                         environment="prod")
        body = json.loads(obs.result.content)
        assert body.get("errorCode") == "rollout_under_way", body
        assert sim.deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "payments-api:1.5.0"
    finally:
        await toolbox.aclose()
