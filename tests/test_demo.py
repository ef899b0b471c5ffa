"""`opspilot demo` without a browser: the page's backend signs what people do and the bot answers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.config import Settings
from bot.demo.server import CHANNEL, Demo
from bot.demo.workspace import all_text, buttons
from tests.conftest import free_port, until
from tests.test_cli import run_cli


async def test_the_demo_runs_without_redis_and_says_so() -> None:
    demo = Demo(Settings(redis_url="redis://127.0.0.1:9/0"), free_port())
    server = await demo.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{server.url}/demo/state") as r:
                state = await r.json()
            assert "NOT durable" in state["store"] and state["scripted"] is True
            async with http.get(server.url) as r:
                assert r.status == 200 and "OpsPilot demo" in await r.text()
            async with http.post(f"{server.url}/demo/say", json={"user": "U0ALICE",
                                                                  "text": "@OpsPilot orders errors in staging"}) as r:
                root = (await r.json())["ts"]
            await until(lambda: any("NullPointerException" in all_text(m) for m in demo.slack.thread(CHANNEL, root)))
            async with http.post(f"{server.url}/demo/say", json={"user": "U0MALLORY",
                                                                  "text": "@OpsPilot restart everything"}) as r:
                assert r.status == 200
            await until(lambda: bool(demo.slack.ephemeral_texts("U0MALLORY")))
            assert "not on the list" in demo.slack.ephemeral_texts("U0MALLORY")[0]
            async with http.post(f"{server.url}/demo/say", json={"user": "U0NOBODY", "text": "hi"}) as r:
                assert r.status == 400
            # App Home's button (a follow-up's Cancel) reaches the bot as Slack sends it: from a view, no channel.
            async with http.post(f"{server.url}/demo/click", json={
                    "user": "U0ALICE", "message_ts": "home", "action_id": "opspilot_timer_cancel:s1.gone",
                    "value": "s1.gone"}) as r:
                assert r.status == 200 and (await r.json())["ok"] is True
    finally:
        await demo.close()
        await server.stop()


async def test_the_pages_endpoints_refuse_malformed_requests_with_400(caplog: pytest.LogCaptureFixture) -> None:
    """What the page's backend is sent but cannot use: 400 and a short reason, nothing posted, no traceback."""
    demo = Demo(Settings(redis_url="redis://127.0.0.1:9/0"), free_port())
    server = await demo.start()
    try:
        async with aiohttp.ClientSession() as http:
            async def refused(path: str, **body: Any) -> str:
                async with http.post(f"{server.url}/demo/{path}", **body) as r:
                    answer = await r.json()
                    assert r.status == 400 and answer["ok"] is False, (path, body, answer)
                    return str(answer["error"])

            for path in ("say", "click", "submit", "home", "alert"):
                assert await refused(path, data=b"{not json") == "the body is not JSON"
                assert await refused(path, data=b"\xff\xfe", headers={"Content-Type": "application/json"}) \
                    == "the body is not JSON"
                assert await refused(path, json=["U0ALICE"]) == "the body is not a JSON object"
                if path != "alert":  # the one that reads no user
                    assert await refused(path, json={"user": ["U0ALICE"]}) == "user must be a string"
            assert await refused("say", json={"user": "U0ALICE", "text": None}) == "choose a user and write something"
            assert await refused("say", json={"user": "U0ALICE", "text": 42}) == "text must be a string"
            assert await refused("click", json={"user": "U0ALICE", "message_ts": "1.1", "values": []}) \
                == "values must be an object"
            assert await refused("alert", json={"status": {"resolved": True}}) == "status must be a string"
        assert demo.slack.messages == {}
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    finally:
        await demo.close()
        await server.stop()


async def test_report_reads_a_demo_thread_with_demo(redis_url: str, prefix: str, tmp_path: Path) -> None:
    demo = Demo(Settings(redis_url=redis_url, key_prefix=prefix), free_port())
    server = await demo.start()
    try:
        asked = {"user": "U0ALICE", "text": "@OpsPilot 看看支付服务最近报错"}
        async with aiohttp.ClientSession() as http, http.post(f"{server.url}/demo/say", json=asked) as r:
            root = (await r.json())["ts"]
        await until(lambda: any(b.get("action_id") == "opspilot_feedback_up" for m in demo.slack.thread(CHANNEL, root)
                                for b in buttons(m)))  # the answer is in: the run's record is written
    finally:
        await demo.close()
        await server.stop()
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
    args = ["report", "--thread", f"{CHANNEL}:{root}", "--no-model"]
    code, out, err = await run_cli(args, "", env, tmp_path)
    assert code == 1 and "OpsPilot holds no records of this thread" in out  # not where the demo keeps them
    assert "add --demo" in err
    code, _, err = await run_cli(["report", "--thread", f"{CHANNEL}:1.1", "--no-model", "--demo"], "", env, tmp_path)
    assert code == 1 and "no records of" in err and "add --demo" not in err  # it looked there already
    code, out, err = await run_cli([*args, "--demo"], "", env, tmp_path)
    assert code == 0, err
    assert out.startswith("# 事件总结：") and "看看支付服务最近报错" in out and "## 时间线" in out


async def test_a_demo_started_again_investigates_the_alert_afresh(redis_url: str, prefix: str) -> None:
    """The page's messages live in its process, the bot's records in Redis: started again within the hour, the
    demo alert was only "Fired again … in this thread", a thread this page never had."""
    from redis.asyncio import Redis

    from bot.demo.server import ALERTS, demo_prefix
    from state.keys import Keys

    redis, keys = Redis.from_url(redis_url), Keys(demo_prefix(prefix))
    for attempt in range(2):
        demo = Demo(Settings(redis_url=redis_url, key_prefix=prefix), free_port())
        server = await demo.start()
        try:
            if attempt:  # the earlier run's quick lane (a Stop it never read) and dead letters are gone too
                assert not await redis.exists(keys.queue("quick"), keys.dead_letters())
            async with aiohttp.ClientSession() as http, \
                    http.post(f"{server.url}/demo/alert", json={"status": "firing"}) as answer:
                assert (await answer.json())["ok"]
            await until(lambda d=demo: any("Payment Service" in all_text(m) or "Fired again" in all_text(m)
                                           for m in d.slack.messages.values() if m["channel"] == ALERTS), 60)
            said = [all_text(m) for m in demo.slack.messages.values() if m["channel"] == ALERTS]
            assert not any("Fired again" in text for text in said), said
        finally:
            await demo.close()
            await server.stop()
        await redis.xadd(keys.queue("quick"), {"item": "{}"})
        await redis.xadd(keys.dead_letters(), {"item": "{}"})
    await redis.aclose()


async def test_a_second_demo_refused_its_port_leaves_the_first_one_s_records(redis_url: str, prefix: str) -> None:
    """Started again by mistake on the port the first holds: refused, after it had cleared the first one's runs."""
    from bot.slack.serve import PortTaken
    from state import connect

    first = Demo(Settings(redis_url=redis_url, key_prefix=prefix), free_port())
    server = await first.start()
    client = connect(redis_url)
    try:
        asked = {"user": "U0ALICE", "text": "@OpsPilot 看看支付服务最近报错"}
        async with aiohttp.ClientSession() as http, http.post(f"{server.url}/demo/say", json=asked) as r:
            root = (await r.json())["ts"]
        await until(lambda: len(first.slack.thread(CHANNEL, root)) > 1, 60)
        kept = [key async for key in client.scan_iter(match=f"{prefix}-demo:*")]
        assert kept
        with pytest.raises(PortTaken):
            await Demo(Settings(redis_url=redis_url, key_prefix=prefix), first.port).start()
        assert [key async for key in client.scan_iter(match=f"{prefix}-demo:*")], "the first demo's records are gone"
    finally:
        await client.aclose()
        await first.close()
        await server.stop()

