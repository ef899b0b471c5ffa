"""What a follow-up or a scheduled check says of itself is what happened: "ran" only once its turn ran, "skipped"
never beside its own answer, a person's card never answered by an automatic turn, nothing run in the name of
someone who may no longer use OpsPilot there, nothing run where nothing can be posted. Real Redis, the real Slack
service over HTTP, an injected clock (``tests/test_timers.py``'s helpers)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from bot.agent.models.scripted import ScriptedModel, reply
from bot.demo.sender import block_action
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.run_limits import RunLimits
from bot.slack.followups.buttons import CANCEL, RECHECK
from bot.slack.inbound.work_items import Converse
from tests.language_scan import english_runs
from tests.slack_harness import CHANNEL, Workspace
from tests.test_followups import restarted
from tests.test_schedules import SAT_0700_EST, command, only_schedule, roots
from tests.test_timers import Clock, _crash, asked, open_at, schedule, tick, turns


async def drain(ws: Workspace) -> None:
    """Until the work queue is read to its end (the workspace's worker reads it)."""
    for _ in range(400):
        await ws.settle()
        if (await ws.store.queue.stats()).length == 0:
            break
        await asyncio.sleep(0.05)
    await ws.settle()


def thread_texts(ws: Workspace) -> list[str]:
    return [all_text(m) for m in ws.slack.thread(CHANNEL, "500.1")]


async def test_a_follow_up_handed_on_by_an_instance_that_died_runs_and_is_not_called_skipped(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """Its instance died after handing it on; another came back past the grace: the queued turn runs, and nothing
    says "skipped: OpsPilot could not run it then … ask me again" above its answer."""
    clock = Clock()
    ws = await open_at(redis_url, prefix, slack, clock, role="worker")
    try:
        thread_id = await asked(ws)
        timer = await schedule(ws, thread_id)
        assert ws.service.worker is not None
        await ws.service.worker.stop()  # the queue is read once the instance is back
        clock.now = timer.due
        assert await _crash(redis_url, prefix, "enqueue", clock.now) == "CLAIMED 1\nENQUEUED\n"
        clock.now = timer.due + 11 * 60  # back 11 minutes later (grace: 10)
        assert await tick(ws) == 1
        ws.service.worker.start()
        await drain(ws)
        assert await turns(ws, thread_id, timer) == 1
        assert not [t for t in thread_texts(ws) if "skipped" in t], thread_texts(ws)
        assert any("started at" in t and "11 min late" in t for t in thread_texts(ws)), thread_texts(ws)
        assert (await ws.store.stats(3600)).get("followup_fired") == 1
        assert await tick(ws) == 0  # completed
    finally:
        await ws.stop()


async def test_a_follow_up_whose_thread_took_a_card_meanwhile_leaves_the_card_and_says_not_run(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """Handed on while the thread was idle; before its turn was read, the person's "restart payments in prod"
    paused on a Confirm card. The follow-up's text must not answer that card ("answered in the thread instead"),
    and its announcement must not say it ran: it says it was not run, in the thread, and tells nobody privately
    to send again a message they never sent."""
    clock = Clock()
    ws = await open_at(redis_url, prefix, slack, clock, role="worker")
    try:
        thread_id = await asked(ws)
        await drain(ws)
        timer = await schedule(ws, thread_id)
        assert ws.service.worker is not None
        await ws.service.worker.stop()
        clock.now = timer.due
        assert await tick(ws) == 1  # nothing under way: handed on
        await ws.settle()
        assert not any("Follow-up ran at" in t for t in thread_texts(ws))  # not before its turn ran
        await ws.service.executor(Converse(channel=CHANNEL, thread_ts="500.1", user="UREQ", ts="500.5",
                                           text="restart payments in prod", request_id=f"{CHANNEL}:500.5"))
        await ws.settle()
        ws.service.worker.start()
        await drain(ws)
        engine = ws.service.core.engine
        assert await engine.under_way(thread_id) and await turns(ws, thread_id, timer) == 0
        live = [b for m in slack.thread(CHANNEL, "500.1") for b in buttons(m) if b["action_id"] == "opspilot_confirm"]
        assert len(live) == 1 and ws.toolbox.restarts.done == []
        texts = thread_texts(ws)
        assert any("not run: I was busy in this thread" in t for t in texts), texts
        assert not any("Follow-up ran at" in t for t in texts) and slack.ephemeral_texts("UREQ") == []
        stats = await ws.store.stats(3600)
        assert (stats.get("followup_fired"), stats.get("followup_skipped")) == (0, 1)
    finally:
        await ws.stop()


@pytest.mark.parametrize("revoked", [{"allowed_users": ["UOTHER"]}, {"allowed_channels": ["COTHER"]}])
async def test_timers_of_someone_no_longer_allowed_do_not_run_in_their_name(
        redis_url: str, prefix: str, slack: FakeSlack, revoked: dict[str, list[str]]) -> None:
    """UREQ asked for a follow-up and a daily check while allowed; then ``allowed_users`` (or ``allowed_channels``)
    changed and OpsPilot restarted. Neither runs the model or its tools in UREQ's name: the follow-up says why in
    its thread, the schedule ends with a line saying why (once, not each day)."""
    clock = Clock(SAT_0700_EST)
    before = await open_at(redis_url, prefix, slack, clock, allowed_users=["UREQ"])
    try:
        await command(before, 'schedule "0 9 * * *" UTC payments recent errors')
        thread_id = await asked(before)
        followup = await schedule(before, thread_id)
    finally:
        await before.stop()
    ws = await open_at(redis_url, prefix, slack, clock, **revoked)
    try:
        daily = await only_schedule(ws)
        runs = (await ws.store.stats(3600)).runs
        clock.now = followup.due + 1
        await tick(ws)
        await ws.settle()
        clock.now = daily.due + 1
        await tick(ws)
        await ws.settle()
        assert await turns(ws, thread_id, followup) == 0 and (await ws.store.stats(3600)).runs == runs
        assert not [m for m in roots(slack) if "*Scheduled check*" in all_text(m)]
        assert any("not run: <@UREQ> may no longer use OpsPilot here" in t for t in thread_texts(ws))
        ended = [all_text(m) for m in roots(slack) if "ended, not run: <@UREQ> may no longer use" in all_text(m)]
        assert len(ended) == 1 and ws.service.timers is not None
        assert await ws.service.timers.slack.timers.get(daily.id) is None  # ended: not tried again every day
    finally:
        await ws.stop()


async def test_a_check_in_an_archived_channel_is_not_run(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """Slack keeps an archived channel's members (``is_member``) and refuses every post in it: a check there
    would run the model and its tools and be counted reported with nothing shown."""
    clock = Clock(SAT_0700_EST)
    ws = await open_at(redis_url, prefix, slack, clock)
    try:
        await command(ws, 'schedule "0 9 * * *" UTC payments recent errors')
        daily = await only_schedule(ws)
        slack.archived.add(CHANNEL)
        clock.now = daily.due + 1
        await tick(ws)
        await ws.settle()
        stats = await ws.store.stats(3600)
        assert (stats.get("schedule_fired"), stats.get("schedule_skipped"), stats.runs) == (0, 1, 0), stats
        assert ws.service.timers is not None and await ws.service.timers.slack.timers.get(daily.id) is not None
    finally:
        await ws.stop()


async def test_making_and_cancelling_schedules_cannot_fill_a_channel(redis_url: str, prefix: str,
                                                                      slack: FakeSlack) -> None:
    """Each made schedule posts in the channel and its cancel once more: 15 make-and-cancel cycles by one person
    posted 30 messages while their ``/opspilot handover`` was refused after its second. A schedule made is a start
    in the person's and the channel's windows, as a handover is."""
    limits = RunLimits(per_person=2, per_channel=3, schedule_min_interval_s=900)
    ws = await open_at(redis_url, prefix, slack, Clock(SAT_0700_EST), run_limits=limits)
    try:
        before = len(roots(slack))
        for i in range(6):
            await command(ws, f'schedule "0 9 * * *" UTC payments nightly check {i}')
            for timer in [t for t in await ws.store.timers.every() if t.kind == "schedule"]:
                await command(ws, f"schedules cancel {timer.id}")
        posts = [all_text(m) for m in roots(slack)[before:]]
        assert len(posts) == 2 * limits.per_person, posts  # two made and cancelled; the third refused
        assert any("runs started" in t or "try again" in t for t in slack.ephemeral_texts("UREQ"))
    finally:
        await ws.stop()


async def test_re_check_pressed_again_after_its_cancel_counts_again(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    """Re-check counted one start per person and answer, whatever followed: Re-check → Cancel → Re-check … made a
    new follow-up and a new announcement each time while the person's and the channel's windows were full."""
    limits = RunLimits(per_person=2, per_channel=3, schedule_min_interval_s=900)
    ws = await open_at(redis_url, prefix, slack, Clock(), run_limits=limits)
    try:
        answer = await restarted(ws, "770.1")  # UREQ's mention and reply: 2 starts in the channel
        run_id = next(b["value"] for b in buttons(answer) if b["action_id"] == RECHECK)
        for _ in range(4):
            await ws.sender.action(block_action(user="UOTHER", channel=CHANNEL, message=copy.deepcopy(answer),
                                                action_id=RECHECK, value=run_id))
            await ws.settle()
            for m in slack.thread(CHANNEL, "770.1"):
                cancel = next((b for b in buttons(m) if b["action_id"] == CANCEL), None)
                if cancel is not None:
                    await ws.sender.action(block_action(user="UOTHER", channel=CHANNEL, message=copy.deepcopy(m),
                                                        action_id=CANCEL, value=cancel["value"]))
                    await ws.settle()
        announced = [m for m in slack.thread(CHANNEL, "770.1") if "ollow-up" in all_text(m)]
        assert len(announced) == 1, [all_text(m) for m in announced]  # the channel's third start; then refused
        assert any("try again" in t for t in slack.ephemeral_texts("UOTHER"))
    finally:
        await ws.stop()


async def test_a_check_cancelled_while_it_ran_says_so_in_its_report(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    """"<@UREQ> cancelled the scheduled check" and then, below it, that schedule's report as if it still ran: the
    report of the check that had started says it started before the cancel, and that it does not run again."""
    clock = Clock(SAT_0700_EST)
    model = ScriptedModel([reply("payments: error rate 4.3%.\nStatus: ATTENTION")], latency_s=1.0)
    ws = await open_at(redis_url, prefix, slack, clock, model=model, specs=[])
    try:
        await command(ws, 'schedule "*/30 * * * *" UTC payments recent errors')
        timer = await only_schedule(ws)
        clock.now = timer.due
        assert await tick(ws) == 1  # handed on: the check runs in the background
        for _ in range(100):  # until its run has started
            if await ws.service.core.engine.under_way(f"check:{timer.id}"):
                break
            await asyncio.sleep(0.02)
        await command(ws, f"schedules cancel {timer.id}")
        await ws.settle()
        texts = [all_text(m) for m in roots(slack)]
        cancelled = next(i for i, t in enumerate(texts) if "cancelled the scheduled check" in t)
        report = next(i for i, t in enumerate(texts) if "*Scheduled check*" in t)
        assert report > cancelled and "started before its schedule was cancelled" in texts[report], texts
    finally:
        await ws.stop()


async def test_a_chinese_teams_check_reports_in_chinese(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """The header was Chinese, the body the model's English: the check's own instruction (English) outweighed
    its Chinese question. The answer's language is the question's, said as such."""
    clock = Clock(SAT_0700_EST)
    ws = await open_at(redis_url, prefix, slack, clock, language="auto")
    try:
        await command(ws, 'schedule "0 9 * * *" Asia/Shanghai 支付服务最近的报错')
        timer = await only_schedule(ws)
        clock.now = timer.due
        await tick(ws)
        await ws.settle()
        report = next(t for t in (all_text(m) for m in roots(slack)) if "*计划检查* ——" in t)
        body = report.split("\n", 1)[1]
        runs = [r for r in english_runs(body, ("environment",)) if len(r.split()) > 2]
        assert not runs, (runs, body)
    finally:
        await ws.stop()


async def test_slack_failing_to_list_a_user_group_never_ends_a_schedule(redis_url: str, prefix: str,
                                                                          slack: FakeSlack) -> None:
    """``allowed_usergroups``, the owner in the group, OpsPilot restarted (nothing cached) and Slack failing
    ``usergroups.users.list`` when the timers fired: the schedule was ended for good and the follow-up skipped,
    both saying "<@UREQ> may no longer use OpsPilot here". Not known is not a no: both wait and run once Slack
    answers."""
    slack.usergroups["S0ONCALL"] = ["UREQ"]
    clock = Clock(SAT_0700_EST)
    before = await open_at(redis_url, prefix, slack, clock, allowed_usergroups=["S0ONCALL"])
    try:
        await command(before, 'schedule "0 13 * * *" UTC payments recent errors')  # in an hour
        thread_id = await asked(before)
        followup = await schedule(before, thread_id, minutes=60)
    finally:
        await before.stop()
    ws = await open_at(redis_url, prefix, slack, clock, allowed_usergroups=["S0ONCALL"])  # nothing cached
    try:
        daily = await only_schedule(ws)
        failing = slack.fault("error", "usergroups.users.list", status=500)
        assert abs(followup.due - daily.due) < 5
        clock.now = max(followup.due, daily.due) + 1
        assert await tick(ws) == 2
        await ws.settle()
        assert not [t for t in [*thread_texts(ws), *(all_text(m) for m in roots(slack))] if "may no longer" in t]
        assert ws.service.timers is not None and await ws.service.timers.slack.timers.get(daily.id) is not None
        failing.until = 0.0  # Slack answers again: both run once their lease ends
        clock.now += 61
        assert await tick(ws) == 2
        await ws.settle()
        assert await turns(ws, thread_id, followup) == 1
        assert [m for m in roots(slack) if "*Scheduled check*" in all_text(m)]
    finally:
        await ws.stop()


async def test_a_channel_no_longer_allowed_ends_a_schedule_while_a_user_group_is_unreadable(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """A user group Slack would not list made every refusal "not known now", a channel taken out of
    ``allowed_channels`` too (its rule reads no group): the schedule was skipped each day with a false reason,
    never ended."""
    slack.usergroups["S0ONCALL"] = ["UREQ"]
    clock = Clock(SAT_0700_EST)
    before = await open_at(redis_url, prefix, slack, clock, allowed_usergroups=["S0ONCALL"])
    try:
        await command(before, 'schedule "0 13 * * *" UTC payments recent errors')
    finally:
        await before.stop()
    ws = await open_at(redis_url, prefix, slack, clock, allowed_usergroups=["S0ONCALL"], allowed_channels=["COTHER"])
    try:
        daily = await only_schedule(ws)
        slack.fault("error", "usergroups.users.list", status=500)
        assert ws.service.timers is not None
        await ws.service.timers.slack.access.members("S0ONCALL")  # failed, nothing cached: a group unread
        clock.now = daily.due + 1
        await tick(ws)
        await ws.settle()
        assert await ws.service.timers.slack.timers.get(daily.id) is None  # ended, saying why
        assert [m for m in roots(slack) if "ended, not run: <@UREQ> may no longer use" in all_text(m)]
    finally:
        await ws.stop()
