"""Liveness and readiness: /healthz answers while the process does; /readyz says whether it can do its part
(Redis answers; a front has a worker reading the queue; a worker's read loop runs), in one line when not."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import aiohttp

from bot.demo.workspace import LocalSlack as FakeSlack
from tests.conftest import OwnRedis, free_port
from tests.slack_harness import open_workspace
from tests.test_slack_modes import _serve_env


async def _probe(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as r:
        return r.status, await r.text()


async def _until_status(url: str, status: int, deadline_s: float = 60.0) -> str:
    """Poll ``url`` until it answers ``status`` (a process starting, a loop noticing an outage); its body."""
    seen: tuple[int, str] | None = None
    for _ in range(int(deadline_s / 0.1)):
        with contextlib.suppress(aiohttp.ClientConnectionError):
            seen = await _probe(url)
            if seen[0] == status:
                return seen[1]
        await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never answered {status}; last: {seen}")


def _one_line(body: str) -> str:
    assert body.endswith("\n") and "\n" not in body[:-1], body
    return body[:-1]


async def test_a_front_is_ready_once_a_worker_reads_the_queue(redis_url: str, prefix: str, slack: FakeSlack,
                                                              tmp_path: Path) -> None:
    front = await open_workspace(redis_url, prefix, slack, role="front")
    port = free_port()
    worker: asyncio.subprocess.Process | None = None
    try:
        status, body = await _probe(f"{front.server.url}/readyz")
        assert status == 503 and "no worker has read the work queue" in _one_line(body)
        assert (await _probe(f"{front.server.url}/healthz"))[0] == 200  # alive all the same

        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "worker", "--port", str(port),
            env=_serve_env(slack, redis_url, prefix, port), cwd=tmp_path,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        assert _one_line(await _until_status(f"http://127.0.0.1:{port}/readyz", 200)) == "ready"
        assert _one_line(await _until_status(f"{front.server.url}/readyz", 200)) == "ready"
    finally:
        if worker is not None:
            worker.terminate()
            await asyncio.wait_for(worker.wait(), 60)
        await front.stop()


async def test_with_redis_gone_readyz_is_503_healthz_200_and_ready_again_when_it_is_back(
        own_redis: OwnRedis, prefix: str, slack: FakeSlack, tmp_path: Path) -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "serve", "--workers", "1", env=_serve_env(slack, own_redis.url, prefix, port),
        cwd=tmp_path, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    front, worker = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"
    try:
        for each in (front, worker):
            await _until_status(f"{each}/readyz", 200)
        own_redis.stop()
        for each in (front, worker):
            reason = _one_line(await _until_status(f"{each}/readyz", 503))
            assert "Redis" in reason, reason
            assert (await _probe(f"{each}/healthz"))[0] == 200
        own_redis.start()
        for each in (front, worker):
            await _until_status(f"{each}/readyz", 200)
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 60)


async def test_readyz_is_503_while_redis_takes_no_writes_or_the_bot_is_unknown(
        own_redis: OwnRedis, prefix: str, slack: FakeSlack, tmp_path: Path) -> None:
    """A full Redis answers PING, and /readyz said "ready" while every request was answered 503; so did a front
    whose auth.test failed at start (the bot's identity unknown)."""
    import redis

    slack.fault("error", "auth.test")  # from its start: the identity is never known
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "serve", "--workers", "1", env=_serve_env(slack, own_redis.url, prefix, port),
        cwd=tmp_path, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    front = f"http://127.0.0.1:{port}"
    try:
        reason = _one_line(await _until_status(f"{front}/readyz", 503))
        assert "identity is not known" in reason, reason
        slack.faults.clear()
        await _until_status(f"{front}/readyz", 200)
        redis.Redis.from_url(own_redis.url).config_set("maxmemory", "1")  # every write now: OOM
        reason = _one_line(await _until_status(f"{front}/readyz", 503))
        assert "maxmemory" in reason, reason
    finally:
        redis.Redis.from_url(own_redis.url).config_set("maxmemory", "0")
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 60)
