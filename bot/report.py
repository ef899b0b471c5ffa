"""``opspilot report --thread <channel>:<ts>``: a thread's incident summary as Markdown, from Redis — the same
document a summary in Slack posts, without Slack (no permalinks). The records part needs no model; the narrative
is written only by a configured model (not the scripted demo model), and never with ``--no-model``."""

from __future__ import annotations

import re
import sys

from bot import when
from bot.assembly import build_model, open_store
from bot.config import ConfigError, Settings
from bot.slack.incidents.document import render
from bot.slack.incidents.incident import gather
from bot.slack.incidents.narrative import write
from core.text import inert

_THREAD = re.compile(r"^(?P<channel>[A-Z0-9]+):(?P<ts>\d+\.\d+)$")


def parse_thread(ref: str) -> tuple[str, str]:
    found = _THREAD.match(ref.strip())
    if found is None:
        raise ConfigError(f"--thread takes <channel id>:<thread ts>, e.g. C0OPS:1718000000.000100; got {ref!r}")
    return found.group("channel"), found.group("ts")


def parse_tz(name: str | None) -> str | None:
    """``--tz`` as given, once this system knows it (a typo would otherwise drop the column without a word)."""
    if name is None or name.upper() in ("UTC", "ETC/UTC"):
        return name
    if not when.known_zone(name):  # a folder of zones ("America") and the empty string too
        raise ConfigError(f"--tz takes a time zone name such as Asia/Shanghai or UTC; {name!r} is not one "
                          "this system knows")
    return name


async def report(settings: Settings, thread: str, *, tz: str | None = None, use_model: bool = True) -> int:
    channel, ts = parse_thread(thread)
    tz = parse_tz(tz) if tz is not None else settings.slack.channel_timezones.get(channel)
    model = build_model(settings) if use_model else None
    if model is not None and model.scripted:
        print("opspilot report: no model is configured (no API key): the records only", file=sys.stderr)
        model = None
    try:
        store = await open_store(settings, fallback=False, reading=True)
        try:
            incident = await gather(store, store.meta, store, channel, ts, language=settings.slack.language)
            narrative = await write(model, incident, []) if model is not None and not incident.empty else None
        finally:
            await store.close()
    finally:
        if model is not None:
            await model.aclose()
    print(inert(render(incident, narrative, tz=tz)), end="")  # people's and the model's words: shown, not obeyed
    if incident.empty:  # said where it looked; the demo's hint only where it did not look there already
        hint = "" if settings.key_prefix.endswith("-demo") else " (a thread of `opspilot demo`? add --demo)"
        print(f"opspilot report: no records of {thread} under the key prefix {settings.key_prefix!r}{hint}",
              file=sys.stderr)
    return 0 if not incident.empty else 1
