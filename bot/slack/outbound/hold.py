"""How sure a deliverer is that its thread's lease is still its own.

A lease in Redis ends by its TTL whether or not the deliverer noticed: in an outage longer than the lease, its
renewals fail while its Slack calls (which need no Redis) go on, and after Redis is back another instance takes
the thread and posts the same message. So every Slack call of a round starts only while the lease cannot lapse
before the call ends, however long it had to wait for its turn at Slack: last renewed (counted from when the
renewal was sent) at most ``lease - call timeout - margin`` ago.
"""

from __future__ import annotations

import time

MARGIN_S = 1.0  # clocks, a slow event loop


class LeaseLost(Exception):
    """The round stops: its lease is someone else's, or may have lapsed. Nothing more is sent this round."""


class Hold:
    def __init__(self, lease_s: float, call_s: float) -> None:
        self.lease_s, self.call_s = lease_s, call_s
        self.renewed_at = time.monotonic()
        self.lost = False

    @staticmethod
    def lease_for(call_s: float, at_least_s: float) -> float:
        """A lease long enough that a call started right after a renewal ends well inside it."""
        return max(at_least_s, 2 * (call_s + MARGIN_S))

    @property
    def renew_every_s(self) -> float:
        """Often enough that two renewals may fail before a call could no longer start."""
        return (self.lease_s - self.call_s - MARGIN_S) / 3

    def renewed(self, sent_at: float, held: bool) -> None:
        """A renewal sent at ``sent_at`` (monotonic: the lease counts from then at the latest) answered ``held``."""
        if held:
            self.renewed_at = max(self.renewed_at, sent_at)
        else:
            self.lost = True

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless a call starting now ends before the lease can lapse."""
        if self.lost:
            raise LeaseLost("another instance holds this thread")
        if time.monotonic() + self.call_s + MARGIN_S > self.renewed_at + self.lease_s:
            raise LeaseLost("the lease was not renewed in time (the store is unavailable?)")
