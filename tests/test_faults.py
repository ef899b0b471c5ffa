"""Every post exactly once while Slack's answers are lost or mixed faults hit (a 5xx, a 429, a reset
connection, no answer in time, the answer lost after Slack did the work): each progress message and each
answer is found again by its outbox key in `metadata` before any repost, and all of them arrive."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.demo.sender import SlackSender, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from state.client import connect
from state.keys import Keys, Ttls
from state.outbox_store import RedisOutbox
from tests.conftest import free_port
from tests.fault_proxy import FaultProxy
from tests.slack_harness import CHANNEL, QUESTION, SECRET, open_workspace
from tests.test_lifecycle import _alive, _serve
from tests.test_slack_modes import _children, _eventually, _serve_env

ANSWER = "docs/payments-db-timeouts.md"
POSTING = ("chat.postMessage", "chat.update", "chat.delete", "conversations.replies", "chat.startStream",
           "chat.appendStream", "chat.stopStream")


def keys(slack: FakeSlack) -> Counter[str]:
    return Counter(str(((m.get("metadata") or {}).get("event_payload") or {}).get("key"))
                   for m in slack.messages.values() if m.get("bot") and m.get("metadata"))


@pytest.mark.parametrize("progress", ["update", "auto"])
@pytest.mark.parametrize(("kind", "rate", "for_s", "runs"), [("lost", 1.0, 12.0, 5), ("mixed", 0.4, 15.0, 20)])
async def test_every_post_exactly_once_under_lost_answers_and_mixed_faults(
        redis_url: str, prefix: str, slack: FakeSlack, kind: str, rate: float, for_s: float, runs: int,
        progress: str) -> None:
    ws = await open_workspace(redis_url, prefix, slack, request_timeout_s=1.0, outbox_max_backoff_s=2.0,
                              progress=progress)
    try:
        slack.fault(kind, *POSTING, for_s=for_s, rate=rate, hang_s=1.5)
        threads = [f"90{n:02d}.1" for n in range(runs)]
        for thread in threads:
            await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, thread))
        await ws.settle(180)
        answers = {t: sum(1 for m in slack.thread(CHANNEL, t) if m.get("bot") and ANSWER in all_text(m))
                   for t in threads}
        assert answers == dict.fromkeys(threads, 1), answers  # 0 missing, 0 twice
        twice = {k: n for k, n in keys(slack).items() if n > 1}
        assert not twice, twice  # no progress message or answer posted twice under one outbox key
    finally:
        await ws.stop()


async def _delivered(redis_url: str, prefix: str) -> None:
    """Until nothing is left to deliver (a late repost would show up as a second key)."""
    client = connect(redis_url)
    try:
        outbox, quiet = RedisOutbox(client, Keys(prefix), Ttls()), 0
        while quiet < 5:
            quiet = quiet + 1 if await outbox.backlog() == 0 else 0
            await asyncio.sleep(0.2)
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def _through_proxy(slack: FakeSlack, redis_url: str, prefix: str,
                         tmp_path: Path) -> AsyncIterator[tuple[FaultProxy, SlackSender]]:
    """`serve --workers 2` talking to Slack through a fault proxy; killed with its workers afterwards."""
    proxy = await FaultProxy(slack.api_url).start()
    port = free_port()
    env = _serve_env(slack, redis_url, prefix, port) | {
        "SLACK_API_URL": proxy.url, "OPSPILOT_SLACK__REQUEST_TIMEOUT_S": "1",
        "OPSPILOT_SLACK__OUTBOX_MAX_BACKOFF_S": "2"}
    serve = await _serve(env, tmp_path, tmp_path / "serve.log")
    workers = _children(serve.pid)
    try:
        yield proxy, SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    finally:
        serve.kill()
        for pid in filter(_alive, workers):
            os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(serve.wait(), 30)  # (reaped, and its pipes closed, on this loop)
        await proxy.stop()


@pytest.mark.parametrize(("kind", "rate", "for_s", "runs"), [("lost", 1.0, 12.0, 5), ("mixed", 0.4, 15.0, 20)])
async def test_every_post_exactly_once_through_a_fault_proxy_with_a_front_and_two_workers(
        redis_url: str, prefix: str, slack: FakeSlack, tmp_path: Path, kind: str, rate: float, for_s: float,
        runs: int) -> None:
    """The issue's setup: real processes (`serve --workers 2`) talking to Slack through a proxy that loses
    replies, resets connections, hangs, and answers 5xx and 429."""
    async with _through_proxy(slack, redis_url, prefix, tmp_path) as (proxy, sender):
        proxy.fault(kind, *POSTING, for_s=for_s, rate=rate, hang_s=1.5)
        threads = [f"91{n:02d}.1" for n in range(runs)]
        for n, thread in enumerate(threads):
            status, _ = await sender.event(mention(CHANNEL, "UREQ", QUESTION, thread), event_id=f"EvFP{kind}{n}")
            assert status == 200

        def answered() -> dict[str, int]:
            return {t: sum(1 for m in slack.thread(CHANNEL, t) if m.get("bot") and ANSWER in all_text(m))
                    for t in threads}

        await _eventually(lambda: all(answered().values()), 240, shows=answered)
        await _delivered(redis_url, prefix)
        assert answered() == dict.fromkeys(threads, 1)  # 0 missing, 0 twice
        twice = {k: n for k, n in keys(slack).items() if n > 1}
        assert not twice, twice
        assert sum(proxy.hits.values()) - proxy.hits["passed"] > 0, proxy.hits  # the faults did hit


async def test_a_pending_card_appears_within_10_s_of_slack_answering_again(
        redis_url: str, prefix: str, slack: FakeSlack, tmp_path: Path) -> None:
    async with _through_proxy(slack, redis_url, prefix, tmp_path) as (proxy, sender):
        proxy.fault("lost", *POSTING, for_s=12.0)
        await sender.event(mention(CHANNEL, "UREQ", "restart payments in prod", "9200.1"), event_id="EvCard")

        def cards() -> list[dict]:
            return [m for m in slack.thread(CHANNEL, "9200.1") if m.get("bot") and "Confirm" in all_text(m)]

        await _eventually(lambda: bool(cards()), 120)
        late = time.monotonic() - proxy.quiet_at()
        assert late <= 10.0, f"the card came {late:.1f} s after Slack answered again"
        await _delivered(redis_url, prefix)
        assert len(cards()) == 1
        twice = {k: n for k, n in keys(slack).items() if n > 1}
        assert not twice, twice
