"""A message whose recording fails past the outage grace is sent directly, once — and never a second time when
the recording did land after all: Redis applied it and its reply was lost (another instance delivered it
meanwhile), or Redis stalled and applied it late (delivered once it answered again). The direct post looks for
the record's delivery first and carries the record's key; a record first delivered an outage's grace after its
put looks for that post first."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.pacer import Pacer
from state.client import connect
from state.keys import Keys, Ttls
from state.outbox_store import RedisOutbox
from tests.conftest import _answers_ping, free_port, until
from tests.test_turn_start import LosingProxy

TEXT = "Something went wrong: this question could not be done."


def _outbox(slack: FakeSlack, url: str, prefix: str, *, timeout_s: float = 5.0) -> SlackOutbox:
    store = RedisOutbox(connect(url, timeout_s=timeout_s), Keys(prefix), Ttls(), outage_grace_s=1.0)
    return SlackOutbox(store=store, pacer=Pacer(posts_per_second=0), metrics=Metrics(), poll_s=0.1,
                       client=AsyncWebClient(token=slack.token, base_url=slack.api_url, timeout=5))


def _shown(slack: FakeSlack) -> int:
    return sum(TEXT in all_text(m) for m in slack.thread("C1", "77.1"))


async def test_a_recording_whose_replies_were_lost_is_not_sent_twice(redis_url: str, prefix: str,
                                                                    slack: FakeSlack) -> None:
    proxy = LosingProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]))
    port = await proxy.start()
    cut = _outbox(slack, f"redis://127.0.0.1:{port}/{redis_url.rsplit('/', 1)[1]}", prefix, timeout_s=0.3)
    other = _outbox(slack, redis_url, prefix)  # another instance, which delivers what landed
    other.start()
    try:
        await cut.say("C1", "77.1", "warm-up", key="warm")  # its scripts loaded, its connections open
        await until(lambda: any("warm-up" in all_text(m) for m in slack.thread("C1", "77.1")))
        proxy.deaf = True
        await cut.say("C1", "77.1", TEXT, key="failed:q1")  # applied, never answered: sent directly after 1 s
        proxy.deaf = False
        await until(lambda: _shown(slack) >= 1)
        await other.drain(5)
        assert _shown(slack) == 1
    finally:
        await other.stop()
        await cut.stop()


@pytest.fixture
def stalling_redis() -> Iterator[str]:
    """A redis-server of this test's own that takes ``DEBUG SLEEP`` (a stall: a fork, a slow disk)."""
    binary, workdir, port = shutil.which("redis-server"), tempfile.mkdtemp(prefix="opspilot-stall-"), free_port()
    if binary is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server)")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--enable-debug-command", "yes", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while not _answers_ping(url):
            if time.monotonic() > deadline:
                pytest.fail(f"redis-server on port {port} never answered")
            time.sleep(0.02)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


async def test_a_recording_redis_applied_late_is_not_sent_twice(stalling_redis: str, slack: FakeSlack) -> None:
    outbox = _outbox(slack, stalling_redis, "stall", timeout_s=0.5)
    admin = connect(stalling_redis)
    outbox.start()
    try:
        await outbox.say("C1", "77.1", "warm-up", key="warm")
        await outbox.drain(5)
        stall = asyncio.create_task(admin.execute_command("DEBUG", "SLEEP", "2.5"))
        await asyncio.sleep(0.1)
        await outbox.say("C1", "77.1", TEXT, key="failed:q1")  # gives up after 1 s: sent directly
        await stall  # then Redis applies the recording, and the outbox delivers it
        await until(lambda: _shown(slack) >= 1)
        await outbox.drain(5)
        assert _shown(slack) == 1
    finally:
        await outbox.stop()
        await admin.aclose()


async def test_a_stream_closed_out_with_the_store_away_is_not_posted_on_its_own(slack: FakeSlack) -> None:
    """A closed-out stream's last edit has no message of its own to post: with the store away it is left to the
    catch-up (it raised KeyError('kind') into the renderer)."""
    outbox = _outbox(slack, f"redis://127.0.0.1:{free_port()}/0", "away", timeout_s=0.2)
    try:
        await outbox.close_stream("progress:r1:0", "C1", "77.1", "stopped here", [])
        assert slack.called("chat.postMessage") == []
    finally:
        await outbox.stop()


async def test_a_backlog_delivered_late_without_an_outage_reads_no_history(redis_url: str, prefix: str,
                                                                           slack: FakeSlack) -> None:
    """Posts paced out past the outage grace (a busy channel) were each looked for in the channel's history first,
    a rate-limited read per post, though nothing could have been sent directly."""
    outbox = _outbox(slack, redis_url, prefix)
    outbox.pacer = outbox.sender.pacer = Pacer(posts_per_second=2, post_burst=1)
    outbox.start()
    try:
        for n in range(4):
            await outbox.say("C1", "77.1", f"note {n}", key=f"note:{n}")
        await until(lambda: sum("note" in all_text(m) for m in slack.thread("C1", "77.1")) == 4)
        assert slack.called("conversations.replies") == [] and slack.called("conversations.history") == []
    finally:
        await outbox.stop()
