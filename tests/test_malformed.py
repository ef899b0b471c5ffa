"""Correctly signed bodies of the wrong shape, through the real HTTP endpoint (security model, "Verified before
anything reads the request"): each is refused with 400 and one warning line before Bolt or a listener indexes into
it — never a 500, a traceback, a call to Slack or a run. Well-formed bodies, odd but Slack's, still get through."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import pytest
from multidict import CIMultiDict

from bot.demo.sender import block_action, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.slack.inbound import gate
from tests.conftest import until
from tests.slack_harness import CHANNEL, SECRET, Workspace, open_workspace
from tests.test_hostile import _raw, _signed

JSON, FORM = "application/json", "application/x-www-form-urlencoded"


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_workspace(redis_url, prefix, slack)
    yield workspace
    await workspace.stop()


def _events(event: Any, **top: Any) -> tuple[bytes, str]:
    body = {"token": "legacy", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
            "event_id": f"Ev{time.time_ns()}", "event_time": int(time.time()), "event": event,
            "authorizations": [{"team_id": "T0001", "user_id": "UBOT", "is_bot": True}], **top}
    return json.dumps(body).encode(), JSON


def _mention(**fields: Any) -> dict[str, Any]:
    return mention(CHANNEL, "UREQ", "payments errors", "400.1") | fields


def _form(payload: Any) -> tuple[bytes, str]:
    return urlencode({"payload": json.dumps(payload)}).encode(), FORM


def _click(**fields: Any) -> dict[str, Any]:
    return block_action(user="UREQ", channel=CHANNEL, message={"ts": "400.1", "thread_ts": "400.1"},
                        action_id="opspilot_stop", value="r1") | fields


def _nested(depth: int) -> bytes:
    return b'{"type": "event_callback", "event": {"type": "pin_added", "x": ' + b"[" * depth + b"]" * depth + b"}}"


_SHORTCUT = {"type": "message_action", "team": {"id": "T0001"}, "user": {"id": "UREQ"}, "trigger_id": "4.1",
             "callback_id": "opspilot_investigate_message", "channel": {"id": CHANNEL}, "message": {"ts": "1.0"}}
_VIEW = {"type": "view_submission", "team": {"id": "T0001"}, "user": {"id": "UREQ"}, "trigger_id": "4.2"}

MALFORMED: dict[str, tuple[bytes, str]] = {
    "event null": _events(None),
    "event a list": _events([1]),
    "event a string": _events("x"),
    "no event": (json.dumps({"type": "event_callback", "team_id": "T0001"}).encode(), JSON),
    "event type a number": _events(_mention(type=1)),
    "event channel a number": _events(_mention(channel=1)),
    "event user a list": _events(_mention(user=[1])),
    "event without ts": _events({k: v for k, v in _mention().items() if k != "ts"}),
    "thread_ts not a timestamp": _events(_mention(thread_ts="x")),
    "text an object": _events(_mention(text={"a": 1})),
    "files not objects": _events(_mention(files=[1])),
    "rich text not objects": _events(_mention(text="", blocks=[{"type": "rich_text", "elements": [1]}])),
    "attachments not objects": _events(_mention(attachments=["x"])),
    # An edit is read as the message it now is (an alert edited to say "resolved"): checked as one.
    "an edit's bot_profile a string": _events(_mention(subtype="message_changed", message={"ts": "1.0",
                                                                                         "bot_profile": "x"})),
    "an edit's attachments not objects": _events(_mention(subtype="message_changed", message={"ts": "1.0",
                                                                                            "attachments": [1]})),
    "an edit without ts": _events(_mention(subtype="message_changed", message={"text": "resolved"})),
    "an edit's ts not a timestamp": _events(_mention(subtype="message_changed", message={"ts": "abc"})),
    "a ts past any clock": _events(_mention(ts="9" * 30)),
    "a ts in other digits": _events(_mention(ts="١٧١٢٣٤٥٦٧٨.٠٠٠٢")),
    "home tab user a number": _events({"type": "app_home_opened", "user": 5, "tab": "home"}),
    "authorizations not objects": _events(_mention(), authorizations=[1]),
    "team a number": _events(_mention(), team=1),
    "enterprise a list": _events(_mention(), enterprise=[1]),
    "nested 100000 deep": (_nested(100_000), JSON),
    "nested past the cap": (_nested(gate.MAX_DEPTH), JSON),
    "actions null": _form(_click(actions=None)),
    "actions empty": _form(_click(actions=[])),
    "an action not an object": _form(_click(actions=[1])),
    "an action without action_id": _form(_click(actions=[{"value": "r1"}])),
    "action_id a number": _form(_click(actions=[{"action_id": 7, "value": "r1"}])),
    "container a string": _form(_click(container="x")),
    "message a string": _form(_click(message="x")),
    "user a bare id": _form(_click(user="UREQ")),
    "user without id": _form(_click(user={})),
    "state values not objects": _form(_click(state={"values": {"b": [1]}})),
    "view null in a click": _form(_click(view=None)),
    "view a string": _form(_VIEW | {"view": "x"}),
    "view without callback_id": _form(_VIEW | {"view": {"type": "modal"}}),
    "shortcut callback_id a number": _form(_SHORTCUT | {"callback_id": 3}),
    "shortcut message a list": _form(_SHORTCUT | {"message": [1]}),
    "shortcut message ts past any clock": _form(_SHORTCUT | {"message": {"ts": "9" * 30}}),
    "message shortcut channel null": _form(_SHORTCUT | {"channel": None}),  # it was read as channel "None"
    "message shortcut channel without id": _form(_SHORTCUT | {"channel": {}}),
    "legacy buttons without actions": _form({"type": "interactive_message", "callback_id": "c"}),
    "payload a string": _form("x"),
    "payload null": _form(None),
    "a second payload, malformed": (_form(_click())[0] + b"&" + _form(_click(actions=None))[0], FORM),
    "JSON sent as a form": (b'{"type": "event_callback", "event": null, "x": "=1"}', FORM),
    # Bolt reads the header as sent (a form, then); the worker reading the stored request, aiohttp's lower case.
    "a capitalised Content-Type": (b' {"x": "=", "type": "event_callback", "event": null}', "Application/JSON"),
    "command without channel": (urlencode({"command": "/opspilot", "text": "hi", "user_id": "UREQ",
                                           "team_id": "T0001", "trigger_id": "4.3"}).encode(), FORM),
    "an unknown charset": (_events(_mention())[0], "application/json; charset=bogus"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_a_signed_body_of_the_wrong_shape_is_refused_with_one_line(
        ws: Workspace, caplog: pytest.LogCaptureFixture, case: str) -> None:
    body, content_type = MALFORMED[case]
    caplog.set_level(logging.INFO)
    status, text = await _raw(ws.sender.url, body, {"Content-Type": content_type, **_signed(body)})
    await ws.settle()
    assert (status, text) == (400, "malformed body")
    warned = [r.getMessage() for r in caplog.records if r.name == gate.__name__]
    assert len(warned) == 1 and "\n" not in warned[0] and len(warned[0]) < 300
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert ws.slack.calls == [] and (await ws.store.stats(3600)).runs == 0


def test_the_gate_counts_nesting_outside_strings_and_takes_one_content_type() -> None:
    def asked(body: bytes, headers: Any = None) -> tuple[int, str] | None:
        return gate.refusal(SECRET, body, CIMultiDict(headers or {"Content-Type": JSON}, **_signed(body)), JSON)

    assert asked(_nested(gate.MAX_DEPTH - 2)) is None  # the envelope and the event are two levels
    assert asked(_nested(gate.MAX_DEPTH - 1)) == (400, "malformed body")
    quoted = json.dumps({"type": "event_callback", "event": _mention(text='[{"\\' * 500)}).encode()
    assert asked(quoted) is None
    body = _events(_mention())[0]
    assert asked(body, [("Content-Type", JSON), ("Content-Type", FORM)]) == (400, "malformed body")
    assert asked(body, {"Content-Type": "application/json; charset=UTF-8"}) is None


async def test_well_formed_bodies_still_get_through(ws: Workspace, caplog: pytest.LogCaptureFixture) -> None:
    """Slack's own odd shapes pass: a user object in user_change, a channel object in channel_created, brackets
    and quotes in a question, a bare team id."""
    caplog.set_level(logging.INFO)
    for event, top in [({"type": "user_change", "user": {"id": "UREQ", "name": "rita"}, "event_ts": "1.1"}, {}),
                       ({"type": "channel_created", "channel": {"id": "C0NEW", "name": "new"}}, {"team": "T0001"}),
                       (_mention(text='<@UBOT> why does [[["\\"]]] fail?'), {})]:
        status, _ = await ws.sender.post(_events(event, **top)[0].decode(), JSON)
        assert status == 200
    await until(lambda: len(ws.slack.called("chat.postMessage")) >= 1)
    await ws.settle()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert (await ws.store.stats(3600)).runs == 1


async def test_a_click_from_no_conversation_is_acknowledged_and_acts_on_nothing(ws: Workspace) -> None:
    """Slack sends a conversation with every button OpsPilot posts; one without is read as nothing, not as a
    channel named "None" that an ephemeral would be queued to."""
    click = _click(channel=None)
    click.pop("container", None)
    status, _ = await ws.sender.post(_form(click)[0].decode(), FORM)
    await ws.settle()
    assert status == 200
    assert [m for m, _ in ws.slack.calls if m != "auth.test"] == [] and ws.slack.ephemeral_texts() == []


async def test_half_an_emoji_is_answered_like_any_question(ws: Workspace, caplog: pytest.LogCaptureFixture) -> None:
    """A lone surrogate (JSON ``"\\ud83d"``, a client's cut emoji) is valid JSON: it could be neither stored nor
    sent, so the turn failed five times with a traceback each and the person was told to ask again — which failed
    the same way."""
    caplog.set_level(logging.INFO)
    event = mention(CHANNEL, "UREQ", "payments errors \ud83d in prod?", "500.1")
    status, _ = await ws.sender.event(event)
    assert status == 200
    await until(lambda: len(ws.slack.thread(CHANNEL, "500.1")) >= 1)
    await ws.settle()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    run = await ws.store.load_run(await ws.store.thread_run(f"slack:{CHANNEL}:500.1") or "")
    assert run is not None and run.status == "finished" and "\ufffd" in run.text
