"""Nothing acknowledged is lost: a front stores a request before it answers 200, and answers 503 when it cannot
store it in time (Slack delivers an event again). Redis frozen, then the front killed: what was acknowledged
is answered after recovery, and what was not is answered once Slack redelivers it."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from bot.demo.sender import SlackSender, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from tests.conftest import OwnRedis, free_port
from tests.slack_harness import CHANNEL, QUESTION, SECRET
from tests.test_lifecycle import ANSWER, _alive, _serve
from tests.test_slack_modes import _children, _eventually, _serve_env


def answered(slack: FakeSlack, thread: str) -> int:
    return sum(1 for m in slack.thread(CHANNEL, thread) if m.get("bot") and ANSWER in all_text(m))


async def test_redis_frozen_then_the_front_killed_loses_nothing_acknowledged(
        own_redis: OwnRedis, prefix: str, slack: FakeSlack, tmp_path: Path) -> None:
    port = free_port()
    env = _serve_env(slack, own_redis.url, prefix, port)
    first = await _serve(env, tmp_path, tmp_path / "serve.log")
    workers = _children(first.pid)
    sender = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    second = None
    try:
        status, _ = await sender.event(mention(CHANNEL, "UREQ", QUESTION, "5000.1"), event_id="EvACK0")
        assert status == 200  # stored, then acknowledged
        assert own_redis.proc is not None
        os.kill(own_redis.proc.pid, signal.SIGSTOP)  # Redis hangs: nothing can be stored
        frozen = [mention(CHANNEL, "UREQ", QUESTION, f"500{n}.1") for n in (1, 2, 3)]
        statuses = await asyncio.gather(*(sender.event(e, event_id=f"EvACK{n}") for n, e in enumerate(frozen, 1)))
        assert [s for s, _ in statuses] == [503, 503, 503]  # not acknowledged: Slack keeps them
        os.kill(first.pid, signal.SIGKILL)  # …and the front dies
        await _eventually(lambda: not any(_alive(pid) for pid in workers), 10)
        os.kill(own_redis.proc.pid, signal.SIGCONT)

        second = await _serve(env, tmp_path, tmp_path / "serve.log")
        for n, event in enumerate(frozen, 1):  # Slack's redelivery of what was not acknowledged
            status, _ = await sender.event(event, event_id=f"EvACK{n}", retry_num=1)
            assert status == 200
        threads = ["5000.1", "5001.1", "5002.1", "5003.1"]
        await _eventually(lambda: all(answered(slack, t) >= 1 for t in threads), 90,
                          shows=lambda: {t: answered(slack, t) for t in threads})
        await asyncio.sleep(0)  # (one more look below: exactly once each)
        assert {t: answered(slack, t) for t in threads} == dict.fromkeys(threads, 1)
    finally:
        if own_redis.proc is not None:
            os.kill(own_redis.proc.pid, signal.SIGCONT)
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                children = _children(proc.pid)
                proc.kill()
                for pid in filter(_alive, children):
                    os.kill(pid, signal.SIGKILL)
            if proc is not None:
                await asyncio.wait_for(proc.wait(), 30)  # reaped on this loop: its transport closes here, not at exit
