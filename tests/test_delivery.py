"""Nothing lost when Slack is degraded (issue 33): a question in a thread whose reading fails is still answered,
and a work item is acknowledged only once its outcome is durable — done, or its asker told why not."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bot.agent.models.scripted import ScriptedModel, reply
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from bot.slack.inbound.work import Executor
from bot.slack.inbound.work_items import Converse, WorkItem
from bot.slack.inbound.worker import MAX_DELIVERIES, Worker
from core.messages import Message
from state.queue import Lane
from tests.conftest import until
from tests.slack_harness import CHANNEL, open_workspace
from tests.test_threads import user_texts


def looked(_: Sequence[Message], __: Sequence[str]) -> object:
    return reply("Looked at it.")


async def _ask_in_thread(slack: FakeSlack, ws_sender: object, parent: str, text: str) -> str:
    slack.post_as_user(CHANNEL, "UALICE", "checkout is throwing 502s since 10:02", thread_ts=parent)
    question = slack.post_as_user(CHANNEL, "UREQ", f"<@UBOT> {text}", thread_ts=parent)
    await ws_sender.event(mention(CHANNEL, "UREQ", text, question["ts"], thread_ts=parent))  # type: ignore[attr-defined]
    return str(question["ts"])


async def test_a_thread_read_through_non_json_5xx_and_a_dropped_connection_is_read(redis_url: str, prefix: str,
                                                                                   slack: FakeSlack) -> None:
    """A proxy's plain-text 502 (slack-sdk holds a str, not a dict) and a reset connection while reading the
    thread: retried like any Slack call, and the question is answered with the thread it was asked in."""
    model = ScriptedModel(looked)
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[])
    try:
        parent = slack.post_as_user(CHANNEL, "UALICE", "payments looks unhappy")["ts"]
        slack.fault("text", "conversations.replies", times=3, status=502)  # more than slack-sdk's own retries
        slack.fault("reset", "conversations.replies", times=2)
        await _ask_in_thread(slack, ws.sender, parent, "what's going on?")
        await until(lambda: any("Looked at it." in all_text(m) for m in slack.thread(CHANNEL, parent)))
        [text] = user_texts(model)
        assert "checkout is throwing 502s" in text  # read after the failures, not skipped
        assert len(slack.called("conversations.replies")) >= 4
    finally:
        await ws.stop()


async def test_a_thread_slack_will_not_show_is_answered_without_it(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    model = ScriptedModel(looked)
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[])
    try:
        parent = slack.post_as_user(CHANNEL, "UALICE", "payments looks unhappy")["ts"]
        slack.fault("text", "conversations.replies", status=503)  # for good
        await _ask_in_thread(slack, ws.sender, parent, "what's going on?")
        await until(lambda: any("Looked at it." in all_text(m) for m in slack.thread(CHANNEL, parent)))
        [text] = user_texts(model)
        assert "could not be read" in text and "502s" not in text  # the model is told, the run goes on
    finally:
        await ws.stop()


class Flaky(Executor):
    """An executor whose dependency fails the first ``fails`` times it is used (then works, when ``fails`` is
    finite): what a work item meets when something it needs is broken for a while."""

    def __init__(self, real: Executor, fails: float) -> None:
        super().__init__(engine=real.engine, meta=real.meta, outbox=real.outbox, metrics=real.metrics,
                         reader=real.reader, language=real.language)
        self.fails, self.tries = fails, 0

    async def __call__(self, item: WorkItem) -> None:
        self.tries += 1
        if self.tries <= self.fails:
            raise RuntimeError(f"the dependency is broken (try {self.tries})")
        await super().__call__(item)


async def _worker_over(ws_store_queue: object, executor: Executor) -> Worker:
    worker = Worker(queue=ws_store_queue, executor=executor, reclaim_after_s=1.0,  # type: ignore[arg-type]
                    retry_after_s=(0.1, 0.2))
    worker.start()
    return worker


@pytest.mark.parametrize("lane", ["work", "quick"])
async def test_a_work_item_that_fails_is_tried_again_by_a_worker_and_answered_once(
        redis_url: str, prefix: str, slack: FakeSlack, lane: Lane) -> None:
    """Today's code acknowledged a failed item and dropped it: nobody was told, nothing answered. (The quick lane's
    entries are tried again by the worker holding them, on the same schedule.)"""
    model = ScriptedModel(looked)
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[], role="front")
    workers: list[Worker] = []
    try:
        real = (await open_workspace(redis_url, prefix, slack, model=model, specs=[], role="worker"))
        ws.extra.append(real)
        assert real.service.worker is not None
        await real.service.worker.stop()  # this test's own workers read the queue instead
        flaky = Flaky(real.service.worker.executor, fails=2)
        workers = [await _worker_over(ws.store.queue, flaky)]
        item = Converse(channel=CHANNEL, thread_ts="50.1", user="UREQ", text="how is payments?", request_id="50.1")
        await ws.store.queue.put(item.model_dump_json(), lane=lane)
        await until(lambda: any("Looked at it." in all_text(m) for m in slack.thread(CHANNEL, "50.1")))
        await until(lambda: not workers[0].busy())
        stats = await ws.store.queue.stats()  # acknowledged once it was done, and done once
        assert (stats.length, stats.pending, stats.dead, flaky.tries) == (0, 0, 0, 3)
        assert real.service.metrics.value("opspilot_work_retries_total", kind="converse") == 2
        assert len([m for m in slack.thread(CHANNEL, "50.1") if "Looked at it." in all_text(m)]) == 1
    finally:
        for worker in workers:
            await worker.stop()
        for extra in ws.extra:
            await extra.stop()
        await ws.stop()


@pytest.mark.parametrize("lane", ["work", "quick"])
async def test_a_work_item_that_always_fails_is_set_aside_and_its_asker_told(redis_url: str, prefix: str,
                                                                             slack: FakeSlack, lane: Lane) -> None:
    model = ScriptedModel(looked)
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[], role="front")
    workers: list[Worker] = []
    try:
        real = await open_workspace(redis_url, prefix, slack, model=model, specs=[], role="worker")
        ws.extra.append(real)
        assert real.service.worker is not None
        await real.service.worker.stop()
        flaky = Flaky(real.service.worker.executor, fails=float("inf"))
        workers = [await _worker_over(ws.store.queue, flaky) for _ in range(2)]  # another worker takes it again
        item = Converse(channel=CHANNEL, thread_ts="51.1", user="UREQ", text="how is payments?", request_id="51.1")
        await ws.store.queue.put(item.model_dump_json(), lane=lane)
        await until(lambda: any("failed every time I tried" in all_text(m) for m in slack.thread(CHANNEL, "51.1")),
                    timeout_s=60)
        assert flaky.tries == MAX_DELIVERIES
        [dead] = await ws.store.queue.dead_letters()
        assert dead.deliveries == MAX_DELIVERIES and "the dependency is broken" in dead.reason
        told = next(all_text(m) for m in slack.thread(CHANNEL, "51.1") if "failed every time" in all_text(m))
        assert dead.reason.startswith("ref ") and dead.reason.split()[1].rstrip(":") in told  # one ref, both ends
        stats = await ws.store.queue.stats()
        assert (stats.length, stats.pending, stats.dead) == (0, 0, 1)
        assert model.requests == []  # never half-done: nothing ran
        ttl = await ws.store.client.ttl(ws.store.keys.dead_letters())
        assert 0 < ttl <= ws.store.ttls.dead_letters_s
    finally:
        for worker in workers:
            await worker.stop()
        for extra in ws.extra:
            await extra.stop()
        await ws.stop()
