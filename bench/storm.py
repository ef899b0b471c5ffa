"""The soak's alert storm (issue 33): Alertmanager posting firing alerts into the alerts channel through its incoming
webhook, some of them the same alert again, and what the channel shows of them afterwards."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import aiohttp

from bot.demo.workspace import LocalSlack, all_text, buttons
from bot.slack.inbound.thread_reader import STATUS_NOTE

ALERTS = "C0ALERTS"
ALERT_RUNS = 5  # the alerts channel's automatic runs per window (alert_sources.max_runs)
SOURCE: dict[str, Any] = {"channel": ALERTS, "bot_ids": ["B0ALERTS"], "mode": "investigate", "max_runs": ALERT_RUNS}
"""The alerts channel as OpsPilot is configured with it (``slack.alert_sources``)."""


async def post(slack: LocalSlack, count: int, over_s: float) -> list[tuple[str, str]]:
    """``count`` firing alerts over ``over_s`` (a quarter of them an earlier alert again): each message's
    (ts, alert name)."""
    hook, posted = slack.add_webhook(ALERTS), list[tuple[str, str]]()
    async with aiohttp.ClientSession() as session:
        for i in range(count):
            name = f"Alert{i % max(count * 3 // 4, 1)}"
            body = {"username": "Alertmanager", "attachments": [{
                "title": f"[FIRING:1] {name} payments (prod critical)", "color": "danger",
                "text": f"*Labels:*\n• alertname: `{name}`\n• service: `payments`\n• environment: `prod`"}]}
            before = set(slack.messages)
            async with session.post(hook, json=body) as response:
                if response.status == 200:
                    posted += [(ts, name) for (ch, ts), m in list(slack.messages.items())
                               if (ch, ts) not in before and ch == ALERTS and m.get("bot_id") == "B0ALERTS"]
            await asyncio.sleep(over_s / count)
    return posted


def figures(slack: LocalSlack, alerts: list[tuple[str, str]], answers: dict[str, Counter[str]]) -> dict[str, int]:
    """The alert storm as the alerts channel shows it. An alert (by name) gets one investigation (its progress
    message, then one answer: more than one is twice) or one Investigate button, under whichever of its messages
    OpsPilot read first (Slack does not promise the order of events); each of its other messages is noted in that
    thread as fired again; the storm is said once, in the channel. ``alerts_unhandled``: messages showing none of it."""
    investigated = answered = twice = offered = unhandled = 0
    groups: dict[str, list[str]] = {}
    for ts, name in alerts:
        groups.setdefault(name, []).append(ts)
    for stamps in groups.values():
        keys = {ts: [str(((m.get("metadata") or {}).get("event_payload") or {}).get("key") or "")
                     for m in slack.thread(ALERTS, ts)] for ts in stamps}
        started = [ts for ts in stamps if any(k.startswith("progress:") for k in keys[ts])]
        button = [ts for ts in stamps if any(b["action_id"] == "opspilot_investigate"
                                             for m in slack.thread(ALERTS, ts) for b in buttons(m))]
        primary = (started + button)[:1]
        n = sum(len(answers.get(f"{ALERTS}:{ts}", ())) for ts in started)
        investigated, answered, twice = investigated + len(started), answered + min(n, 1), twice + max(n - 1, 0)
        offered += len(button)
        noted = {k.removeprefix(STATUS_NOTE) for ts in primary for k in keys[ts] if k.startswith(STATUS_NOTE)}
        unhandled += sum(1 for ts in stamps if ts not in primary and ts not in noted)
    notices = sum(1 for (ch, _), m in list(slack.messages.items())
                  if ch == ALERTS and not m.get("thread_ts") and "Many alerts at once" in all_text(m))
    return {"alerts": len(alerts), "alerts_investigated": investigated, "alerts_answered": answered,
            "alerts_answered_twice": twice, "alerts_offered": offered, "alerts_unhandled": unhandled,
            "storm_notices": notices}


def detail(slack: LocalSlack, alerts: list[tuple[str, str]], clicked: dict[str, float] | None = None,
           ended: dict[str, float] | None = None) -> str:
    """Each alert message and what its thread shows (the outbox keys of OpsPilot's messages there, buttons), then
    each confirmed card that never showed its outcome: what to read when a soak's figures are off."""
    lines = []
    for ts, name in alerts:
        shown = [str(((m.get("metadata") or {}).get("event_payload") or {}).get("key") or "")[:40] or
                 ",".join(b["action_id"] for b in buttons(m)) or "-" for m in slack.thread(ALERTS, ts)[1:]]
        lines.append(f"{name} {ts}: {' '.join(shown) or 'nothing'}")
    return "\n".join([*lines, *(cards(slack, clicked, ended or {}).splitlines() if clicked else [])])


def cards(slack: LocalSlack, clicked: dict[str, float], ended: dict[str, float]) -> str:
    """Each confirmed card that never showed its outcome: what it shows now (its text, buttons, edits)."""
    lines = []
    for ts in clicked:
        if ts in ended:
            continue
        card = next((m for (_, at), m in slack.messages.items() if at == ts), {})
        lines.append(f"card {ts}: {all_text(card)[:120]!r} buttons={[b['action_id'] for b in buttons(card)]} "
                     f"edits={card.get('edits')}")
    return "\n".join(lines)

