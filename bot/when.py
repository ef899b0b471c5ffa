"""When a follow-up or a scheduled check is due. APScheduler 3's triggers do the arithmetic — crontab fields,
time zones, the hour that daylight saving time skips or repeats — and nothing here re-implements it; only a fixed
time of day in a repeated hour is taken once, as classic cron takes it (:func:`next_due`).

Keeping and firing timers is OpsPilot's own (:mod:`state.timer_store`, :mod:`bot.slack.followups.firing`):
APScheduler 3's job stores have no way for several processes to share one (each scheduler takes every due job
for itself, and its Redis job store has no claim between processes), so every instance would run every job.
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

if TYPE_CHECKING:  # imported when a timer is computed, not by every process at start
    from apscheduler.triggers.cron import CronTrigger


class WhenError(ValueError):
    """A crontab expression or time zone that cannot be used, in words a person can act on (English); ``kind``
    (``zone``, ``cron``) and ``value`` let a front end say it in the person's language."""

    def __init__(self, message: str, kind: str = "", value: str = "") -> None:
        super().__init__(message)
        self.kind, self.value = kind, value


@functools.cache
def _canonical() -> frozenset[str]:
    """The IANA names, read from the disk once. ZoneInfo alone also opens any file under the zone folders
    (posixrules, right/…, posix/…); "localtime" is this machine's own setting and "Factory" means "not set"."""
    return frozenset(available_timezones() - {"Factory", "localtime"} | {"UTC"})


def zone(name: str) -> ZoneInfo:
    if name.strip() in _canonical():
        try:
            return ZoneInfo(name.strip())
        except (ZoneInfoNotFoundError, ValueError, OSError):  # listed, yet its file cannot be read
            pass
    raise WhenError(f"unknown time zone {name!r} (use an IANA name such as UTC, Europe/Berlin or "
                    "America/New_York)", "zone", name)


def known_zone(name: str) -> bool:
    try:
        zone(name)
    except WhenError:
        return False
    return True


_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _day(value: str) -> int:
    low = value.strip().lower()
    if low[:3] in _DAYS and low.isalpha():
        return _DAYS.index(low[:3])
    if low.isdigit() and int(low) <= 7:
        return int(low) % 7  # 0 and 7 are both Sunday
    raise ValueError(f"{value!r} is not a day of the week (0-7 or sun-sat)")


def weekdays(field: str) -> str:
    """A crontab day-of-week field (0 or 7 = Sunday) in APScheduler 3's terms, where 0 is Monday: the days by
    name (``1-5`` → ``mon,tue,wed,thu,fri``). APScheduler's ``from_crontab`` passes the numbers through as they
    are, so ``1-5`` would mean Tuesday to Saturday."""
    if field == "*":
        return field
    days: set[int] = set()
    for part in field.split(","):
        span, _, step = part.partition("/")
        every = int(step) if step.isdigit() and int(step) > 0 else None
        if step and every is None:
            raise ValueError(f"{part!r}: the step must be a positive number")
        if span == "*":
            first, last = 0, 6
        else:
            low, dash, high = span.partition("-")
            first = _day(low)
            last = 6 if every else first
            if dash:  # a range may end on Sunday as 7 (or sun): 5-7 is Friday to Sunday
                last = 7 if high.strip().lower() in ("7", "sun") else _day(high)
            if last < first:
                raise ValueError(f"{part!r}: a range of days runs forwards (e.g. 1-5)")
        days.update(d % 7 for d in range(first, last + 1, every or 1))
    return ",".join(_DAYS[d] for d in sorted(days))


def trigger(cron: str, timezone: str) -> CronTrigger:
    """The crontab expression (minute hour day-of-month month day-of-week, 0 or 7 = Sunday) in ``timezone``."""
    from apscheduler.triggers.cron import CronTrigger

    tz = zone(timezone)
    try:
        fields = cron.split()
        if len(fields) != 5:
            raise ValueError(f"got {len(fields)} fields")
        return CronTrigger(minute=fields[0], hour=fields[1], day=fields[2], month=fields[3],
                           day_of_week=weekdays(fields[4]), timezone=tz)
    except ValueError as exc:
        raise WhenError(f"{cron!r} is not a crontab expression (five fields: minute hour day-of-month month "
                        f"day-of-week, e.g. \"0 9 * * 1-5\"): {exc}", "cron", cron) from exc


def problem(cron: str, timezone: str) -> str | None:
    """Why this schedule cannot be used, or None."""
    try:
        trigger(cron, timezone)
    except WhenError as exc:
        return str(exc)
    return None


def next_due(cron: str, timezone: str, after: float) -> int | None:
    """The first time the schedule fires at or after ``after`` (epoch seconds); None if it never does again.
    A fixed time of day (neither the minute nor the hour a ``*``) in the hour a fall-back of daylight saving time
    repeats fires once, the first time the clock shows it, as classic cron does; APScheduler returns both."""
    fields = cron.split()
    if len(fields) == 5 and not fields[2].startswith("*") and not fields[4].startswith("*"):
        # Both days restricted: classic crontab fires on either ("0 9 1 * 1": the 1st and every Monday);
        # APScheduler asks for both (the Mondays that are a 1st).
        either = [next_due(" ".join([*fields[:4], "*"]), timezone, after),
                  next_due(" ".join([*fields[:2], "*", fields[3], fields[4]]), timezone, after)]
        return min((due for due in either if due is not None), default=None)
    fires, tz = trigger(cron, timezone), zone(timezone)
    fixed = not any(field.startswith("*") for field in fields[:2])
    moment = datetime.fromtimestamp(after, UTC)
    while True:
        fire: datetime | None = fires.get_next_fire_time(None, moment)
        if fire is None or not (fixed and _repeated(fire, tz)):
            return math.ceil(fire.timestamp()) if fire is not None else None
        moment = datetime.fromtimestamp(fire.timestamp() + 1, UTC)  # in UTC: local arithmetic loses the fold


def _repeated(moment: datetime, tz: ZoneInfo) -> bool:
    """Whether the wall clock showed ``moment``'s local time once already (the second pass of a fall-back)."""
    wall = moment.astimezone(tz).replace(tzinfo=None)
    return wall.replace(tzinfo=tz, fold=0).timestamp() < moment.timestamp()


def once(after_s: float, now: float) -> int:
    """A single occurrence ``after_s`` from ``now`` (a follow-up), to the second."""
    from apscheduler.triggers.date import DateTrigger

    start = datetime.fromtimestamp(now, UTC)
    fire: datetime | None = DateTrigger(run_date=start + timedelta(seconds=after_s)).get_next_fire_time(None, start)
    assert fire is not None  # a date trigger fires once, at its date
    return math.ceil(fire.timestamp())


def local(ts: float, timezone: str = "UTC", with_day: bool = False) -> str:
    """``09:00 EDT`` (``Mon 09:00 EDT``): a time as people in ``timezone`` read it."""
    moment = datetime.fromtimestamp(ts, zone(timezone) if timezone else UTC)
    return moment.strftime("%a %H:%M %Z" if with_day else "%H:%M %Z")
