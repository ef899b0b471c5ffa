"""A hostile workspace member and a careless log line, through the real HTTP endpoint: signed and unsigned requests
against the real app, a fake Slack Web API that records every call, a scripted model that keeps every request,
a real Redis. Each test covers one item of the security model (docs/security.md)."""

from __future__ import annotations

import html
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import block_action, mention, signature
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.inbound import gate
from core.messages import Message
from tests.conftest import until
from tests.redaction_corpus import SECRETS
from tests.slack_harness import CHANNEL, SECRET, Workspace, ask_restart, open_workspace
from tools import ToolContext, tool

HOSTILE = ["<!channel>", "<!here>", "<!everyone>", "<!subteam^S0SRE|@sre>", "<@U0ALICE>",
           "<https://evil.example/login|click to re-auth>"]
LIVE = ["<!channel", "<!here", "<!everyone", "<!subteam", "<@U0ALICE", "<https://evil"]


class Grep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pattern: str


def _needle(secret: str) -> str:
    return secret.split("\n")[1] if "\n" in secret else secret  # a private key: its body


def _sent_to_slack(slack: FakeSlack) -> str:
    """Everything the app sent to Slack, as Slack would show it (entities decoded)."""
    return html.unescape("\n".join(json.dumps(body, ensure_ascii=False) for _, body in slack.calls))


def _sent_to_model(model: ScriptedModel) -> str:
    return "\n".join(m.model_dump_json() for r in model.requests for m in r.messages)


async def _stored(redis_url: str, prefix: str) -> str:
    """Every value under the app's prefix, whatever its type."""
    client = aioredis.from_url(redis_url, decode_responses=True)
    out: list[str] = []
    try:
        async for key in client.scan_iter(f"{prefix}:*"):
            kind = await client.type(key)
            if kind == "string":
                out.append(str(await client.get(key)))
            elif kind == "hash":
                out.append(json.dumps(await client.hgetall(key), ensure_ascii=False))
            elif kind == "list":
                out.extend(await client.lrange(key, 0, -1))
            elif kind == "set":
                out.extend(await client.smembers(key))
            elif kind == "zset":
                out.extend(await client.zrange(key, 0, -1))
            elif kind == "stream":
                out.extend(json.dumps(fields, ensure_ascii=False) for _, fields in await client.xrange(key))
    finally:
        await client.aclose()
    assert out, "nothing stored: the test would prove nothing"
    return "\n".join(out)


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_workspace(redis_url, prefix, slack)
    yield workspace
    await workspace.stop()


# 1. Secrets: in the question, in log lines and a runbook a tool returns, in the model's arguments and answer.

async def test_no_secret_reaches_slack_the_model_or_redis(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    lines = [line.format(s=secret) for line, secret in SECRETS]
    runbook = "# Rotating credentials\n" + "\n".join(f"- e.g. `{line}`" for line in lines[::3])

    @tool(description="Reads log lines matching a pattern.")
    async def read_logs(args: Grep, ctx: ToolContext) -> dict[str, Any]:
        return {"lines": lines, "runbook": runbook}

    model = ScriptedModel([
        reply(f"Looking for {lines[0]}", call("read_logs", "r1", pattern=lines[5])),
        reply("Found these:\n" + "\n".join(lines)),
    ])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[read_logs])
    try:
        question = f"why does this fail? {lines[1]} and {lines[10]}"
        await ws.sender.event(mention(CHANNEL, "UREQ", question, "100.1"))
        await ws.settle()
        assert len(model.requests) == 2 and "Found these" in all_text(slack.thread(CHANNEL, "100.1")[-1])

        places = {"slack": _sent_to_slack(slack), "model": _sent_to_model(model),
                  "redis": await _stored(redis_url, prefix)}
        leaks = {where: [_needle(s) for _, s in SECRETS if _needle(s) in text] for where, text in places.items()}
        assert leaks == {"slack": [], "model": [], "redis": []}
        # Redacted, not dropped: the lines are still there to read.
        assert places["model"].count("[REDACTED") >= len(SECRETS) and "[REDACTED" in places["slack"]
    finally:
        await ws.stop()


# 2. Neutral text: what we did not write cannot mention anyone or disguise a link.

async def test_mentions_and_disguised_links_are_shown_not_acted_on(redis_url: str, prefix: str,
                                                                    slack: FakeSlack) -> None:
    hostile = " ".join(HOSTILE)

    @tool(description="Reads log lines matching a pattern.")
    async def read_logs(args: Grep, ctx: ToolContext) -> dict[str, Any]:
        # Busy until the progress message shows this call with its (hostile) arguments.
        await until(lambda: any("read_logs" in _texts(b) and "evil" in _texts(b) for b in slack.called("chat.update")))
        return {"lines": [f"ERROR {hostile}"]}

    model = ScriptedModel(lambda messages, tools: _echo_model(messages, hostile))
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[read_logs])
    try:
        status, _ = await ws.sender.command({"command": "/opspilot", "text": f"look at {hostile}", "user_id": "UREQ",
                                             "channel_id": CHANNEL, "team_id": "T0001", "trigger_id": "9.1",
                                             "response_url": "https://hooks.slack.test/c"})
        assert status == 200
        await ws.settle()
        texts = [_texts(body) for method, body in slack.calls if method.startswith("chat.")]
        sent = "\n".join(texts)
        assert "asked: look at" in sent and "`read_logs`" in sent and "The log says" in sent
        assert [token for token in LIVE if token in sent] == []
        # Shown as written, with the link's real target visible.
        assert "&lt;!channel&gt;" in sent and "https://evil.example/login|click to re-auth" in sent
        assert "<@UREQ>" in sent  # the mention the bot composes itself stays live
    finally:
        await ws.stop()


def _echo_model(messages: Any, hostile: str) -> Any:
    """First read the logs with a hostile pattern, then answer by repeating what they said."""
    if not any(getattr(m, "role", "") == "tool" for m in messages):
        return reply("", call("read_logs", "r1", pattern=hostile))
    return reply(f"The log says: {hostile}")


def _texts(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(_texts(v) if k != "text" or not isinstance(v, str) else v for k, v in value.items())
    if isinstance(value, list):
        return " ".join(_texts(v) for v in value)
    return ""


# 3. Binding: a token acts only on the card it was issued for.

async def test_a_token_lifted_from_one_card_does_nothing_elsewhere(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack, mutating_channels=["C0CHANGES"])
    try:
        card = await ask_restart(ws)  # in C0OPS, where changes are not allowed
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
        elsewhere = {**card, "ts": "555.5", "thread_ts": "555.1"}
        for channel, message in (("C0CHANGES", card), ("C0CHANGES", elsewhere), (CHANNEL, elsewhere)):
            await ws.sender.action(block_action(user="UAPPROVER", channel=channel, message=message,
                                                action_id="opspilot_confirm", value=token))
        await ws.settle()
        assert ws.toolbox.restarts.done == []
        refused = ws.slack.ephemeral_texts("UAPPROVER")
        assert len([t for t in refused if "does not belong to this message" in t]) == 3

        # On its own card the click is judged by the card's channel, where changes are not allowed.
        await ws.sender.action(block_action(user="UAPPROVER", channel=CHANNEL, message=card,
                                            action_id="opspilot_confirm", value=token))
        await ws.settle()
        assert ws.toolbox.restarts.done == []
        assert any("can only be confirmed in <#C0CHANGES>" in t for t in ws.slack.ephemeral_texts("UAPPROVER")[3:])
        assert buttons(ws.slack.messages[(CHANNEL, card["ts"])])  # the card still asks
    finally:
        await ws.stop()


# 4. Only the installed workspace: events, commands and clicks from another team or organisation are ignored.

async def test_another_workspace_is_ignored(ws: Workspace, caplog: pytest.LogCaptureFixture) -> None:
    card = await ask_restart(ws)
    calls_before, runs_before = len(ws.slack.calls), (await ws.store.stats(3600)).runs
    token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")

    for team, enterprise in (("T0EVIL", None), ("T0001", "E0EVIL")):
        envelope = {"token": "x", "team_id": team, "enterprise_id": enterprise, "api_app_id": "A0001",
                    "type": "event_callback", "event_id": f"Ev{team}{enterprise}", "event_time": int(time.time()),
                    "event": {"type": "app_mention", "channel": CHANNEL, "user": "UREQ", "ts": "900.1",
                              "text": "<@UBOT> payments errors", "event_ts": "900.1"}}
        assert (await ws.sender.post(json.dumps(envelope), "application/json"))[0] == 200
        assert (await ws.sender.command({"command": "/opspilot", "text": "payments errors", "user_id": "UREQ",
                                         "channel_id": CHANNEL, "team_id": team, "enterprise_id": enterprise or "",
                                         "trigger_id": f"7.{team}"}))[0] == 200
        click = block_action(user="UAPPROVER", channel=CHANNEL, message=card, action_id="opspilot_confirm",
                             value=token)
        click["team"] = {"id": team}
        if enterprise:
            click["enterprise"] = {"id": enterprise}
        assert (await ws.sender.action(click))[0] == 200
    await ws.settle()

    assert ws.toolbox.restarts.done == [] and len(ws.slack.calls) == calls_before
    assert (await ws.store.stats(3600)).runs == runs_before
    assert len([r for r in caplog.records if "ignored" in r.getMessage() and "T0EVIL" in r.getMessage()]) == 3
    assert len([r for r in caplog.records if "ignored" in r.getMessage() and "E0EVIL" in r.getMessage()]) == 3


# 5. Replays: the same signed slash command twice is one run.

async def test_a_replayed_slash_command_runs_once(ws: Workspace) -> None:
    fields = {"command": "/opspilot", "text": "payments errors", "user_id": "UREQ", "channel_id": CHANNEL,
              "team_id": "T0001", "trigger_id": "13.37", "response_url": "https://hooks.slack.test/c"}
    now = time.time()
    first = await ws.sender.command(fields, timestamp=now)
    await ws.settle()
    second = await ws.sender.command(fields, timestamp=now)  # byte for byte the same request, later
    await ws.settle()
    assert first[0] == second[0] == 200
    asked = [b for b in ws.slack.called("chat.postMessage") if "asked:" in str(b.get("text"))]
    assert len(asked) == 1 and (await ws.store.stats(3600)).runs == 1


async def test_a_slash_command_that_says_payload_is_not_lost(ws: Workspace) -> None:
    """Bolt reads any form mentioning "payload" as an interactive payload (and finds none): the question must
    still arrive, word for word."""
    fields = {"command": "/opspilot", "text": "why is the payload API slow? payload=1", "user_id": "UREQ",
              "channel_id": CHANNEL, "team_id": "T0001", "trigger_id": "14.1", "response_url": "https://h.test/c"}
    status, _ = await ws.sender.command(fields)
    await ws.settle()
    asked = [str(b.get("text")) for b in ws.slack.called("chat.postMessage") if "asked:" in str(b.get("text"))]
    assert status == 200 and asked == ["<@UREQ> asked: why is the payload API slow? payload=1"]


# 6. Parsing: the signature is checked on the raw bytes first; nothing malformed gets past, nothing crashes.

async def _raw(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=headers) as response:
        return response.status, await response.text()


def _signed(body: bytes, *, timestamp: str | None = None) -> dict[str, str]:
    ts = timestamp or str(int(time.time()))
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature(SECRET, ts, body.decode())}


@pytest.mark.parametrize(("body", "content_type", "headers", "status"), [
    (b'{"type": "event_callback", "event": ', "application/json", {}, 401),
    (b"payload=%7B%22type", "application/x-www-form-urlencoded", {}, 401),
    (b"\xff\xfe\x00garbage", "application/json", {}, 401),
    (b'{"type":"url_verification","challenge":"x"}', "application/json",
     {"X-Slack-Request-Timestamp": "abc", "X-Slack-Signature": "v0=00"}, 401),
    (b'{"type":"url_verification","challenge":"x"}', "application/json",
     {"X-Slack-Request-Timestamp": str(int(time.time()) - 3600), "X-Slack-Signature": "v0=00"}, 401),
    (b'{"type": "event_callback", "event": ', "application/json", "signed", 400),
    (b"payload=%7B%22type", "application/x-www-form-urlencoded", "signed", 400),
    (b'["not", "an", "object"]', "application/json", "signed", 400),
    (b"payload=%5B1%2C2%5D", "application/x-www-form-urlencoded", "signed", 400),
    (b"a=1&&&=b", "application/x-www-form-urlencoded", "signed", 400),
    (b'{"type":"url_verification","challenge":"x"}', "application/json", "stale", 401),
])
async def test_malformed_or_unsigned_requests_are_refused_without_a_trace(
        ws: Workspace, caplog: pytest.LogCaptureFixture, body: bytes, content_type: str,
        headers: dict[str, str] | str, status: int) -> None:
    if headers == "signed":
        headers = _signed(body)
    elif headers == "stale":
        headers = _signed(body, timestamp=str(int(time.time()) - 3600))
    assert isinstance(headers, dict)
    caplog.set_level(logging.INFO)
    got, text = await _raw(ws.sender.url, body, {"Content-Type": content_type, **headers})
    await ws.settle()
    assert got == status and "Traceback" not in text and len(text) < 200
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert ws.slack.calls == [] and (await ws.store.stats(3600)).runs == 0


@pytest.mark.parametrize("age_s", [301, 3600, -301])
def test_the_gate_itself_refuses_a_stale_but_correctly_signed_body(age_s: int) -> None:
    """Bolt's own check would hide a gate that skipped the 5-minute window at the endpoint: the gate is asked
    directly. A stale body is refused before it is parsed (401, not 400 for the malformed one)."""
    for body in (b'{"type": "url_verification", "challenge": "c"}', b"[1, 2"):
        ts = str(int(time.time()) - age_s)
        headers = {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature(SECRET, ts, body.decode())}
        assert gate.refusal(SECRET, body, headers, "application/json") == (401, "invalid or missing signature")
    fresh = str(int(time.time()) - 10)
    body = b'{"type": "url_verification", "challenge": "c"}'
    headers = {"X-Slack-Request-Timestamp": fresh, "X-Slack-Signature": signature(SECRET, fresh, body.decode())}
    assert gate.refusal(SECRET, body, headers, "application/json") is None


async def test_an_oversized_body_is_refused(ws: Workspace) -> None:
    body = b'{"type": "event_callback", "pad": "' + b"x" * 2_000_000 + b'"}'
    status, _ = await _raw(ws.sender.url, body, {"Content-Type": "application/json", **_signed(body)})
    assert status == 413 and ws.slack.calls == []


async def test_a_well_formed_signed_request_still_gets_through(ws: Workspace) -> None:
    body = json.dumps({"type": "url_verification", "challenge": "c-123"}).encode()
    status, text = await _raw(ws.sender.url, body, {"Content-Type": "application/json", **_signed(body)})
    assert status == 200 and "c-123" in text


# 7. No internals in Slack: what failed and what to do, with a reference id; the details in the log only.

async def test_an_internal_failure_shows_a_reference_not_its_details(redis_url: str, prefix: str, slack: FakeSlack,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    def broken(messages: list[Message], tools: Any) -> Any:
        raise RuntimeError("Error 111 connecting to 10.9.8.7:6379. Connection refused.")

    ws = await open_workspace(redis_url, prefix, slack, model=ScriptedModel(broken))
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors", "300.1"))
        await ws.settle()
        sent = _sent_to_slack(slack)
        answer = all_text(slack.thread(CHANNEL, "300.1")[-1])
        assert "internal error" in answer and "ref " in answer
        ref = answer.split("ref ")[1].lstrip("`")[:8]  # (a code span: the operator copies it whole)
        for detail in ("10.9.8.7", "6379", "Error 111", "RuntimeError", "Traceback"):
            assert detail not in sent, detail
        logged = "\n".join(r.getMessage() + (logging.Formatter().formatException(r.exc_info) if r.exc_info else "")
                           for r in caplog.records)
        assert ref in logged and "10.9.8.7:6379" in logged  # the operator can find it
    finally:
        await ws.stop()
