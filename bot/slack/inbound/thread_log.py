"""What happened in a thread besides its runs, kept per thread so an incident summary renders it from the record
(OpsPilot's status notes in Slack keep only their ts once posted): the alert the thread investigates — fired,
fired again, resolved — and its follow-ups — scheduled, ran, skipped, cancelled."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

from state.store import MetaStore

AlertKind = Literal["fired", "fired_again", "partly_resolved", "resolved"]
FollowupKind = Literal["scheduled", "ran", "skipped", "cancelled"]
KEEP = 200
T = TypeVar("T")


@dataclass(frozen=True)
class AlertEvent:
    kind: AlertKind
    at: float
    title: str = ""
    count: int = 1


@dataclass(frozen=True)
class FollowupEvent:
    kind: FollowupKind
    at: float
    timer_id: str
    question: str
    due: float
    by: str
    """Who asked for it; for ``cancelled``, who cancelled it."""
    why: str = ""
    """For ``skipped``: ``late`` or ``busy``."""


async def log_alert(meta: MetaStore, channel: str, thread_ts: str, kind: AlertKind, at: float, *, title: str = "",
                    count: int = 1) -> None:
    await _log(meta, f"alert-events:{channel}:{thread_ts}", {"kind": kind, "at": at, "title": title[:300],
                                                             "count": count})


async def alert_events(meta: MetaStore, channel: str, thread_ts: str) -> list[AlertEvent]:
    def parse(body: dict[str, Any]) -> AlertEvent:
        return AlertEvent(body["kind"], float(body["at"]), str(body.get("title") or ""), int(body.get("count", 1)))

    return await _read(meta, f"alert-events:{channel}:{thread_ts}", get_args(AlertKind), parse)


async def log_followup(meta: MetaStore, channel: str, thread_ts: str, kind: FollowupKind, at: float, *,
                       timer_id: str, question: str, due: float, by: str, why: str = "") -> None:
    await _log(meta, f"followup-events:{channel}:{thread_ts}", {
        "kind": kind, "at": at, "timer_id": timer_id, "question": question[:300], "due": due, "by": by, "why": why})


async def followup_events(meta: MetaStore, channel: str, thread_ts: str) -> list[FollowupEvent]:
    def parse(body: dict[str, Any]) -> FollowupEvent:
        return FollowupEvent(body["kind"], float(body["at"]), str(body["timer_id"]), str(body.get("question") or ""),
                             float(body["due"]), str(body.get("by") or ""), str(body.get("why") or ""))

    return await _read(meta, f"followup-events:{channel}:{thread_ts}", get_args(FollowupKind), parse)


async def _log(meta: MetaStore, name: str, event: dict[str, Any]) -> None:
    await meta.remember(name, json.dumps(event, ensure_ascii=False), keep=KEEP)


async def _read(meta: MetaStore, name: str, kinds: tuple[str, ...], parse: Callable[[dict[str, Any]], T]) -> list[T]:
    """Oldest first; an entry that does not read is skipped."""
    events = []
    for raw in reversed(await meta.recall(name)):
        try:
            body = json.loads(raw)
            if isinstance(body, dict) and body.get("kind") in kinds:
                events.append(parse(body))
        except (ValueError, KeyError, TypeError):
            continue
    return events
