"""Progress as a Slack stream (``slack.progress: stream | auto``): task cards that move pending → in progress →
complete/error in place, the answer as markdown at the stream's end, the thread's status while working, a new
stream below a question's card after a pause — and the fall back to an edited message whenever streaming does
not work, with no step lost or shown twice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import block_action, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.outbound.thread_meta import THREAD, thread_key
from tests.conftest import until
from tests.slack_harness import CHANNEL, card_of, open_workspace
from tests.toolkit import Probe, toolkit


def ask(slack: FakeSlack, text: str, ts: str, user: str = "UREQ") -> dict[str, Any]:
    """The question as Slack has it (a stream must answer a message that exists), and its mention event."""
    slack.post_as_user(CHANNEL, user, text, ts=ts)
    return mention(CHANNEL, user, text, ts)


def streamed(slack: FakeSlack, thread_ts: str) -> list[dict[str, Any]]:
    return [m for m in slack.thread(CHANNEL, thread_ts) if m.get("stream") or m.get("was_stream")]


def stop_buttons(slack: FakeSlack, thread_ts: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every Stop button the thread shows now, with its message."""
    return [(m, b) for m in slack.thread(CHANNEL, thread_ts) for b in buttons(m) if b["action_id"] == "opspilot_stop"]


def task_states(slack: FakeSlack, task_id: str) -> list[str]:
    """Every status Slack was sent for one task, in order."""
    return [c["status"] for method in ("chat.startStream", "chat.appendStream", "chat.stopStream")
            for body in slack.called(method) for c in body.get("chunks") or []
            if c.get("type") == "task_update" and c["id"] == task_id]


async def test_steps_stream_as_task_cards_and_the_answer_ends_the_stream(redis_url: str, prefix: str,
                                                                         slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("Check the two lookups first.", call("blocker", "b1"), call("lookup_a", "a1")),
                           reply("", call("broken", "x1")),
                           reply("*Payments* looks fine: `a` answered, the `broken` check failed.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream",
                              specs=[tools["blocker"], tools["lookup_a"], tools["broken"]])
    try:
        await ws.sender.event(ask(slack, "how is payments?", "900.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        await until(lambda: any(t["id"] == "a1" and t["status"] == "complete"
                                for m in streamed(slack, "900.1") for t in m["stream"]["tasks"]))
        live = streamed(slack, "900.1")[0]
        assert live["stream"]["state"] == "streaming"
        assert {t["id"]: t["status"] for t in live["stream"]["tasks"]} == {"b1": "in_progress", "a1": "complete"}
        assert slack.status_log[0] == (CHANNEL, "900.1", "is looking into it…")  # until the stream shows steps
        assert live["stream"]["plan"] == "Check the two lookups first."
        # A stream cannot take a button back: Stop is a message of its own under the stream, not in it.
        assert not any(b["action_id"] == "opspilot_stop" for b in buttons(live))
        await until(lambda: bool(stop_buttons(slack, "900.1")))  # posted once the stream has started
        [(control, stop)] = stop_buttons(slack, "900.1")
        assert float(control["ts"]) > float(live["ts"]) and "stream" not in control
        probe.release.set()
        await ws.settle()

        start = slack.called("chat.startStream")
        assert len(start) == 1 and start[0]["recipient_user_id"] == "UREQ" and start[0]["recipient_team_id"] == "T0001"
        assert start[0]["thread_ts"] == "900.1"
        [message] = streamed(slack, "900.1")
        assert message["stream"]["state"] == "stopped"
        tasks = {t["id"]: t for t in message["stream"]["tasks"]}
        assert [t for t in tasks] == ["b1", "a1", "x1"]
        assert tasks["b1"]["status"] == "complete" and tasks["x1"]["status"] == "error"
        assert tasks["x1"]["output"].startswith("internal_error:"), tasks["x1"]  # why it failed, on its card
        assert "hunter2" not in str(slack.calls)  # scrubbed like everything else
        assert task_states(slack, "b1")[0] == "in_progress" and task_states(slack, "b1")[-1] == "complete"
        # The answer is the stream's markdown (mrkdwn bold became markdown bold), feedback under it.
        assert "**Payments** looks fine" in message["stream"]["markdown"]
        assert any(b["action_id"] == "opspilot_feedback_up" for b in buttons(message))
        # No edited progress message, no separate answer: one message carries the run.
        assert not slack.called("chat.update")
        assert [m["ts"] for m in slack.thread(CHANNEL, "900.1") if m.get("bot")] == [message["ts"]]
        assert [d["ts"] for d in slack.deleted] == [control["ts"]]  # the run ended: its Stop is gone
        assert (CHANNEL, "900.1") not in slack.statuses  # the status cleared at the end
        # Pressed in a client that still showed it as the run ended: it says so and changes nothing.
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=control,
                                            action_id="opspilot_stop", value=stop["value"]))
        await ws.settle()
        assert slack.ephemeral_texts("UREQ")[-1] == "This run has already finished: there is nothing to stop."
        assert message["stream"]["markdown"].startswith("**Payments** looks fine")
    finally:
        probe.release.set()
        await ws.stop()


async def test_a_pause_stops_the_stream_and_once_answered_it_says_by_whom_and_work_streams_below_the_card(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("Look, then change.", call("blocker", "b1")),
                           reply("", call("change", "c1", target="payments", environment="prod")),
                           reply("Changed payments in prod.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream",
                              specs=[tools["blocker"], tools["change"]])
    try:
        await ws.sender.event(ask(slack, "change payments in prod", "910.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        await until(lambda: bool(stop_buttons(slack, "910.1")))  # while it works, it can be stopped
        probe.release.set()
        await ws.settle()
        [first] = streamed(slack, "910.1")
        assert first["stream"]["state"] == "stopped"
        waiting = [t for t in first["stream"]["tasks"] if t["status"] == "pending"]
        assert waiting and waiting[0]["title"].startswith("change")
        assert "Waiting for a person" in first["stream"]["markdown"]
        assert not stop_buttons(slack, "910.1")  # paused: nothing to stop but the question, which has Cancel
        assert [b["action_id"] for m in slack.deleted for b in buttons(m)] == ["opspilot_stop"]
        card = card_of(slack, "910.1")
        assert float(card["ts"]) > float(first["ts"])
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
        await ws.sender.action(block_action(user="UBOB", channel=CHANNEL, message=card,
                                            action_id="opspilot_confirm", value=token))
        await ws.settle()
        assert probe.count("change") == 1
        past, second = streamed(slack, "910.1")
        # The paused stretch is closed out: it says who answered, no longer that it waits.
        assert past["ts"] == first["ts"] and past.get("was_stream")
        text = all_text(past)
        assert text.startswith(":arrow_down: Answered by <@UBOB> — continued below") and "Waiting" not in text
        assert "`blocker`" in text and "`change`" not in text  # its own steps; the change ran below
        assert float(second["ts"]) > float(card["ts"])  # the rest reads below the card, in order
        change = [t for t in second["stream"]["tasks"] if t["title"].startswith("change")]
        assert change and change[0]["status"] == "complete", second["stream"]["tasks"]
        assert second["stream"]["state"] == "stopped" and "Changed payments" in second["stream"]["markdown"]
        # No Stop was ever part of a stream, and none is left now the run is over (a stretch's own Stop message is
        # deleted when it stops, or never posted if it stopped first).
        assert "opspilot_stop" not in str([slack.called(m) for m in ("chat.startStream", "chat.appendStream",
                                                                     "chat.stopStream")])
        assert not stop_buttons(slack, "910.1")
    finally:
        probe.release.set()
        await ws.stop()


async def test_a_declined_question_closes_its_stretch_out_in_chinese(redis_url: str, prefix: str,
                                                                           slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("change", "c1", target="payments", environment="prod"))])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream", language="zh",
                              specs=[tools["change"]])
    try:
        await ws.sender.event(ask(slack, "重启 payments", "915.1"))
        await ws.settle()
        card = card_of(slack, "915.1")
        assert not stop_buttons(slack, "915.1")
        decline = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_decline")
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=card,
                                            action_id="opspilot_decline", value=decline))
        await ws.settle()
        past = streamed(slack, "915.1")[0]
        assert all_text(past).startswith(":arrow_down: 已由 <@UREQ> 回答，下文继续"), all_text(past)
        assert probe.count("change") == 0 and not stop_buttons(slack, "915.1")
    finally:
        await ws.stop()


async def test_a_workspace_without_streaming_gets_edited_messages_in_auto_mode(redis_url: str, prefix: str,
                                                                              slack: FakeSlack) -> None:
    slack.streams_supported = False
    ws = await open_workspace(redis_url, prefix, slack, progress="auto")
    try:
        for ts in ("920.1", "921.1"):
            await ws.sender.event(mention(CHANNEL, "UREQ", "看看支付服务最近报错", ts))
            await ws.settle()
            thread = slack.thread(CHANNEL, ts)
            progress = next(m for m in thread if m.get("bot") and "query_logs" in all_text(m))
            assert all_text(progress).count("`query_logs`") == 1
            assert any("feedback" in str(b.get("block_id")) for m in thread for b in m.get("blocks", []))
        # Tried once; the workspace said it has no streaming, so the second run did not try again.
        assert len(slack.called("chat.startStream")) == 1
    finally:
        await ws.stop()


async def test_a_stream_that_times_out_falls_back_to_the_same_message_without_losing_a_step(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("lookup_a", "a1")), reply("", call("blocker", "b1")),
                           reply("", call("lookup_b", "c1")), reply("All three answered.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream",
                              specs=[tools["blocker"], tools["lookup_a"], tools["lookup_b"]])
    try:
        await ws.sender.event(ask(slack, "check", "930.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        await until(lambda: any(len(m.get("stream", {}).get("tasks", [])) == 2 for m in streamed(slack, "930.1")))
        slack.stream_timeout_s = 0.0  # Slack ends the stream while a step takes long
        probe.release.set()
        await ws.settle()
        [message] = streamed(slack, "930.1")
        assert message.get("was_stream") and "stream" not in message  # now a plain message on the same ts
        text = all_text(message)
        for tool in ("lookup_a", "blocker", "lookup_b"):
            assert text.count(f"`{tool}`") == 1, text
        answers = [m for m in slack.thread(CHANNEL, "930.1") if "All three answered." in all_text(m)]
        assert len(answers) == 1 and answers[0]["ts"] != message["ts"]
        assert any(b["action_id"] == "opspilot_feedback_up" for b in buttons(answers[0]))
    finally:
        probe.release.set()
        await ws.stop()


async def test_a_lost_answer_to_stop_shows_the_answer_once(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    model = ScriptedModel([reply("", call("lookup_a", "a1")), reply("The answer, once.")])
    tools = toolkit(Probe())
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream", specs=[tools["lookup_a"]])
    try:
        slack.fault("lost", "chat.stopStream", times=1)  # it stopped, but the reply never came
        await ws.sender.event(ask(slack, "check", "940.1"))
        await ws.settle()
        thread = slack.thread(CHANNEL, "940.1")
        shown = [m for m in thread if "The answer, once." in all_text(m) + str(m.get("stream", {}).get("markdown"))]
        assert len(shown) == 1, thread
        assert sum(all_text(m).count("`lookup_a`") + sum(t["title"].startswith("lookup_a")
                   for t in m.get("stream", {}).get("tasks", [])) for m in thread) == 1
    finally:
        await ws.stop()


async def test_a_streamed_answer_shows_where_a_link_goes(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """A streamed answer is Markdown: the model's ``[label](target)`` would be a live link whose label hides its
    target (in an edited message the same text is no link). Shown as the label beside its target."""
    model = ScriptedModel([reply("", call("lookup_a", "a1")), reply(
        "Open [https://grafana.internal/d/pay](https://evil.example/sso) and ![x](https://evil.example/p.png).")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream",
                              specs=[toolkit(Probe())["lookup_a"]])
    try:
        await ws.sender.event(ask(slack, "check", "945.1"))
        await ws.settle()
        [stop] = slack.called("chat.stopStream")
        said = str(stop["markdown_text"])
        assert "https://grafana.internal/d/pay (https://evil.example/sso)" in said and "](" not in said, said
        assert "x (https://evil.example/p.png)" in said
    finally:
        await ws.stop()


async def test_runs_nobody_asked_and_alert_runs_are_not_streamed(redis_url: str, prefix: str,
                                                                  slack: FakeSlack) -> None:
    """Slack streams to one person; a run an alert started has nobody to stream to: an edited message."""
    ws = await open_workspace(redis_url, prefix, slack, progress="stream")
    try:
        parent = slack.post_as_user(CHANNEL, "UREQ", "[FIRING:1] payments errors")
        thread = thread_key(CHANNEL, parent["ts"])
        await ws.service.core.meta.put(THREAD, thread, {"channel": CHANNEL, "thread_ts": parent["ts"]})
        await ws.service.core.engine.ask(thread, "check payments", user_id="B0ALERTS", request_id="r1",
                                         unattended=True)
        await ws.settle()
        assert not slack.called("chat.startStream")
        assert any("query_logs" in all_text(m) for m in slack.thread(CHANNEL, parent["ts"]) if m.get("bot"))
    finally:
        await ws.stop()


def test_a_stream_stopped_elsewhere_stops_holding_a_slot_once_slack_would_have_ended_it() -> None:
    """auto mode caps the streams open per process; one started here and stopped by another instance (or never:
    its run gone) must not hold a slot for good."""
    import time

    from bot.slack.outbound.counters import Metrics
    from bot.slack.outbound.pacer import Pacer
    from bot.slack.outbound.streams import Streams

    streams = Streams(client=None, pacer=Pacer(), metrics=Metrics(), mode="auto")  # type: ignore[arg-type]
    streams._open = {"t/a": time.monotonic() - 301, "t/b": time.monotonic() - 10}
    assert streams._open_now() == 1 and list(streams._open) == ["t/b"]


async def test_a_short_run_s_stream_whose_stop_is_refused_is_stopped_and_shown_once(redis_url: str, prefix: str,
                                                                                    slack: FakeSlack) -> None:
    """A stream started and ended in one delivery round, Slack refusing its closing stop: the stream was left open
    (a lone task card once Slack timed it out) and the progress posted a second time as a plain message."""
    model = ScriptedModel([reply("Looking.", call("lookup_a", "a1")), reply("THE ANSWER")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream",
                              specs=[toolkit(Probe())["lookup_a"]])
    try:
        slack.fault("refuse", "chat.stopStream", times=1, error="msg_too_long")
        await ws.sender.event(ask(slack, "check", "71.1"))
        await ws.settle()
        assert slack.unstopped_streams() == []
        bot = [m for m in slack.thread(CHANNEL, "71.1") if m.get("bot")]
        shown = [all_text(m) + str((m.get("stream") or {}).get("markdown") or "") for m in bot]
        assert sum("THE ANSWER" in s for s in shown) == 1, shown
    finally:
        await ws.stop()


async def test_a_stop_control_whose_deletion_answer_was_lost_is_not_an_error(
        redis_url: str, prefix: str, slack: FakeSlack, caplog: pytest.LogCaptureFixture) -> None:
    """chat.delete done and its answer lost: the retry met message_not_found, logged at ERROR as "refused a message
    for good … dropped" of a message that was deleted as asked."""
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1")), reply("Done.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream", specs=[tools["blocker"]])
    try:
        await ws.sender.event(ask(slack, "how is payments?", "960.1"))
        await until(lambda: bool(stop_buttons(slack, "960.1")))
        [(control, _)] = stop_buttons(slack, "960.1")
        slack.fault("lost", "chat.delete", times=1)
        probe.release.set()
        await ws.settle()
        assert control["ts"] in [d["ts"] for d in slack.deleted]
        assert not [r for r in caplog.records if "refused a message for good" in r.getMessage()]
    finally:
        await ws.stop()


async def _stalled(redis_url: str, prefix: str, slack: FakeSlack, probe: Probe, then: str, ts: str) -> Any:
    """A stream-mode run whose worker died mid-change, parked as stalled by the sweep (its next reply: ``then``)."""
    import time

    tools = toolkit(probe, slow_s=1000)
    model = ScriptedModel([reply("Change it.", call("change", "c1", target="payments")), reply(then)])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream", specs=[tools["change"]])
    await ws.sender.event(ask(slack, "change it", ts))
    await until(lambda: bool(stop_buttons(slack, ts)), 20)
    await asyncio.wait_for(probe.started.setdefault("change", asyncio.Event()).wait(), 20)
    await ws.store.journal.start(str(await ws.store.thread_run(f"slack:{CHANNEL}:{ts}")), "c1")
    for task in list(ws.service.inbound.tasks.running):  # the worker dies mid-change
        task.cancel()
    await until(lambda: not ws.service.inbound.tasks.running)
    await ws.service.core.sweeps.sweep(now=time.time() + 600)
    await ws.settle()
    return ws


async def test_a_stalled_stream_whose_run_then_ends_gives_up_its_resume_and_shows_its_end(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """A run whose worker died mid-change stalled (its stream stopped with Resume); a newer message then closed it
    ("Stopped partway…", the change's outcome unknown). In stream mode its end went to the stopped stream: the
    Resume stayed live on a finished run, and the closing answer was never shown."""
    from bot.demo.sender import message

    probe = Probe()
    ws = await _stalled(redis_url, prefix, slack, probe, "NEWER ANSWER", "740.1")
    try:

        def bot() -> list[dict[str, Any]]:
            return [m for m in slack.thread(CHANNEL, "740.1") if m.get("bot")]

        def shown(m: dict[str, Any]) -> str:
            return all_text(m) + str((m.get("stream") or {}).get("markdown") or "")

        assert any(b["action_id"] == "opspilot_resume" for m in bot() for b in buttons(m))
        newer = slack.post_as_user(CHANNEL, "UREQ", "what about orders?", thread_ts="740.1")
        await ws.sender.event(message(CHANNEL, "UREQ", "what about orders?", newer["ts"], thread_ts="740.1"))
        await ws.settle()
        assert not any(b["action_id"] == "opspilot_resume" for m in bot() for b in buttons(m))
        assert any("Stopped partway" in shown(m) for m in bot()) and any("outcome unknown" in shown(m) for m in bot())
        assert not slack.unstopped_streams()
    finally:
        probe.release.set()
        await ws.stop()


async def test_a_resumed_run_s_answer_says_its_model_not_the_stall(redis_url: str, prefix: str,
                                                                    slack: FakeSlack) -> None:
    """Stalled (its worker died mid-change), then Resumed and finished: the stall's note replaced the run's model
    note for good, so the answer carried "This stopped partway…" and no longer said which model wrote it."""
    probe = Probe()
    ws = await _stalled(redis_url, prefix, slack, probe, "RESUMED ANSWER", "750.1")
    try:
        stalled = next(m for m in slack.thread(CHANNEL, "750.1")
                       if any(b["action_id"] == "opspilot_resume" for b in buttons(m)))
        resume = next(b for b in buttons(stalled) if b["action_id"] == "opspilot_resume")
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=stalled,
                                            action_id="opspilot_resume", value=resume["value"]))
        await ws.settle()
        final = next(m for m in slack.thread(CHANNEL, "750.1")
                     if "RESUMED ANSWER" in all_text(m) + str((m.get("stream") or {}).get("markdown") or ""))
        text = all_text(final) + " " + " ".join(str(b) for b in final.get("blocks", []))
        assert "stopped partway" not in text and "scripted" in text, text
    finally:
        probe.release.set()
        await ws.stop()
