"""👍 / 👎 under an answer, kept with its context so someone can act on it.

👍 is stored at once. 👎 opens a short form (``views.open`` with the click's ``trigger_id``): what was wrong —
wrong facts, missed something, too slow, other — and a note; its submission stores the rating. Either way
the entry holds the run id, the question and the answer (scrubbed), the model that answered (recorded when
the run finished), who rated it and when, and the answer's permalink (``chat.getPermalink``). One vote per
person per answer. Someone who may not use OpsPilot is refused, privately, as everywhere else.

The form carries only an opaque token (``private_metadata``): whose form it is, and which run, are read back
from Redis. A submission that does not match a form opened for its sender is refused in the form itself
(``response_action: errors``) and stores nothing.
"""

from __future__ import annotations

import logging
import re
import secrets
from dataclasses import dataclass
from typing import Any, get_args

from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.engine import Engine
from bot.agent.engine_errors import EngineError
from bot.agent.events import Event
from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.visibility import Visibility
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.api_errors import SLACK_FAILURES, may_have_acted, slack_error
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.people import People
from bot.slack.outbound.permalinks import permalink
from bot.slack.outbound.thread_meta import RUN, THREAD, channel_of, thread_key
from bot.slack.outbound.words import language_of, say
from core.redact import redact
from state import RunRecord
from state.feedback_store import NOTE_CHARS, REASONS, FeedbackEntry, Rating, Reason
from state.store import MetaStore, Reports

log = logging.getLogger(__name__)

VIEW_ID = "opspilot_feedback"
"""The form's ``callback_id`` (what Bolt routes its submission by)."""
FORM = "slack-feedback-form"
"""Meta kind: a form's token → who it was opened for, the run, where its answer is."""
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


def reason_words(lang: str, reason: str) -> str:
    return say(lang, f"reason_{reason if reason in get_args(Reason) else ''}")


def form(token: str, lang: str) -> dict[str, Any]:
    """The 👎 form: a required choice of what was wrong, and an optional note."""
    options = [{"text": {"type": "plain_text", "text": reason_words(lang, r)}, "value": r} for r in REASONS]
    return {
        "type": "modal", "callback_id": VIEW_ID, "private_metadata": token,
        "title": {"type": "plain_text", "text": say(lang, "fb_title")},
        "submit": {"type": "plain_text", "text": say(lang, "fb_send")},
        "close": {"type": "plain_text", "text": say(lang, "cancel")},
        "blocks": [
            {"type": "input", "block_id": "reason", "label": {"type": "plain_text", "text": say(lang, "fb_reason")},
             "element": {"type": "radio_buttons", "action_id": "reason", "options": options}},
            {"type": "input", "block_id": "note", "optional": True,
             "label": {"type": "plain_text", "text": say(lang, "fb_note")},
             "element": {"type": "plain_text_input", "action_id": "note", "multiline": True,
                         "max_length": NOTE_CHARS}},
        ],
    }


@dataclass(frozen=True)
class Submission:
    """A submitted form that matches one opened for its sender."""

    token: str
    user: str
    reason: Reason
    note: str
    form: dict[str, str]


DOWN_READ = 100
"""How many of the latest 👎 in the workspace App Home reads to find a viewer's five."""


class Feedback:
    def __init__(self, *, client: AsyncWebClient, engine: Engine, meta: MetaStore, reports: Reports,
                 outbox: SlackOutbox, access: AccessPolicy, metrics: Metrics, model_label: str) -> None:
        self.client = client
        # views.open uses up its trigger: a lost answer retried by the SDK met "trigger_exchanged" and the form
        # (open on the person's screen) was taken for one that never opened. A 429 used nothing: tried once more
        # after its Retry-After (the trigger lasts 3 s: a longer wait meets expired_trigger_id, said as before).
        self.once = AsyncWebClient(token=client.token, base_url=client.base_url, timeout=client.timeout,
                                   retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)])
        self.engine = engine
        self.meta = meta
        self.reports = reports
        self.outbox = outbox
        self.access = access
        self.metrics = metrics
        self.model_label = model_label

    async def __call__(self, event: Event) -> None:
        """Subscribed where runs happen: which model wrote each answer (a click may reach another process)."""
        if event.type == "run_finished" and event.answer:
            await self.meta.put(RUN, event.run_id, {"model": self.model_label})

    # --- the buttons --------------------------------------------------------------------------------------

    async def click(self, body: dict[str, Any], value: str, user: str, channel: str, thread_ts: str | None) -> None:
        rating, _, run_id = value.partition(":")
        message_ts = str((body.get("message") or {}).get("ts") or (body.get("container") or {}).get("message_ts")
                         or thread_ts or "")
        lang = await self._lang(channel, thread_ts)
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if not verdict.allowed:
            await self.outbox.tell(channel, user, verdict.words(lang), thread_ts)
            return
        run = await self._run(run_id, channel, thread_ts) if rating in ("up", "down") and thread_ts else "fb_misplaced"
        if isinstance(run, str):
            log.warning("feedback %r by %s in %s/%s refused (%s)", value, user, channel, thread_ts, run)
            await self.outbox.tell(channel, user, say(lang, run), thread_ts)
            return
        if await self.reports.feedback.rated(run.run_id, run.thread_id, user):
            await self.outbox.tell(channel, user, say(lang, "rated"), thread_ts)
            return
        where = {"run_id": run.run_id, "user": user, "channel": channel, "thread_ts": str(thread_ts),
                 "message_ts": message_ts, "lang": lang}
        opened = await self._ask_why(str(body.get("trigger_id") or ""), where) if rating == "down" else "refused"
        if opened == "opened":
            return  # the form's submission stores it
        if opened == "unknown":  # it may be open on their screen: its submission stores it, or they press again
            await self.outbox.tell(channel, user, say(lang, "fb_form_unknown"), thread_ts)
            return
        # 👎 whose form would not open (a trigger expired on the way): kept without a reason, and said so.
        await self._store(run, "up" if rating == "up" else "down", "", "", where)

    async def _ask_why(self, trigger_id: str, where: dict[str, str]) -> str:
        """``opened``; ``refused`` (it did not open); ``unknown`` (Slack did not answer: it may have)."""
        if not trigger_id:
            return "refused"
        token = secrets.token_urlsafe(24)
        await self.meta.put(FORM, token, where)
        try:
            await self.once.views_open(trigger_id=trigger_id, view=form(token, where["lang"]))
        except SLACK_FAILURES as exc:
            log.warning("the 👎 form did not open: %s", slack_error(exc))
            return "unknown" if may_have_acted(exc) else "refused"
        return "opened"

    # --- the form -------------------------------------------------------------------------------------------

    async def read(self, body: dict[str, Any]) -> tuple[Submission | None, dict[str, str]]:
        """A submission, or what is wrong with it (by the form's block id, as ``response_action: errors``
        shows it). Checked before the acknowledgement: a refusal stays in the form, where it was sent."""
        view: dict[str, Any] = body["view"] if isinstance(body.get("view"), dict) else {}
        user = str((body.get("user") or {}).get("id") or "")
        token = str(view.get("private_metadata") or "")
        found = await self.meta.get(FORM, token) if _TOKEN.match(token) else {}
        lang = found.get("lang") or language_of("", self.access.config.language)
        if not found or not user or found.get("user") != user:
            log.warning("a feedback form from %r refused: not one opened for them", user)
            return None, {"reason": say(lang, "fb_forged")}
        values = (view.get("state") or {}).get("values") or {}
        picked = (((values.get("reason") or {}).get("reason") or {}).get("selected_option") or {}).get("value")
        note = ((values.get("note") or {}).get("note") or {}).get("value") or ""
        if picked not in REASONS:
            return None, {"reason": say(lang, "fb_choose")}
        if not isinstance(note, str) or len(note) > NOTE_CHARS:
            return None, {"note": say(lang, "fb_too_long", n=NOTE_CHARS)}
        return Submission(token, user, picked, note, found), {}

    async def submitted(self, sub: Submission) -> None:
        where = sub.form
        channel, thread_ts = where["channel"], where["thread_ts"]
        if not await self.meta.first_time(f"feedback-form:{sub.token}"):
            return  # the same submission again
        verdict = await self.access.may_use(sub.user, channel, direct=channel.startswith("D"))
        if not verdict.allowed:
            await self.outbox.tell(channel, sub.user, verdict.words(where["lang"]), thread_ts)
            return
        run = await self._run(where["run_id"], channel, thread_ts)
        if isinstance(run, str):
            await self.outbox.tell(channel, sub.user, say(where["lang"], run), thread_ts)
            return
        await self._store(run, "down", sub.reason, sub.note, where)

    # --- storing -----------------------------------------------------------------------------------------------

    async def _store(self, run: RunRecord, rating: Rating, reason: Reason, note: str, where: dict[str, str]) -> None:
        channel, thread_ts, user, lang = where["channel"], where["thread_ts"], where["user"], where["lang"]
        model = (await self.meta.get(RUN, run.run_id)).get("model") or "unknown"
        link = await permalink(self.client, channel, where["message_ts"])
        entry = FeedbackEntry.of(run_id=run.run_id, thread_id=run.thread_id, rating=rating, reason=reason,
                                 note=redact(note.strip()), question=redact(run.text), answer=redact(run.answer),
                                 model=model, user=user, link=link)
        if not await self.reports.feedback.add(entry):
            await self.outbox.tell(channel, user, say(lang, "rated"), thread_ts)
            return
        await self.reports.tally(run.thread_id, f"feedback_{rating}")
        self.metrics.inc("opspilot_feedback_total", model=model, rating=rating)
        if rating == "up" or not reason:
            words = say(lang, f"thanks_{rating}")
        else:
            words = say(lang, "thanks_reason", reason=reason_words(lang, reason).lower())
        await self.outbox.tell(channel, user, words, thread_ts)

    async def _run(self, run_id: str, channel: str, thread_ts: str | None) -> RunRecord | str:
        """The run, if it is one of this thread's (a run id lifted from another thread's message is not); else
        the words saying why not."""
        try:
            run = await self.engine.run_record(run_id)
        except EngineError:
            return "fb_gone"
        return run if run.thread_id == thread_key(channel, str(thread_ts)) else "fb_misplaced"

    async def _lang(self, channel: str, thread_ts: str | None) -> str:
        known = (await self.meta.get(THREAD, thread_key(channel, thread_ts))).get("lang") if thread_ts else None
        return known or language_of("", self.access.config.language)


def thread_url(entry: FeedbackEntry) -> str:
    """The answer's permalink, else the thread's address (Slack opens it for whoever may see it)."""
    if entry.link:
        return entry.link
    channel, _, ts = entry.thread_id.removeprefix("slack:").partition(":")
    return f"https://slack.com/archives/{channel}/p{ts.replace('.', '')}"


async def home_lines(reports: Reports, visibility: Visibility, people: People, viewer: str, lang: str,
                     count: int = 5) -> str:
    """The latest 👎 someone may see on their Home tab: from conversations they can read in Slack, where they may use
    OpsPilot (a direct message's only to its person)."""
    lines, read = [], await reports.feedback.latest("down", DOWN_READ)  # deep: a busy channel's are not theirs
    for entry in read:
        if not await visibility.may_see(viewer, channel_of(entry.thread_id), person=entry.user):
            continue
        note = f": {kit.quoted(entry.note[:120])}" if entry.note else ""  # one line: never a forged entry
        question = kit.quoted(await people.quoted(entry.question, 80)) or "…"
        lines.append(f"• {kit.hhmm(entry.at)} — *{reason_words(lang, entry.reason)}*{note} — “{question}” — "
                     f"<{thread_url(entry)}|{say(lang, 'home_thread')}> — {kit.model_name(entry.model, lang)}")
        if len(lines) == count:
            break
    if not lines and len(read) == DOWN_READ:  # theirs may be older than what was read: not "none lately"
        return f"_{say(lang, 'home_no_down_read', n=DOWN_READ)}_"
    return "\n".join(lines) or f"_{say(lang, 'home_no_down')}_"
