"""An incident as OpsPilot holds records of it: one Slack thread's alert events, questions, runs (with their
traces and open confirmations) and every change with who asked, who approved, how it ended and what its
verification measured. Read-only: gathered from the store, the audit stream and the alert log, never recalled
by a model (the summary's records part is rendered from this; see :mod:`bot.slack.incidents.document`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bot.slack.alerts import ALERT
from bot.slack.inbound.thread_log import AlertEvent, FollowupEvent, alert_events, followup_events
from bot.slack.outbound.thread_meta import THREAD, thread_key
from bot.slack.outbound.words import Lang, language_of
from core.messages import Message, ToolResultMessage, UserMessage
from core.quote import own_words, split
from core.redact import redact
from state.memory import MemoryStore
from state.records import CallTrace, PendingCall, RunRecord
from state.redis import RedisStore
from state.store import MetaStore, Reports
from state.threads import runs_of_thread

AUDIT_DEPTH = 200
"""Audit entries read per run (its shard's newest are searched): more changes than any one run makes."""


@dataclass(frozen=True)
class Asked:
    """A message someone addressed to OpsPilot in the thread."""

    at: float | None
    user: str
    text: str
    ts: str | None
    automatic: bool = False
    """The question OpsPilot asks itself for an alert (not anyone's words)."""
    shortcut: bool = False
    """The question OpsPilot composed for the Investigate shortcut on a message (automatic too)."""
    rollback: bool = False
    """The question OpsPilot composed for a "Roll back to …" press (automatic too)."""


@dataclass(frozen=True)
class Change:
    """A change that was decided (run, failed, declined, expired or of unknown outcome), from the audit stream,
    with the verification figures its result carried (a restart's error rate before and after)."""

    at: float
    run_id: str
    tool: str
    arguments: dict[str, Any]
    requested_by: str
    approved_by: str
    declined_by: str
    status: str
    error_code: str
    result: dict[str, Any]
    entry: dict[str, str] = field(repr=False)

    @property
    def target(self) -> str:
        return str(next((self.arguments[k] for k in ("service_id", "service", "target") if self.arguments.get(k)), ""))

    @property
    def environment(self) -> str:
        return str(self.arguments.get("environment") or "")

    @property
    def verified(self) -> bool:
        before, after = self.result.get("error_rate_before"), self.result.get("error_rate_after")
        return self.status == "ok" and isinstance(before, int | float) and isinstance(after, int | float) \
            and not self.result.get("error_rate_warnings")  # compared on part of the data: not verified


@dataclass(frozen=True)
class Pending:
    run_id: str
    requester: str
    call: PendingCall


@dataclass(frozen=True)
class Incident:
    channel: str
    thread_ts: str
    lang: Lang
    title: str
    alerts: list[AlertEvent]
    asked: list[Asked]
    runs: list[RunRecord]
    changes: list[Change]
    answers: list[str]
    """OpsPilot's answers in the thread, in order (redacted): what the narrative reads, not rendered."""
    followups: list[FollowupEvent] = field(default_factory=list)

    @property
    def followups_pending(self) -> list[FollowupEvent]:
        """Follow-ups scheduled here that have not yet run, been skipped or been cancelled."""
        ended = {f.timer_id for f in self.followups if f.kind != "scheduled"}
        return [f for f in self.followups if f.kind == "scheduled" and f.timer_id not in ended]

    @property
    def thread_id(self) -> str:
        return thread_key(self.channel, self.thread_ts)

    @property
    def pending(self) -> list[Pending]:
        return [Pending(r.run_id, r.user_id or "", p) for r in self.runs if r.status == "paused" for p in r.pending]

    @property
    def alert_firing(self) -> bool | None:
        """None without an alert; else whether its latest event left it firing."""
        return self.alerts[-1].kind != "resolved" if self.alerts else None

    @property
    def empty(self) -> bool:
        return not (self.alerts or self.asked or self.runs or self.changes or self.followups)


_NOT_RUN = frozenset({"declined_by_user", "expired", "user_replied_instead", "cancelled", "interrupted_by_restart"})


def calls_of(run: RunRecord) -> list[CallTrace]:
    """The calls that ran, each once with how it ended: a call that paused for a person is traced at each pause
    (a form, then a confirmation) and once more when it ran; one declined, expired, cancelled or still waiting did
    not run."""
    latest: dict[str, CallTrace] = {}
    for entry in run.trace:
        if isinstance(entry, CallTrace):
            latest[entry.call_id] = entry  # its first position, its last state
    return [c for c in latest.values() if c.status in ("ok", "error") and c.error_code not in _NOT_RUN]


async def gather(store: RedisStore | MemoryStore, meta: MetaStore, reports: Reports, channel: str, thread_ts: str,
                 *, language: str = "auto") -> Incident:
    thread_id = thread_key(channel, thread_ts)
    runs = await runs_of_thread(store, thread_id)
    transcript = await store.load_transcript(thread_id)
    results = {m.call_id: m for m in transcript if isinstance(m, ToolResultMessage)}
    entries = [e for run in runs for e in await reports.read_audit(AUDIT_DEPTH, run_id=run.run_id)]
    changes = sorted((_change(e, results.get(e.get("call_id", ""))) for e in entries), key=lambda c: c.at)
    alerts = await alert_events(meta, channel, thread_ts)
    asked = asked_in(transcript, {i: r.created_at for r in runs for i in (r.first_request_id, r.request_id) if i})
    group = (await meta.get(ALERT, f"{channel}:{thread_ts}")).get("group")
    known = await meta.get(ALERT, group) if group else {}
    title = known.get("label") or known.get("title", "")
    people = [a for a in asked if not a.automatic]
    title = title or (alerts[0].title if alerts else "") or (people[0].text if people else "") or thread_ts
    lang = (await meta.get(THREAD, thread_id)).get("lang") or language_of(
        " ".join(a.text for a in people[:1]) or title, language)
    answers = [redact(m.content) for m in transcript if m.role == "assistant" and m.content and not m.tool_calls]
    return Incident(channel, thread_ts, "zh" if lang == "zh" else "en", redact(" ".join(title.split()))[:150],
                    alerts, asked, runs, changes, answers, await followup_events(meta, channel, thread_ts))


def _change(entry: dict[str, str], result: ToolResultMessage | None) -> Change:
    try:
        arguments = json.loads(entry.get("arguments") or "{}")
    except ValueError:
        arguments = {}
    return Change(at=_float(entry.get("at")), run_id=entry.get("run_id", ""), tool=entry.get("tool", "?"),
                  arguments=arguments if isinstance(arguments, dict) else {},
                  requested_by=entry.get("requested_by", ""), approved_by=entry.get("approved_by", ""),
                  declined_by=entry.get("declined_by", ""),
                  status=entry.get("status", ""), error_code=entry.get("error_code", ""),
                  result=_data(result.content if result is not None else entry.get("result", "")), entry=entry)


def _data(content: str) -> dict[str, Any]:
    """A tool result's data (the transcript keeps all of it; the audit stream its first 500 characters, which
    may not parse: then there are no figures to show, and none are made up)."""
    try:
        body = json.loads(content)
    except ValueError:
        return {}
    data = body.get("data") if isinstance(body, dict) else None
    return data if isinstance(data, dict) else {}


def asked_in(transcript: list[Message], started: dict[str, float] | None = None) -> list[Asked]:
    """What people (and OpsPilot, for an alert or a shortcut) asked in a thread, oldest first. A person's question is
    dated by its message; one OpsPilot composed (its request id names the alert or message it is about) by when its
    run began, from ``started`` (request id → the run's start): the press, not the alert's own time."""
    asked = []
    for m in transcript:
        if not isinstance(m, UserMessage):
            continue
        request = m.request_id or ""
        parts = request.split(":")
        ts = parts[1] if len(parts) > 1 else None
        shortcut, rollback = ":shortcut:" in request, request.startswith("rollback:")
        if rollback:  # rollback:<channel>:<thread ts>:<user>:<press>: the thread it was pressed in
            ts = parts[2] if len(parts) > 2 else None
        automatic = request.endswith(":alert") or shortcut or rollback
        # (a run kept from before runs knew their first request: dated as before, by the message it is about)
        at = (started or {}).get(request) or _float(ts) or None if automatic else _float(ts) or None
        question = own_words(split(m.content)[1].strip())  # the question, not the thread quoted before it
        asked.append(Asked(at, m.user_id or "", redact(" ".join(question.split()))[:300], ts, automatic=automatic,
                           shortcut=shortcut, rollback=rollback))
    return asked


def _float(value: object) -> float:
    try:
        return float(str(value))
    except ValueError:
        return 0.0
