"""A dependency's outage as the operator's log tells it: one line when it goes away, one when it comes back
(with how long it was gone), and a summary once a minute in between — never a line per retry. Every loop in a
process that talks to Redis, Slack or the model reports to the same :class:`Outage` for that dependency, so
ten loops retrying a dead Redis still write one line a minute, not ten a second."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

SUMMARY_EVERY_S = 60.0
_log = logging.getLogger("opspilot.outages")


class Outage:
    def __init__(self, name: str, *, every_s: float = SUMMARY_EVERY_S, logger: logging.Logger = _log,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.every_s, self.log, self.clock = name, every_s, logger, clock
        self.since: float | None = None
        self._failures = 0
        self._last = ""
        self._next_summary = 0.0

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, detail: object) -> None:
        """A call to the dependency failed for reasons of its own (unreachable, 5xx, timed out)."""
        now = self.clock()
        self._last = " ".join(str(detail).split())[:300]
        if self.since is None:
            self.since, self._failures, self._next_summary = now, 0, now + self.every_s
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
        if self.since is None:
            return
        gone = self.clock() - self.since
        self.since = None
        self.log.warning("%s is back after %s", self.name, _span(gone))


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
