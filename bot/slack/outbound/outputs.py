"""What a tool call came to, and what a run did, in the thread's language.

Tools return facts (counts, figures, trend codes, error codes); the words are the catalog's. What a tool quotes
— a log pattern, a version, a metric's name, a tool's own error message — is data: it goes in a code span, as
written. The result is mrkdwn-safe once escaped (the progress message escapes it; a task card shows it as is)."""

from __future__ import annotations

import re
from typing import Any

from bot.agent.fallback import Fallback, Ran
from bot.slack.outbound.blocks import bare, escape
from bot.slack.outbound.words import catalog, headline, plural, say
from core.figures import percent
from tools.ops.series import story

_QUOTE = 120  # characters of quoted data in one output (a task card's output holds 256)


def _cut(value: object, limit: int = _QUOTE) -> str:
    """On one line, within ``limit``; a cut says so (a list that stops mid-way must not look complete)."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _code(value: object, limit: int = _QUOTE) -> str:
    return "`" + _cut(str(value).replace("`", "'"), limit) + "`"


def _n(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def output(status: str, error_code: str | None, body: dict[str, Any], lang: str, summary: str = "") -> str:
    """One line for a finished call: what it found, or why it did not."""
    if status != "ok" or body.get("ok") is False:
        return failure(status, error_code or str(body.get("errorCode") or status), str(body.get("message") or ""),
                       lang)
    data = body.get("data")
    if not isinstance(data, dict):
        return _code(data if data is not None else summary) if (data or summary) else say(lang, "out_done")
    if isinstance(data.get("error_lines"), int):
        return _logs(data, lang)
    if isinstance(data.get("metrics"), dict):
        return say(lang, "semi").join(_metric(str(k), v, lang) for k, v in list(data["metrics"].items())[:3]
                                     if isinstance(v, dict))
    if isinstance(data.get("changes"), list) and "window" in data:
        return _changes(data, lang)
    if "rollout" in data and "verdict" in data:
        return _restart(data, lang)
    for key in ("candidates", "results", "items"):
        if isinstance(data.get(key), list):
            return _count(key, data[key], lang)
    if isinstance(data.get("summary"), str) and data["summary"]:  # a tool we do not know: its own words, quoted
        return _code(data["summary"])
    plain = ", ".join(f"{k}={v}" for k, v in list(data.items())[:3] if not isinstance(v, dict | list))
    return _code(plain) if plain else say(lang, "out_done")


def failure(status: str, code: str, message: str, lang: str) -> str:
    named = {"outcome_unknown": "out_unknown", "declined_by_user": "audit_declined", "expired": "audit_expired",
             "user_replied_instead": "audit_replied", "interrupted_by_restart": "interrupted"}
    if code in named:
        return say(lang, named[code])
    if status == "cancelled":
        return say(lang, "ran_not_started" if "nothing was run" in message else "ran_stopped")
    if status == "expired":
        return say(lang, "audit_expired")
    if lang == "en":  # the tool's words are English prose already
        return say(lang, "out_failed", code=code, message=_cut(message))
    return say(lang, "out_failed", code=_code(code, 40), message=_code(message) if message else "")


def _count(key: str, items: list[Any], lang: str) -> str:
    n = len(items)
    names = [str(c.get("id")) for c in items[:3] if isinstance(c, dict) and c.get("id")]
    shown = plural(lang, "out_" + key, n)
    return shown + (("：" if lang == "zh" else ": ") + ", ".join(_code(x, 40) for x in names) if names else "")


def _logs(data: dict[str, Any], lang: str) -> str:
    n, minutes = data["error_lines"], data.get("window_minutes", "?")
    patterns = [p for p in data.get("patterns") or [] if isinstance(p, dict)]
    if not n or not patterns:
        return say(lang, "out_no_logs", minutes=minutes)
    top = patterns[0]  # a capped read is not the window's count
    return say(lang, "out_logs_capped" if data.get("limit_reached") else "out_logs", n=n, minutes=minutes,
               pattern=_code(top.get("pattern", "")), count=top.get("count"))


def trend(word: str, lang: str) -> str:
    key = "trend_" + word.replace(" ", "_")
    return say(lang, key) if key in _TRENDS else _code(word, 40)


def _metric(name: str, fig: dict[str, Any], lang: str) -> str:
    shown = _code(name, 40)
    if "current" not in fig:  # a counter's first sample has no increase yet: not "no data"
        return say(lang, "out_metric_single" if fig.get("points") else "out_metric_none", name=shown)
    value, word = _n(fig["current"]), trend(str(fig.get("trend", "")), lang)
    onset, back = str(fig.get("onset_at") or "")[11:16], str(fig.get("recovered_at") or "")[11:16]
    told = story(fig)  # the same rule as the tool's summary and the demo model's answer
    line = say(lang, "out_metric", name=shown, value=value, trend=word) if told == "plain" else \
        say(lang, f"out_metric_{told}", name=shown, value=value, trend=word, onset=onset, back=back)
    if isinstance(fig.get("excursions"), int) and fig["excursions"] > 1 and fig.get("earlier_recovered_at"):
        went = say(lang, "metric_went_up" if "peak" in fig else "metric_went_down")
        first, last = str(fig.get("earlier_onset_at") or "")[11:16], str(fig["earlier_recovered_at"])[11:16]
        line += say(lang, "out_metric_earlier", went=went, onset=first, back=last) if fig["excursions"] == 2 else \
            say(lang, "out_metric_earlier_many", went=went, n=fig["excursions"] - 1, onset=first, back=last)
    # What the figures stand on: a value that is not now's, points that are missing.
    if fig.get("last_point_at"):
        line += say(lang, "out_metric_stale", at=str(fig["last_point_at"])[11:16])
    if fig.get("backend_warnings"):
        line += say(lang, "out_metric_partial")
    gaps = fig.get("gaps") if isinstance(fig.get("gaps"), int) else 0
    return line + (say(lang, "out_metric_gaps_one") if gaps == 1 else say(lang, "out_metric_gaps", n=gaps) if gaps
                   else "")


def _change(change: dict[str, Any], lang: str, today: str = "") -> str:
    """``deploy `2026.12.02-1` 09:10``; dated (``12-01 14:02``) when not on the window's last day (``today``);
    ``after 08:20`` / ``about 09:12`` when its time is only known that far (``time``: unknown, approximate)."""
    kind, stamp = str(change.get("kind") or ""), str(change.get("at") or "")
    at = stamp[11:16] if not today or stamp[:10] == today else f"{stamp[5:10]} {stamp[11:16]}"
    dated = {"unknown": "change_after", "approximate": "change_about"}.get(str(change.get("time") or ""))
    at = say(lang, dated, at=at) if dated else at
    target = change.get("to_version") if kind in ("rollback", "scale") else None
    version = target or change.get("version")
    if "change_" + kind not in _KINDS:  # a CI/CD record's own kind: quoted as data
        return f"{_code(' '.join(str(p) for p in (kind, version) if p), 40)} {at}"
    return " ".join(p for p in (say(lang, "change_" + kind), _code(version, 40) if version else "", at) if p)


def _changes(data: dict[str, Any], lang: str) -> str:
    """The count is the window's only when the list is whole: "at least" when older ones were left off, and
    "none" only when every record could be read."""
    changes = [c for c in data["changes"] if isinstance(c, dict)]
    minutes = (data.get("window") or {}).get("minutes", "?")
    today = str((data.get("window") or {}).get("to") or "")[:10]
    more, unread = _positive(data.get("more_changes")), _positive(data.get("unreadable_records"))
    listed = say(lang, "sep").join(_change(c, lang, today) for c in changes[:3])
    if more and changes:
        text = say(lang, "out_changes_more", n=len(changes) + more, minutes=minutes, listed=listed,
                   listed_n=min(len(changes), 3))
    elif changes:
        text = say(lang, "out_changes" + ("_one" if len(changes) == 1 else ""), n=len(changes), minutes=minutes,
                   listed=listed)
    else:
        text = say(lang, "out_none_found", minutes=minutes, unread=unread) if unread else \
            say(lang, "out_no_changes", minutes=minutes)
    if unread and changes:
        text += say(lang, "out_unread", unread=unread)
    missing = [str(u.get("source")) for u in data.get("unavailable") or [] if isinstance(u, dict)]
    return text + (say(lang, "out_not_checked", sources=", ".join(_code(s, 40) for s in missing)) if missing else "")


def _positive(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def rollout_words(rollout: str, lang: str) -> str:
    """How a change's rollout went, in words ("rollout did not finish in time: not verified")."""
    key = "rollout_" + rollout
    return say(lang, key) if key in _ROLLOUTS else say(lang, "rollout_other", state=_code(rollout, 40))


def _restart(data: dict[str, Any], lang: str) -> str:
    text = rollout_words(str(data.get("rollout")), lang)
    before, after = data.get("error_rate_before"), data.get("error_rate_after")
    if isinstance(before, int | float) and isinstance(after, int | float):
        text += say(lang, "out_error_rate", before=percent(before), after=percent(after))
        if warned := data.get("error_rate_warnings"):  # the figures stand on part of the data
            text += say(lang, "out_partial", warning=_code(str(warned[0]), 120))
    return text


_TRENDS = {"trend_flat", "trend_rising", "trend_falling", "trend_steady_high", "trend_steady_low",
           "trend_spiked_and_recovered", "trend_dipped_and_recovered", "trend_elevated", "trend_lowered",
           "trend_single_point", "trend_no_data"}
_KINDS = {f"change_{k}" for k in ("image", "config", "restart", "rollback", "scale", "pause", "resume", "deploy",
                                  "rollout")}
_ROLLOUTS = {"rollout_complete", "rollout_timed_out", "rollout_failed", "rollout_unknown", "rollout_superseded"}


# --- what a run did, when OpsPilot composed its answer -------------------------------------------------------

def ran_line(call: Ran, lang: str) -> str:
    """A call in a composed answer (mrkdwn, escaped: its tool and target come from the model's arguments)."""
    outcome = {"done": "audit_ok", "unknown": "ran_unknown", "not_started": "ran_not_started",
               "stopped": "ran_stopped", "declined": "ran_declined", "expired": "audit_expired"}.get(call.outcome)
    code = call.code if lang == "en" else _code(call.code, 40)  # an error code reads as a word in English only
    words = say(lang, outcome) if outcome else say(lang, "audit_failed", code=code) if call.outcome == "failed" \
        else say(lang, "audit_issued", how=rollout_words(call.code, lang)) if call.outcome == "issued" else code
    on = say(lang, "ran_on", target=escape(call.target)) if call.target else ""
    return say(lang, "ran_line", tool=bare(call.tool), on=on, outcome=escape(words))


def what_ran(calls: tuple[Ran, ...], lang: str) -> str:
    lines = "\n".join(ran_line(c, lang) for c in calls) or say(lang, "ran_none")
    warnings = "".join("\n" + say(lang, "ran_warning", tool=bare(c.tool)) for c in calls if c.outcome == "unknown")
    return f"{say(lang, 'ran_title')}\n{lines}{warnings}\n{say(lang, 'ran_next')}"


def fallback_answer(fallback: Fallback, lang: str, stopped_by: str = "") -> str:
    """The answer OpsPilot composed (Stop, a limit, a failure) in ``lang``, as mrkdwn: why, then the model's
    summary if it wrote one (escaped: its words, not ours), else what ran. ``stopped_by``: a live mention."""
    if fallback.kind == "stopped":
        head = say(lang, "stopped_by", by=stopped_by, at=fallback.at) if stopped_by else \
            say(lang, "stopped_at", at=fallback.at)
    elif fallback.kind == "early":
        head = headline(lang, fallback.reason)
    else:
        head = say(lang, "failed_because", why=headline(lang, fallback.reason), detail=_failure(fallback, lang))
    body = escape(fallback.summary) if fallback.summary else what_ran(fallback.ran, lang)
    return f"_{head}{say(lang, 'period')}_\n\n{body}"


def _failure(fallback: Fallback, lang: str) -> str:
    """Why a run failed, in ``lang`` when its kind is one OpsPilot words (a reference or an HTTP status kept as data);
    else its English, quoted."""
    if f"why_{fallback.code}" not in catalog():
        return escape(_code(fallback.why, 200))
    found = re.search(r"\(ref ([0-9a-f]+)\)|HTTP (\d{3})", fallback.why)
    detail = _code(found.group(1) or found.group(2)) if found else ""
    return say(lang, f"why_{fallback.code}" + ("_detail" if detail else ""), detail=detail)

