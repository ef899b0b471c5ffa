"""recent_changes: every change source asked at once, merged newest first, with what could not be read said
plainly — a source that failed or does not cover the environment never counts as "nothing changed"."""

from __future__ import annotations

import asyncio
from typing import Any

from tools.ops.catalog import Service
from tools.ops.changes import Change, ChangeSource, Found
from tools.ops.series import hhmm, iso
from tools.tool_errors import ToolError

MAX_LISTED = 20


_LABELS = {"image": "image change", "config": "config change"}


def _detail(change: Change) -> str:
    """What a Kubernetes-derived change was, in brief: its images, what changed, or its target."""
    if change.kind == "image" and change.from_images:
        return f"{', '.join(change.from_images)} → {', '.join(change.images)}"
    if change.kind == "rollback":
        return ", ".join(change.images)
    if change.kind == "config":
        return ", ".join(c.removesuffix(" changed") for c in change.changed)
    return ""


def _line(change: Change, dated: bool = False) -> str:
    when = f"{(iso(change.at) or '')[:10]} {hhmm(change.at)}" if dated else hhmm(change.at)
    when = {"approximate": f"about {when}", "unknown": f"an unknown time after {when}"}.get(change.dated or "", when)
    if change.kind == "rollback" and change.to_version:
        what = f"rollback to {change.to_version}"
    elif change.kind == "scale" and change.to_version:
        what = f"scale to {change.to_version}"
    else:
        what = " ".join(p for p in (_LABELS.get(change.kind, change.kind), change.version) if p)
    what += f" [{change.status}]" if change.status else ""  # its own word that it did not succeed
    what += " [environment not stated]" if change.unscoped else ""
    if detail := _detail(change):
        return f"{what} ({detail[:80]}) at {when} UTC"
    extra = change.description or (", ".join(change.images) if change.images else "")
    return f"{what} at {when} UTC" + (f" ({extra[:80]})" if extra else "")


SKEW_S = 300.0
"""A change dated this far after now is still the window's (clocks differ); further, it is counted unreadable."""


async def recent(sources: list[ChangeSource], service: Service, environment: str, minutes: int,
                 now: float) -> dict[str, Any]:
    start = now - minutes * 60
    asked = [s for s in sources if s.serves(environment)]
    answers = await asyncio.gather(*(s.changes(service, environment, start, now) for s in asked),
                                   return_exceptions=True)
    changes: list[Change] = []
    unavailable: list[dict[str, str]] = []
    answered: list[str] = []
    unreadable = 0
    notes: list[str] = []
    failures: list[ToolError] = []
    for source, answer in zip(asked, answers, strict=True):
        if isinstance(answer, Found):
            answered.append(source.name)
            changes += answer.changes
            unreadable += answer.unreadable
            notes += answer.notes
        elif isinstance(answer, ToolError):
            failures.append(answer)
            unavailable.append({"source": source.name, "errorCode": answer.code, "message": answer.message})
        else:  # anything else is a bug in a source: let the runtime classify it (internal_error, logged)
            raise answer
    if not answered:
        if failures:
            raise type(failures[0])("; ".join(f"{u['source']}: {u['message']}" for u in unavailable),
                                    code=failures[0].code)
        raise ToolError(f"no change source covers {environment} (configured: "
                        f"{', '.join(s.name for s in sources) or 'none'})", code="not_configured")
    future = [c for c in changes if c.at > now + SKEW_S]  # a time no clock skew explains: not a time to trust
    unreadable += len(future)
    changes = sorted((c for c in changes if c.at <= now + SKEW_S), key=lambda c: c.at, reverse=True)
    twice = len(changes)  # one change delivered twice (a retried CI webhook) is one change: listed, counted once
    changes = list({(c.kind, c.version, c.to_version, round(c.at), c.description): c for c in changes}.values())
    twice -= len(changes)
    window = [c for c in changes if start <= c.at]
    before = next((c for c in changes if c.at < start), None)
    if window:
        summary = f"{len(window)} change{'s' if len(window) != 1 else ''} in the last {minutes} min: " + \
            "; ".join(_line(c) for c in window[:3]) + ("; …" if len(window) > 3 else "")
    else:
        last = f"; the last one: {_line(before, dated=True)}" if before else ""
        summary = f"no {'readable ' if unreadable else ''}change in the last {minutes} min{last}"
    if unreadable:  # left out of the list, not of what is said: "nothing changed" would not be known
        summary += f"; {unreadable} record{'s' if unreadable != 1 else ''} could not be read (no time, service or " \
                   "a time far in the future): the list may be incomplete"
    if twice:
        notes.append(f"{twice} record{'s' if twice != 1 else ''} of a change already listed counted once")
    if notes:
        summary += "; " + "; ".join(notes)
    if unavailable:
        summary += f" (not checked: {', '.join(u['source'] for u in unavailable)})"
    out: dict[str, Any] = {
        "service_id": service.id, "environment": environment,
        "window": {"from": iso(start), "to": iso(now), "minutes": minutes},
        "changes": [c.record() for c in window[:MAX_LISTED]], "more_changes": max(len(window) - MAX_LISTED, 0),
        "last_before_window": before.record() if before else None,
        "sources": answered, "unavailable": unavailable, "summary": summary}
    if unreadable:
        out["unreadable_records"] = unreadable
    if notes:
        out["notes"] = notes
    return out


_RELEASES = {"deploy", "image", "rollback", "rollout", "config"}


async def releases(sources: list[ChangeSource], service: Service, environment: str, now: float) -> list[Change]:
    """A service's releases in one environment up to ``now``, oldest first, from the sources that answer: what a
    rollback by webhook or by the demo plans from. A source that fails is left out (the plan is shown, and a
    release it does not know can still be named)."""
    asked = [s for s in sources if s.serves(environment)]
    answers = await asyncio.gather(*(s.changes(service, environment, 0.0, now) for s in asked),
                                   return_exceptions=True)
    found: list[Change] = []
    for answer in answers:
        if isinstance(answer, Found):
            found += [c for c in answer.changes if c.kind in _RELEASES and c.version and c.at <= now]
        elif not isinstance(answer, ToolError):
            raise answer
    return sorted(found, key=lambda c: c.at)
