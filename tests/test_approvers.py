"""A confirm card says who may confirm it before anyone clicks — the approvers by name (never a mention that
would notify them all), the two-person rule where it applies, or, with no rule, who may under the config as it
stands — and the clicks bear it out."""

from __future__ import annotations

from typing import Any

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from tests.slack_harness import CHANNEL, Workspace, card_of, open_workspace
from tests.toolkit import Probe, toolkit


async def _card(redis_url: str, prefix: str, slack: FakeSlack, thread: str, **config: Any) -> tuple[Workspace, Probe]:
    probe = Probe()
    model = ScriptedModel([reply("", call("change", "c1", target="payments", environment="prod")),
                           reply("Changed.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[toolkit(probe)["change"]], **config)
    await ws.sender.event(mention(CHANNEL, "UREQ", "change payments in prod", thread))
    await ws.settle()
    return ws, probe


def _click(card: dict[str, Any], user: str) -> dict[str, Any]:
    token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
    return block_action(user=user, channel=CHANNEL, message=card, action_id="opspilot_confirm", value=token)


async def test_the_card_names_the_approvers_and_the_two_person_rule(redis_url: str, prefix: str,
                                                                    slack: FakeSlack) -> None:
    slack.profiles = {"UBOSS": "Boss", "UREQ": "Ann"}
    slack.usergroups["S0SRE"] = ["USRE", "UREQ"]
    slack.usergroup_handles["S0SRE"] = "sre-oncall"
    ws, probe = await _card(redis_url, prefix, slack, "300.1", two_person_rule=["prod"],
                            approvers={"change": {"prod": {"users": ["UBOSS"], "usergroups": ["S0SRE"]}}})
    try:
        card = card_of(slack, "300.1")
        text = all_text(card)
        assert "Who may confirm: Boss, members of @sre-oncall" in text, text
        assert ("Two-person rule in `prod`: Ann asked for this and cannot approve their own request; someone else "
                "must confirm.") in text
        assert "<@UBOSS>" not in text and "subteam" not in text  # names: listing them notifies nobody
        # What the card says is what a click meets: the requester (in the group) is refused, a member is not.
        await ws.sender.action(_click(card, "UREQ"))
        await ws.settle()
        assert probe.count("change") == 0
        await ws.sender.action(_click(card, "USRE"))
        await ws.settle()
        assert probe.count("change") == 1
        # The requester again, on the card as their client still shows it: it was answered, and that is what
        # they are told, not the two-person rule (as if someone else could still confirm it).
        told = len(slack.ephemeral_texts("UREQ"))
        await ws.sender.action(_click(card, "UREQ"))
        await ws.settle()
        assert probe.count("change") == 1
        said = slack.ephemeral_texts("UREQ")[told:]
        assert len(said) == 1 and "already handled" in said[0] and "Two-person" not in said[0], said
    finally:
        await ws.stop()


async def test_without_a_rule_the_card_says_anyone_who_may_use_it_here(redis_url: str, prefix: str,
                                                                       slack: FakeSlack) -> None:
    ws, _ = await _card(redis_url, prefix, slack, "310.1", mutating_channels=["C0CHANGES"])
    try:
        text = all_text(card_of(slack, "310.1"))
        assert "Who may confirm: anyone who may use OpsPilot in this channel" in text, text
        assert "Two-person rule" not in text  # not configured for prod: not claimed
        assert "Changes can only be confirmed in <#C0CHANGES>." in text  # nobody can, here: the card says so
    finally:
        await ws.stop()


async def test_the_card_says_it_in_chinese(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    slack.profiles = {"UBOSS": "Boss", "UOPS": "Ops", "UREQ": "Ann"}
    slack.usergroups["S0SRE"] = ["USRE"]
    slack.usergroup_handles["S0SRE"] = "sre-oncall"
    ws, _ = await _card(redis_url, prefix, slack, "320.1", language="zh", two_person_rule=["prod"],
                        approvers={"change": {"*": {"users": ["UBOSS", "UOPS"], "usergroups": ["S0SRE"]}}})
    try:
        text = all_text(card_of(slack, "320.1"))
        assert "可以确认的人：Boss、Ops、@sre-oncall 的成员" in text, text
        assert "`prod` 适用双人规则：这是 Ann 发起的，不能批准自己的请求，需要另一个人确认。" in text
    finally:
        await ws.stop()


async def test_capitalised_config_keys_still_protect_prod(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """`Prod` / `PROD` written by hand: folded at load, so the rules still match the call's `prod`."""
    ws, probe = await _card(redis_url, prefix, slack, "330.1", two_person_rule=["PROD"],
                            approvers={"change": {"Prod": {"users": ["UREQ", "uboss"]}}})
    try:
        card = card_of(slack, "330.1")
        assert "Two-person rule in `prod`" in all_text(card)
        # The requester is an approver but cannot approve their own request: the card does not name them.
        assert "Who may confirm: UBOSS" in all_text(card) and "UREQ" not in all_text(card).split("Two-person")[0]
        await ws.sender.action(_click(card, "UREQ"))  # the requester, though an approver: refused
        await ws.settle()
        assert probe.count("change") == 0
        assert any("Two-person rule" in t for t in slack.ephemeral_texts())
        await ws.sender.action(_click(card, "UBOSS"))
        await ws.settle()
        assert probe.count("change") == 1
    finally:
        await ws.stop()


async def test_a_rule_that_cannot_match_lets_nobody_confirm_and_says_why(redis_url: str, prefix: str,
                                                                          slack: FakeSlack) -> None:
    probe = Probe()
    model = ScriptedModel([reply("", call("change", "c1", target="payments", environment="Production")),
                           reply("Changed.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[toolkit(probe)["change"]],
                              approvers={"change": {"prod": {"users": ["UBOSS"]}}})
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "change payments in production", "340.1"))
        await ws.settle()
        card = card_of(slack, "340.1")
        text = all_text(card)
        assert "Who may confirm: nobody — `production` is not an environment I know (known: prod, staging)" in text
        assert "anyone" not in text
        assert [b["action_id"] for b in buttons(card)] == ["opspilot_decline"]  # no button nobody may use
        token = buttons(card)[0]["value"]
        for user in ("UBOSS", "UREQ"):  # a click forged with its token: not even the prod approver (no match)
            await ws.sender.action(block_action(user=user, channel=CHANNEL, message=card,
                                                action_id="opspilot_confirm", value=token))
            await ws.settle()
        assert probe.count("change") == 0
    finally:
        await ws.stop()


async def test_an_approver_group_slack_would_not_list_lets_none_of_it_confirm(redis_url: str, prefix: str,
                                                                               slack: FakeSlack) -> None:
    slack.usergroup_handles["S0GONE"] = "sre-oncall"  # listed by usergroups.list, its members not readable
    ws, probe = await _card(redis_url, prefix, slack, "350.1",
                            approvers={"change": {"prod": {"usergroups": ["S0GONE"]}}})
    try:
        card = card_of(slack, "350.1")
        text = all_text(card)
        assert "Who may confirm: no one — I could not read @sre-oncall from Slack" in text, text
        await ws.sender.action(_click(card, "USRE"))
        await ws.settle()
        assert probe.count("change") == 0
        assert any("could not read the approver group" in t for t in slack.ephemeral_texts())
    finally:
        await ws.stop()


async def test_when_only_the_requester_could_approve_the_card_says_no_one_can(redis_url: str, prefix: str,
                                                                              slack: FakeSlack) -> None:
    slack.profiles = {"UREQ": "Ann"}
    ws, _ = await _card(redis_url, prefix, slack, "340.1", two_person_rule=["prod"],
                        approvers={"change": {"prod": {"users": ["UREQ"]}}})
    try:
        card = card_of(slack, "340.1")
        text = all_text(card)
        assert ("Who may confirm: no one — Ann asked for this and is the only approver of `change` in `prod`, and "
                "the two-person rule lets nobody approve their own request") in text, text
        assert "someone else must confirm" not in text  # not said beside "no one": nobody can
        assert [b["action_id"] for b in buttons(card)] == ["opspilot_decline"]
    finally:
        await ws.stop()


async def test_a_reply_that_leads_to_a_change_makes_its_author_the_requester(redis_url: str, prefix: str,
                                                                             slack: FakeSlack) -> None:
    """An approver replying in someone else's paused thread asks for what follows: under the two-person rule they
    cannot approve the change their reply led to, and the card and the audit name them, not the thread's starter."""
    probe = Probe()
    slack.profiles = {"UREQ": "Ann", "UCARL": "Carl", "UBOB": "Bob"}
    model = ScriptedModel([reply("", call("change", "c1", target="payments", environment="prod")),
                           reply("", call("change", "c2", target="orders", environment="prod")),
                           reply("Changed.")])
    rule = {"change": {"prod": {"users": ["UREQ", "UCARL", "UBOB"]}}}
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[toolkit(probe)["change"]],
                              two_person_rule=["prod"], approvers=rule)
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "change payments in prod", "310.1"))
        await ws.settle()
        await ws.sender.event(message(CHANNEL, "UCARL", "no, change orders instead", "310.2", thread_ts="310.1"))
        await ws.settle()
        card = [m for m in slack.thread(CHANNEL, "310.1") if any(
            b["action_id"] == "opspilot_confirm" for b in buttons(m))][-1]
        text = all_text(card)
        assert "orders" in text and "Carl asked for this and cannot approve their own request" in text, text
        assert "Who may confirm: Ann, Bob" in text, text
        await ws.sender.action(_click(card, "UCARL"))  # their own request: refused
        await ws.settle()
        assert probe.count("change") == 0
        assert any("Two-person rule" in t for t in slack.ephemeral_texts("UCARL")), slack.ephemeral_texts("UCARL")
        await ws.sender.action(_click(card, "UREQ"))  # the thread's starter did not ask for this one: may approve
        await ws.settle()
        assert probe.count("change") == 1
        audit = [a for a in await ws.store.read_audit(10) if a.get("tool") == "change"]
        # The first change, set aside by the reply, was Ann's; the one the reply led to is Carl's, approved by Ann.
        assert {(a.get("call_id"), a.get("requested_by"), a.get("approved_by"), a.get("error_code") or "")
                for a in audit} == {("c1", "UREQ", "", "user_replied_instead"), ("c2", "UCARL", "UREQ", "")}, audit
    finally:
        await ws.stop()


async def test_a_reply_from_someone_who_may_not_decline_leaves_the_card_open(redis_url: str, prefix: str,
                                                                             slack: FakeSlack) -> None:
    """Only whoever may turn a card down (its requester, an approver) sets it aside by writing in its thread;
    anyone else is told, privately, and the card stays as it was, still answerable."""
    ws, probe = await _card(redis_url, prefix, slack, "320.1",
                            approvers={"change": {"prod": {"users": ["UBOSS"]}}})
    try:
        card = card_of(slack, "320.1")
        await ws.sender.event(message(CHANNEL, "UMAL", "never mind, do nothing", "320.2", thread_ts="320.1"))
        await ws.settle()
        told = slack.ephemeral_texts("UMAL")
        assert len(told) == 1 and "waiting for an answer on its card" in told[0], told
        assert "not run" not in all_text(card_of(slack, "320.1"))  # the card is as it was
        await ws.sender.action(_click(card, "UBOSS"))
        await ws.settle()
        assert probe.count("change") == 1
    finally:
        await ws.stop()


async def test_rollbacks_and_scaling_fall_under_a_restart_s_approvers_unless_they_have_their_own(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """A config written before rollback and scaling existed names who may confirm a restart in prod: the riskier
    changes were left to anyone ("Who may confirm: anyone …"), and a bystander scaled prod."""
    slack.profiles = {"UBOSS": "Boss"}
    ws = await open_workspace(redis_url, prefix, slack, approvers={"restart_service": {"prod": {"users": ["UBOSS"]}}})
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "scale payments in prod to 6", "900.1"))
        await ws.settle()
        card = card_of(slack, "900.1")
        assert "Who may confirm: Boss" in all_text(card), all_text(card)
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
        for user in ("UBYSTANDER", "UBOSS"):
            await ws.sender.action(block_action(user=user, channel=CHANNEL, message=card,
                                                action_id="opspilot_confirm", value=token))
            await ws.settle()
            assert len(ws.toolbox.scaling.done) == (user == "UBOSS"), user
    finally:
        await ws.stop()
