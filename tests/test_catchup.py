"""What a killed instance leaves undone is done by another (issue 33): a run that ended or paused while nobody
showed it is shown from its record, once; a run cut off by a dead worker while it only read carries on by itself
(said in the thread), while one with a change in flight still waits for a person."""

from __future__ import annotations

import asyncio
import time

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.outbound.thread_meta import THREAD, thread_key
from state import RedisStore
from tests.conftest import make_harness, until
from tests.slack_harness import CHANNEL, Workspace, open_workspace
from tests.toolkit import Probe, toolkit


async def _ended_unseen(store: RedisStore, model: ScriptedModel, thread_ts: str, text: str) -> str:
    """A run that pauses or ends in an instance that dies before it renders anything: the engine alone (no Slack
    service listens), with the thread known as the executor records it before asking."""
    thread_id = thread_key(CHANNEL, thread_ts)
    await store.meta.put(THREAD, thread_id, {"channel": CHANNEL, "thread_ts": thread_ts, "lang": "en"})
    probe = Probe()
    harness = make_harness(model, store, list(toolkit(probe).values()))
    outcome = await harness.engine.ask(thread_id, text, user_id="UREQ", request_id=thread_ts)
    return outcome.run_id


async def _bot_texts(slack: FakeSlack, thread_ts: str) -> list[str]:
    return [all_text(m) for m in slack.thread(CHANNEL, thread_ts) if m.get("bot")]


async def test_an_answer_never_shown_is_shown_from_the_record_once(redis_url: str, prefix: str, slack: FakeSlack,
                                                                   store: RedisStore) -> None:
    model = ScriptedModel([reply("", call("lookup_a", "a1")), reply("payments is fine: 0.1% errors.")])
    run_id = await _ended_unseen(store, model, "60.1", "how is payments?")
    assert await store.runs_due("unshown", float("inf")) == [run_id]  # written with the run's end, atomically
    ws = await open_workspace(redis_url, prefix, slack, model=ScriptedModel([]), role="worker")
    try:
        assert ws.service.catchup is not None
        assert await ws.service.catchup.show_unshown(now=float("inf")) == 1
        await ws.settle()
        texts = await _bot_texts(slack, "60.1")
        assert sum("payments is fine: 0.1% errors." in t for t in texts) == 1
        progress = next(t for t in texts if "lookup_a" in t)
        assert "Working on it" not in progress  # its final state, not a run that seems to go on
        assert await store.runs_due("unshown", float("inf")) == []
        assert await ws.service.catchup.show_unshown(now=float("inf")) == 0  # once
        await ws.settle()
        assert await _bot_texts(slack, "60.1") == texts
    finally:
        await ws.stop()


async def test_a_pause_never_shown_gets_its_card(redis_url: str, prefix: str, slack: FakeSlack,
                                                 store: RedisStore) -> None:
    model = ScriptedModel([reply("", call("change", "c1", target="payments", environment="prod"))])
    await _ended_unseen(store, model, "61.1", "restart payments in prod")
    ws = await open_workspace(redis_url, prefix, slack, model=ScriptedModel([]), role="worker")
    try:
        assert ws.service.catchup is not None
        assert await ws.service.catchup.show_unshown(now=float("inf")) == 1
        await ws.settle()
        cards = [m for m in slack.thread(CHANNEL, "61.1")
                 if any(b["action_id"] == "opspilot_confirm" for b in buttons(m))]
        assert len(cards) == 1 and "change" in all_text(cards[0])
    finally:
        await ws.stop()


async def test_a_run_shown_as_usual_leaves_nothing_to_catch_up(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack, model=ScriptedModel([reply("All good.")]), specs=[])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "how is payments?", "62.1"))
        await until(lambda: any("All good." in all_text(m) for m in slack.thread(CHANNEL, "62.1")))
        await ws.settle()
        assert await ws.store.runs_due("unshown", float("inf")) == []
    finally:
        await ws.stop()


async def _kill(ws: Workspace) -> None:
    """The instance dies: its runs stop where they are, nothing is written after (its lease lapses)."""
    for _, task in list(ws.service.core.engine._running.values()):
        task.cancel()
    await ws.service.outbox.stop()


async def test_a_run_cut_off_mid_read_carries_on_by_itself(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1")), reply("finished after the restart")])
    first = await open_workspace(redis_url, prefix, slack, model=model, specs=[tools["blocker"]],
                                 lease_ttl_ms=300, stale_after_s=0.6)
    try:
        await first.sender.event(mention(CHANNEL, "UREQ", "go", "63.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        await _kill(first)
        probe.release.set()
        second = await open_workspace(redis_url, prefix, slack, model=model, specs=[tools["blocker"]],
                                      lease_ttl_ms=300, stale_after_s=0.6)
        try:
            sweeps = second.service.core.sweeps
            for _ in range(200):  # the engine's sweep, as it ticks: once the run is stale, it is carried on
                await sweeps.sweep(now=time.time() + sweeps.stale_after_s)
                if any("finished after the restart" in all_text(m) for m in slack.thread(CHANNEL, "63.1")):
                    break
                await asyncio.sleep(0.1)
            await second.settle()
            texts = await _bot_texts(slack, "63.1")
            assert sum("finished after the restart" in t for t in texts) == 1
            assert sum("it carries on from where it was last saved" in t for t in texts) == 1  # said, once
            assert not any(b["action_id"] == "opspilot_resume" for m in slack.thread(CHANNEL, "63.1")
                           for b in buttons(m))  # nobody is asked to press Resume
            assert probe.count("blocker") == 1  # the cut-off read was thought again, not run twice
        finally:
            await second.stop()
    finally:
        await first.stop()


async def test_a_run_cut_off_with_a_change_in_flight_still_waits_for_a_person(redis_url: str, prefix: str,
                                                                               slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1")), reply("should not be reached")])
    first = await open_workspace(redis_url, prefix, slack, model=model, specs=[tools["blocker"]],
                                 lease_ttl_ms=300, stale_after_s=0.6)
    try:
        await first.sender.event(mention(CHANNEL, "UREQ", "go", "64.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        run_id = str(await first.store.thread_run(thread_key(CHANNEL, "64.1")))
        await first.store.journal.start(run_id, "b1")  # as a change does before it runs: its outcome is unknown
        await _kill(first)
        second = await open_workspace(redis_url, prefix, slack, model=model, specs=[tools["blocker"]],
                                      lease_ttl_ms=300, stale_after_s=0.6)
        try:
            for _ in range(200):
                await second.service.core.sweeps.sweep(now=time.time() + second.service.core.sweeps.stale_after_s)
                if (await second.store.load_run(run_id)).status == "stalled":  # type: ignore[union-attr]
                    break
                await asyncio.sleep(0.1)
            await second.settle()
            assert any(b["action_id"] == "opspilot_resume" for m in slack.thread(CHANNEL, "64.1")
                       for b in buttons(m))
            assert not any("it carries on from where it was last saved" in t for t in await _bot_texts(slack, "64.1"))
        finally:
            await second.stop()
    finally:
        probe.release.set()
        await first.stop()


async def test_a_second_resume_is_told_the_run_moved_on_never_to_send_it_again(redis_url: str, prefix: str,
                                                                               slack: FakeSlack) -> None:
    """A colleague's Resume while the resumed run went on was told "I am still working on the previous message …
    send it again in a moment"; one pressed after the run finished got no word at all."""
    from bot.demo.sender import block_action
    from tests.slack_harness import progress_of

    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1")), reply("", call("blocker", "b2")),
                           reply("resumed and finished")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[tools["blocker"]])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "block", "65.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        await ws.store.journal.start(str(await ws.store.thread_run(thread_key(CHANNEL, "65.1"))), "b1")
        for task in list(ws.service.inbound.tasks.running):  # its worker dies with the change in flight
            task.cancel()
        await until(lambda: not ws.service.inbound.tasks.running)
        await ws.service.core.sweeps.sweep(now=time.time() + 600)
        await ws.settle()
        stalled = progress_of(slack, "65.1")
        resume = next(b for b in buttons(stalled) if b["action_id"] == "opspilot_resume")
        probe.started["blocker"].clear()

        async def press(user: str) -> None:
            await ws.sender.action(block_action(user=user, channel=CHANNEL, message=stalled,
                                                action_id="opspilot_resume", value=resume["value"]))

        await press("UREQ")
        await asyncio.wait_for(probe.started["blocker"].wait(), 10)  # resumed: b2 running
        await press("UBOB")
        await until(lambda: slack.ephemeral_texts("UBOB"))
        assert "someone resumed it a moment ago" in slack.ephemeral_texts("UBOB")[-1]
        assert not any("send it again" in t for t in slack.ephemeral_texts("UBOB"))
        probe.release.set()
        await ws.settle()
        assert any("resumed and finished" in all_text(m) for m in slack.thread(CHANNEL, "65.1"))
        await press("UBOB")
        await until(lambda: len(slack.ephemeral_texts("UBOB")) == 2)
        assert "already finished: there is nothing to resume" in slack.ephemeral_texts("UBOB")[-1]
    finally:
        probe.release.set()
        await ws.stop()


async def test_a_declined_change_shown_from_its_record_is_one_declined_line(
        redis_url: str, prefix: str, slack: FakeSlack, store: RedisStore) -> None:
    """Shown late, from its record: a declined call was two lines ("interrupted", then ":x: failed"), and a change of
    unknown outcome ":x: failed" — what the live progress says neither of."""
    from bot.agent.decisions import Decline

    thread_id = thread_key(CHANNEL, "62.1")
    await store.meta.put(THREAD, thread_id, {"channel": CHANNEL, "thread_ts": "62.1", "lang": "en"})
    tools = toolkit(Probe())
    model = ScriptedModel([reply("Changing.", call("change", "c1", target="payments", environment="prod")),
                           reply("Left it alone.")])
    engine = make_harness(model, store, [tools["change"]]).engine
    paused = await engine.ask(thread_id, "change payments in prod", user_id="UREQ", request_id="62.1")
    await engine.resume_token(paused.pending[0].token, Decline("no"), by="UREQ")
    ws = await open_workspace(redis_url, prefix, slack, model=ScriptedModel([]), role="worker")
    try:
        assert ws.service.catchup is not None
        await ws.service.catchup.show_unshown(now=float("inf"))
        await ws.settle()
        progress = next(t for t in await _bot_texts(slack, "62.1") if "change:" in t)
        lines = [line for line in progress.splitlines() if line.startswith("change:")]
        assert len(lines) == 1 and "declined" in lines[0] and "failed" not in lines[0], progress
    finally:
        await ws.stop()
