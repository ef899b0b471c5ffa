"""``opspilot stats``: runs, steps, failure and resume rates, stop reasons, work set aside and the latest 👎 of a
window, from Redis, for an operator's terminal."""

from __future__ import annotations

import json
import time

from bot.config import Settings
from bot.slack.outbound.words import say
from core.text import inert, show


async def stats(settings: Settings, window: str) -> int:
    """What ``opspilot stats`` prints: the window's counts, work set aside, stop reasons, the latest 👎."""
    from bot.assembly import open_store
    from bot.slack.feedback.votes import thread_url
    from bot.slack.outbound.thread_meta import channel_of

    store = await open_store(settings, fallback=False, reading=True)
    try:
        seconds = {"1h": 3600, "1d": 86400, "7d": 7 * 86400}[window]
        s = await store.stats(seconds)
        downs = [e for e in await store.feedback.latest("down", 10) if e.at >= s.since]
        work, dead = await store.queue.stats(), await store.queue.dead_letters(5)
    finally:
        await store.close()
    kinds = await _kinds(settings, {channel_of(e.thread_id) for e in downs})
    show(f"OpsPilot — last {window}, counted in whole hours since "  # the span the hour buckets really cover
         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(s.since))}")
    show(f"  runs                        {s.runs}")
    show(f"  average steps per run       {s.avg_steps:.2f}")
    show(f"  tool calls / failures       {s.get('tool_calls')} / {s.get('tool_failures')}"
          f"  ({s.tool_failure_rate:.1%} failed)")
    asked, resumed = s.get("interrupts"), s.get("resumed")  # answers count in their hour, questions in theirs
    rate = f"{resumed / asked:.1%}" if asked >= resumed and asked else "none asked" if not resumed else \
        "more answers than questions: asked before this window, or not counted (a process stopped first)"
    show(f"  interrupts → resumed        {asked} → {resumed}  ({rate})")
    show(f"  answers rated 👍 / 👎        {s.get('feedback_up')} / {s.get('feedback_down')}")
    show(f"  follow-ups fired / skipped / cancelled     {s.get('followup_fired')} / {s.get('followup_skipped')} / "
          f"{s.get('followup_cancelled')}")
    show(f"  scheduled checks fired / skipped / cancelled  {s.get('schedule_fired')} / {s.get('schedule_skipped')} / "
          f"{s.get('schedule_cancelled')}  (reported {s.get('schedule_reported')}, quiet {s.get('schedule_quiet')})")
    print(f"  runs refused by limits      {s.get('refused_person')} per person / {s.get('refused_channel')} per "
          "channel")
    read, written, full = s.get("cache_read_tokens"), s.get("cache_write_tokens"), s.get("input_tokens")
    total = read + written + full
    show(f"  input tokens                {total}: {full} at full price, {read} read from the prompt cache "
          f"({read / total if total else 0:.0%}), {written} written to it; output {s.get('output_tokens')}")
    show(f"  work set aside (dead letters, 14 days)  {work.dead}"
          + ("" if not dead else "  — newest first:"))
    for d in dead:  # what it was and where, never its text (a person's words, shown to operators only in Slack)
        show(f"    {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(d.at))}  {_work_label(d.body)}, "
              f"{d.deliveries} tries: {inert(d.reason)[:160]}")
    show("  stop reasons")
    for reason, count in s.stop_reasons.items() or {"(none yet)": 0}.items():
        show(f"    {reason:<24}  {count}")
    show("  latest 👎 (newest first)" if downs else "  latest 👎: none")
    for e in downs:
        kind = kinds.get(channel_of(e.thread_id))
        shown = kind == "public"  # a terminal has no reader: only what the workspace may read
        note = f": {' '.join(e.note.split())[:100]}" if e.note and shown else ""
        show(f"    {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(e.at))}  "
              f"{say('en', 'reason_' + e.reason).lower()}{note} — by {e.user}, model {e.model}")
        show(f"      asked: {' '.join(e.question.split())[:100]}" if shown else "      (private conversation)"
             if kind else "      (not shown: whether anyone may read that conversation is not known"
             + (": Slack did not say)" if settings.slack.bot_token else ": set SLACK_BOT_TOKEN)"))
        show(f"      {thread_url(e)}")
    return 0


async def _kinds(settings: Settings, channels: set[str]) -> dict[str, str]:
    """What Slack says each of ``channels`` is (``public``, ``private``, ``dm``: ``conversations.info`` with the bot
    token); left out when that is not known (no token, Slack not answering): a private conversation's words never
    reach a terminal on a guess, nor is a public one called private."""
    if not settings.slack.bot_token or not channels:
        return {}
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.slack.inbound.visibility import Visibility

    slack = Visibility(AsyncWebClient(token=settings.slack.bot_token, base_url=settings.slack.api_url, timeout=10))
    return {c: found.kind for c in channels if (found := await slack.conversation(c)) is not None}


def _work_label(body: str) -> str:
    """A work item as a line of ``stats``: its kind and where it was (channel, thread), not what it said."""
    try:
        item = json.loads(body)
    except ValueError:
        return "unreadable item"
    if not isinstance(item, dict):
        return "unreadable item"
    where = "/".join(str(item[k]) for k in ("channel", "thread_ts") if item.get(k))
    return inert(f"{item.get('kind', '?')}{' in ' + where if where else ''}")
