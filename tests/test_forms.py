"""One form per question: calls of one step that need the same field are asked once; the form says what it
is for; the closed form shows what was chosen and by whom."""

from __future__ import annotations

import json
import re

from bot.agent.decisions import ProvideParams
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import block_action, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.inbound.work_items import Answer
from core.messages import ToolResultMessage
from tests.slack_harness import CHANNEL, Workspace, open_workspace
from tools import ops


async def two_reads_without_environment(redis_url: str, prefix: str, slack: FakeSlack) -> Workspace:
    """A step with two calls that both lack the environment (so both ask for it), then an answer."""
    toolbox = ops.build()
    model = ScriptedModel([reply("", call("query_logs", "l1", service_id="payments"),
                                 call("query_metrics", "m1", service_id="payments")),
                           reply("Read both.")])
    return await open_workspace(redis_url, prefix, slack, model=model, specs=toolbox.specs, toolbox=toolbox)


async def test_two_calls_needing_the_environment_share_one_form(redis_url: str, prefix: str,
                                                                slack: FakeSlack) -> None:
    ws = await two_reads_without_environment(redis_url, prefix, slack)
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors", "950.1"))
        await ws.settle()
        forms = [m for m in slack.thread(CHANNEL, "950.1") if any(b["action_id"] == "opspilot_submit"
                                                                  for b in buttons(m))]
        assert len(forms) == 1, [all_text(m) for m in slack.thread(CHANNEL, "950.1")]
        form = forms[0]
        assert "For `query_logs` and `query_metrics` on `payments`: they go ahead as soon as you answer" in \
            all_text(form)
        token = next(b["value"] for b in buttons(form) if b["action_id"] == "opspilot_submit")
        values = {"opspilot_field:environment": {"value": {"type": "static_select",
                                                           "selected_option": {"value": "prod"}}}}
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=form, action_id="opspilot_submit",
                                            value=token, state={"values": values}))
        await ws.settle()
        closed = all_text(slack.messages[(CHANNEL, form["ts"])])
        assert re.search(r"Submitted by <@UREQ> at \d\d:\d\d UTC: environment = `prod`", closed), closed
        assert buttons(slack.messages[(CHANNEL, form["ts"])]) == []
        transcript = await ws.store.load_transcript("slack:C0OPS:950.1")
        results = {m.call_id: json.loads(m.content) for m in transcript if isinstance(m, ToolResultMessage)}
        assert results["l1"]["ok"] and results["m1"]["ok"], results
        assert results["l1"]["data"]["environment"] == "prod"
        assert "Read both." in all_text(slack.thread(CHANNEL, "950.1")[-1])
    finally:
        await ws.stop()


async def test_a_redelivered_answer_finishes_the_calls_sharing_its_form(redis_url: str, prefix: str,
                                                                        slack: FakeSlack) -> None:
    """The worker applied the form to its first call and died: the work comes again and answers the rest."""
    ws = await two_reads_without_environment(redis_url, prefix, slack)
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors", "960.1"))
        await ws.settle()
        form = next(m for m in slack.thread(CHANNEL, "960.1") if any(b["action_id"] == "opspilot_submit"
                                                                     for b in buttons(m)))
        token = next(b["value"] for b in buttons(form) if b["action_id"] == "opspilot_submit")
        engine = ws.service.core.engine
        ticket = await engine.ticket(token)
        await engine.answer(ticket, ProvideParams({"environment": "prod"}), by="UREQ")  # then the worker died
        await ws.settle()
        assert "Read both." not in all_text(slack.thread(CHANNEL, "960.1")[-1])  # the sibling still waits
        await ws.service.inbound.dispatch(Answer(ticket=ticket, decision="submit", values={"environment": "prod"},
                                                 user="UREQ", channel=CHANNEL, thread_ts="960.1"))
        await ws.settle()
        transcript = await ws.store.load_transcript("slack:C0OPS:960.1")
        results = {m.call_id: json.loads(m.content) for m in transcript if isinstance(m, ToolResultMessage)}
        assert results["l1"]["ok"] and results["m1"]["ok"], results
        assert "Read both." in all_text(slack.thread(CHANNEL, "960.1")[-1])
    finally:
        await ws.stop()
