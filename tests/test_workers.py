"""Fronts that acknowledge and enqueue, workers that run the engine, over one Redis."""

from __future__ import annotations

import asyncio

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.agent.transcript import violations
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from tests.conftest import until
from tests.slack_harness import CHANNEL, Workspace, open_workspace
from tests.test_slack import QUESTION
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
