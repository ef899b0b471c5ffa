""""Was it the deploy?" from the tools' own results — one rule for every surface that says it (the demo
model's answer, the Slack answer's "Roll back to …" button): when the errors began (the error rate's onset,
sharpened by the first error log line in that minute), the changes before and after it, and yes / no / can't
tell. Yes only when a change came at most ``TIE_S`` before the errors and the error rate was at its baseline
before it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

TIE_S = 30 * 60  # a change more than 30 minutes before the errors began is not tied to them by timing alone
SETTLE_S = 15 * 60
"""How far after it began a change dated "approximate" may be stamped: Kubernetes keeps no start time for a
rollback, and its traces move on as its rollout goes (a rollout followed for up to ~15 minutes)."""
Kind = Literal["yes", "no", "too_early", "nothing_changed", "incomplete", "no_rise", "no_data", "no_history"]


def stamp(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    changes: tuple[tuple[float, dict[str, Any]], ...] = ()
    """The window's changes with their times, newest first."""
    began: float | None = None
    how: str = ""
    """How ``began`` was found: ``first error log line`` or ``error rate first clearly above its baseline``."""
    change: dict[str, Any] | None = None
    """The change the verdict is about: the one before the errors (yes, too early), or after them (no)."""
    change_at: float | None = None
    earlier: tuple[float, dict[str, Any]] | None = None
    """For "no": the change before the errors, if any."""
    previous: dict[str, Any] | None = None
    """For "yes": the release before the change (a rollback's natural target), when the history shows one."""
    unread: int = 0
    """Change records that could not be read, and sources not checked: "nothing changed" is then not known
    (``incomplete``)."""
    hidden: str = ""
    """Why ``incomplete`` when changes were listed: ``cut`` (older changes left off the list), ``undated`` (a change
    whose time is only known to be after its stamp), ``approximate`` (one stamped after the errors began that may
    have begun before them), ``gap`` (the metric has no points just before the errors: when they began is not
    known), ``before_data`` / ``resolution`` (see :func:`_blind`: ``change`` is the change it is about), ``failed``
    (the change before the errors is recorded as not successful: whether any of it took effect is not known),
    ``unscoped`` (its record names no environment: whether it reached this one is not known), ``recurring`` (see
    :func:`_again`)."""


def onset(rate: dict[str, Any], logs: dict[str, Any] | None) -> tuple[float, str] | None:
    began = stamp(rate.get("onset_at")) if rate.get("onset_at") else None
    if began is None or "peak" not in rate:
        return None
    firsts = [t for p in (logs or {}).get("patterns") or [] if (t := stamp(p.get("first_seen"))) is not None]
    first = min(firsts, default=None)
    if first is not None and began - 60 <= first <= began:
        return first, "first error log line"
    return began, "error rate first clearly above its baseline"


RATE_FIGURES = ("onset_at", "peak", "trend", "first_point_at", "step_s", "onset_after_gap", "excursions",
                "earlier_onset_at", "earlier_recovered_at")
"""Every figure of the error rate's a verdict reads: whoever keeps a rate to judge it later keeps these."""

SAME_DEPLOY_S = 30.0
"""Two sources' records of one deploy (CI's release, Kubernetes' revision) land within seconds of each other."""


def _previous(history: list[tuple[float, dict[str, Any]]], change: dict[str, Any], before_window: Any,
              cut: bool) -> dict[str, Any] | None:
    """The release that ran before ``change``: the next older deploy in the history, else the last change before
    the window — or None when that is not known: a rollback or a change of unknown time comes first (what ran
    then is not a release named here), or older changes were left off the list (the last one before the window
    would skip them); or when ``change`` is no release at all (a flag, a scaling: rolling back undoes no such
    thing)."""
    if not _release(change) and not _revision(change):
        return None
    stamp = next((t for t, c in history if c is change), None)
    seen = False
    for at, c in history:
        if c is change:
            seen = True
        elif not seen and c.get("kind") == "rollback":  # undone already, after it: nothing to offer
            return None
        elif not seen or _same_deploy(c, at, change, stamp):  # one deploy recorded twice is not the one before it
            continue
        elif c.get("kind") == "rollback" or c.get("time") == "unknown":
            return None
        elif _release(c) or _revision(c):
            return c
    ok = not cut and isinstance(before_window, dict) and not _same_deploy(before_window, None, change, stamp) \
        and before_window.get("version") not in (None, "")
    return before_window if ok and isinstance(before_window, dict) else None


def _release(change: dict[str, Any]) -> bool:
    return change.get("kind") in (None, "deploy", "image", "rollout") and bool(change.get("version"))


def _same_deploy(other: dict[str, Any], at: float | None, change: dict[str, Any], stamp: float | None) -> bool:
    """``other`` is ``change`` recorded again: the same version, or another source's record of a deploy seconds
    apart (CI's ``2026.12.02-1`` and Kubernetes' ``revision 2``) whose images, where both name them, are the same.
    Equal images alone are no proof: a config change keeps the images of the deploy before it."""
    if other.get("version") == change.get("version"):
        return True
    if at is None or stamp is None or other.get("source") == change.get("source") or abs(at - stamp) > SAME_DEPLOY_S:
        return False
    mine, theirs = sorted(map(str, change.get("images") or ())), sorted(map(str, other.get("images") or ()))
    return (not mine or not theirs or mine == theirs) and (_release(other) or _revision(other))


def _revision(change: dict[str, Any]) -> bool:
    """A Deployment's revision of another kind (a config change, a restart): a whole pod template Kubernetes can
    roll back to, and the one before the culprit there (as ``kubectl rollout undo`` takes it) — skipping it would
    take the change it made away too, unseen on the card."""
    return change.get("kind") in ("config", "restart") and str(change.get("version") or "").startswith("revision ")


def _blind(rate: dict[str, Any], at: float, began: float, how: str) -> str:
    """Why the metric cannot tie the errors to a change at ``at``: ``before_data`` (its first point is after the
    change: the rate before it was not read), ``resolution`` (the onset is a metric point, known only to within a
    step before it, and the change is inside that step); "" when it can."""
    first = stamp(rate.get("first_point_at")) if rate.get("first_point_at") else None
    if first is not None and at < first:
        return "before_data"
    step = rate.get("step_s")
    if how != "first error log line" and isinstance(step, int | float) and began - at < step:
        return "resolution"
    return ""


def _unordered(dated: tuple[tuple[float, dict[str, Any]], ...], began: float) -> bool:
    """A change of unknown time that may have come just before the errors: one stamped before them (its time is
    only "after" its stamp) with no later-stamped, dated change of its own source before them — which would be a
    later revision, so the unknown one came before that."""
    for i, (stamped, change) in enumerate(dated):  # newest first
        if change.get("time") != "unknown" or stamped > began:
            continue
        if not any(t > stamped and t <= began and c.get("time") != "unknown" and c.get("source") == change.get("source")
                   for t, c in dated[:i]):
            return True
    return False


def _again(rate: dict[str, Any], listed: tuple[tuple[float, dict[str, Any]], ...],
           began: float) -> float | str | None:
    """The error rate had risen and come back before the rise under way (``began``): that rise is the errors'
    start (None) when a change came while it was back, or none came before it; the first rise's onset when the
    last change before them came before that one too (the errors have come and gone since); ``recurring`` — not
    one start to tie to a change — when the change came during an earlier rise, or it has risen and recovered
    twice or more without one."""
    first, back = stamp(rate.get("earlier_onset_at")), stamp(rate.get("earlier_recovered_at"))
    count = rate.get("excursions")
    if not isinstance(count, int) or count < 2 or first is None or back is None:
        return None
    last = next((t for t, _ in listed if t <= began), None)
    if last is None:
        return None
    if last >= back:
        return "recurring" if count > 2 else None
    return first if last < first else "recurring"


def judge(changes: dict[str, Any] | None, rate: dict[str, Any] | None, logs: dict[str, Any] | None) -> Verdict:
    """``changes``: recent_changes' data; ``rate``: query_metrics' error_rate figures; ``logs``: query_logs' data."""
    if changes is None:
        return Verdict("no_history")
    dated = tuple((t, c) for c in changes.get("changes") or [] if isinstance(c, dict)
                  and (t := stamp(c.get("at"))) is not None)
    listed = tuple((t, c) for t, c in dated if c.get("time") != "unknown")
    # Not all of the window known: records unread, sources not asked, older changes left off the list (the newest
    # are listed), a change whose time is only "after" its stamp: an absence or an order they could upset.
    unread = int(changes.get("unreadable_records") or 0) + len(changes.get("unavailable") or [])
    cut = int(changes.get("more_changes") or 0)
    undated = [t for t, c in dated if c.get("time") == "unknown"]
    nothing: Kind = "incomplete" if unread or cut or undated else "nothing_changed"
    found = onset(rate or {}, logs)
    if found is None:
        if (rate or {}).get("trend") in (None, "no data", "single point"):
            return Verdict("no_data", listed, unread=unread + cut)
        first = stamp((rate or {}).get("first_point_at")) if (rate or {}).get("first_point_at") else None
        if listed and first is not None and listed[0][0] < first:  # no rise after it is not what was read
            t, c = listed[0]
            return Verdict("incomplete", listed, None, "", c, t, unread=unread + cut, hidden="before_data")
        return Verdict("no_rise" if listed else nothing, listed, unread=unread + cut)
    began, how = found
    again = _again(rate or {}, listed, began)
    if again == "recurring":
        t, c = next((t, c) for t, c in listed if t <= began)
        return Verdict("incomplete", dated, began, how, c, t, unread=unread, hidden="recurring")
    if isinstance(again, float):  # coming and going since its first rise, with no change in between
        began, how = again, "error rate first clearly above its baseline"
    if (rate or {}).get("onset_after_gap") and how != "first error log line":  # it began somewhere in a gap
        return Verdict("incomplete", dated, began, how, unread=unread, hidden="gap")
    before = [(t, c) for t, c in listed if t <= began]
    after = [(t, c) for t, c in listed if t > began]
    if _unordered(dated, began):  # it may have come just before the errors: the order is not known
        return Verdict("incomplete", dated, began, how, unread=unread, hidden="undated")
    if any(c.get("time") == "approximate" and began < t <= began + SETTLE_S for t, c in dated):
        return Verdict("incomplete", dated, began, how, unread=unread, hidden="approximate")
    if cut and not before:  # what came just before the errors is among the changes left off the list
        return Verdict("incomplete", dated, began, how, unread=unread + cut, hidden="cut")
    if before and began - before[0][0] <= TIE_S:
        t, c = before[0]
        blind = "failed" if c.get("status") else "unscoped" if c.get("scope") else _blind(rate or {}, t, began, how)
        if blind:  # "the errors began after it, at its baseline before it" is not what the data shows
            return Verdict("incomplete", dated, began, how, c, t, unread=unread, hidden=blind)
        return Verdict("yes", listed, began, how, c, t,
                       previous=_previous(list(dated), c, changes.get("last_before_window"), bool(cut)))
    if after:
        t, c = after[-1]
        return Verdict("no", listed, began, how, c, t, earlier=before[0] if before else None)
    if before:
        t, c = before[0]
        return Verdict("too_early", listed, began, how, c, t)
    return Verdict(nothing, listed, began, how, unread=unread)
