"""Fronts that acknowledge and enqueue, workers that run the engine, over one Redis."""

from __future__ import annotations

import asyncio

from bot import exits
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.agent.transcript import violations
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.serve import restart_after
from tests.conftest import until
from tests.slack_harness import CHANNEL, QUESTION, Workspace, ask_restart, confirm, open_workspace
from tests.toolkit import Probe, toolkit


async def test_two_fronts_two_workers_and_a_duplicate_delivery_make_one_run(redis_url: str, prefix: str,
                                                                           slack: FakeSlack) -> None:
    fronts = [await open_workspace(redis_url, prefix, slack, role="front") for _ in range(2)]
    workers = [await open_workspace(redis_url, prefix, slack, role="worker") for _ in range(2)]
    everyone: list[Workspace] = [*fronts, *workers]
    try:
        event = mention(CHANNEL, "UREQ", QUESTION, "40.1")
        statuses = await asyncio.gather(fronts[0].sender.event(event, event_id="EvDUP"),
                                        fronts[1].sender.event(event, event_id="EvDUP", retry_num=1))
        assert [s for s, _ in statuses] == [200, 200]
        await until(lambda: any("docs/payments-db-timeouts.md" in all_text(m)
                                   for m in slack.thread(CHANNEL, "40.1") if "step" not in all_text(m)))
        for ws in everyone:
            await ws.settle()
            await ws.store.stats(3600)  # its own counts reach Redis (else within seconds, or when it closes)
        assert (await fronts[0].store.stats(3600)).runs == 1
        assert not any(f.service.core.bus.busy() or f.service.inbound.tasks.busy() for f in fronts)
        bot = [m for m in slack.thread(CHANNEL, "40.1") if m.get("bot")]
        assert len([m for m in bot if "step" in all_text(m)]) == 1 and len(bot) == 2
        stats = await fronts[0].store.queue.stats()
        assert (stats.length, stats.pending) == (0, 0)
    finally:
        for ws in everyone:
            await ws.stop()


async def test_a_worker_that_dies_mid_run_is_taken_over_by_another(redis_url: str, prefix: str,
                                                                    slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1")), reply("finished by another worker")])
    front = await open_workspace(redis_url, prefix, slack, role="front")
    first = await open_workspace(redis_url, prefix, slack, role="worker", model=model, specs=[tools["blocker"]],
                                 lease_ttl_ms=300, stale_after_s=0.6)
    try:
        await front.sender.event(mention(CHANNEL, "UREQ", "go", "41.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        worker = first.service.worker
        assert worker is not None
        for task in [*worker._tasks, *first.service.core.engine._running.values()]:  # the worker process dies
            (task[1] if isinstance(task, tuple) else task).cancel()
        await worker.stop()
        probe.release.set()

        second = await open_workspace(redis_url, prefix, slack, role="worker", model=model,
                                      specs=[tools["blocker"]], lease_ttl_ms=300, stale_after_s=0.6)
        try:
            await until(lambda: any("finished by another worker" in all_text(m)
                                       for m in slack.thread(CHANNEL, "41.1")))
            await second.settle()
            transcript = await second.store.load_transcript("slack:C0OPS:41.1")
            # A read-only step is saved with its results: the dead worker's step left nothing behind, and the
            # next worker thought it again (nothing ran twice, no call id lacks a result).
            assert not any(getattr(m, "call_id", None) == "b1" for m in transcript)
            assert violations(transcript) == []
            assert probe.count("blocker") == 1
            progress = " ".join(all_text(m) for m in slack.thread(CHANNEL, "41.1"))
            assert "blocker" in progress and "Interrupted by a restart" in progress  # its line is closed
            await second.store.stats(3600)  # its own counts reach Redis (else within seconds, or when it closes)
            assert (await front.store.stats(3600)).runs == 1
        finally:
            await second.stop()
    finally:
        await first.stop()
        await front.stop()


async def test_a_click_whose_worker_died_is_done_within_seconds(redis_url: str, prefix: str,
                                                                 slack: FakeSlack) -> None:
    """In ``serve`` the front stores a click and a worker reads it. A worker killed holding it left it for the work
    lane's idle period (45 s by default) with the card's Confirm button up; the quick lane hands it on in ~2 s."""
    front = await open_workspace(redis_url, prefix, slack, role="front")
    worker = await open_workspace(redis_url, prefix, slack, role="worker")  # stale_after_s: 45 s
    try:
        card = await ask_restart(front, thread="42.1")
        reader = worker.service.worker
        assert reader is not None
        await reader.stop()  # a dead worker takes the click from the queue and never finishes it
        assert (await front.sender.action(confirm(card, "UAPPROVER")))[0] == 200
        held = await front.store.queue.take("worker-killed", block_ms=2000)
        assert [e.lane for e in held] == ["quick"]
        reader.start()
        start = asyncio.get_running_loop().time()
        await until(lambda: "Confirmed by" in all_text(slack.messages[(CHANNEL, card["ts"])]), 20)
        assert asyncio.get_running_loop().time() - start < 15  # the work lane would wait 45 s
        await worker.settle()
        assert len(worker.toolbox.restarts.done) == 1
        assert not buttons(slack.messages[(CHANNEL, card["ts"])])
    finally:
        await worker.stop()
        await front.stop()


def test_a_worker_killed_after_working_starts_again_at_once_a_crash_loop_backs_off() -> None:
    """``serve`` restarts its workers. One dying at start again and again waits longer each time (up to 30 s); one
    killed after working (the OOM killer, a node's trouble: every few seconds in an incident) starts again after
    1 s — the doubling left the soak's front with one worker, or none, for 30 s at a time."""
    failures, waits = 0, []
    for _ in range(7):
        failures, wait = restart_after(failures, 0.5)
        waits.append(wait)
    assert waits == [1, 2, 4, 8, 16, 30, 30]
    for _ in range(5):  # killed every 12–25 s while working
        failures, wait = restart_after(failures, 12.0)
        assert wait == 1.0
    assert restart_after(failures, 1.0)[1] == 2.0  # then crash-looping again: backing off again
    for _ in range(8):  # started during a Redis outage: "unavailable" at start, again and again
        failures, wait = restart_after(failures, 0.7, exits.UNAVAILABLE)
        assert wait == 2.0  # back within seconds of Redis, not 30 s later
