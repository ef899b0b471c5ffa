"""The layers under "a change runs once" and "nobody else acts", each proven on its own.

Each test here was written to fail when one realistic bug is planted in one layer (a lost claim
ignored, a journal refusal ignored, case folding dropped from the gate, a dedupe removed, the pairing
check skipped, an authorisation verdict ignored, a key written without a TTL), while every other
layer still holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import pytest

from bot.agent.decisions import Confirm
from bot.agent.engine import EngineOptions
from bot.agent.engine_errors import AlreadyHandled
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.agent.sweeps import Sweeps
from bot.demo.sender import block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from core.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from state import RedisStore
from state.records import RunRecord
from state.store import Write
from tests.conftest import make_harness
from tests.slack_harness import CHANNEL, ask_restart, confirm, open_workspace, progress_of
from tests.toolkit import Change, Probe, toolkit
from tools import confirm_in, ops, tool
from tools.registry import Registry, ToolContext
from tools.runtime import execute_one


def restart_script() -> list[Any]:
    return [reply("restarting payments", call("restart_service", "r1", service_id="payments", environment="prod")),
            reply("restarted")]


async def test_simultaneous_clicks_one_winner_everyone_else_told_the_winner(store: RedisStore) -> None:
    toolbox = ops.build(restarts=ops.DemoRestarts(delay_s=0.05))
    h = make_harness(ScriptedModel(restart_script()), store, toolbox=toolbox)
    paused = await h.engine.ask("t", "restart")
    token = paused.pending[0].token
    engines = [make_harness(ScriptedModel([reply("restarted")]), store, toolbox=toolbox) for _ in range(3)]

    outcomes = await asyncio.gather(*(w.engine.resume_token(token, Confirm(), by=f"U{i}")
                                      for i, w in enumerate(engines)), return_exceptions=True)

    assert len(toolbox.restarts.done) == 1
    decided = [e for w in engines for e in w.of("call_decided")]
    assert len(decided) == 1  # the "decided" notice (which closes the card) comes from the winner only
    losers = [o for o in outcomes if isinstance(o, AlreadyHandled)]
    assert len(losers) == 2 and all(loser.holder == decided[0].by for loser in losers)


async def test_a_confirmed_change_cut_off_by_a_crash_is_outcome_unknown_and_not_asked_again(
        store: RedisStore) -> None:
    probe = Probe()

    @tool(description="A prod change that hangs.", mutating=True, confirm=confirm_in("prod"), timeout_s=60)
    async def hang(args: Change, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("hang")
        await asyncio.sleep(60)
        return {}

    first = make_harness(ScriptedModel([reply("", call("hang", "h1", target="db", environment="prod"))]), store,
                         [hang])
    paused = await first.engine.ask("t", "change the prod db")
    worker = asyncio.create_task(first.engine.resume_token(paused.pending[0].token, Confirm(), by="U2"))
    await asyncio.wait_for(probe.started.setdefault("hang", asyncio.Event()).wait(), 5)
    worker.cancel()  # the worker dies in the middle of the confirmed change
    with contextlib.suppress(asyncio.CancelledError):
        await worker

    model = ScriptedModel([reply("I cannot tell whether the change happened.")])
    second = make_harness(model, store, [hang])
    await Sweeps(second.engine, stale_after_s=0).sweep(now=time.time() + 600)
    record = await store.load_run(paused.run_id)
    assert record is not None and record.status == "stalled" and record.pending == []
    out = await second.engine.recover(paused.run_id)

    assert probe.count("hang") == 1
    assert out.status == "finished" and out.pending == () and second.of("loop_interrupt") == []
    results = {m.call_id: m for m in await store.load_transcript("t") if isinstance(m, ToolResultMessage)}
    assert results["h1"].error_code == "outcome_unknown"
    assert any(isinstance(m, ToolResultMessage) and m.error_code == "outcome_unknown"
               for m in model.requests[0].messages)


async def test_a_mutating_call_id_runs_once_even_when_executed_twice(store: RedisStore) -> None:
    probe = Probe()
    registry = Registry.of([toolkit(probe)["change_b"]])
    journal = store.journal
    change = ToolCall(id="c-1", name="change_b", arguments={"target": "payments"})
    ctx = ToolContext(run_id="run-1", thread_id="t", user_id="U1", call_id=change.id)

    first = await execute_one(change, registry=registry, ctx=ctx, journal=journal)
    second = await execute_one(change, registry=registry, ctx=ctx, journal=journal)

    assert first.result is not None and first.result.status == "ok"
    assert second.result is not None and json.loads(second.result.content)["errorCode"] == "outcome_unknown"
    assert probe.count("change_b") == 1


async def test_the_gate_folds_case_for_a_plugin_tool(store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe)
    for spelling in ("Prod", "PROD", " prod"[1:]):
        model = ScriptedModel([reply("", call("change", "c1", target="db", environment=spelling))])
        out = await make_harness(model, store, [tools["change"]]).engine.ask(f"t-{spelling}", "change it")
        assert out.status == "paused" and out.pending[0].interrupt_type == "confirm_risky", spelling
    assert probe.count("change") == 0


async def test_the_pairing_check_runs_before_the_first_request(store: RedisStore) -> None:
    lost = ToolCall(id="lost-1", name="lookup_a", arguments={})
    now = time.time()
    old = RunRecord(run_id="old-run", thread_id="t", user_id="U1", text="q", status="finished",
                    stop_reason="final_answer", created_at=now, updated_at=now)
    await store.commit(Write(run=old, messages=[UserMessage(content="q"), AssistantMessage(tool_calls=(lost,))]))
    model = ScriptedModel([reply("answered")])
    tools = toolkit(Probe())

    out = await make_harness(model, store, [tools["lookup_a"]]).engine.ask("t", "again")

    assert out.answer == "answered"
    sent = [m for m in model.requests[0].messages if isinstance(m, ToolResultMessage) and m.call_id == "lost-1"]
    assert len(sent) == 1 and json.loads(sent[0].content)["errorCode"] == "missing_result"


async def test_a_mention_and_its_message_as_a_thread_reply_start_one_run(redis_url: str, prefix: str,
                                                                         slack: FakeSlack) -> None:
    slack.bot_user = None  # auth.test does not tell us our own user id
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors", "1300.1"))
        await ws.settle()
        before = (await ws.store.stats(3600)).runs
        text = "<@UBOT> and the runbook for rollbacks?"
        await ws.sender.event(mention(CHANNEL, "UREQ", text, "1300.2", thread_ts="1300.1"), event_id="EvM")
        await ws.sender.event(message(CHANNEL, "UREQ", text, "1300.2", thread_ts="1300.1"), event_id="EvN")
        await ws.settle()
        assert (await ws.store.stats(3600)).runs == before + 1
    finally:
        await ws.stop()


async def test_an_outsider_cannot_confirm_stop_or_resume(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("change", "c1", target="db", environment="prod")),
                           reply("", call("blocker", "b1")), reply("resumed and finished")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[tools["change"], tools["blocker"]],
                              allowed_users=["UREQ"])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "change the db", "1400.1"))
        await ws.settle()
        card = next(m for m in slack.thread(CHANNEL, "1400.1")
                    if any(b["action_id"] == "opspilot_confirm" for b in buttons(m)))
        await ws.sender.action(confirm(card, "UOUT"))
        progress = progress_of(slack, "1400.1")
        stop = next(b for b in buttons(progress) if b["action_id"] == "opspilot_stop")
        await ws.sender.action(block_action(user="UOUT", channel=CHANNEL, message=progress,
                                            action_id="opspilot_stop", value=stop["value"]))
        await ws.settle()
        assert probe.count("change") == 0
        run_id = await ws.store.thread_run("slack:C0OPS:1400.1")
        record = await ws.store.load_run(run_id or "")
        assert record is not None and record.status == "paused" and len(record.pending) == 1
        assert buttons(slack.messages[(CHANNEL, card["ts"])])  # the card still asks

        # A run whose worker died with a change in flight waits for Resume (one cut off mid-read carries on by
        # itself); an outsider's Resume does nothing.
        await ws.sender.event(mention(CHANNEL, "UREQ", "block", "1500.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        await ws.store.journal.start(str(await ws.store.thread_run("slack:C0OPS:1500.1")), "b1")
        for task in list(ws.service.inbound.tasks.running):
            task.cancel()
        await asyncio.sleep(0.2)
        await ws.service.core.sweeps.sweep(now=time.time() + 600)
        await ws.settle()
        stalled = progress_of(slack, "1500.1")
        resume = next(b for b in buttons(stalled) if b["action_id"] == "opspilot_resume")
        requests = len(model.requests)
        await ws.sender.action(block_action(user="UOUT", channel=CHANNEL, message=stalled,
                                            action_id="opspilot_resume", value=resume["value"]))
        await ws.settle()
        assert len(model.requests) == requests
        assert all("resumed and finished" not in all_text(m) for m in slack.thread(CHANNEL, "1500.1"))
        assert len([t for t in slack.ephemeral_texts("UOUT") if "not on the list" in t]) == 3
    finally:
        await ws.stop()


async def test_a_stop_on_a_paused_run_is_refused_to_who_may_not_decline_its_card(redis_url: str, prefix: str,
                                                                                 slack: FakeSlack) -> None:
    """A bystander's Decline of a prod card is refused; their Stop on the paused run's progress turned the same card
    down ("Cancelled: the run was stopped by @UBYSTANDER"). Whoever asked still may."""
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("Changing.", call("change", "c1", target="payments", environment="prod")),
                           reply("stopped")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[tools["change"]], progress="update",
                              approvers={"change": {"prod": {"users": ["UBOSS"]}}})
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "change payments in prod", "1450.1"))
        await ws.settle()
        progress = progress_of(slack, "1450.1")
        stop = next(b for b in buttons(progress) if b["action_id"] == "opspilot_stop")
        for user in ("UBYSTANDER", "UREQ"):
            await ws.sender.action(block_action(user=user, channel=CHANNEL, message=progress,
                                                action_id="opspilot_stop", value=stop["value"]))
            await ws.settle()
            record = await ws.store.load_run(await ws.store.thread_run("slack:C0OPS:1450.1") or "")
            assert record is not None
            if user == "UBYSTANDER":
                assert record.status == "paused" and len(record.pending) == 1
                assert any("approver" in t for t in slack.ephemeral_texts("UBYSTANDER"))
                for p in record.pending:  # its ticket lapsed (past expiry + a day, not yet swept): judged all the same
                    await ws.store.client.delete(ws.store.keys.token(p.token))
            else:
                assert record.status == "finished" and record.stop_reason == "cancelled"
        assert probe.count("change") == 0
    finally:
        await ws.stop()


async def test_every_key_has_a_ttl_after_a_slack_flow_and_a_cancel_through_redis(
        redis_url: str, prefix: str, slack: FakeSlack, store: RedisStore) -> None:
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        card = await ask_restart(ws)
        await ws.sender.action(confirm(card, "UAPPROVER"))
        await ws.settle()
        assert len(ws.toolbox.restarts.done) == 1
    finally:
        await ws.stop()

    probe = Probe()
    tools = toolkit(probe)
    runner = make_harness(ScriptedModel([reply("", call("blocker", "b1"))]), store, [tools["blocker"]])
    other = make_harness(ScriptedModel([]), store, [tools["blocker"]])
    asking = asyncio.create_task(runner.engine.ask("t-cancel", "go"))
    await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 5)
    run_id = await store.thread_run("t-cancel")
    assert await other.engine.cancel(run_id or "") is None  # not running here: asked through Redis
    assert (await asyncio.wait_for(asking, 10)).stop_reason == "cancelled"
    await store.locks.request_cancel("run-elsewhere")  # a request still waiting for its worker to read it

    keys = [k async for k in store.client.scan_iter(match=f"{prefix}:*")]
    parts = [[p for p in k.split(":")[1:] if not p.startswith("{")] for k in keys]
    kinds = {p[0] + (":" + p[1] if p[0] == "meta" else "") for p in parts}
    assert {"meta:slack-thread", "meta:slack-run", "meta:slack-card", "token", "claim", "dedupe"} <= kinds
    assert any(k.endswith(":cancel") for k in keys)
    for key in keys:
        assert await store.client.ttl(key) > 0, f"{key} has no TTL"


async def test_every_key_has_a_ttl_while_a_run_is_paused(redis_url: str, prefix: str, slack: FakeSlack,
                                                         store: RedisStore) -> None:
    """Not only after a run ends: a paused run's record and its question's ticket, like every other key, must
    expire if nobody ever answers (and its trace is inside its record: no list beside it)."""
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        await ask_restart(ws)  # the Confirm card is out; the run waits for a person
        keys = [k async for k in store.client.scan_iter(match=f"{prefix}:*")]
        assert not any(k.endswith(":trace") for k in keys), "a run's trace is inside its record"
        assert {"token", "run"} <= {p for k in keys for p in k.split(":")[1:] if not p.startswith("{")}
        for key in keys:
            assert await store.client.ttl(key) > 0, f"{key} has no TTL while its run is paused"
    finally:
        await ws.stop()


async def test_stop_after_a_worker_died_mid_change_never_says_nothing_ran(store: RedisStore) -> None:
    probe = Probe()

    @tool(description="A change that hangs.", mutating=True, timeout_s=60)
    async def hang(args: Change, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("hang")
        await asyncio.sleep(60)
        return {}

    first = make_harness(ScriptedModel([reply("", call("hang", "h1", target="db"))]), store, [hang],
                         options=EngineOptions(lease_ttl_ms=200))
    worker = asyncio.create_task(first.engine.ask("t", "change the db", user_id="UREQ"))
    await asyncio.wait_for(probe.started.setdefault("hang", asyncio.Event()).wait(), 5)
    run_id = await store.thread_run("t")
    worker.cancel()  # the worker dies in the middle of the change
    with contextlib.suppress(asyncio.CancelledError):
        await worker

    other = make_harness(ScriptedModel([]), store, [hang])
    out = await other.engine.cancel(run_id or "", by="UREQ")

    assert out is not None and out.stop_reason == "cancelled" and probe.count("hang") == 1
    assert "may or may not have completed" in out.answer and "nothing was run" not in out.answer
    results = {m.call_id: m for m in await store.load_transcript("t") if isinstance(m, ToolResultMessage)}
    assert results["h1"].error_code == "outcome_unknown"
    audit = await store.read_audit()
    assert [(a["tool"], a["error_code"]) for a in audit] == [("hang", "outcome_unknown")]


async def test_a_claim_whose_holder_died_is_taken_over_and_a_live_one_is_respected(store: RedisStore) -> None:
    toolbox = ops.build()
    h = make_harness(ScriptedModel([*restart_script(), reply("restarted")]), store, toolbox=toolbox,
                     options=EngineOptions(claim_stale_s=0.3, lease_wait_s=1))
    paused = await h.engine.ask("t", "restart")
    token = paused.pending[0].token
    assert (await store.locks.claim(token, "UDEAD")).won  # a click that died before deciding

    with pytest.raises(AlreadyHandled) as fresh:  # within the grace period: someone may be deciding
        await h.engine.resume_token(token, Confirm(), by="U2")
    assert fresh.value.holder == "UDEAD"
    await Sweeps(h.engine, stale_after_s=0).sweep()  # recovery leaves claims alone
    assert not (await store.locks.claim(token, "UPROBE")).won
    await asyncio.sleep(0.4)

    out = await h.engine.resume_token(token, Confirm(), by="U2")
    assert out.answer == "restarted" and len(toolbox.restarts.done) == 1
    with pytest.raises(AlreadyHandled) as late:
        await h.engine.resume_token(token, Confirm(), by="U3")
    assert late.value.holder == "U2"


async def test_a_run_quiet_for_long_but_held_by_its_live_worker_is_not_lost(store: RedisStore) -> None:
    """One slow read past ``stale_after_s``: the sweep took the live run for lost at every tick, spending its
    automatic carry-ons, so that a real death afterwards left it waiting for a person's Resume."""
    probe = Probe()
    tools = toolkit(probe)
    h = make_harness(ScriptedModel([reply("", call("blocker", "b1")), reply("done")]), store, [tools["blocker"]])
    running = asyncio.create_task(h.engine.ask("t", "look"))
    await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 5)
    sweeps = Sweeps(h.engine, stale_after_s=0)
    lost: list[str] = []

    async def on_lost(run_id: str) -> bool:
        lost.append(run_id)
        return True

    sweeps.on_lost = on_lost
    for _ in range(3):
        await sweeps.sweep(now=time.time() + 600)
    assert lost == []  # held: at work, not lost
    probe.release.set()
    out = await asyncio.wait_for(running, 10)
    assert out.status == "finished" and out.answer == "done"


async def test_a_catalog_s_own_spelling_of_an_environment_is_known() -> None:
    """A catalog saying `Prod` (the config's rules folded, the catalog's list not): a change there was refused as
    "not an environment I know (known: Prod, staging)" and nobody could confirm it."""
    from bot.config import SlackConfig
    from bot.slack.inbound.access import AccessPolicy

    config = SlackConfig(bot_token="xoxb-x", signing_secret="s",
                         approvers={"restart_service": {"staging": {"users": ["UBOSS"]}}})
    access = AccessPolicy(config, client=None, environments=["Prod", "staging"])  # type: ignore[arg-type]
    verdict = await access.may_confirm("UOPS", "restart_service", "Prod", "UREQ")
    assert verdict.allowed and "not an environment I know" not in verdict.words("en")
