"""A shift handover: ``/opspilot handover [hours]`` in a channel lists, across its threads with activity in the
last N hours, the open investigations, the confirmations still waiting for someone and the scheduled
follow-ups, each with its state and a link — from the records, like a summary's records part."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.alerts import ALERT
from bot.slack.inbound.thread_log import alert_events
from bot.slack.incidents.document import run_state
from bot.slack.incidents.incident import asked_in, calls_of
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.people import People
from bot.slack.outbound.permalinks import permalink
from bot.slack.outbound.thread_meta import thread_key
from bot.slack.outbound.words import say
from core.messages import Message, UserMessage
from state.memory import MemoryStore
from state.records import RunRecord
from state.redis import RedisStore
from state.store import MetaStore
from state.threads import runs_of_thread, threads_with_prefix

DEFAULT_HOURS, MAX_HOURS = 12, 168
FollowUps = Callable[[str, str], Awaitable[list[str]]]
"""A channel's pending follow-ups, one line each in a language (the scheduler's, when there is one)."""


def hours_of(argument: str) -> int | None:
    """``""`` → the default; a whole number of hours from 1 to a week; anything else → None (usage)."""
    if not argument.strip():
        return DEFAULT_HOURS
    try:
        hours = int(argument.strip().rstrip("hH"))
    except ValueError:
        return None
    return hours if 1 <= hours <= MAX_HOURS else None


@dataclass(frozen=True)
class Entry:
    thread_ts: str
    run: RunRecord
    firing: bool
    topic: str
    """What the thread is about: its alert's names, else its first question (not the latest "restart it")."""
    unknown: bool = False
    """A change of unknown outcome in any of its runs, not done since: to check by hand."""


async def _unresolved(store: RedisStore | MemoryStore, thread_id: str, latest: RunRecord,
                      transcript: list[Message]) -> bool:
    """Whether a change of unknown outcome in any of the thread's runs was not done since (the same call, the same
    arguments, run to its end after it), as the summary's open questions have it. The thread's other runs are
    listed (a scan) only where its first question was not the latest run's: most threads have one run."""
    asked = [m.request_id for m in transcript if isinstance(m, UserMessage)]
    earlier = bool(asked) and asked[0] not in (latest.first_request_id, latest.request_id)
    calls = [c for run in (await runs_of_thread(store, thread_id) if earlier else [latest]) for c in calls_of(run)]
    return any(c.error_code == "outcome_unknown" and not any(
        later.status == "ok" and (later.tool, later.args_digest) == (c.tool, c.args_digest) for later in calls[i + 1:])
               for i, c in enumerate(calls))


class Handover:
    def __init__(self, *, client: AsyncWebClient, store: RedisStore | MemoryStore, meta: MetaStore,
                 followups: FollowUps | None = None, people: People | None = None) -> None:
        self.client, self.store, self.meta, self.followups = client, store, meta, followups
        self.people = people or People(client)

    async def entries(self, channel: str, since: float) -> list[Entry]:
        found = []
        for thread_id in await threads_with_prefix(self.store, thread_key(channel, "")):
            run_id = await self.store.thread_run(thread_id)
            run = await self.store.load_run(run_id) if run_id else None
            thread_ts = thread_id.rsplit(":", 1)[-1]
            events = await alert_events(self.meta, channel, thread_ts)
            latest = max([run.updated_at if run else 0.0, *(e.at for e in events)])
            if run is not None and latest >= since:
                transcript = await self.store.load_transcript(thread_id)
                found.append(Entry(thread_ts, run, bool(events) and events[-1].kind != "resolved",
                                   await self._topic(channel, thread_ts, transcript) or run.text,
                                   await _unresolved(self.store, thread_id, run, transcript)))
        return sorted(found, key=lambda e: e.run.updated_at, reverse=True)

    async def text(self, channel: str, hours: int, lang: str, now: float | None = None) -> str:
        now = now or time.time()
        since = now - hours * 3600
        entries = await self.entries(channel, since)
        links = {e.thread_ts: await permalink(self.client, channel, e.thread_ts) for e in entries}
        open_: list[str] = []
        answered: list[str] = []
        pending: list[str] = []
        for e in entries:
            run, link = e.run, links[e.thread_ts]
            subject = kit.quoted(await self.people.quoted(e.topic, 80))
            unknown = e.unknown  # a change to check by hand, whichever of the thread's runs made it
            state = run_state(run, lang, kit.who) + (f", {say(lang, 'ho_firing')}" if e.firing else "") + \
                (f", {say(lang, 'st_unknown')}" if unknown else "")
            line = f"• <{link}|{subject}> — {state} ({kit.hhmm(run.updated_at, now)})" if link else \
                f"• {subject} — {state} ({kit.hhmm(run.updated_at, now)})"
            done = run.status == "finished" and run.stop_reason in (None, "final_answer") and not e.firing \
                and not unknown
            (answered if done else open_).append(line)
            for p in run.pending:
                target = p.arguments.get("service_id") or p.arguments.get("service") or ""
                env = p.environment or ""
                what = kit.code(p.call.name) + (f" {kit.code(target)}" if target else "") + \
                    (f" @ {kit.code(env)}" if env else "")
                asker = say(lang, "requested_by", by=kit.who(run.user_id or "?"))
                pending.append(f"• {what} — {asker} — {kit.hhmm(p.created_at, now)} → {kit.hhmm(p.expires_at, now)}"
                               + (f" — <{link}|↗>" if link else ""))
        follow = await self.followups(channel, lang) if self.followups is not None else []
        none = f"_{say(lang, 'ho_none')}_"
        parts = [f"*{say(lang, 'ho_title', channel=channel, hours=hours)}*",
                 f"*{say(lang, 'ho_open')}*", *(open_ or [none]),
                 f"*{say(lang, 'ho_pending')}*", *(pending or [none]),
                 f"*{say(lang, 'ho_followups')}*",
                 *([f"• {f}" for f in follow] or [f"_{say(lang, 'ho_no_followups')}_"]),
                 f"*{say(lang, 'ho_answered', n=len(answered))}*", *answered]
        return "\n".join(parts)

    async def _topic(self, channel: str, thread_ts: str, transcript: list[Message]) -> str:
        group = (await self.meta.get(ALERT, f"{channel}:{thread_ts}")).get("group")
        alert = await self.meta.get(ALERT, group) if group else {}
        if alert.get("label") or alert.get("title"):
            return str(alert.get("label") or alert.get("title"))
        people = [a for a in asked_in(transcript) if not a.automatic]
        return people[0].text if people else ""

