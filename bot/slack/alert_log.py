"""What happened to the alert a thread investigates — fired, fired again, resolved — kept per thread, so an
incident summary renders it from the record (OpsPilot's status notes in Slack keep only their ts once posted)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from state.store import MetaStore

AlertKind = Literal["fired", "fired_again", "resolved"]
KEEP = 200


@dataclass(frozen=True)
class AlertEvent:
    kind: AlertKind
    at: float
    title: str = ""
    count: int = 1


def _name(channel: str, thread_ts: str) -> str:
    return f"alert-events:{channel}:{thread_ts}"


async def log_alert(meta: MetaStore, channel: str, thread_ts: str, kind: AlertKind, at: float, *, title: str = "",
                    count: int = 1) -> None:
    event = {"kind": kind, "at": at, "title": title[:300], "count": count}
    await meta.remember(_name(channel, thread_ts), json.dumps(event, ensure_ascii=False), keep=KEEP)


async def alert_events(meta: MetaStore, channel: str, thread_ts: str) -> list[AlertEvent]:
    """Oldest first; an entry that does not read is skipped."""
    events: list[AlertEvent] = []
    for raw in reversed(await meta.recall(_name(channel, thread_ts))):
        try:
            body = json.loads(raw)
            kind = body["kind"]
            if kind not in ("fired", "fired_again", "resolved"):
                continue
            events.append(AlertEvent(kind, float(body["at"]), str(body.get("title") or ""), int(body.get("count", 1))))
        except (ValueError, KeyError, TypeError):
            continue
    return events
