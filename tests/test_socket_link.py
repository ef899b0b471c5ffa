"""`opspilot serve` in Socket Mode, as an operator sees it: Slack out of reach is one line per try with a growing
wait (slack-sdk alone printed a traceback every few seconds) and /readyz says why; a wrong app token is one line
and exit 1; once Slack answers it connects and says so; no model key is said in the banner."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

import aiohttp

from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from tests.conftest import free_port
from tests.slack_harness import CHANNEL
from tests.test_slack import QUESTION
from tests.test_slack_modes import _eventually, _ready, _serve_env


async def _start(env: dict[str, str], cwd: Path) -> tuple[asyncio.subprocess.Process, Path]:
    err = cwd / "serve.err"
    with err.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", "--workers", "0",
                                                    env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=sink)
    return proc, err


async def _readyz(port: int) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/readyz") as r:
        return r.status, await r.text()


async def test_slack_out_of_reach_is_one_line_per_try_with_a_growing_wait(
        redis_url: str, prefix: str, slack: FakeSlack, tmp_path: Path) -> None:
    port, nowhere = free_port(), free_port()  # nothing listens on `nowhere`
    env = _serve_env(slack, redis_url, prefix, port) | {"SLACK_APP_TOKEN": slack.app_token,
                                                        "SLACK_API_URL": f"http://127.0.0.1:{nowhere}/api/"}
    proc, err = await _start(env, tmp_path)
    try:
        assert proc.stdout is not None
        banner = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
        assert "Socket Mode" in banner and "scripted demo model" in banner
        assert "No model key" in (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        tries = lambda: re.findall(r"cannot reach Slack at .*; trying again in (\d+)s", err.read_text())  # noqa: E731
        await _eventually(lambda: len(tries()) >= 3, 120, shows=lambda: err.read_text()[-2000:])
        assert [int(w) for w in tries()[:3]] == [1, 2, 4]  # waits grow
        status, reason = await _readyz(port)
        assert status == 503 and "not connected to Slack" in reason
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 60)
    text = err.read_text()
    assert code == 0
    assert "Traceback" not in text, text[:3000]
    assert all("Socket Mode" in line for line in text.splitlines() if line.strip()), text[:3000]


async def test_a_refused_app_token_is_one_line_and_exit_1(redis_url: str, prefix: str, slack: FakeSlack,
                                                          tmp_path: Path) -> None:
    env = _serve_env(slack, redis_url, prefix, free_port()) | {"SLACK_APP_TOKEN": "xapp-1-not-this-one"}
    proc, err = await _start(env, tmp_path)
    code = await asyncio.wait_for(proc.wait(), 120)
    text = err.read_text()
    assert code == 1
    assert "Slack refused SLACK_APP_TOKEN (invalid_auth)" in text and "connections:write" in text
    assert "Traceback" not in text, text[:3000]


async def test_it_connects_says_so_and_answers(redis_url: str, prefix: str, slack: FakeSlack,
                                               tmp_path: Path) -> None:
    port = free_port()
    env = _serve_env(slack, redis_url, prefix, port) | {"SLACK_APP_TOKEN": slack.app_token}
    proc, err = await _start(env, tmp_path)
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 120)).decode() for _ in range(3)]
        assert lines[2].strip() == "Connected to Slack (Socket Mode).", lines
        await _ready(f"http://127.0.0.1:{port}")
        await _eventually(lambda: bool(slack.sockets), 30)
        await slack.push("env-1", {"type": "event_callback", "event_id": "EvSock1", "team_id": "T0001",
                                   "event": mention(CHANNEL, "UREQ", QUESTION, "7100.1")})
        await _eventually(lambda: any("docs/payments-db-timeouts.md" in all_text(m)
                                      for m in slack.thread(CHANNEL, "7100.1") if m.get("bot")), 120)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
    assert "Traceback" not in err.read_text()
