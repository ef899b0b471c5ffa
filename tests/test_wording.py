"""The exact words people read when a run is stopped or a change declined: who, when, and what ran in this
run only, with targets, in words."""

from __future__ import annotations

import asyncio
import re

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from tests.slack_harness import CHANNEL, QUESTION, card_of, open_workspace
from tests.toolkit import Probe, toolkit


async def test_stop_says_who_and_when_and_lists_only_this_runs_calls(redis_url: str, prefix: str,
                                                                     slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("lookup_b", "old1")), reply("First answer."),
                           reply("", call("blocker", "b1"), call("lookup_a", "a1"))])
    ws = await open_workspace(redis_url, prefix, slack, model=model,
                              specs=[tools["blocker"], tools["lookup_a"], tools["lookup_b"]])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "first", "800.1"))
        await ws.settle()
        await ws.sender.event(message(CHANNEL, "UREQ", "second", "800.2", thread_ts="800.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        await asyncio.sleep(0.2)
        progress = next(m for m in reversed(slack.thread(CHANNEL, "800.1")) if buttons(m))
        stop = next(b for b in buttons(progress) if b["action_id"] == "opspilot_stop")
        await ws.sender.action(block_action(user="UBOB", channel=CHANNEL, message=progress,
                                            action_id="opspilot_stop", value=stop["value"]))
        await ws.settle()
        header = all_text(slack.messages[(CHANNEL, progress["ts"])]).splitlines()[0]
        assert re.fullmatch(r":no_entry_sign: Stopped by <@UBOB> at \d\d:\d\d UTC", header), header
        answer = all_text(slack.thread(CHANNEL, "800.1")[-1])
        assert re.match(r"_Stopped by <@UBOB> at \d\d:\d\d UTC\._\n\nWhat ran:\n", answer), answer
        assert "• `blocker`: stopped before it finished" in answer and "• `lookup_a`: done" in answer
        assert "lookup_b" not in answer  # the previous turn's call is not this run's
    finally:
        await ws.stop()


async def test_a_declined_change_names_the_person_and_stop_on_a_waiting_card_says_not_started(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    slack.profiles = {"UAPPROVER": "Alice"}
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "810.1"))
        await ws.settle()
        await ws.sender.event(message(CHANNEL, "UREQ", "restart it in prod", "810.2", thread_ts="810.1"))
        await ws.settle()
        card = card_of(slack, "810.1")
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_decline")
        await ws.sender.action(block_action(user="UAPPROVER", channel=CHANNEL, message=card,
                                            action_id="opspilot_decline", value=token))
        await ws.settle()
        answer = all_text(slack.thread(CHANNEL, "810.1")[-1])
        assert "The restart did not run: declined in Slack by Alice." in answer, answer
        prose, audit = answer.split("*Audit*")  # the prose names people as the model may; the audit mentions them
        assert "U0" not in prose and "UAPPROVER" not in prose and "declined by <@UAPPROVER>" in audit, answer

        await ws.sender.event(message(CHANNEL, "UREQ", "restart it in prod", "810.3", thread_ts="810.1"))
        await ws.settle()
        progress = next(m for m in reversed(slack.thread(CHANNEL, "810.1")) if any(
            b["action_id"] == "opspilot_stop" for b in buttons(m)))
        stop = next(b for b in buttons(progress) if b["action_id"] == "opspilot_stop")
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=progress,
                                            action_id="opspilot_stop", value=stop["value"]))
        await ws.settle()
        answer = all_text(slack.thread(CHANNEL, "810.1")[-1])
        assert "• `restart_service` on payments/prod: not started" in answer, answer
        ending = all_text(next(m for m in slack.thread(CHANNEL, "810.1")[::-1] if "Cancelled" in all_text(m)))
        assert re.search(r"Cancelled: the run was stopped by <@UREQ> at \d\d:\d\d UTC", ending), ending
    finally:
        await ws.stop()


async def test_the_audit_list_says_each_change_in_words_in_the_threads_language(redis_url: str, prefix: str,
                                                                                slack: FakeSlack) -> None:
    cases = [  # (the question, whose language the thread speaks; the first run's audit; the second's)
        ("change payments", [
            "• `change` on `payments` in `prod` — requested by <@UREQ>, approved by <@UBOB> — done",
            "• `change` on `orders` in `prod` — requested by <@UREQ>, declined by <@UBOB> — declined: not run"],
            "• `change` on `cart` in `prod` — requested by <@UREQ> — not run: the run stopped first"),
        ("改一下 payments", [
            "• 在 `prod` 对 `payments` 执行 `change` — 发起人 <@UREQ>，批准人 <@UBOB> — 已完成",
            "• 在 `prod` 对 `orders` 执行 `change` — 发起人 <@UREQ>，拒绝人 <@UBOB> — 已拒绝，未执行"],
            "• 在 `prod` 对 `cart` 执行 `change` — 发起人 <@UREQ> — 未执行：运行先停止了"),
    ]
    for n, (question, first, stopped) in enumerate(cases):
        probe = Probe()
        model = ScriptedModel([reply("", call("change", "c1", target="payments", environment="prod")),
                               reply("", call("change", "c2", target="orders", environment="prod")),
                               reply("Done."), reply("", call("change", "c3", target="cart", environment="prod"))])
        ws = await open_workspace(redis_url, f"{prefix}{n}", slack, model=model, specs=[toolkit(probe)["change"]],
                                  language="auto")
        thread = f"83{n}.1"
        try:
            await ws.sender.event(mention(CHANNEL, "UREQ", question, thread))
            await ws.settle()
            for action in ("opspilot_confirm", "opspilot_decline"):
                card = card_of(slack, thread) if action == "opspilot_confirm" else next(
                    m for m in reversed(slack.thread(CHANNEL, thread)) if any(
                        b["action_id"] == action for b in buttons(m)))
                await ws.sender.action(block_action(user="UBOB", channel=CHANNEL, message=card, action_id=action,
                                                    value=next(b["value"] for b in buttons(card)
                                                               if b["action_id"] == action)))
                await ws.settle()
            answer = all_text(slack.thread(CHANNEL, thread)[-1])
            assert "\n".join(first) in answer, answer

            await ws.sender.event(message(CHANNEL, "UREQ", question, f"83{n}.2", thread_ts=thread))
            await ws.settle()
            progress = next(m for m in reversed(slack.thread(CHANNEL, thread)) if any(
                b["action_id"] == "opspilot_stop" for b in buttons(m)))
            await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=progress,
                                                action_id="opspilot_stop", value=next(
                                                    b["value"] for b in buttons(progress))))
            await ws.settle()
            answer = all_text(slack.thread(CHANNEL, thread)[-1])
            assert stopped in answer and "(cancelled)" not in answer, answer
            assert probe.count("change") == 1
        finally:
            await ws.stop()
