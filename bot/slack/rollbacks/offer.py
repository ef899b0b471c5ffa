""""Roll back to <previous release>" under an answer whose run found that the errors began right after a
deploy — decided from the run's own tool results by the same rule the answer's verdict uses
(tools.ops.verdict), never from the model's words. The button does nothing by itself: pressing it asks
OpsPilot, in the thread and as the person who pressed it, to roll back; rollback_service then shows the
normal confirmation card (from → to, approvers, two-person rule), so the card stays the only gate."""

from __future__ import annotations

import json
from typing import Any

from bot.agent.events import ToolResultEvent
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.words import say
from tools.ops.verdict import RATE_FIGURES, judge

ROLLBACK = "opspilot_rollback"
_READS = ("recent_changes", "query_metrics", "query_logs")


def remember(state: dict[str, Any], event: ToolResultEvent) -> None:
    """Keep what the verdict needs from a read (compactly: the progress state lives in Redis)."""
    data = event.data.get("data") if event.status == "ok" and isinstance(event.data, dict) else None
    if event.tool not in _READS or not isinstance(data, dict) or not data.get("service_id"):
        return
    key = f"{data['service_id']}/{data.get('environment') or ''}"
    facts = state.setdefault("facts", {}).setdefault(key, {})
    if event.tool == "recent_changes":  # all the verdict reads, the list whole: a cut one turned "yes" into no button
        keep = ("at", "kind", "version", "images", "time", "source")
        facts["changes"] = {
            "changes": [{k: c.get(k) for k in keep if c.get(k) is not None} for c in data.get("changes") or []
                        if isinstance(c, dict)],
            "last_before_window": {k: (data.get("last_before_window") or {}).get(k) for k in keep}
            if isinstance(data.get("last_before_window"), dict) else None,
            **{k: data[k] for k in ("more_changes", "unreadable_records", "unavailable") if data.get(k)}}
    elif event.tool == "query_metrics":
        rate = (data.get("metrics") or {}).get("error_rate")
        if isinstance(rate, dict):
            facts["rate"] = {k: rate.get(k) for k in RATE_FIGURES if k in rate}  # the answer's verdict, not a part
    else:
        firsts = [str(p.get("first_seen")) for p in data.get("patterns") or [] if isinstance(p, dict)
                  and p.get("first_seen")]
        facts["logs"] = {"patterns": [{"first_seen": min(firsts)}] if firsts else []}


def offer(state: dict[str, Any], run_id: str, lang: str) -> kit.Block | None:
    """The button, when a service's verdict is yes and the release before the culprit is known."""
    for key, facts in sorted((state.get("facts") or {}).items()):
        if "changes" not in facts:
            continue
        verdict = judge(facts["changes"], facts.get("rate"), facts.get("logs"))
        previous = verdict.previous
        if verdict.kind != "yes" or previous is None:
            continue
        service, _, env = key.partition("/")
        release = str(previous.get("version"))
        value = json.dumps({"run": run_id, "service": service, "environment": env, "release": release})
        label = say(lang, "rollback_offer", release=release)
        return {"type": "actions", "block_id": f"rollback:{run_id}"[:255],
                "elements": [kit.button(label[:75], ROLLBACK, value[:2000])]}
    return None


def parse(value: str) -> dict[str, str] | None:
    """A pressed button's value, or None when it is not one of ours (a forged or damaged payload)."""
    try:
        body = json.loads(value)
    except ValueError:
        return None
    want = ("run", "service", "environment", "release")
    if not isinstance(body, dict) or not all(isinstance(body.get(k), str) and body[k] for k in want):
        return None
    return {k: str(body[k])[:200] for k in want}


def question(target: dict[str, str], user: str, lang: str = "en") -> str:
    """What pressing the button asks, in the person's name and the thread's language (the model proposes; the card
    decides)."""
    return say(lang, "rollback_question", user=user, **target)
