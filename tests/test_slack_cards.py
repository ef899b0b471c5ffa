"""The Slack surface end to end, its cards: a confirmation or a form, who may answer it, how it closes (expiry,
reminder, a reply in the thread, a restart between pause and click). Bolt's real HTTP endpoint, signed requests."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import time
from typing import Any

from bot.agent.transcript import violations
from bot.demo.sender import block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.inbound.work import AGAIN
from bot.slack.outbound.audit import audit_line
from core.messages import ToolResultMessage
from tests.conftest import until
from tests.slack_harness import CHANNEL, QUESTION, Workspace, ask_restart, card_of, confirm, open_workspace


async def test_confirm_by_an_authorised_user_runs_once_and_closes_the_card(ws: Workspace) -> None:
    card = await ask_restart(ws)
    assert "Confirmation needed" in all_text(card) and "`prod`" in all_text(card)
    confirm_button = next(b for b in buttons(card) if b["action_id"] == "opspilot_confirm")
    assert confirm_button["style"] == "danger" and "confirm" in confirm_button
    assert len(confirm_button["value"]) < 64 and "prod" not in confirm_button["value"]  # an opaque token only

    status, _ = await ws.sender.action(confirm(card, "UAPPROVER"))
    assert status == 200
    await ws.settle()

    assert len(ws.toolbox.restarts.done) == 1
    closed = ws.slack.messages[(CHANNEL, card["ts"])]
    assert buttons(closed) == [] and "Confirmed by <@UAPPROVER>" in all_text(closed)
    final = ws.slack.thread(CHANNEL, "100.1")[-1]
    assert "Restarted `payments` in prod" in all_text(final)
    assert "approved by <@UAPPROVER>" in all_text(final) and "requested by <@UREQ>" in all_text(final)
    assert ws.slack.rejected == []


async def test_double_click_and_simultaneous_approvers_run_once(ws: Workspace) -> None:
    card = await ask_restart(ws)
    await asyncio.gather(ws.sender.action(confirm(card, "UA")), ws.sender.action(confirm(card, "UA")),
                         ws.sender.action(confirm(card, "UB")))
    await ws.settle()

    assert len(ws.toolbox.restarts.done) == 1
    closed = all_text(ws.slack.messages[(CHANNEL, card["ts"])])
    winner = next(u for u in ("UA", "UB") if f"Confirmed by <@{u}>" in closed)
    texts = ws.slack.ephemeral_texts()
    # "Already handled by @UA", or, once the card closed, how its card says it ended ("… (Confirmed by @UA …)")
    assert len([t for t in texts if "lready handled" in t and f"<@{winner}>" in t]) == 2, texts


async def test_one_s_own_click_cut_off_after_it_claimed_is_not_already_handled(ws: Workspace) -> None:
    """A Confirm that claimed the card and then lost Redis past the grace ("I could not record this"): the same
    person's next Confirm was told "Already handled by" themselves, nothing having run, for half a minute."""
    card = await ask_restart(ws)
    token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
    store = ws.service.core.store
    assert (await store.locks.claim(token, "UAPPROVER")).won  # the cut-off click's claim, three seconds old
    key = store.keys.claim(token)
    await store.client.pexpire(key, await store.client.pttl(key) - 3000)
    await ws.sender.action(confirm(card, "UAPPROVER"))
    await ws.settle()
    said = ws.slack.ephemeral_texts("UAPPROVER")
    assert said and "still being recorded, or was cut off" in said[-1] and "press again" in said[-1], said
    assert not any("lready handled" in t for t in said) and ws.toolbox.restarts.done == []


async def test_a_card_whose_state_was_lost_is_closed_not_put_back(ws: Workspace, prefix: str) -> None:
    """Redis restarted without persistence: a click on a paused run's card said "no longer pending" and put the card
    back with its buttons, to be pressed in vain again and again."""
    card = await ask_restart(ws)
    client = ws.service.core.store.client
    async for key in client.scan_iter(match=f"{prefix}*"):  # everything OpsPilot kept, gone
        await client.delete(key)
    click = confirm(card, "UAPPROVER") | {"response_url": ws.slack.response_url(CHANNEL, card["ts"])}
    await ws.sender.action(click)
    await ws.settle()
    shown = ws.slack.messages[(CHANNEL, card["ts"])]
    assert buttons(shown) == [] and "OpsPilot holds no record of this request" in all_text(shown), all_text(shown)
    assert "This request is no longer pending." in ws.slack.ephemeral_texts("UAPPROVER")
    assert ws.toolbox.restarts.done == []


async def test_an_unauthorised_click_changes_nothing(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    slack.usergroups["S0SRE"] = ["USRE"]
    ws = await open_workspace(redis_url, prefix, slack,
                              approvers={"restart_service": {"prod": {"users": ["UBOSS"], "usergroups": ["S0SRE"]}}},
                              two_person_rule=["prod"])
    try:
        card = await ask_restart(ws, user="UREQ")
        await ws.sender.action(confirm(card, "URANDOM"))
        await ws.sender.action(confirm(card, "UREQ"))  # the requester, under the two-person rule
        await ws.settle()
        assert ws.toolbox.restarts.done == []
        assert buttons(ws.slack.messages[(CHANNEL, card["ts"])])  # the card still asks
        assert any("not an approver" in t for t in ws.slack.ephemeral_texts("URANDOM"))
        assert any("Two-person rule" in t for t in ws.slack.ephemeral_texts("UREQ"))

        await ws.sender.action(confirm(card, "USRE"))  # a member of the approvers' user group
        await ws.settle()
        assert len(ws.toolbox.restarts.done) == 1
    finally:
        await ws.stop()


async def test_params_form_validates_then_resumes(ws: Workspace) -> None:
    await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors", "200.1"))
    await ws.settle()
    await ws.sender.event(message(CHANNEL, "UREQ", "restart it", "200.2", thread_ts="200.1"))
    await ws.settle()
    form = card_of(ws.slack, "200.1")
    inputs = [b for b in form["blocks"] if b["type"] == "input"]
    assert inputs[0]["block_id"] == "opspilot_field:environment"
    assert [o["value"] for o in inputs[0]["element"]["options"]] == ["prod", "staging"]
    token = next(b["value"] for b in buttons(form) if b["action_id"] == "opspilot_submit")

    def submit(value: str) -> dict:
        state = {"values": {"opspilot_field:environment": {
            "value": {"type": "static_select", "selected_option": {"value": value}}}}}
        return block_action(user="UREQ", channel=CHANNEL, message=form, action_id="opspilot_submit",
                            value=token, state=state)

    await ws.sender.action(submit("moon"))  # a forged value: validated against the tool's model
    await ws.settle()
    stays = ws.slack.messages[(CHANNEL, form["ts"])]
    assert buttons(stays) and "environment must be one of `prod`, `staging`" in all_text(stays), all_text(stays)

    nothing = block_action(user="UREQ", channel=CHANNEL, message=form, action_id="opspilot_submit", value=token,
                           state={"values": {"opspilot_field:environment": {
                               "value": {"type": "static_select", "selected_option": None}}}})
    await ws.sender.action(nothing)  # Submit with nothing chosen: refused on the form, not "submitted" and asked again
    await ws.settle()
    stays = ws.slack.messages[(CHANNEL, form["ts"])]
    assert buttons(stays) and "Not accepted: choose environment" in all_text(stays), all_text(stays)
    assert not ws.toolbox.restarts.done

    await ws.sender.action(submit("staging"))
    await ws.settle()
    assert ws.toolbox.restarts.done[0]["environment"] == "staging"
    closed = ws.slack.messages[(CHANNEL, form["ts"])]
    assert "Submitted by <@UREQ>" in all_text(closed) and not buttons(closed)
    assert "Restarted `payments` in staging" in all_text(ws.slack.thread(CHANNEL, "200.1")[-1])

    await ws.sender.action(submit("moon"))  # a stale form's bad value, after the answer: told so, the form stays shut
    await ws.settle()
    assert ws.slack.messages[(CHANNEL, form["ts"])] == closed and len(ws.toolbox.restarts.done) == 1
    assert any("already handled" in text.lower() for text in ws.slack.ephemeral_texts("UREQ"))


async def test_expiry_closes_the_card_and_a_late_click_is_told(ws: Workspace) -> None:
    card = await ask_restart(ws)
    await ws.service.core.sweeps.sweep(now=time.time() + 3 * 3600)
    await ws.settle()

    closed = ws.slack.messages[(CHANNEL, card["ts"])]
    assert buttons(closed) == [] and "Expired" in all_text(closed)
    transcript = await ws.store.load_transcript("slack:C0OPS:100.1")
    assert any(isinstance(m, ToolResultMessage) and m.status == "expired" for m in transcript)

    await ws.sender.action(confirm(card, "UAPPROVER"))
    await ws.settle()
    assert ws.toolbox.restarts.done == []
    assert "This request expired." in ws.slack.ephemeral_texts("UAPPROVER")


async def test_a_click_on_a_card_past_its_time_closes_it_at_once(ws: Workspace) -> None:
    """Clicked after its time and before the sweep came by: the person was told it expired while its card kept its
    live buttons and "Waiting for you" for up to a sweep's period."""
    engine = ws.service.core.engine
    engine.deps = dataclasses.replace(engine.deps, interrupt_ttl_s=0.2)
    card = await ask_restart(ws)
    pending = (await ws.store.load_run(await ws.store.thread_run("slack:C0OPS:100.1") or "")).pending[0]
    # Its time runs out (no sweep runs in between: its period is longer).
    await asyncio.sleep(max(pending.expires_at - time.time(), 0.0) + 0.05)
    await ws.sender.action(confirm(card, "UAPPROVER"))
    await ws.settle()
    assert ws.toolbox.restarts.done == []
    assert "This request expired." in ws.slack.ephemeral_texts("UAPPROVER")
    closed = ws.slack.messages[(CHANNEL, card["ts"])]
    assert buttons(closed) == [] and "Expired" in all_text(closed), all_text(closed)


async def test_a_reminder_is_posted_once_before_expiry(ws: Workspace) -> None:
    await ask_restart(ws)
    record = await ws.store.load_run(await ws.store.thread_run("slack:C0OPS:100.1") or "")
    assert record is not None
    soon = record.pending[0].expires_at - 60
    await ws.service.reminders.sweep(now=soon)
    await ws.service.reminders.sweep(now=soon + 1)
    await ws.settle()  # reminders go out through the outbox
    reminders = [m for m in ws.slack.thread(CHANNEL, "100.1") if "still waiting for a decision" in all_text(m)]
    assert len(reminders) == 1 and "<@UREQ>" in all_text(reminders[0])


async def test_a_restart_between_pause_and_click(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    first = await open_workspace(redis_url, prefix, slack)
    card = await ask_restart(first)
    await first.stop()  # this instance goes away; its paused run lives on in Redis

    second = await open_workspace(redis_url, prefix, slack)
    try:
        await second.sender.action(confirm(card, "UAPPROVER"))
        await second.settle()
        assert len(second.toolbox.restarts.done) == 1
        # The new instance kept editing the paused run's progress message, from the state it found in Redis.
        runs = [m for m in slack.thread(CHANNEL, "100.1") if "step" in all_text(m)]
        assert len(runs) == 2  # the lookup run and the restart run
        restart_progress = all_text(runs[1])
        assert ":white_check_mark: Done" in restart_progress
        assert ":white_check_mark: `restart_service`" in restart_progress
        assert [c for c in slack.called("chat.update") if c["ts"] == runs[1]["ts"]]
        assert "Restarted `payments` in prod" in all_text(slack.thread(CHANNEL, "100.1")[-1])
    finally:
        await second.stop()


async def test_a_reply_in_the_thread_answers_a_pending_card(ws: Workspace) -> None:
    card = await ask_restart(ws)
    await ws.sender.event(message(CHANNEL, "UREQ", "wait, check the database first", "100.5", thread_ts="100.1"))
    await ws.settle()
    closed = ws.slack.messages[(CHANNEL, card["ts"])]
    assert buttons(closed) == [] and "Answered in the thread instead" in all_text(closed)
    assert ws.toolbox.restarts.done == []
    await ws.sender.action(confirm(card, "UAPPROVER"))  # a stale Confirm, pressed from an old copy of the card
    await ws.settle()
    told = ws.slack.ephemeral_texts("UAPPROVER")
    assert any("Answered in the thread instead" in t for t in told) and ws.toolbox.restarts.done == [], told
    transcript = await ws.store.load_transcript("slack:C0OPS:100.1")
    assert violations(transcript) == []


async def test_changes_only_in_their_channels_and_the_audit_stream(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack, mutating_channels=["C0CHANGES"])
    try:
        card = await ask_restart(ws)
        await ws.sender.action(confirm(card, "UAPPROVER"))
        await ws.settle()
        assert ws.toolbox.restarts.done == []
        assert any("only be confirmed in <#C0CHANGES>" in t for t in ws.slack.ephemeral_texts("UAPPROVER"))

        await ws.sender.event(mention("C0CHANGES", "UREQ", QUESTION, "1200.1"))
        await ws.settle()
        await ws.sender.event(message("C0CHANGES", "UREQ", "restart it in prod", "1200.2", thread_ts="1200.1"))
        await ws.settle()
        card = copy.deepcopy(next(m for m in slack.thread("C0CHANGES", "1200.1")
                                  if any(b["action_id"] == "opspilot_confirm" for b in buttons(m))))
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
        await ws.sender.action(block_action(user="UAPPROVER", channel="C0CHANGES", message=card,
                                            action_id="opspilot_confirm", value=token))
        await ws.settle()
        assert len(ws.toolbox.restarts.done) == 1
        audit = await ws.store.read_audit()
        assert [(a["tool"], a["requested_by"], a["approved_by"], a["status"]) for a in audit] == [
            ("restart_service", "UREQ", "UAPPROVER", "ok")]
        assert json.loads(audit[0]["arguments"])["environment"] == "prod"
    finally:
        await ws.stop()


async def test_the_requester_can_cancel_their_own_request(ws: Workspace) -> None:
    card = await ask_restart(ws)
    assert "*The model's reason:*" in all_text(card)
    token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_decline")
    await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=card, action_id="opspilot_decline",
                                        value=token))
    await ws.settle()
    closed = ws.slack.messages[(CHANNEL, card["ts"])]
    assert buttons(closed) == [] and "Declined by <@UREQ>" in all_text(closed)
    assert ws.toolbox.restarts.done == []
    assert "The restart did not run" in all_text(ws.slack.thread(CHANNEL, "100.1")[-1])
    # the audit keeps who turned it down, as it keeps who approves (nobody approved this one)
    [entry] = await ws.store.read_audit()
    assert (entry["approved_by"], entry["declined_by"], entry["error_code"]) == ("", "UREQ", "declined_by_user")
    assert "declined by <@UREQ>" in audit_line(entry, "en") and "拒绝人 <@UREQ>" in audit_line(entry, "zh")


async def test_a_card_s_token_on_another_message_of_its_thread_acts_on_nothing(ws: Workspace) -> None:
    """Slack sends a click with the message clicked: the card's token on another of the bot's messages in the
    same thread would close that one (through its response_url) and leave the card live."""
    card = await ask_restart(ws)
    other = next(m for m in ws.slack.thread(CHANNEL, "100.1") if m.get("bot") and m["ts"] != card["ts"])
    token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
    await ws.sender.action(block_action(user="UAPPROVER", channel=CHANNEL, message=copy.deepcopy(other),
                                        action_id="opspilot_confirm", value=token))
    await ws.settle()
    assert ws.toolbox.restarts.done == [] and ws.slack.messages[(CHANNEL, other["ts"])]["blocks"] == other["blocks"]
    assert buttons(ws.slack.messages[(CHANNEL, card["ts"])])  # the card still asks
    await ws.sender.action(confirm(card, "UAPPROVER"))  # from the card itself: runs
    await ws.settle()
    assert len(ws.toolbox.restarts.done) == 1


async def test_a_click_done_again_is_not_told_it_was_already_handled(ws: Workspace) -> None:
    """One Confirm, its worker killed mid-change, the click's work done again by another: the person who clicked
    once was told "This request was already handled" (by themselves). A second click of theirs still is told."""
    card = await ask_restart(ws)
    done: list[Any] = []
    handing = ws.service.inbound.dispatch

    async def keep(item: Any) -> None:
        done.append(item)
        await handing(item)

    ws.service.inbound.dispatch = keep
    await ws.sender.action(confirm(card, "UAPPROVER"))
    await ws.settle()
    [answer] = [item for item in done if item.kind == "answer"]
    assert ws.service.executor is not None
    again = AGAIN.set(True)
    try:
        await ws.service.executor(answer)
    finally:
        AGAIN.reset(again)
    await ws.settle()
    assert ws.slack.ephemeral_texts("UAPPROVER") == [] and len(ws.toolbox.restarts.done) == 1
    await ws.service.executor(answer)  # a second click of theirs: told how it ended
    await ws.settle()
    assert [t for t in ws.slack.ephemeral_texts("UAPPROVER") if "already handled" in t.lower()]


async def test_while_a_confirmed_change_runs_the_progress_is_not_waiting(redis_url: str, prefix: str,
                                                                         slack: FakeSlack) -> None:
    """Confirmed, the change running (a rollout can take minutes): the progress still said "✋ Waiting for you"."""
    from bot.agent.models.scripted import ScriptedModel, call, reply
    from tests.toolkit import Change
    from tools import ToolContext, confirm_in, tool

    running, release = asyncio.Event(), asyncio.Event()

    @tool(description="A slow change; prod needs confirmation.", mutating=True, confirm=confirm_in("prod"),
          args=Change)
    async def slow_change(args: Change, ctx: ToolContext) -> dict[str, Any]:
        running.set()
        await release.wait()
        return {"done": args.target}

    model = ScriptedModel([reply("", call("slow_change", "s1", target="api", environment="prod")), reply("Done.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[slow_change])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "change api", "700.1"))
        await ws.settle()
        card = card_of(ws.slack, "700.1")
        await ws.sender.action(confirm(card, "UAPPROVER"))
        await asyncio.wait_for(running.wait(), 10)

        def progress() -> str:
            return next(all_text(m) for m in ws.slack.thread(CHANNEL, "700.1") if "slow_change: running" in
                        all_text(m) or "slow_change: waiting" in all_text(m))

        await until(lambda: "slow_change: running" in progress(), 10)  # its line and the header: one edit
        assert "Waiting for you" not in progress() and "Working on it" in progress(), progress()
        release.set()
        await ws.settle()
    finally:
        release.set()
        await ws.stop()


async def test_a_decision_whose_worker_died_before_showing_it_still_closes_its_card(ws: Workspace) -> None:
    """A Confirm recorded by a worker that died before its event was shown: the click, done again by another
    worker, was "already handled" by its own clicker and returned quietly, and the card kept its buttons for good
    (the restart had run)."""
    from bot.agent.decisions import Confirm
    from tests.conftest import make_harness

    card = await ask_restart(ws)
    done: list[Any] = []
    handing = ws.service.inbound.dispatch

    async def held(item: Any) -> None:  # the click reaches the queue; the worker that takes it is another process
        done.append(item)

    ws.service.inbound.dispatch = held
    await ws.sender.action(confirm(card, "UAPPROVER"))
    await ws.settle()
    ws.service.inbound.dispatch = handing
    [answer] = [item for item in done if item.kind == "answer"]
    # That worker records the decision and runs the restart; its events die with it (nobody renders them).
    elsewhere = make_harness(ws.service.core.engine.deps.model, ws.service.core.store, toolbox=ws.toolbox)
    await elsewhere.engine.answer(await elsewhere.engine.ticket(answer.ticket.pending.token), Confirm(),
                                  by="UAPPROVER")
    assert len(ws.toolbox.restarts.done) == 1
    assert any(b["action_id"] == "opspilot_confirm" for b in buttons(ws.slack.messages[(CHANNEL, card["ts"])]))
    assert ws.service.executor is not None
    again = AGAIN.set(True)  # the queue hands the click to another worker
    try:
        await ws.service.executor(answer)
    finally:
        AGAIN.reset(again)
    await ws.settle()
    shown = ws.slack.messages[(CHANNEL, card["ts"])]
    assert buttons(shown) == [] and "<@UAPPROVER>" in all_text(shown), all_text(shown)
    assert len(ws.toolbox.restarts.done) == 1 and ws.slack.ephemeral_texts("UAPPROVER") == []
