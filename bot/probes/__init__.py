"""What ``opspilot check`` runs: one probe per dependency, each read-only and each with its own deadline
(:func:`bounded`), so the whole check ends within :data:`TOTAL_S` even when an endpoint accepts and never answers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger(__name__)

PROBE_S = 8.0
"""One probe's deadline: the probes run side by side, so this bounds the whole run too."""
TOTAL_S = 20.0
"""The whole check, start to verdict (an init container's or a CI gate's budget)."""
STAGED_S = TOTAL_S - PROBE_S / 2
"""The deadline of a probe in two stages: the model's (its SDK's import, then the request), the toolbox's (MCP
servers start, then every backend is probed in the time left)."""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    says: str
    fix: str = ""
    required: bool = True
    refused: bool = False
    """What ``serve`` would refuse to start with (a configuration error): the check exits 2, as serve would."""

    @property
    def status(self) -> Literal["ok", "warn", "fail"]:
        return "ok" if self.ok else "fail" if self.required else "warn"

    def line(self) -> str:
        mark = {"ok": "✓", "fail": "✗", "warn": "!"}[self.status]
        return f"{mark} {self.name}: {self.says}" + (f" — fix: {self.fix}" if self.fix and not self.ok else "")

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.says, "fix": "" if self.ok else self.fix}


async def bounded(name: str, probe: Callable[[], Awaitable[list[Check]]], *, deadline_s: float = PROBE_S,
                  fix: str = "") -> list[Check]:
    """The probe's checks, or one failed check saying it did not answer in time (never a hang) or failed in a way
    its own checks did not foresee (never a traceback instead of the other checks and the verdict)."""
    try:
        async with asyncio.timeout(deadline_s):
            return await probe()
    except TimeoutError:
        return [Check(name, False, f"did not answer within {deadline_s:g}s", fix)]
    except Exception as exc:  # one boundary per probe: classified, and the other checks still run
        log.debug("check %s failed unexpectedly", name, exc_info=True)  # where, at DEBUG
        return [Check(name, False, f"failed unexpectedly: {type(exc).__name__}: {str(exc)[:200]}", fix)]
