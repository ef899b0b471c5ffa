"""Follow-ups fired exactly once: the claim in Redis (and a Redis Cluster), two instances firing at once, an
instance killed between claim and hand-on, misfires within and beyond the grace. Real Redis, the real Slack
service over HTTP, an injected clock."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import pytest

from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from bot.slack.followups.buttons import time_of
from bot.slack.outbound.thread_meta import thread_key
from core.messages import UserMessage
from state import Keys, RedisStore, connect
from state.timer_store import Firing, MemoryTimers, Timer, new_timer_id
from tests.slack_harness import CHANNEL, Workspace, open_workspace

T0 = 1_760_000_000.0  # a fixed "now" the tests move by hand
QUESTION = "look at the payment service's recent errors"


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def followup(thread_id: str, due: float, question: str = "is it holding?") -> Timer:
    channel, _, ts = thread_id.removeprefix("slack:").partition(":")
    return Timer(id=new_timer_id(thread_id), kind="followup", group=thread_id, channel=channel, thread_ts=ts,
                 owner="UREQ", question=question, created_at=due - 600, due=int(due))


async def test_a_claim_hides_the_timer_for_its_lease_and_only_completion_ends_it(store: RedisStore,
                                                                                  redis_url: str) -> None:
    other = RedisStore(connect(redis_url), keys=store.keys)  # a second instance: its own connections
    try:
        timer = followup("slack:C1:1.1", T0)
        assert await store.timers.add(timer) == "added"
        assert await store.timers.claim(T0 - 1, 60) == []  # not due yet
        first, second = await asyncio.gather(store.timers.claim(T0, 60), other.timers.claim(T0, 60))
        assert len(first) + len(second) == 1  # one claimer, whoever was first
        claimed = (first + second)[0]
        assert await other.timers.claim(T0 + 59, 60) == []  # hidden while the lease holds
        again = await other.timers.claim(T0 + 61, 60)  # the claimer died: it comes back after the lease
        assert [c.timer.id for c in again] == [timer.id] and again[0].timer.due == int(T0)
        assert again[0].timer.request_id == claimed.timer.request_id  # the same occurrence, the same work id
        assert await other.timers.complete(again[0])
        assert not await store.timers.complete(claimed)  # the same record, completed once
        assert await store.timers.claim(T0 + 1000, 60) == [] and await store.timers.get(timer.id) is None
    finally:
        await other.close()


async def test_completion_is_compare_and_set_so_a_late_claimer_changes_nothing(store: RedisStore) -> None:
    timer = followup("slack:C1:2.2", T0).model_copy(update={"kind": "schedule", "cron": "0 9 * * *",
                                                            "timezone": "UTC"})
    await store.timers.add(timer)
    [slow] = await store.timers.claim(T0, 10)
    [fast] = await store.timers.claim(T0 + 11, 10)  # the slow one's lease ran out
    assert await store.timers.complete(fast, int(T0) + 86400)
    assert not await store.timers.complete(slow, int(T0) + 86400 * 5)  # it would have moved the schedule again
    kept = await store.timers.get(timer.id)
    assert kept is not None and kept.due == int(T0) + 86400


@pytest.mark.parametrize("kind", ["redis", "memory"])
async def test_a_timer_being_fired_is_not_cancelled_by_a_person(store: RedisStore, kind: str) -> None:
    """Cancel pressed while a tick fired it: "cancelled by @UMATE" on its announcement, its turn run all the same,
    stats counting it cancelled. Claimed, it cannot be cancelled by a person; once done firing it can, and the
    config's own removal of a schedule is not asked."""
    timers = store.timers if kind == "redis" else MemoryTimers()
    timer = followup("slack:C1:4.4", T0).model_copy(update={"kind": "schedule", "cron": "0 9 * * *",
                                                            "timezone": "UTC"})
    await timers.add(timer)
    [claimed] = await timers.claim(T0, 60)
    with pytest.raises(Firing):
        await timers.cancel(timer.id, unless_firing=True)
    assert await timers.get(timer.id) is not None
    assert await timers.complete(claimed, int(T0) + 86400)
    cancelled = await timers.cancel(timer.id, unless_firing=True)
    assert cancelled is not None and await timers.get(timer.id) is None
    await timers.add(timer)
    await timers.claim(T0, 60)
    assert await timers.cancel(timer.id) is not None  # (the config's sync removes it whatever)


async def test_a_group_holds_at_most_its_limit_and_adding_again_is_the_same_timer(store: RedisStore) -> None:
    thread = "slack:C1:3.3"
    timers = [followup(thread, T0 + i) for i in range(4)]
    assert [await store.timers.add(t, limit=3) for t in timers] == ["added", "added", "added", "full"]
    assert await store.timers.add(timers[0], limit=3) == "exists"
    assert [t.id for t in await store.timers.pending(thread)] == [t.id for t in timers[:3]]
    assert await store.timers.cancel(timers[1].id) is not None
    assert await store.timers.cancel(timers[1].id) is None
    assert await store.timers.add(timers[3], limit=3) == "added"
    assert {await store.client.ttl(k) > 0 for k in (store.keys.timers(timers[0].id[:2]),
                                                    store.keys.timers_due(timers[0].id[:2]),
                                                    store.keys.timer_group(thread))} == {True}


async def test_claims_on_a_redis_cluster_fire_each_timer_once(cluster_url: str, prefix: str) -> None:
    a = RedisStore(connect(cluster_url), keys=Keys(prefix))
    b = RedisStore(connect(cluster_url), keys=Keys(prefix))
    await a.ping()
    await b.ping()
    try:
        timers = [followup(f"slack:C1:{i}.0", T0 - i) for i in range(40)]  # spread over the shards
        assert len({t.id[:2] for t in timers}) > 8
        for t in timers:
            assert await a.timers.add(t, limit=3) == "added"
        rounds = await asyncio.gather(*(s.timers.claim(T0, 60) for s in (a, b, a, b)))
        ids = [c.timer.id for r in rounds for c in r]
        assert sorted(ids) == sorted(t.id for t in timers)  # each claimed, none twice
        for r in rounds:
            for c in r:
                assert await a.timers.complete(c)
        assert await b.timers.every() == []
    finally:
        keys = [k async for k in a.client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await a.client.delete(*keys)
        await a.close()
        await b.close()


# --- the Slack service: the firer ---------------------------------------------------------------------------


async def open_at(redis_url: str, prefix: str, slack: FakeSlack, clock: Clock, **kw: object) -> Workspace:
    ws = await open_workspace(redis_url, prefix, slack, **kw)  # type: ignore[arg-type]
    assert ws.service.core.followups is not None and ws.service.timers is not None
    ws.service.core.followups.clock = clock
    return ws


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_at(redis_url, prefix, slack, Clock())
    yield workspace
    await workspace.stop()


def clock_of(ws: Workspace) -> Clock:
    assert ws.service.core.followups is not None
    clock = ws.service.core.followups.clock
    assert isinstance(clock, Clock)
    return clock


async def asked(ws: Workspace, thread: str = "500.1") -> str:
    """A question about payments answered in ``thread``: what a follow-up compares with."""
    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, thread))
    await ws.settle()
    return thread_key(CHANNEL, thread)


async def schedule(ws: Workspace, thread_id: str, minutes: int = 10) -> Timer:
    assert ws.service.core.followups is not None
    timer, fresh = await ws.service.core.followups.schedule(thread_id=thread_id, owner="UREQ", after_minutes=minutes,
                                                            question="is payments holding?", source="model")
    assert fresh
    await ws.settle()
    return timer


async def turns(ws: Workspace, thread_id: str, timer: Timer) -> int:
    transcript = await ws.store.load_transcript(thread_id)
    return sum(1 for m in transcript if isinstance(m, UserMessage) and m.request_id == timer.request_id)


async def tick(ws: Workspace) -> int:
    assert ws.service.timers is not None
    return await ws.service.timers.firer.tick()


async def test_a_follow_up_runs_once_in_its_thread_with_two_instances_firing(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    clock = Clock()
    a = await open_at(redis_url, prefix, slack, clock)
    b = await open_at(redis_url, prefix, slack, clock)
    try:
        thread_id = await asked(a)
        answers_before = len(slack.thread(CHANNEL, "500.1"))
        timer = await schedule(a, thread_id)
        announcement = slack.thread(CHANNEL, "500.1")[-1]
        assert "Follow-up at" in all_text(announcement) and "<@UREQ>" in all_text(announcement)
        assert await asyncio.gather(tick(a), tick(b)) == [0, 0]  # not due yet
        clock.now = timer.due + 1
        claimed = await asyncio.gather(*(tick(w) for w in (a, b, a, b, b, a)))
        assert sum(claimed) == 1
        await a.settle()
        await b.settle()
        assert await turns(a, thread_id, timer) == 1
        transcript = await a.store.load_transcript(thread_id)
        turn = next(m for m in transcript if isinstance(m, UserMessage) and m.request_id == timer.request_id)
        assert turn.content.startswith("Follow-up requested by <@UREQ> at ") and "is payments holding?" in turn.content
        assert (await a.store.load_run(str(await a.store.thread_run(thread_id)))).unattended  # type: ignore[union-attr]
        clock.now += 3600
        assert await asyncio.gather(tick(a), tick(b)) == [0, 0]  # completed: never again
        thread = slack.thread(CHANNEL, "500.1")
        assert "Follow-up ran at" in all_text(slack.messages[(CHANNEL, announcement["ts"])])
        assert len(thread) > answers_before + 1 and "Follow-up on payments" in all_text(thread[-1])
        assert (await a.store.stats(3600)).get("followup_fired") == 1
    finally:
        await a.stop()
        await b.stop()


async def _crash(redis_url: str, prefix: str, mode: str, now: float) -> str:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "tests.timer_crash_worker", redis_url, prefix,
                                                mode, repr(now), stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 9, err.decode()
    return out.decode()


async def test_an_instance_killed_between_claim_and_hand_on_leaves_it_to_fire_once(
        ws: Workspace, redis_url: str, prefix: str) -> None:
    thread_id = await asked(ws)
    timer = await schedule(ws, thread_id)
    clock = clock_of(ws)
    clock.now = timer.due + 5
    assert await _crash(redis_url, prefix, "claim", clock.now) == "CLAIMED 1\n"
    assert await tick(ws) == 0  # its lease still hides it
    assert await turns(ws, thread_id, timer) == 0
    clock.now += 61  # the lease ran out: this instance fires it (late, well within the grace)
    assert await tick(ws) == 1
    await ws.settle()
    assert await turns(ws, thread_id, timer) == 1
    clock.now += 120
    assert await tick(ws) == 0
    assert (await ws.store.stats(3600)).get("followup_fired") == 1


async def test_an_instance_killed_after_handing_it_on_does_not_make_it_run_twice(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    clock = Clock()
    ws = await open_at(redis_url, prefix, slack, clock, role="worker")  # reads the work queue, as in production
    try:
        thread_id = await asked(ws)
        timer = await schedule(ws, thread_id)
        worker = ws.service.worker
        assert worker is not None
        await worker.stop()  # nobody reads the queue yet: both hand-ons wait there, neither run
        clock.now = timer.due
        assert await _crash(redis_url, prefix, "enqueue", clock.now) == "CLAIMED 1\nENQUEUED\n"
        clock.now += 61  # its lease ran out before it could complete: this instance claims and hands it on again
        assert await tick(ws) == 1
        assert (await ws.store.queue.stats()).length == 2
        worker.start()
        for _ in range(100):
            await ws.settle()
            if (await ws.store.queue.stats()).length == 0:
                break
            await asyncio.sleep(0.05)
        assert await tick(ws) == 0
        assert await turns(ws, thread_id, timer) == 1  # the engine took the second as the same message
        assert (await ws.store.stats(3600)).runs == 2  # the question, and one follow-up
    finally:
        await ws.stop()


async def test_a_follow_up_missed_while_down_runs_late_within_the_grace_and_is_skipped_beyond(ws: Workspace) -> None:
    thread_id = await asked(ws)
    clock = clock_of(ws)
    late = await schedule(ws, thread_id)
    later = await schedule(ws, thread_id, minutes=20)
    clock.now = late.due + 300  # five minutes late: within the 10-minute grace
    assert await tick(ws) == 1
    await ws.settle()
    turn = next(m for m in await ws.store.load_transcript(thread_id)
                if isinstance(m, UserMessage) and m.request_id == late.request_id)
    assert "5 min late: OpsPilot could not run it on time" in turn.content
    clock.now = later.due + 11 * 60  # beyond the grace
    assert await tick(ws) == 1
    await ws.settle()
    assert await turns(ws, thread_id, later) == 0
    note = all_text(ws.slack.thread(CHANNEL, "500.1")[-1])
    assert "skipped: OpsPilot could not run it then" in note and "11 min" in note and "is payments holding?" in note
    stats = await ws.store.stats(3600)
    assert (stats.get("followup_fired"), stats.get("followup_skipped")) == (1, 1)


@pytest.mark.parametrize(("lang", "said", "late_line"), [
    ("en", "Follow-up due at {due} started at {at}, 5 min late", "Follow-up due at {due} is 5 min late"),
    ("zh", "原定 {due} 的跟进于 {at} 开始运行，晚了 5 分钟", "原定 {due} 的跟进晚了 5 分钟")])
async def test_a_follow_up_that_runs_late_says_how_late_in_its_thread(redis_url: str, prefix: str, slack: FakeSlack,
                                                                      lang: str, said: str, late_line: str) -> None:
    ws = await open_at(redis_url, prefix, slack, Clock(), language=lang)
    try:
        thread_id = await asked(ws)
        timer = await schedule(ws, thread_id)
        clock_of(ws).now = timer.due + 300  # five minutes late: within the grace
        assert await tick(ws) == 1
        await ws.settle()
        thread = [all_text(m) for m in slack.thread(CHANNEL, "500.1")]
        line = said.format(due=time_of(timer.due, lang), at=time_of(timer.due + 300, lang))
        own = late_line.format(due=time_of(timer.due, lang))
        # On the announcement once it ran; and a line of its own just above the turn's answer (which comes after it)
        # that says how late, not that it started (its turn may yet find the thread busy).
        assert len([t for t in thread if line in t]) == 1, thread
        shown = [i for i, text in enumerate(thread) if own in text]
        assert len(shown) == 1 and shown[-1] < len(thread) - 1, thread
        assert "payments" in thread[-1] and own not in thread[-1]  # the turn's answer, below the line
    finally:
        await ws.stop()


async def test_a_follow_up_due_while_its_thread_waits_for_a_decision_is_not_run(ws: Workspace) -> None:
    thread_id = await asked(ws)
    timer = await schedule(ws, thread_id)
    await ws.sender.event(mention(CHANNEL, "UREQ", "restart payments in prod", "500.5", thread_ts="500.1"))
    await ws.settle()
    assert await ws.service.core.engine.under_way(thread_id)  # the restart's card waits for a person
    clock_of(ws).now = timer.due
    assert await tick(ws) == 1
    await ws.settle()
    assert await turns(ws, thread_id, timer) == 0  # the follow-up's text did not answer the card
    assert "not run: I was busy in this thread" in all_text(ws.slack.thread(CHANNEL, "500.1")[-1])
    assert ws.toolbox.restarts.done == []


async def test_a_cancel_or_a_completion_whose_reply_is_lost_knows_its_own_change(redis_url: str,
                                                                                store: RedisStore) -> None:
    """The reply lost after Redis applied it, the retry found the timer gone (or moved) and said "no longer
    pending" / "changed since the claim": the follow-up cancelled, its card still offering Cancel; one that ran
    never announced as run."""
    from tests.test_turn_start import LosingProxy

    proxy = LosingProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]))
    port = await proxy.start()
    through = RedisStore(connect(f"redis://127.0.0.1:{port}/{redis_url.rsplit('/', 1)[1]}"), keys=store.keys)
    try:
        await through.ping()
        cancelled, ran = followup("slack:C1:3.3", T0), followup("slack:C1:4.4", T0 + 5)
        warm = followup("slack:C1:5.5", T0 - 5)  # the scripts cached first: a fresh Redis answers NOSCRIPT, unapplied
        for timer in (cancelled, ran, warm):
            await through.timers.add(timer)
        await through.timers.complete((await through.timers.claim(T0 - 5, 60))[0])
        await through.timers.add(spare := followup("slack:C1:6.6", T0 + 999))
        await through.timers.cancel(spare.id)
        proxy.armed = True
        assert await through.timers.cancel(cancelled.id) == cancelled  # applied, its reply lost, retried
        [claimed] = await through.timers.claim(T0 + 5, 60)
        proxy.armed = True
        assert await through.timers.complete(claimed)
        assert proxy.lost == 2
        # Another's change is still another's: a second cancel of the same timer finds nothing of its own.
        assert await store.timers.cancel(cancelled.id) is None and await store.timers.get(ran.id) is None
    finally:
        await through.close()
