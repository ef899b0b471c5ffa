"""Scheduled checks: ``/opspilot schedule`` and ``/opspilot schedules`` through the signed endpoint, the config's
``schedules:``, a daily check across the start of daylight saving time in New York, misfires, quiet checks and a
check that proposes a change. Real Redis, an injected clock."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from bot import when
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.config import ScheduleConfig, Settings
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from bot.slack.followups.buttons import time_of
from bot.slack.followups.checks import status_of
from bot.slack.followups.schedules import config_timer
from bot.slack.inbound.work_items import Check
from state.timer_store import Timer
from tests.slack_harness import CHANNEL, Workspace
from tests.test_timers import Clock, open_at, tick

SAT_0700_EST = datetime(2025, 3, 8, 12, 0, tzinfo=UTC).timestamp()  # New York moves to EDT on Sun 9 March, 02:00


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_at(redis_url, prefix, slack, Clock(SAT_0700_EST), allowed_users=["UREQ"])
    yield workspace
    await workspace.stop()


async def command(ws: Workspace, text: str, user: str = "UREQ") -> None:
    await ws.sender.command({"command": "/opspilot", "text": text, "user_id": user, "channel_id": CHANNEL,
                             "trigger_id": f"trig-{text[:20]}-{user}-{len(ws.slack.calls)}",
                             "response_url": "https://hooks.slack.test/commands/1"})
    await ws.settle()


def roots(slack: FakeSlack) -> list[dict]:
    return sorted((m for (c, ts), m in slack.messages.items() if c == CHANNEL and m.get("thread_ts") in (None, ts)),
                  key=lambda m: float(m["ts"]))


async def only_schedule(ws: Workspace) -> Timer:
    [timer] = [t for t in await ws.store.timers.every() if t.kind == "schedule"]
    return timer


async def test_a_daily_check_fires_at_nine_new_york_time_on_both_sides_of_the_dst_change(ws: Workspace) -> None:
    clock = Clock(SAT_0700_EST)
    assert ws.service.core.followups is not None
    ws.service.core.followups.clock = clock
    await command(ws, 'schedule "0 9 * * *" America/New_York payments recent errors')
    created = all_text(roots(ws.slack)[-1])
    assert "<@UREQ> scheduled a check here: `0 9 * * *` (America/New_York), next Sat 09:00 UTC-5" in created
    timer = await only_schedule(ws)
    assert timer.due == datetime(2025, 3, 8, 14, 0, tzinfo=UTC).timestamp()  # 09:00 EST
    clock.now = timer.due - 1
    assert await tick(ws) == 0
    clock.now = timer.due
    assert await tick(ws) == 1
    await ws.settle()
    report = roots(ws.slack)[-1]
    text = all_text(report)
    assert "*Scheduled check* — payments recent errors (`0 9 * * *` America/New_York)" in text
    assert "error rate 4.3%" in text and "Status:" not in text  # found something; the status line is ours
    sunday = (await only_schedule(ws)).due
    assert sunday == datetime(2025, 3, 9, 13, 0, tzinfo=UTC).timestamp()  # 09:00 EDT: an hour earlier in UTC
    clock.now = sunday - 1
    assert await tick(ws) == 0
    clock.now = sunday + 2
    assert await tick(ws) == 1
    await ws.settle()
    assert (await only_schedule(ws)).due == datetime(2025, 3, 10, 13, 0, tzinfo=UTC).timestamp()
    reports = [m for m in roots(ws.slack) if "Scheduled check" in all_text(m)]
    assert len(reports) == 2
    stats = await ws.store.stats(10 * 86400)
    assert (stats.get("schedule_fired"), stats.get("schedule_reported")) == (2, 2)


async def test_a_check_missed_beyond_the_grace_is_skipped_with_a_line_and_goes_on(ws: Workspace) -> None:
    clock = Clock(SAT_0700_EST)
    assert ws.service.core.followups is not None
    ws.service.core.followups.clock = clock
    await command(ws, 'schedule "0 9 * * *" America/New_York payments recent errors')
    timer = await only_schedule(ws)
    clock.now = timer.due + 9 * 60  # within the grace: it runs, saying how late
    assert await tick(ws) == 1
    await ws.settle()
    # in the schedule's own zone, as its other lines say it (it said "due 14:00 UTC" beside "09:00 UTC-5")
    assert "(due 09:00 UTC-5, 9 min late: OpsPilot could not run it on time" in all_text(roots(ws.slack)[-1])
    sunday = (await only_schedule(ws)).due
    clock.now = sunday + 3 * 3600  # down all morning
    assert await tick(ws) == 1
    await ws.settle()
    line = all_text(roots(ws.slack)[-1])
    assert "Scheduled check due at Sun 09:00 UTC-4 skipped: OpsPilot could not run it then (stopped, or its state " \
        "store away; 180 min late" in line
    assert "Next: Mon 09:00 UTC-4" in line
    assert (await only_schedule(ws)).due == datetime(2025, 3, 10, 13, 0, tzinfo=UTC).timestamp()
    stats = await ws.store.stats(10 * 86400)
    assert (stats.get("schedule_fired"), stats.get("schedule_skipped")) == (1, 1)


async def test_schedules_are_listed_cancelled_and_refused_with_reasons(ws: Workspace) -> None:
    await command(ws, 'schedule "0 9 * * 1-5" Europe/Berlin payments recent errors --quiet')
    await command(ws, 'schedule "61 9 * * *" UTC payments')
    await command(ws, 'schedule "0 9 * * *" Mars/Olympus payments')
    await command(ws, "schedule payments every morning")
    told = ws.slack.ephemeral_texts("UREQ")
    assert "Not scheduled: '61 9 * * *' is not a crontab expression" in told[0]
    assert "unknown time zone 'Mars/Olympus'" in told[1] and told[2].startswith("Usage: `/opspilot schedule")
    timer = await only_schedule(ws)
    assert timer.quiet and timer.question == "payments recent errors"
    await command(ws, "schedules")
    listing = ws.slack.ephemeral_texts("UREQ")[-1]
    assert f"`{timer.id}` — `0 9 * * 1-5` (Europe/Berlin), quiet when OK, next Mon 09:00 UTC+1" in listing
    await command(ws, "schedules cancel nope")
    assert "There is no scheduled check `nope`" in ws.slack.ephemeral_texts("UREQ")[-1]
    await command(ws, "schedule \"0 9 * * *\" UTC payments", user="UOUT")  # may not use OpsPilot
    assert len(await ws.store.timers.every()) == 1
    await command(ws, f"schedules cancel {timer.id}")
    assert await ws.store.timers.every() == []
    assert "<@UREQ> cancelled the scheduled check `0 9 * * 1-5` (Europe/Berlin)" in all_text(roots(ws.slack)[-1])
    assert (await ws.store.stats(3600)).get("schedule_cancelled") == 1


async def test_a_quiet_check_posts_only_when_it_found_something_and_is_counted_either_way(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    model = ScriptedModel([reply("payments: error rate 0.2%, flat.\nStatus: OK"),
                           reply("payments: error rate 4.3%, steady high.\n**Status: ATTENTION**")])
    clock = Clock(SAT_0700_EST)
    ws = await open_at(redis_url, prefix, slack, clock, model=model, specs=[])
    try:
        await command(ws, 'schedule "*/30 * * * *" UTC payments recent errors --quiet')
        before = len(roots(slack))
        clock.now = (await only_schedule(ws)).due
        assert await tick(ws) == 1
        await ws.settle()
        assert len(roots(slack)) == before  # all well: nothing posted
        clock.now = (await only_schedule(ws)).due
        assert await tick(ws) == 1
        await ws.settle()
        report = all_text(roots(slack)[-1])
        assert "Scheduled check" in report and "4.3%" in report and "ATTENTION" not in report
        stats = await ws.store.stats(3600)
        assert (stats.get("schedule_fired"), stats.get("schedule_quiet"), stats.get("schedule_reported")) == (2, 1, 1)
        # The second check read the first: each schedule's checks are one conversation.
        assert any("error rate 0.2%" in getattr(m, "content", "") for m in model.requests[-1].messages)
    finally:
        await ws.stop()


async def test_a_check_that_proposes_a_change_is_stopped_and_its_report_says_so(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    model = ScriptedModel([reply("", call("restart_service", service_id="payments", environment="prod",
                                          reason="errors")), reply("Stopped.")])
    clock = Clock(SAT_0700_EST)
    ws = await open_at(redis_url, prefix, slack, clock, model=model)
    try:
        seen: list[Check] = []
        checks = ws.service.executor.checks
        assert checks is not None

        async def keep(item: Check) -> None:  # the occurrence's work item, to read it again below
            seen.append(item)
            await checks(item)

        ws.service.executor.checks = keep
        await command(ws, 'schedule "*/30 * * * *" UTC payments recent errors --quiet')
        clock.now = (await only_schedule(ws)).due
        assert await tick(ws) == 1
        await ws.settle()
        assert ws.toolbox.restarts.done == [] and len(seen) == 1
        report = all_text(roots(slack)[-1])
        assert "It proposed `restart_service`, which needs a person: nothing was changed" in report
        assert not await ws.service.core.engine.under_way(f"check:{(await only_schedule(ws)).id}")
        # Read again (its worker died after the report was recorded, before acknowledging the item): the report
        # was rewritten from the run it cancelled, "Stopped at …", its proposal gone.
        assert ws.service.executor.checks is not None
        await ws.service.executor.checks(seen[0])
        await ws.settle()
        assert all_text(roots(slack)[-1]) == report and not roots(slack)[-1].get("edits")
    finally:
        await ws.stop()


async def test_the_configs_schedules_are_kept_in_step_with_the_file(ws: Workspace) -> None:
    assert ws.service.timers is not None
    schedules = ws.service.timers.schedules
    entry = ScheduleConfig(cron="0 8 * * 1-5", timezone="Europe/London", channel=CHANNEL.lower(),
                           question="gateway errors overnight", quiet_when_ok=True)
    schedules.configured = [entry]
    await schedules.sync()
    await schedules.sync()  # a second instance starting: the same timer
    [kept] = await ws.store.timers.every()
    assert kept.source == "config" and kept.channel == CHANNEL and kept.quiet
    assert kept.id == config_timer(entry, SAT_0700_EST + 3600).id  # its id is what it says, not when it was made
    await command(ws, f"schedules cancel {kept.id}")
    assert "comes from the configuration" in ws.slack.ephemeral_texts("UREQ")[-1]
    schedules.configured = [entry.model_copy(update={"cron": "0 7 * * 1-5"})]
    await schedules.sync()
    [edited] = await ws.store.timers.every()
    assert edited.id != kept.id and edited.cron == "0 7 * * 1-5"
    with pytest.raises(ValidationError, match="not a crontab expression"):
        Settings(schedules=[{"cron": "0 9 * *", "channel": "C1", "question": "x"}])  # type: ignore[list-item]
    for tz in ("EST5", "posixrules", "Factory", "localtime", "right/UTC", "posix/Asia/Shanghai"):
        with pytest.raises(ValidationError, match=f"unknown time zone {tz!r}"):
            Settings(schedules=[{"cron": "0 9 * * *", "timezone": tz, "channel": "C1", "question": "x"}])  # type: ignore[list-item]


def test_the_status_line_is_read_from_the_answers_end() -> None:
    assert status_of("all fine\nStatus: OK") == ("ok", "all fine")
    assert status_of("errors up\n*Status: ATTENTION*") == ("attention", "errors up")
    assert status_of("Status: OK\nbut then errors") == ("unknown", "Status: OK\nbut then errors")
    assert status_of("") == ("unknown", "")


NOT_IANA = ("posixrules", "Factory", "localtime", "right/UTC", "posix/Asia/Shanghai")  # zone files on this disk


async def test_a_schedule_in_a_zone_file_that_is_no_iana_name_is_refused(ws: Workspace) -> None:
    for tz in NOT_IANA:
        await command(ws, f'schedule "0 9 * * *" {tz} payments')
        assert f"Not scheduled: unknown time zone {tz!r}" in ws.slack.ephemeral_texts("UREQ")[-1]
    assert await ws.store.timers.every() == []


def test_only_iana_names_are_time_zones_and_they_are_read_from_disk_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    listed = when.available_timezones

    def counted() -> set[str]:
        reads.append(1)
        return listed()

    monkeypatch.setattr(when, "available_timezones", counted)
    when._canonical.cache_clear()
    try:
        assert all(when.known_zone(tz) for tz in ("UTC", "Asia/Shanghai", " Europe/Berlin", "America/New_York"))
        assert not any(when.known_zone(tz) for tz in (*NOT_IANA, "America", "", "Nowhere/Bogus", "../UTC"))
        assert len(reads) == 1
    finally:
        when._canonical.cache_clear()


def test_crontab_days_of_the_week_count_from_sunday() -> None:
    saturday = datetime(2025, 3, 8, 12, 0, tzinfo=UTC).timestamp()
    day = lambda cron: datetime.fromtimestamp(when.next_due(cron, "UTC", saturday) or 0, UTC).strftime("%a")  # noqa: E731
    assert [day(f"0 9 * * {d}") for d in ("1-5", "0", "7", "6", "5-7", "sun", "*")] == \
        ["Mon", "Sun", "Sun", "Sat", "Sun", "Sun", "Sun"]  # from Saturday noon: Saturday's 09:00 has passed
    assert when.weekdays("*/2") == "sun,tue,thu,sat"
    with pytest.raises(when.WhenError, match="not a day of the week"):
        when.trigger("0 9 * * 8", "UTC")


def fires(cron: str, timezone: str, start: datetime, n: int) -> list[str]:
    """The schedule's next ``n`` times from ``start``, each as the firer moves on (a second past the last)."""
    out, at = [], start.timestamp()
    for _ in range(n):
        at = float(when.next_due(cron, timezone, at) or 0)
        out.append(time_of(at, "en", timezone, with_day=True, now=start.timestamp()))
        at += 1
    return out


def test_a_daily_time_in_the_hour_a_dst_fall_back_repeats_fires_once() -> None:
    # Berlin falls back on Sun 27 Oct 2024 (03:00 CEST → 02:00 CET), New York on Sun 3 Nov 2024 (02:00 EDT → 01:00).
    assert fires("30 2 * * *", "Europe/Berlin", datetime(2024, 10, 26, 12, tzinfo=UTC), 3) == \
        ["Sun 02:30 UTC+2", "Mon 02:30 UTC+1", "Tue 02:30 UTC+1"]
    assert fires("0,30 1 * * *", "America/New_York", datetime(2024, 11, 2, 12, tzinfo=UTC), 4) == \
        ["Sun 01:00 UTC-4", "Sun 01:30 UTC-4", "Mon 01:00 UTC-5", "Mon 01:30 UTC-5"]
    # Every half hour is every half hour of real time, as in classic cron: the repeated hour's too.
    assert fires("*/30 * * * *", "Europe/Berlin", datetime(2024, 10, 26, 23, 59, tzinfo=UTC), 4) == \
        ["Sun 02:00 UTC+2", "Sun 02:30 UTC+2", "Sun 02:00 UTC+1", "Sun 02:30 UTC+1"]


def test_times_name_the_day_in_the_readers_language_and_the_zone_by_its_offset() -> None:
    noon = datetime(2025, 3, 8, 12, 0, tzinfo=UTC).timestamp()  # a Saturday
    assert time_of(noon, "en") == "12:00 UTC"
    assert time_of(noon, "zh", with_day=True, now=noon) == "周六 12:00 UTC"
    assert time_of(noon, "zh", "Asia/Shanghai", with_day=True, now=noon) == "周六 20:00 UTC+8"  # not "CST"
    assert time_of(noon, "en", "Asia/Kolkata", with_day=True, now=noon) == "Sat 17:30 UTC+5:30"
    assert time_of(noon, "en", "America/New_York", with_day=True, now=noon) == "Sat 07:00 UTC-5"
    assert time_of(noon + 86400, "en", "America/New_York", with_day=True, now=noon) == "Sun 08:00 UTC-4"  # DST
    # more than six days away: the date too, in the reader's order
    assert time_of(noon + 24 * 86400, "en", with_day=True, now=noon) == "Tue 1 Apr 2025 12:00 UTC"
    assert time_of(noon + 24 * 86400, "zh", with_day=True, now=noon) == "2025年4月1日 周二 12:00 UTC"


async def test_a_schedule_asked_in_chinese_is_answered_with_chinese_days(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    ws = await open_at(redis_url, prefix, slack, Clock(SAT_0700_EST), allowed_users=["UREQ"], language="auto")
    try:
        await command(ws, 'schedule "*/1 * * * *" UTC 支付服务错误率正常吗？')
        await command(ws, 'schedule "0 9 * * 1-5" Asia/Shanghai 支付服务最近的报错')
        created = [all_text(m) for m in roots(ws.slack) if "安排了计划检查" in all_text(m)]
        assert "（UTC），下次 周六 12:00 UTC：支付服务错误率正常吗？" in created[0], created
        assert "（Asia/Shanghai），下次 周一 09:00 UTC+8：支付服务最近的报错" in created[1], created
        assert ws.service.inbound.home is not None
        await ws.service.inbound.home.asked("UREQ", CHANNEL, "900.1", "支付服务错误率正常吗？")  # a Chinese Home
        home = [b["text"]["text"] for b in await ws.service.inbound.home.blocks("UREQ") if "accessory" in b]
        for text in [*created, *home]:
            assert not re.search(r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun|CST)\b", text), text
        assert any("下次 周一 09:00 UTC+8" in text for text in home), home
        # A schedule that cannot be made is told why in Chinese too (the parser's English was quoted)
        await command(ws, 'schedule "0 9 * * *" 北京时间 支付服务最近的报错')
        await command(ws, 'schedule "0 9 * *" UTC 支付服务最近的报错')
        told = ws.slack.ephemeral_texts("UREQ")[-2:]
        assert "未知时区 `北京时间`" in told[0] and "不是 crontab 表达式" in told[1], told
        assert not any(re.search(r"unknown time zone|is not a crontab", t) for t in told), told
    finally:
        await ws.stop()


async def test_a_list_asked_without_words_is_in_the_persons_language(redis_url: str, prefix: str,
                                                                     slack: FakeSlack) -> None:
    ws = await open_at(redis_url, prefix, slack, Clock(SAT_0700_EST), allowed_users=["UREQ"], language="auto")
    try:
        await _listed_in_the_persons_language(ws)
    finally:
        await ws.stop()


async def _listed_in_the_persons_language(ws: Workspace) -> None:
    await command(ws, "schedules")
    assert ws.slack.ephemeral_texts("UREQ")[-1] == "No scheduled checks in this channel."  # nothing to go by: English
    await ws.sender.event(mention(CHANNEL, "UREQ", "看看支付服务最近报错", "880.1"))
    await ws.settle()
    await command(ws, "schedules")  # "schedules" says no language; the person's latest question does
    assert ws.slack.ephemeral_texts("UREQ")[-1] == "本频道没有计划检查。"
    await command(ws, "schedules cancel nope")
    assert "nope" in ws.slack.ephemeral_texts("UREQ")[-1] and "There is no" not in ws.slack.ephemeral_texts("UREQ")[-1]


async def test_a_fence_in_a_question_cannot_turn_the_list_into_code(ws: Workspace) -> None:
    """One ``` in each of two questions made everything between them in ``/opspilot schedules`` (ids, "set by",
    the next time) one preformatted block."""
    await command(ws, 'schedule "0 9 * * *" UTC check ```payments errors')
    await command(ws, 'schedule "0 10 * * *" UTC orders``` latency')
    await command(ws, "schedules")
    listing = ws.slack.ephemeral_texts("UREQ")[-1]
    assert "```" not in listing and listing.count("ˋˋˋ") == 2 and listing.count("<@UREQ>") == 2, listing
    assert "```" not in "".join(all_text(m) for m in roots(ws.slack))


def test_both_days_restricted_fire_on_either_as_crontab_does() -> None:
    """"0 9 1 * 1" fired only on Mondays that were the 1st (months apart); crontab fires on the 1st and on every
    Monday, as docs/slack.md's "standard crontab" promises."""
    def days(cron: str, n: int) -> list[str]:
        out, at = [], datetime(2026, 6, 1, 10, 0, tzinfo=UTC).timestamp()  # a Monday the 1st, past 09:00
        for _ in range(n):
            at = float(when.next_due(cron, "UTC", at) or 0)
            out.append(datetime.fromtimestamp(at, UTC).strftime("%a %m-%d %H:%M"))
            at += 1
        return out

    assert days("0 9 1 * 1", 5) == ["Mon 06-08 09:00", "Mon 06-15 09:00", "Mon 06-22 09:00", "Mon 06-29 09:00",
                                    "Wed 07-01 09:00"]
    assert days("0 9 13 * *", 1) == ["Sat 06-13 09:00"]  # one of them a *: that one alone


async def test_a_schedule_where_opspilot_was_removed_runs_no_check(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    """OpsPilot removed from the channel: every day a whole check ran (the model, reads against prod) and its
    report was dropped, counted "reported". Now no check runs there, and the schedule waits for OpsPilot's return."""
    model = ScriptedModel([reply("payments: all well.\nStatus: OK")])
    clock = Clock(SAT_0700_EST)
    ws = await open_at(redis_url, prefix, slack, clock, model=model, specs=[])
    try:
        await command(ws, 'schedule "*/30 * * * *" UTC payments recent errors')
        slack.absent.add(CHANNEL)  # removed after the schedule was set
        clock.now = (await only_schedule(ws)).due
        assert await tick(ws) == 1
        await ws.settle()
        stats = await ws.store.stats(3600)
        assert (stats.runs, stats.get("schedule_skipped"), stats.get("schedule_reported")) == (0, 1, 0)
        assert (await only_schedule(ws)).due > clock.now  # kept, for when OpsPilot is back
    finally:
        await ws.stop()


async def test_a_schedule_the_config_removed_is_not_said_cancelled_by_whoever_asks(ws: Workspace) -> None:
    """The config sync removed it (nobody pressed anything); `schedules cancel <id>` afterwards told the asker "it
    was cancelled already, by you", and the channel "you cancelled the scheduled check"."""
    schedules = ws.service.timers.schedules
    schedules.configured = [ScheduleConfig(cron="0 8 * * 1-5", timezone="Europe/London", channel=CHANNEL.lower(),
                                           question="gateway errors overnight")]
    await schedules.sync()
    kept = await only_schedule(ws)
    schedules.configured = []
    await schedules.sync()
    posts = len(ws.slack.called("chat.postMessage"))
    await command(ws, f"schedules cancel {kept.id}")
    assert not any("cancelled already" in t for t in ws.slack.ephemeral_texts("UREQ"))
    assert not any("cancel" in str(m.get("text")).lower() for m in ws.slack.called("chat.postMessage")[posts:])
    assert not (await ws.store.stats(3600)).get("schedule_cancelled")


async def test_a_check_s_own_instruction_is_not_read_as_its_question(redis_url: str, prefix: str,
                                                                      slack: FakeSlack) -> None:
    """Without a model key, a check of a misspelt service reported "There is no service named `read-only`": the
    scripted model read the check's instruction ("Look with your read-only tools…") as the question."""
    clock = Clock(SAT_0700_EST)
    ws = await open_at(redis_url, prefix, slack, clock)
    try:
        await command(ws, 'schedule "*/30 * * * *" UTC paymnts recent errors')
        clock.now = (await only_schedule(ws)).due
        assert await tick(ws) == 1
        await ws.settle()
        report = all_text(roots(slack)[-1])
        assert "read-only" not in report and "paymnts" in report, report
    finally:
        await ws.stop()


async def test_a_schedule_s_next_run_weeks_away_is_said_with_its_date(redis_url: str, prefix: str,
                                                                      slack: FakeSlack) -> None:
    """Made on a Saturday, a monthly check was announced "next Tue 09:00 UTC": the run was 24 days away, not the
    coming Tuesday."""
    clock = Clock(SAT_0700_EST)
    ws = await open_at(redis_url, prefix, slack, clock)
    try:
        await command(ws, 'schedule "0 9 1 * *" UTC monthly capacity review')
        due = (await only_schedule(ws)).due
        assert due - clock.now > 6 * 86400
        said = all_text(roots(slack)[-1])
        day = datetime.fromtimestamp(due, UTC)
        assert f"{day:%a} {day.day} {day:%b %Y} 09:00 UTC" in said, said
    finally:
        await ws.stop()


async def test_a_schedule_whose_first_run_is_years_away_is_refused(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    """A leap-day check ("0 9 29 2 *") was accepted and announced, its first run 1088 days away: its records lapse
    after 400 days, and it vanished without a word."""
    ws = await open_at(redis_url, prefix, slack, Clock(SAT_0700_EST))
    try:
        await command(ws, 'schedule "0 9 29 2 *" UTC leap day review')
        assert not [t for t in await ws.store.timers.every() if t.kind == "schedule"]
        assert any("more than a year away" in t for t in slack.ephemeral_texts("UREQ")), slack.ephemeral_texts("UREQ")
    finally:
        await ws.stop()
