"""An incident summary as Markdown (a canvas, a file, ``opspilot report``), in the thread's language.

Everything but two sections is rendered here from :class:`bot.slack.incidents.incident.Incident` — the timeline (UTC and
a second time zone), what was done, the current state, open questions, the evidence. *Impact* and *Next steps*
are the model's (:mod:`bot.slack.incidents.narrative`), each quoted under a label saying so, its headings unable to pass
for these. Every value is quoted by :func:`bot.slack.outbound.markdown.code`. Secrets are scrubbed last, over the whole
document.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from bot import when
from bot.slack.incidents.incident import Asked, Change, Incident, calls_of
from bot.slack.outbound.audit import outcome
from bot.slack.outbound.blocks import is_user, model_name
from bot.slack.outbound.markdown import code, fenced
from bot.slack.outbound.words import headline, plural, say
from core.figures import percent
from core.messages import DECLINED
from core.redact import redact
from state.records import CallTrace, RunRecord

Mention = Callable[[str], str]
_ROLLOUTS = frozenset({"complete", "timed_out", "failed", "unknown", "superseded"})
"""A restart's rollout states with words of their own (``rollout_complete``… in the catalog)."""


def plain_mention(user: str) -> str:
    """A person by id; any other name (an alert source's) is data, quoted."""
    return f"@{user}" if re.fullmatch(r"[A-Z0-9]{2,}", user) else code(user) or "?"


@dataclass(frozen=True)
class Narrative:
    impact: str = ""
    next_steps: str = ""
    by: str = ""
    """The model's label; empty when no model wrote it (then ``problem`` or nothing says why)."""
    problem: str = ""


@dataclass(frozen=True)
class Links:
    thread: str = ""
    by_ts: dict[str, str] = field(default_factory=dict)
    """Permalinks of the thread's messages (``chat.getPermalink``), by ts: the evidence."""


def render(incident: Incident, narrative: Narrative | None, *, tz: str | None = None, links: Links | None = None,
           mention: Mention = plain_mention, now: float | None = None) -> str:
    lang, links = incident.lang, links or Links()
    zone = _zone(tz)
    out = [f"# {say(lang, 'inc_title', title=code(incident.title))}", "",
           "_" + say(lang, "inc_generated", at=_utc(now or time.time()),
                     link=f" ({links.thread})" if links.thread else "") + "_", ""]
    if incident.empty:
        return redact("\n".join([*out, say(lang, "inc_no_records"), ""]))
    out += [f"## {say(lang, 'inc_timeline')}", "", *_timeline(incident, zone, links, mention), ""]
    if narrative is not None and narrative.impact:
        out += [f"## {say(lang, 'inc_impact')}", "", *_models(narrative, narrative.impact, lang)]
    out += [f"## {say(lang, 'inc_done')}", "", *_done(incident, mention), ""]
    out += [f"## {say(lang, 'inc_state')}", "", *_state(incident, mention, now or time.time()), ""]
    out += [f"## {say(lang, 'inc_open')}", "", *(_open(incident) or [say(lang, "inc_open_none")]), ""]
    if narrative is not None and narrative.next_steps:
        out += [f"## {say(lang, 'inc_next')}", "", *_models(narrative, narrative.next_steps, lang)]
    evidence = [f"- [{ts}]({url})" for ts, url in links.by_ts.items()]
    if evidence:
        out += [f"## {say(lang, 'inc_evidence')}", "", *evidence, ""]
    if narrative is not None and narrative.problem:
        out.append("_" + say(lang, "inc_model_failed", why=narrative.problem) + "_")
    elif narrative is None or not narrative.by:
        out.append("_" + say(lang, "inc_no_model") + "_")
    return redact("\n".join(out) + "\n")


def _models(narrative: Narrative, text: str, lang: str) -> list[str]:
    """A section the model wrote: under a label saying so, quoted line by line, so that no heading, link or
    figure of its own can pass for the record's (its links were made inert by
    :func:`bot.slack.outbound.markdown.inert`)."""
    label = say(lang, "inc_written_by", model=model_name(narrative.by, lang, code) if narrative.by else "?")
    return [f"_{label}_", "", *fenced(text), ""]


def facts(incident: Incident, mention: Mention = plain_mention) -> str:
    """The records part as plain lines, for the model to write the narrative from (not to repeat)."""
    lines = [f"{_utc(at)} {what}" for at, what, _ in _events(incident, mention)]
    lines += ["", *_done(incident, mention), *_state(incident, mention, time.time()), *_open(incident)]
    return redact("\n".join(lines))


# --- the sections -----------------------------------------------------------------------------------------------

def _timeline(incident: Incident, zone: ZoneInfo | None, links: Links, mention: Mention) -> list[str]:
    lang = incident.lang
    head = ["UTC", *([say(lang, "inc_time", tz=str(zone))] if zone else []), say(lang, "inc_event")]
    rows = [f"| {' | '.join(head)} |", f"|{'---|' * len(head)}"]
    for at, what, ts in _events(incident, mention):
        when = [_utc(at), *([_local(at, zone)] if zone else [])]
        link = links.by_ts.get(ts or "")
        cell = f"[{_cell(what)}]({link})" if link else _cell(what)
        rows.append(f"| {' | '.join(when)} | {cell} |")
    return rows


def _events(incident: Incident, mention: Mention) -> list[tuple[float, str, str | None]]:
    lang = incident.lang
    events: list[tuple[float, str, str | None]] = []
    for a in incident.alerts:
        what = say(lang, "inc_alert_fired", title=code(a.title)) if a.kind == "fired" else \
            say(lang, "inc_alert_again", n=a.count) if a.kind == "fired_again" else \
            say(lang, "inc_alert_partly", n=a.count) if a.kind == "partly_resolved" else say(lang, "inc_alert_resolved")
        events.append((a.at, what, incident.thread_ts if a.kind == "fired" else None))
    for q in incident.asked:
        if q.at:
            events.append((q.at, _asked(q, lang, mention), q.ts))
    for run in incident.runs:
        calls = calls_of(run)
        events.append((run.updated_at, say(lang, "inc_run", status=run_state(run, lang, mention),
                                           steps=plural(lang, "inc_steps", run.step),
                                           calls=plural(lang, "inc_calls", len(calls)),
                                           failed=_failed(calls, lang)), None))
        for p in run.pending:
            events.append((p.created_at, say(lang, "inc_confirm_asked", what=_what(p.call.name, p.arguments)), None))
    for c in incident.changes:
        events.append((c.at, say(lang, "inc_change", what=_change_line(c, lang, mention)), None))
    for f in incident.followups:
        key = f"inc_fu_{f.kind}" + (f"_{f.why}" if f.kind == "skipped" else "")
        events.append((f.at, say(lang, key, due=_utc(f.due), by=mention(f.by), question=code(f.question[:200])),
                       None))
    return sorted(events, key=lambda e: e[0])


def _done(incident: Incident, mention: Mention) -> list[str]:
    lang = incident.lang
    lines = [f"- {_change_line(c, lang, mention)}" for c in incident.changes] or [f"- {say(lang, 'inc_no_changes')}"]
    calls = [c for run in incident.runs for c in calls_of(run)]
    if incident.runs:
        tools = Counter(c.tool for c in calls)
        lines.append("- " + say(lang, "inc_runs_done", runs=plural(lang, "inc_runs", len(incident.runs)),
                                calls=plural(lang, "inc_calls", len(calls)),
                                tools=", ".join(f"{code(t)} ×{n}" for t, n in sorted(tools.items())) or "-",
                                failed=_failed(calls, lang)))
    return lines


def _state(incident: Incident, mention: Mention, now: float) -> list[str]:
    lang, lines = incident.lang, []
    if incident.alerts:
        last = incident.alerts[-1]
        key = "inc_alert_resolved_at" if last.kind == "resolved" else "inc_alert_firing_now"
        lines.append("- " + say(lang, key, at=_utc(last.at)))
    if incident.runs:
        run = incident.runs[-1]
        lines.append("- " + say(lang, "inc_latest_run", status=run_state(run, lang, mention), at=_utc(run.updated_at)))
    for p in incident.pending:  # one past its expiry that OpsPilot has not closed yet (it was away) is not waiting
        key = "inc_pending" if p.call.expires_at > now else "inc_pending_lapsed"
        lines.append("- " + say(lang, key, what=_what(p.call.call.name, p.call.arguments),
                                who=mention(p.requester), at=_utc(p.call.created_at), until=_utc(p.call.expires_at)))
    for f in incident.followups_pending:
        lines.append("- " + say(lang, "inc_fu_pending", due=_utc(f.due), by=mention(f.by),
                                question=code(f.question[:200])))
    return lines


def _open(incident: Incident) -> list[str]:
    lang, lines = incident.lang, []
    for i, c in enumerate(incident.changes):
        what = _what(c.tool, c.arguments)
        if any(later.status == "ok" and (later.tool, _what(later.tool, later.arguments)) == (c.tool, what)
               for later in incident.changes[i + 1:]):
            continue  # done since: not open any more
        if c.error_code == "outcome_unknown":
            lines.append("- " + say(lang, "inc_open_unknown", what=what))
        elif c.status == "ok" and "rollout" in c.result and not c.verified:  # restart, rollback, scale
            lines.append("- " + say(lang, "inc_open_unverified", what=what,
                                    why=code(c.result.get("verdict") or c.result.get("rollout") or "?")))
        elif c.status == "error" and c.error_code != "declined_by_user":  # a person's no is a decision, not open
            lines.append("- " + say(lang, "inc_open_failed", what=what, why=code(c.error_code or "?")))
    for p in incident.pending:
        lines.append("- " + say(lang, "inc_confirm_asked", what=_what(p.call.call.name, p.call.arguments)))
    for run in incident.runs:
        if run.status == "finished" and run.stop_reason not in (None, "final_answer"):
            lines.append("- " + say(lang, "inc_open_stopped", at=_utc(run.created_at),
                                    reason=headline(lang, run.stop_reason)))
        elif run.status == "stalled":  # its worker stopped: it waits for someone's Resume
            lines.append("- " + say(lang, "inc_open_stalled", at=_utc(run.created_at)))
    if incident.alert_firing:
        lines.append("- " + say(lang, "inc_open_firing"))
    return lines


# --- pieces -----------------------------------------------------------------------------------------------------

def _change_line(c: Change, lang: str, mention: Mention) -> str:
    people = say(lang, "requested_by", by=mention(c.requested_by) if c.requested_by else "?")
    for person, words in ((c.approved_by, "approved_by"), (c.declined_by, "declined_by_person")):
        if person:
            people += say(lang, "sep") + say(lang, words, by=mention(person))
    error = c.entry.get("error_code") or ""  # a tool's own code (an MCP server's): data unless a plain word
    entry = c.entry if re.fullmatch(r"[a-z0-9_]*", error) else {**c.entry, "error_code": code(error)}
    line = f"{_what(c.tool, c.arguments)} — {people} — {_unescape(outcome(entry, lang))}"
    before, after = c.result.get("error_rate_before"), c.result.get("error_rate_after")
    extra = []
    rollout = str(c.result.get("rollout") or "")
    if rollout:  # the catalog's words for the states it knows; any other is data, shown as such
        extra.append(say(lang, f"rollout_{rollout}") if rollout in _ROLLOUTS else
                     say(lang, "inc_rollout", state=code(rollout)))
    if before is not None or after is not None:
        extra.append(say(lang, "inc_figures", before=_rate(before), after=_rate(after)))
    return line + (say(lang, "paren", text=say(lang, "semi").join(extra)) if extra else "")


def _failed(calls: list[CallTrace], lang: str) -> str:
    """``, 1 failed``, ``, 1 of unknown outcome``: a decline is neither; a change that may have run is not "failed"."""
    failed = sum(1 for c in calls if c.status == "error" and c.error_code not in (DECLINED, "outcome_unknown"))
    unknown = sum(1 for c in calls if c.error_code == "outcome_unknown")
    return (say(lang, "inc_failed_calls", n=failed) if failed else "") + \
        (say(lang, "inc_unknown_calls", n=unknown) if unknown else "")


def _what(tool: str, arguments: dict[str, object]) -> str:
    target = next((str(arguments[k]) for k in ("service_id", "service", "target") if arguments.get(k)), "")
    env = str(arguments.get("environment") or "")
    return code(tool) + (f" {code(target)}" if target else "") + (f" @ {code(env)}" if env else "")


def run_state(run: RunRecord, lang: str, mention: Mention = plain_mention) -> str:
    """A run's state in a summary or a handover: answered, waiting, or how it ended — and who stopped it."""
    if run.status != "finished":
        return say(lang, f"inc_st_{run.status}")
    if run.stop_reason in (None, "final_answer"):
        return say(lang, "inc_st_answered")
    if run.stop_reason == "cancelled" and run.stopped_by:
        return say(lang, "inc_st_stopped_by", by=mention(run.stopped_by))
    return say(lang, "inc_st_stopped", reason=headline(lang, run.stop_reason))


def _rate(value: object) -> str:
    return percent(value) if isinstance(value, int | float) else code(value) if value is not None else "?"


def _zone(tz: str | None) -> ZoneInfo | None:
    """The second column's time zone; none for UTC itself or a name this system does not know."""
    if not tz or tz.upper() in ("UTC", "ETC/UTC"):
        return None
    try:
        return when.zone(tz)  # the same names the config and `report --tz` accept
    except when.WhenError:
        return None


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _local(at: float, zone: ZoneInfo) -> str:
    return datetime.fromtimestamp(at, zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _asked(q: Asked, lang: str, mention: Mention) -> str:
    if q.shortcut:  # the question OpsPilot composed for the shortcut: not the presser's words
        return say(lang, "inc_message_investigated_by", who=mention(q.user))
    if q.rollback:  # the question a "Roll back to …" press composed
        return say(lang, "inc_rollback_pressed", who=mention(q.user))
    if q.automatic:  # the question OpsPilot asked itself for an alert: not anyone's words
        return say(lang, "inc_alert_investigated_by", who=mention(q.user)) if is_user(q.user) else \
            say(lang, "inc_alert_investigated")
    return say(lang, "inc_asked", who=mention(q.user), text=code(q.text[:200]))


def _inline(text: str) -> str:
    return " ".join(text.split())


def _unescape(text: str) -> str:
    """The audit words are Slack mrkdwn (``&lt;``): Markdown shows the characters themselves."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
