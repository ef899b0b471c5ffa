"""Workers die with their front: after `kill -9` of `opspilot serve`, no worker lives on holding its ports, a
run they were doing is finished once by the next `serve`, and a port still taken is one line, not a crash loop."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

from bot.demo.sender import SlackSender, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from tests.conftest import free_port
from tests.slack_harness import CHANNEL, QUESTION, SECRET
from tests.test_slack_modes import _children, _eventually, _ready, _serve_env

ANSWER = "docs/payments-db-timeouts.md"


def _alive(pid: int) -> bool:
    """Running, not a zombie (an orphan's new parent may be slow to reap it, or never do)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def _serve(env: dict[str, str], cwd: Path, log: Path) -> asyncio.subprocess.Process:
    """`serve --workers 2`, ready: the front and both workers answer /readyz with 200."""
    with log.open("ab") as err:  # the workers outlive the front's pipes; a file never fills
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", "--workers", "2",
                                                    env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=err)
    assert proc.stdout is not None
    await asyncio.wait_for(proc.stdout.readline(), 60)
    port = int(env["PORT"])
    for each in (port, port + 1, port + 2):
        await _ready(f"http://127.0.0.1:{each}")
    return proc


async def test_kill_9_of_the_front_takes_its_workers_and_a_new_serve_gets_the_ports_and_the_run(
        redis_url: str, prefix: str, slack: FakeSlack, tmp_path: Path) -> None:
    port = free_port()
    env = _serve_env(slack, redis_url, prefix, port) | {"OPSPILOT_LLM__SCRIPTED_LATENCY_S": "1.0"}
    log = tmp_path / "serve.log"
    first = await _serve(env, tmp_path, log)
    workers = _children(first.pid)
    assert len(workers) == 2
    sender = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    await sender.event(mention(CHANNEL, "UREQ", QUESTION, "3300.1"))
    # A run is under way in a worker when the front is killed.
    await _eventually(lambda: any("step" in all_text(m) for m in slack.thread(CHANNEL, "3300.1")), 20)
    os.kill(first.pid, signal.SIGKILL)
    killed = time.monotonic()
    try:  # (not first.wait(): asyncio waits for its pipes too, which live workers would hold)
        await _eventually(lambda: not any(_alive(pid) for pid in workers), 5,
                          shows=lambda: f"workers still alive: {[p for p in workers if _alive(p)]}")
    finally:
        for pid in filter(_alive, workers):  # this test's own orphans, should they outlive it
            os.kill(pid, signal.SIGKILL)
    assert time.monotonic() - killed < 5
    await asyncio.wait_for(first.wait(), 10)
    assert "the front (pid" in log.read_text()  # each said why it left

    second = await _serve(env, tmp_path, log)  # the same ports, all free again
    try:
        await _eventually(lambda: any(ANSWER in all_text(m) and "step" not in all_text(m)
                                      for m in slack.thread(CHANNEL, "3300.1")), 60,
                          shows=lambda: [all_text(m)[:120] for m in slack.thread(CHANNEL, "3300.1")])
        await asyncio.sleep(2.0)  # anything that would come twice has time to
        answers = [m for m in slack.thread(CHANNEL, "3300.1")
                   if m.get("bot") and ANSWER in all_text(m) and "step" not in all_text(m)]
        assert len(answers) == 1  # the abandoned item was done by the new workers, once
    finally:
        second.terminate()
        await asyncio.wait_for(second.wait(), 60)


async def test_a_port_in_use_at_start_is_one_line_and_a_non_zero_exit(redis_url: str, prefix: str,
                                                                      slack: FakeSlack, tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as squatter:  # something else holds the second worker's port
        squatter.bind(("127.0.0.1", port + 2))
        squatter.listen()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "serve", "--workers", "2", env=_serve_env(slack, redis_url, prefix, port),
            cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 3 and out == b""  # unavailable at start; no banner: nothing was started
    lines = err.decode().strip().splitlines()
    # The squatted port, or (on a busy machine, where another process may take a port of the range between
    # free_port() and the start) another of the range: either way one line, and nothing started.
    taken = re.search(r"port (\d+) is in use", lines[0]) if len(lines) == 1 else None
    assert taken is not None and int(taken.group(1)) in (port, port + 1, port + 2), lines


async def test_a_workers_port_stays_held_while_it_is_started_again(redis_url: str, prefix: str,
                                                                   slack: FakeSlack, tmp_path: Path) -> None:
    """The front binds its workers' ports and hands each socket over: a worker that died is started again on
    the same socket, so no other process can take the port in between (it once could, on a busy machine) and
    a probe meanwhile waits instead of being refused."""
    port = free_port()
    env = _serve_env(slack, redis_url, prefix, port)
    serve = await _serve(env, tmp_path, tmp_path / "serve.log")
    workers = _children(serve.pid)
    try:
        os.kill(workers[0], signal.SIGKILL)
        await _eventually(lambda: not _alive(workers[0]), 10)
        for each in (port + 1, port + 2):  # while the dead one waits to be started again: its port is still
            _, writer = await asyncio.open_connection("127.0.0.1", each)  # held (a connection waits, not refused)
            writer.close()
        await _eventually(lambda: len([p for p in _children(serve.pid) if _alive(p)]) == 2, 30)
        for each in (port + 1, port + 2):
            await _ready(f"http://127.0.0.1:{each}")  # the new worker serves on the port it was handed
    finally:
        serve.terminate()
        await asyncio.wait_for(serve.wait(), 60)
