"""Incident summaries in Slack: "@OpsPilot summarize" in a thread, ``/opspilot summary <link or ts>`` and the
message shortcut "Summarize this incident" all end here.

The summary goes to a canvas tabbed in the channel (``canvases.create`` with ``channel_id``); running it again
for the same thread replaces that canvas's content (``canvases.edit``, the canvas id kept per thread; two asked
at once make one: the first claims the making). Where
canvases are not available (free plans, a missing ``canvases:write`` scope, an admin's restriction) it is posted
in the thread as a Markdown file (``files.getUploadURLExternal``, upload, ``files.completeUploadExternal``).
A note in the thread says where it went; a re-run edits that note rather than adding another.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.models.base import ChatModel
from bot.slack.inbound.thread_reader import ThreadReader
from bot.slack.incidents.document import Links, render
from bot.slack.incidents.incident import Incident, gather
from bot.slack.incidents.narrative import THREAD_CHARS, write
from bot.slack.outbound.api_errors import SLACK_FAILURES, may_have_acted, retried, slack_error
from bot.slack.outbound.markdown import code
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.permalinks import permalink
from bot.slack.outbound.words import language_of, say
from core.text import reveal
from state.memory import MemoryStore
from state.redis import RedisStore
from state.store import MetaStore, Reports

log = logging.getLogger(__name__)
TZ_S = 3.0

CANVAS = "slack-canvas"
"""Meta kind (``Keys.meta``, the thread's TTL): engine thread id → the canvas its summary is in."""
CANVAS_UNAVAILABLE = frozenset({
    "not_allowed", "not_allowed_token_type", "missing_scope", "canvas_disabled_user_team",
    "free_teams_cannot_create_non_tabbed_canvases", "free_teams_cannot_edit_standalone_canvases",
    "restricted_action", "canvas_creation_failed", "team_tier_cannot_create_canvases", "unknown_method",
    "feature_not_enabled"})
MAX_EVIDENCE = 20
CREATING_S = 30.0
"""How long a summary waits for the canvas another one is making for the same thread (then makes it itself)."""
THREAD_MESSAGES = 60
"""Colleagues' messages the narrative reads at most (the thread's first and its newest; THREAD_CHARS in all)."""
_REF = re.compile(r"(?:/archives/(?P<channel>[A-Z0-9]+)/p(?P<p>\d{7,})(?:\?(?P<query>\S*))?)"
                  r"|^(?P<ts>\d+\.\d+)$")


def canvas_mention(user: str) -> str:
    """A person in canvas Markdown (``![](@U…)``); a bot or an alert source by its name."""
    return f"![](@{user})" if re.fullmatch(r"[UW][A-Z0-9]{2,}", user) else (code(user) or "?")


def thread_of(ref: str, channel: str) -> str | None:
    """The thread a ``/opspilot summary`` argument names: a permalink (to the root or a reply) or a ts."""
    found = _REF.search(ref.strip().strip("<>").split("|")[0])
    if found is None:
        return None
    if found.group("ts"):
        return found.group("ts")
    if found.group("channel") != channel:
        return None
    query = dict(p.partition("=")[::2] for p in (found.group("query") or "").split("&") if p)
    p = found.group("p")
    return query.get("thread_ts") or f"{p[:-6]}.{p[-6:]}"  # a permalink's p: the ts without its dot


class Summaries:
    def __init__(self, *, client: AsyncWebClient, store: RedisStore | MemoryStore, meta: MetaStore,
                 reports: Reports, model: ChatModel | None, outbox: SlackOutbox, language: str = "auto",
                 timezones: dict[str, str] | None = None) -> None:
        self.client, self.store, self.meta, self.reports = client, store, meta, reports
        # Making a canvas or a file is not idempotent: never tried again after a lost reply or a 5xx (a lost reply
        # retried made a second canvas); what a failure may have left is said, not guessed. A 429 is Slack doing
        # nothing: tried once more after its Retry-After.
        self.once = AsyncWebClient(token=client.token, base_url=client.base_url, timeout=client.timeout,
                                   retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)])
        self.model, self.outbox, self.language = model, outbox, language
        self.timezones = timezones or {}
        self.reader = ThreadReader(client, meta, max_messages=THREAD_MESSAGES, max_chars=THREAD_CHARS)

    async def summarize(self, channel: str, thread_ts: str, user: str, *, asked: str = "",
                        in_thread: bool = True) -> bool:
        """``asked``: the words that asked for it (their language, when the thread has none on record);
        ``in_thread``: whether the asker is in that thread (a slash command is not). False: nothing to summarise
        (no model call made)."""
        incident = await gather(self.store, self.meta, self.reports, channel, thread_ts, language=self.language)
        if incident.empty:  # nothing to summarise: said to the asker alone, no canvas, no post in the thread
            lang = language_of(asked, self.language) if asked else incident.lang
            await self.outbox.tell(channel, user, say(lang, "inc_no_records"), thread_ts if in_thread else None)
            return False
        links = await self._links(incident)
        evidence = [(f"message {ts}", url) for ts, url in links.by_ts.items()]
        narrative = None
        if self.model is not None:
            narrative = await write(self.model, incident, evidence, said=await self._said(incident),
                                    mention=canvas_mention)
        document = render(incident, narrative, tz=await self._tz(incident.channel, user), links=links,
                          mention=canvas_mention)
        await self.publish(incident, document)
        return True

    async def publish(self, incident: Incident, document: str) -> None:
        lang, thread_id = incident.lang, incident.thread_id
        note = f"incident-summary:{incident.thread_ts}"
        try:
            how = await self._canvas(incident, document)
        except SLACK_FAILURES as exc:
            error = slack_error(exc)
            if error not in CANVAS_UNAVAILABLE:
                log.warning("summary of %s: canvas failed (%s)", thread_id, error)
                key = "inc_unconfirmed" if may_have_acted(exc) else "inc_failed"
                if may_have_acted(exc) and (await self.meta.get(CANVAS, thread_id)).get("canvas_id"):  # an edit
                    await self.outbox.say(incident.channel, incident.thread_ts, say(
                        lang, "inc_edit_unconfirmed", why=error, link=f"<#{incident.channel}>"), key=note)
                    return
                await self.outbox.say(incident.channel, incident.thread_ts, say(
                    lang, key, why=error, what=say(lang, "inc_what_canvas"), link=f"<#{incident.channel}>"), key=note)
                return
            log.info("summary of %s: canvases unavailable (%s): posting a file", thread_id, error)
            await self._file(incident, document, error)
            return
        await self.outbox.say(incident.channel, incident.thread_ts, say(
            lang, "inc_in_canvas", how=say(lang, f"inc_{how}"), link=f"<#{incident.channel}>"), key=note)

    async def _known(self, thread_id: str) -> tuple[str | None, bool]:
        """The thread's canvas, or (None, True) when this summary is the one to make it: a summary asked for at
        the same time elsewhere (another instance, a double request) makes one canvas, and this one edits it."""
        deadline = asyncio.get_running_loop().time() + CREATING_S
        while True:
            if known := (await self.meta.get(CANVAS, thread_id)).get("canvas_id"):
                return str(known), False
            if (await self.store.locks.claim(f"canvas:{thread_id}", "summary")).won:
                if known := (await self.meta.get(CANVAS, thread_id)).get("canvas_id"):  # made and let go meanwhile
                    await self.store.locks.release_claim(f"canvas:{thread_id}")
                    return str(known), False
                return None, True
            if asyncio.get_running_loop().time() > deadline:  # its maker is gone without a word: make it here
                return None, False
            await asyncio.sleep(0.2)  # the one making it has not said its id yet

    async def _canvas(self, incident: Incident, document: str) -> str:
        content = {"type": "markdown", "markdown": document}
        known, making = await self._known(incident.thread_id)
        try:
            if known:
                try:  # a replace is the same edit made again: tried again while Slack's failure is transient
                    await retried("canvases.edit", lambda: self.client.canvases_edit(canvas_id=known, changes=[
                        {"operation": "replace", "document_content": content}]), attempts=3)
                    return "updated"
                except SlackApiError as exc:
                    if slack_error(exc) != "canvas_not_found":  # deleted by someone: make a new one
                        raise
            created = await self.once.canvases_create(
                title=say(incident.lang, "inc_canvas_title", title=reveal(incident.title))[:120],
                document_content=content, channel_id=incident.channel)
            await self.meta.put(CANVAS, incident.thread_id, {"canvas_id": str(created["canvas_id"])})
            return "created"
        finally:
            if making:  # made, or failed (no canvases here: the next one looks again at once)
                await self.store.locks.release_claim(f"canvas:{incident.thread_id}")

    async def _file(self, incident: Incident, document: str, why: str) -> None:
        lang = incident.lang
        try:
            await self.once.files_upload_v2(
                channel=incident.channel, thread_ts=incident.thread_ts, content=document.encode(),
                filename=f"incident-summary-{incident.thread_ts}.md",
                title=say(lang, "inc_canvas_title", title=reveal(incident.title))[:120],
                initial_comment=say(lang, "inc_as_file", why=why))
        except SLACK_FAILURES as exc:  # the upload URL is another host: it may fail alone
            error = slack_error(exc)
            log.warning("summary of %s: file upload failed (%s)", incident.thread_id, error)
            key = "inc_unconfirmed" if may_have_acted(exc) else "inc_failed"
            await self.outbox.say(incident.channel, incident.thread_ts, say(
                lang, key, why=error, what=say(lang, "inc_what_file"), link=f"<#{incident.channel}>"),
                key=f"incident-summary:{incident.thread_ts}")

    async def _said(self, incident: Incident) -> str:
        """What colleagues wrote in the thread, for the narrative; without it (no history scope, Slack failing)
        the narrative is written from the records and OpsPilot's answers alone."""
        try:
            return await self.reader.others(incident.channel, incident.thread_ts)
        except SLACK_FAILURES as exc:
            why = slack_error(exc)
            log.warning("summary of %s: the thread could not be read (%s): the records only", incident.thread_id, why)
            return ""

    async def _links(self, incident: Incident) -> Links:
        wanted = [incident.thread_ts, *(q.ts for q in incident.asked if q.ts)]
        by_ts: dict[str, str] = {}
        for ts in dict.fromkeys(wanted):
            if len(by_ts) >= MAX_EVIDENCE:
                break
            link = await permalink(self.client, incident.channel, ts)
            if link:
                by_ts[ts] = link
        return Links(thread=by_ts.get(incident.thread_ts, ""), by_ts=by_ts)

    async def _tz(self, channel: str, user: str) -> str | None:
        """The timeline's second column: the channel's time zone (``slack.channel_timezones``: Slack channels have
        none of their own), else the asker's."""
        if channel in self.timezones:
            return self.timezones[channel]
        try:
            async with asyncio.timeout(TZ_S):  # a column's zone: never hold a summary for it
                answer: Any = await self.client.users_info(user=user)
        except SLACK_FAILURES as exc:
            log.info("the asker's time zone is not known (%s): the timeline in UTC only", slack_error(exc))
            return None
        tz = (answer.get("user") or {}).get("tz")
        return str(tz) if tz else None
