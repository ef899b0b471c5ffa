"""When an outbox round reads every shard's due index, not only the threads its own process just wrote to.

Such a read finds what other processes wrote and left due: a thread whose process died holding it, a retry whose
timer died with it. It happens at least once per ``poll_s``, and at every round while the last one found more than
a round takes (a backlog). With a claim (a Redis key per ``poll_s`` slot, taken once), one process of the
deployment reads per slot: N processes read the 16 shards once a second in all, not N times (each still claims:
one command, not sixteen). A claim that cannot be asked (the store is down) reads anyway, as a process alone would.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable

from state.store_errors import StoreError

Claim = Callable[[int], Awaitable[bool]]
"""Whether this process reads in slot ``n`` (``time.time() // poll_s``): True for one process per slot."""


class Scans:
    def __init__(self, poll_s: float, claim: Claim | None = None) -> None:
        self.poll_s, self.claim = poll_s, claim
        self.backlog = False
        """The last read found more than a round takes: read again at every round until it does not."""
        self.reads = 0
        self._at = 0.0

    async def due(self) -> bool:
        """Whether this round reads every shard."""
        if self.backlog:
            return True
        if time.monotonic() - self._at < self.poll_s:
            return False
        mine = True
        if self.claim is not None:
            with contextlib.suppress(StoreError):  # not known: read, and the read says what it is
                mine = await self.claim(int(time.time() // self.poll_s))
        self._at = time.monotonic()  # tried (a read that fails waits for the next slot too) or left to another
        return mine

    def read(self, found: int, limit: int) -> None:
        """A read of every shard found ``found`` due threads, with room for ``limit``."""
        self.backlog, self.reads = found >= limit, self.reads + 1
