"""A dependency's outage as the operator's log tells it: one line when it goes away, one when it comes back
(with how long it was gone), and a summary once a minute in between — never a line per retry. Failures that
successes keep interrupting are not an outage: one "failing intermittently" line a minute tells them. Every loop
in a process that talks to Redis, Slack or the model reports to the same :class:`Outage` for that dependency, so
ten loops retrying a dead Redis still write one line a minute, not ten a second."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

SUMMARY_EVERY_S = 60.0
DOWN_AFTER_S = 1.0
"""Failures with no success in between for this long make an outage; shorter, it is a blip (an incident's
Slack failing 40 % of calls is degraded, not gone: a line per failure and per success would bury the log)."""
_INTERMITTENT = 3  # failures in a minute, between successes, worth one line
_log = logging.getLogger("opspilot.outages")


class Outage:
    def __init__(self, name: str, *, every_s: float = SUMMARY_EVERY_S, after_s: float = DOWN_AFTER_S,
                 logger: logging.Logger = _log, clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.every_s, self.after_s, self.log, self.clock = name, every_s, after_s, logger, clock
        self.since: float | None = None
        self._failing_since: float | None = None  # the first failure since the last success
        self._failures = 0
        self._last = ""
        self._next_summary = 0.0
        self._window_end: float | None = None  # the minute in which blips are counted
        self._blips = self._calls = 0

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, detail: object) -> None:
        """A call to the dependency failed for reasons of its own (unreachable, 5xx, timed out)."""
        now = self.clock()
        self._last = " ".join(str(detail).split())[:300]
        self._count(now, failed=True)
        if self.since is None:
            if self._failing_since is None:
                self._failing_since = now
            if now - self._failing_since < self.after_s:
                return  # a blip, so far
            self.since, self._failures, self._next_summary = self._failing_since, 0, now + self.every_s
            self._blips = 0  # they were the outage's start, told now
            self.log.warning("%s is unavailable: %s (retrying; next report in %.0f s unless it is back)",
                             self.name, self._last, self.every_s)
            return
        self._failures += 1
        if now >= self._next_summary:
            self.log.warning("%s still unavailable after %s: %d failed attempts in the last %.0f s; last: %s",
                             self.name, _span(now - self.since), self._failures, self.every_s, self._last)
            self._failures, self._next_summary = 0, now + self.every_s

    def ok(self) -> None:
        """A call to the dependency succeeded: if it was down, say it is back and how long it was gone."""
        now = self.clock()
        self._count(now, failed=False)
        self._failing_since = None
        if self.since is None:
            return
        gone = now - self.since
        self.since = None
        self.log.warning("%s is back after %s", self.name, _span(gone))

    def _count(self, now: float, *, failed: bool) -> None:
        """Blips (failures while it is not down) are told as one line a minute where there were several."""
        if self._window_end is None or now >= self._window_end:
            if self._blips >= _INTERMITTENT:
                self.log.warning("%s is failing intermittently: %d of %d calls failed in the last %.0f s; "
                                 "last: %s", self.name, self._blips, self._calls, self.every_s, self._last)
            self._window_end, self._blips, self._calls = now + self.every_s, 0, 0
        self._calls += 1
        self._blips += int(failed and self.since is None)


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


_SHARED: dict[str, Outage] = {}


def outage(name: str) -> Outage:
    """The process's one :class:`Outage` for ``name`` (``Redis``, ``Slack``, ``the model``)."""
    if name not in _SHARED:
        _SHARED[name] = Outage(name)
    return _SHARED[name]
