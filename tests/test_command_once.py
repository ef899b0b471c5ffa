"""``/opspilot`` acts once per command: a thread's first message whose answer Slack lost, and a command read a
second time (its worker died before acknowledging it), start one thread, one run and one schedule."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import pytest

from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from bot.slack.inbound.work_items import Delivery
from bot.slack.service import _reader
from tests.slack_harness import CHANNEL, Workspace, open_workspace


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_workspace(redis_url, prefix, slack, language="en")
    yield workspace
    await workspace.stop()


def command(ws: Workspace, text: str, trigger: str) -> dict[str, Any]:
    return {"command": "/opspilot", "text": text, "user_id": "UREQ", "channel_id": CHANNEL, "team_id": "T0001",
            "trigger_id": trigger, "response_url": ws.slack.response_url()}


def roots(ws: Workspace) -> list[dict[str, Any]]:
    return [m for (c, ts), m in ws.slack.messages.items() if c == CHANNEL and m.get("thread_ts") in (None, ts)]


async def test_a_thread_whose_post_lost_its_answer_is_found_and_answered(ws: Workspace) -> None:
    """Slack posted "<@UREQ> asked: …" and lost its answer: nothing ran under it, and the person was told to send
    the command again (a second post)."""
    ws.slack.fault("lost", "chat.postMessage", times=1)
    await ws.sender.command(command(ws, "payments recent errors", "trig-lost"))
    await ws.settle()
    [root] = roots(ws)
    assert "asked: payments recent errors" in all_text(root)
    assert len(ws.slack.thread(CHANNEL, root["ts"])) > 1  # answered in it
    assert not [r for r in ws.slack.responses if "send the command again" in str(r)]
    assert (await ws.store.stats(3600)).runs == 1


async def test_a_command_read_twice_acts_once(ws: Workspace) -> None:
    read = _reader(lambda: ws.service.bolt)
    for n, text in enumerate(['schedule "0 9 * * *" UTC payments nightly errors', "payments recent errors"]):
        item = Delivery(body=urlencode(command(ws, text, f"trig-{n}")),
                        content_type="application/x-www-form-urlencoded", received_at=time.time())
        for _ in range(2):  # the first reading's worker died before acknowledging it: another reads it again
            await read(item, f"1700000000000-{n}")
            await ws.settle()
    assert len([t for t in await ws.store.timers.every() if t.kind == "schedule"]) == 1
    texts = [all_text(m) for m in roots(ws)]
    assert len([t for t in texts if "nightly errors" in t]) == 1, texts
    assert len([t for t in texts if "asked: payments recent errors" in t]) == 1, texts
    assert (await ws.store.stats(3600)).runs == 1


async def test_where_opspilot_is_not_every_door_says_so_and_starts_nothing(ws: Workspace) -> None:
    """Subcommands and shortcuts in a channel OpsPilot is not in: their replies were ephemerals Slack refused
    (silence), yet a schedule was kept there and "Investigate" ran a model where nobody could see it."""
    ws.slack.absent.add("C0NOTIN")
    texts = ["payments errors", 'schedule "0 9 * * *" UTC payments nightly', "schedules", "handover 4", ""]
    for n, text in enumerate(texts):
        await ws.sender.command({**command(ws, text, f"nic-{n}"), "channel_id": "C0NOTIN"})
    for callback in ("opspilot_investigate_message", "opspilot_summarize_incident"):
        await ws.sender.action({"type": "message_action", "callback_id": callback, "team": {"id": "T0001"},
                                "user": {"id": "UREQ"}, "channel": {"id": "C0NOTIN"}, "trigger_id": callback,
                                "response_url": ws.slack.response_url(),
                                "message": {"type": "message", "user": "UBOB", "ts": "1700000000.000200",
                                            "text": "payments is throwing 500s"}})
    await ws.settle()
    told = [str(r.get("text")) for r in ws.slack.responses]
    assert len(told) == len(texts) + 2 and all("I am not in this channel" in t for t in told), told
    assert not [t for t in await ws.store.timers.every() if t.channel == "C0NOTIN"]
    assert (await ws.store.stats(3600)).runs == 0


async def test_the_look_for_a_lost_post_is_tried_again(ws: Workspace) -> None:
    """One 5xx on the channel's history after the post lost its answer: the question was posted, never answered,
    and the person told to wait for a thread that had appeared."""
    ws.slack.fault("lost", "chat.postMessage", times=1)
    ws.slack.fault("error", "conversations.history", times=1)
    await ws.sender.command(command(ws, "payments recent errors", "trig-look"))
    await ws.settle()
    [root] = roots(ws)
    assert len(ws.slack.thread(CHANNEL, root["ts"])) > 1 and (await ws.store.stats(3600)).runs == 1


async def test_a_slow_slack_does_not_hold_a_command(ws: Workspace) -> None:
    """conversations.info hanging (is OpsPilot in the channel?) held every command a minute: now not known in a few
    seconds, and let through. Two commands without a trigger id each get their own thread."""
    ws.slack.fault("hang", "conversations.info", hang_s=8, times=2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    for text in ("payments errors", "orders errors"):
        await ws.sender.command({**command(ws, text, ""), "trigger_id": ""})
    await ws.settle()
    assert loop.time() - started < 30
    assert sorted(all_text(m).split(": ", 1)[1] for m in roots(ws)) == ["orders errors", "payments errors"]


class _Killed(BaseException):
    """The worker process dies here."""


async def test_a_cancel_read_again_after_its_worker_died_says_it_once(ws: Workspace) -> None:
    """`/opspilot schedules cancel <id>` whose worker died after the schedule was cancelled and before its line was
    said: read again, the line never came and the person was told there is no such schedule."""
    read = _reader(lambda: ws.service.bolt)
    make = Delivery(body=urlencode(command(ws, 'schedule "0 9 * * *" UTC payments nightly errors', "t-make")),
                    content_type="application/x-www-form-urlencoded", received_at=time.time())
    await read(make, "1700000000000-1")
    await ws.settle()
    [timer] = [t for t in await ws.store.timers.every() if t.kind == "schedule"]
    cancel = Delivery(body=urlencode(command(ws, f"schedules cancel {timer.id}", "t-cancel")),
                      content_type="application/x-www-form-urlencoded", received_at=time.time())
    outbox, said = ws.service.outbox, ws.service.outbox.say

    async def dies(*args: Any, **kw: Any) -> None:  # the process is killed as it was to say it
        raise _Killed

    outbox.say = dies  # type: ignore[method-assign]
    with contextlib.suppress(_Killed, Exception):  # however the reader takes its listener's death
        await read(cancel, "1700000000000-2")
        await ws.settle()
    outbox.say = said  # type: ignore[method-assign]
    assert await ws.store.timers.get(timer.id) is None  # cancelled, its line never said
    for _ in range(2):  # another worker reads the unacknowledged request again (twice: said once)
        await read(cancel, "1700000000000-2")
        await ws.settle()
    lines = [all_text(m) for m in roots(ws) if "cancelled the scheduled check" in all_text(m)]
    assert len(lines) == 1, lines
    told = ws.slack.ephemeral_texts("UREQ")
    assert not any("There is no scheduled check" in t for t in told) and "cancelled already, by <@UREQ>" in told[-1]


async def test_a_summary_asked_once_and_read_twice_shares_one_file(ws: Workspace) -> None:
    """A workspace without canvases: "@OpsPilot summarize" read a second time (its worker died after the file was
    shared, before acknowledging the stored event) made a second model call and shared a second file."""
    import json

    from bot.demo.sender import mention
    from tests.slack_harness import restarted

    await restarted(ws)
    ws.slack.canvases_refused = "canvas_disabled_user_team"  # a free plan: summaries are files
    read = _reader(lambda: ws.service.bolt)
    event = mention(CHANNEL, "UOTHER", "summarize", "100.5", thread_ts="100.1")
    envelope = {"token": "legacy", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
                "event_id": "EvSUMMARY", "event_time": int(time.time()),
                "event": {"event_ts": event.get("ts"), **event},
                "authorizations": [{"team_id": "T0001", "user_id": "UBOT", "is_bot": True}]}
    item = Delivery(body=json.dumps(envelope), content_type="application/json", received_at=time.time())
    for _ in range(2):  # the first reading's worker died before acknowledging it: another reads it again
        await read(item, "1700000000000-7")
        await ws.settle()
    assert len([m for m in ws.slack.thread(CHANNEL, "100.1") if m.get("files")]) == 1


@pytest.mark.parametrize("kind", ["limited", "error"])
async def test_one_429_or_5xx_on_the_thread_s_first_post_does_not_drop_the_question(ws: Workspace,
                                                                                    kind: str) -> None:
    """The first post was tried once: one 429 (Retry-After: 1) or one 5xx mid-incident and the question was
    dropped ("send the command again"), nothing ran. Tried again — a post that may have landed only once it was
    looked for — it starts one thread and one run."""
    ws.slack.fault(kind, "chat.postMessage", times=1, status=503)
    await ws.sender.command(command(ws, "payments recent errors", f"again-{kind}"))
    await ws.settle()
    assert (await ws.store.stats(3600)).runs == 1
    assert len([m for m in roots(ws) if "asked" in all_text(m)]) == 1, [all_text(m) for m in roots(ws)]
    assert not ws.slack.responses  # nobody was told to send it again


@pytest.mark.parametrize("kind", ["error", "reset", "text"])
async def test_a_reply_only_a_response_url_can_carry_survives_one_failure(ws: Workspace, kind: str) -> None:
    """`/opspilot` where OpsPilot is not in the channel: its only word goes through the command's response_url,
    tried once — one 5xx or dropped connection and the person was never told."""
    ws.slack.absent.add("C0NOTIN")
    ws.slack.fault(kind, "response_url", times=1, status=503)
    await ws.sender.command({**command(ws, "payments errors", f"url-{kind}"), "channel_id": "C0NOTIN"})
    await ws.settle()
    told = [str(r.get("text")) for r in ws.slack.responses]
    assert len(told) == 1 and "not in this channel" in told[0], told


@pytest.mark.parametrize("look", ["error", "refuse"])
async def test_a_post_whose_answer_was_lost_is_not_posted_again_when_it_cannot_be_looked_for(ws: Workspace,
                                                                                             look: str) -> None:
    """Slack posted the question and lost the answer, then the look for it failed (history down, or no scope to
    read it): "not known" was taken for "not there" and the question was posted a second time."""
    ws.slack.fault("lost", "chat.postMessage", times=1)
    if look == "error":
        ws.slack.fault("error", "conversations.history", times=9, status=503)
    else:
        ws.slack.fault("refuse", "conversations.history", error="missing_scope")
    await ws.sender.command(command(ws, "payments recent errors", f"look-{look}"))
    await ws.settle()
    assert len([m for m in roots(ws) if "asked" in all_text(m)]) == 1
