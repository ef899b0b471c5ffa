"""A Redis outage in the middle of a run and during a question: nothing is dropped, the answers arrive
when Redis is back, and the user never sees an internal address or a stack trace."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from types import SimpleNamespace

import pytest

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.inbound.worker import Worker
from bot.slack.outbound.counters import Metrics
from core.outages import Outage
from state import Keys, RedisStore, StoreError, Ttls, connect
from tests.conftest import OwnRedis, until
from tests.slack_harness import CHANNEL, QUESTION, ask_restart, card_of, confirm, open_workspace
from tests.toolkit import Probe, toolkit


async def test_redis_down_mid_run_and_during_a_question(own_redis: OwnRedis, prefix: str, slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1")), reply("done"), reply("done")])
    ws = await open_workspace(own_redis.url, prefix, slack, model=model, specs=[tools["blocker"]])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "first", "20.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        own_redis.stop()  # Redis goes away while a tool runs…
        probe.release.set()  # …which finishes: its result must wait for Redis, not be lost
        status, _ = await ws.sender.event(mention(CHANNEL, "UREQ", "second", "21.1"))
        assert status == 200  # a question during the outage is acknowledged…
        await asyncio.sleep(2.0)
        own_redis.start()
        await ws.settle(60)  # …and answered once Redis is back

        for thread in ("20.1", "21.1"):
            bot = [m for m in slack.thread(CHANNEL, thread) if m.get("bot")]
            assert len([m for m in bot if set(all_text(m).split()) == {"done"}]) == 1, [all_text(m) for m in bot]
            progress = [m for m in bot if "step" in all_text(m)]
            assert len(progress) == 1 and ":white_check_mark: Done" in all_text(progress[0])
        everything = " ".join(all_text(m) for m in slack.messages.values()) + " ".join(slack.ephemeral_texts())
        assert str(own_redis.port) not in everything and "Traceback" not in everything
    finally:
        await ws.stop()


async def test_a_run_the_store_lost_midway_is_not_told_it_was_not_taken(own_redis: OwnRedis, prefix: str,
                                                                         slack: FakeSlack) -> None:
    """Redis away past the grace after a run took its question (and may have changed something): the thread said
    "I can't take questions right now… ask again", and asking again could run a change twice."""
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1")), reply("done")])
    ws = await open_workspace(own_redis.url, prefix, slack, model=model, specs=[tools["blocker"]], outage_grace_s=1.0)
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "first", "25.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        own_redis.stop()
        probe.release.set()  # its result cannot be saved: the run stops here, taken
        await until(lambda: any("became unavailable while I was working" in all_text(m)
                                for m in slack.thread(CHANNEL, "25.1") if m.get("bot")), 20)
        said = " ".join(all_text(m) for m in slack.thread(CHANNEL, "25.1") if m.get("bot"))
        assert "can't take questions" not in said and "Ask again" not in said, said
    finally:
        own_redis.start()
        await ws.stop()


async def test_a_click_the_store_lost_while_its_change_ran_is_not_told_unrecorded(own_redis: OwnRedis, prefix: str,
                                                                                   slack: FakeSlack) -> None:
    """A confirmed change started; Redis went away before its result was saved: the approver was told "I could not
    record this" of a change that had run."""
    probe = Probe()
    tools = toolkit(probe, slow_s=3.0)  # long enough to stop Redis while it runs
    model = ScriptedModel([reply("", call("change", "c1", target="payments", environment="prod")), reply("done")])
    ws = await open_workspace(own_redis.url, prefix, slack, model=model, specs=[tools["change"]], outage_grace_s=1.0)
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "change payments in prod", "27.1"))
        await ws.settle()
        card = card_of(slack, "27.1")
        await ws.sender.action(confirm(card, "UAPPROVER"))
        await asyncio.wait_for(probe.started.setdefault("change", asyncio.Event()).wait(), 10)
        own_redis.stop()  # the change runs (slow_s); its result cannot be saved
        await until(lambda: any("state store became unavailable while acting on it" in t
                                for t in slack.ephemeral_texts("UAPPROVER")), 20)
        assert not any("could not record this" in t for t in slack.ephemeral_texts("UAPPROVER"))
    finally:
        own_redis.start()
        await ws.stop()


async def test_a_longer_outage_is_told_to_the_user_plainly(own_redis: OwnRedis, prefix: str,
                                                           slack: FakeSlack) -> None:
    ws = await open_workspace(own_redis.url, prefix, slack, model=ScriptedModel([reply("done")]), specs=[],
                              outage_grace_s=1.0)
    try:
        own_redis.stop()
        await ws.sender.event(mention(CHANNEL, "UREQ", "anyone there?", "30.1"))
        for _ in range(100):
            told = [all_text(m) for m in slack.thread(CHANNEL, "30.1") if m.get("bot")]
            if told:
                break
            await asyncio.sleep(0.1)
        assert len(told) == 1 and "state store is unavailable" in told[0]
        assert str(own_redis.port) not in told[0] and "Error" not in told[0]
    finally:
        own_redis.start()
        await ws.stop()


async def test_an_outage_in_a_chinese_thread_is_told_in_chinese(own_redis: OwnRedis, prefix: str,
                                                                 slack: FakeSlack) -> None:
    """A colleague's English "@OpsPilot restart it" in a Chinese thread while Redis was away got the notice in
    English: the thread's language is in the store that was away, and this process had seen it."""
    ws = await open_workspace(own_redis.url, prefix, slack, model=ScriptedModel([reply("好的。"), reply("好的。")]),
                              specs=[], outage_grace_s=1.0, language="auto")
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "看看支付服务最近报错", "31.1"))
        await ws.settle()
        own_redis.stop()
        await ws.sender.event(mention(CHANNEL, "UMATE", "restart it", "31.2", thread_ts="31.1"))
        for _ in range(100):
            told = [t for m in slack.thread(CHANNEL, "31.1")
                    if m.get("bot") and ("store" in (t := all_text(m)) or "存储" in t)]
            if told:
                break
            await asyncio.sleep(0.1)
        assert len(told) == 1 and "状态存储" in told[0] and "state store" not in told[0], told
    finally:
        own_redis.start()
        await ws.stop()


async def test_a_confirm_right_after_a_redis_restart_runs_the_change_once(own_redis: OwnRedis, prefix: str,
                                                                           slack: FakeSlack) -> None:
    """Every pooled connection is dead after a restart: the claim, the decision and the ticket read must be
    retried on fresh ones like every other write, not dropped with "Connection closed by server"."""
    ws = await open_workspace(own_redis.url, prefix, slack)
    try:
        card = await ask_restart(ws, thread="40.1")
        own_redis.stop()
        click = asyncio.create_task(ws.sender.action(confirm(card, "UAPPROVER")))  # clicked during the restart
        await asyncio.sleep(1.0)
        own_redis.start()
        status, _ = await click
        assert status == 200
        await ws.settle(60)
        assert len(ws.toolbox.restarts.done) == 1
        said = " ".join(all_text(m) for m in slack.thread(CHANNEL, "40.1")) + " ".join(slack.ephemeral_texts())
        assert "Confirmed by" in said and "could not" not in said.lower() and "unavailable" not in said
    finally:
        await ws.stop()


async def test_claims_cancels_and_takeovers_wait_out_a_restart(own_redis: OwnRedis, prefix: str) -> None:
    """The claim-once write itself, asked while Redis is down and back a second later: it waits within the
    outage grace instead of failing the click ("Redis unreachable while claiming an interrupt")."""
    store = RedisStore(connect(own_redis.url, timeout_s=1.0), keys=Keys(prefix), ttls=Ttls(interrupt_s=600),
                       outage_grace_s=20.0)
    try:
        assert (await store.locks.claim("s1.tok-a", "UANN")).won
        own_redis.stop()
        back = asyncio.create_task(asyncio.to_thread(lambda: (time.sleep(1.0), own_redis.start())))
        claim = await store.locks.claim("s1.tok-b", "UBOB")
        await store.locks.request_cancel("s1.run-x", "UBOB")
        await back
        assert claim.won and claim.holder == "UBOB"
        again = await store.locks.claim("s1.tok-b", "UCAROL")
        assert not again.won and again.holder == "UBOB"  # the winner is named without its attempt id
        assert (await store.locks.cancel_requests(["s1.run-x"])) == {"s1.run-x": "UBOB"}
    finally:
        if own_redis.proc is None:
            own_redis.start()
        await store.close()


async def test_an_outage_is_logged_once_then_a_summary_then_back(own_redis: OwnRedis, prefix: str, slack: FakeSlack,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Every loop (outbox, worker, sweeps, reminders, timers) retries a dead Redis several times a second; the
    operator's log says it once when it goes, once when it is back — not ~3 lines a second."""
    ws = await open_workspace(own_redis.url, prefix, slack, model=ScriptedModel([reply("done"), reply("done")]))
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "first", "40.1"))
        await ws.settle()
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        own_redis.stop()
        await ws.sender.event(mention(CHANNEL, "UREQ", "during", "41.1"))  # work that must wait for Redis
        await asyncio.sleep(3.0)  # the outbox alone polls every few ms
        failures = [r for r in caplog.records if r.levelno == logging.DEBUG and "unavailable" in r.getMessage()]
        own_redis.start()
        await ws.settle(60)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        about_redis = [w for w in warnings if "Redis" in w or "store" in w or "queue" in w]
        assert len(failures) >= 2  # the loops did retry…
        assert len(about_redis) <= 3, about_redis  # …and the log said it once, not per retry
        assert any(w.startswith("Redis is back after") for w in warnings), warnings
        assert len([m for m in slack.thread(CHANNEL, "41.1") if set(all_text(m).split()) == {"done"}]) == 1
    finally:
        await ws.stop()


def _logged(name: str, logger_name: str, now: list[float]) -> tuple[Outage, list[str]]:
    """An :class:`Outage` on a fake clock (``now[0]``), and the lines its log says."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(logger_name)
    logger.addHandler(Collect())
    return Outage(name, logger=logger, clock=lambda: now[0]), lines


def test_the_outage_log_counts_and_times() -> None:
    now = [0.0]
    outage, lines = _logged("Redis", "test.outage", now)
    outage.ok()  # up and fine: nothing said
    for t in range(0, 150, 1):  # a failure a second for 150 s
        now[0] = float(t)
        outage.failed("Connection refused")
    now[0] = 151.0
    outage.ok()
    outage.ok()
    # Said once it has failed for 1 s with no success (at t=1), counted from its first failure.
    assert lines[0] == "Redis is unavailable: Connection refused (retrying; next report in 60 s unless it is back)"
    assert lines[1] == ("Redis still unavailable after 61 s: 60 failed attempts in the last 60 s; "
                        "last: Connection refused")
    assert lines[2].startswith("Redis still unavailable after 2 min: 60 failed attempts")
    assert lines[3:] == ["Redis is back after 3 min"]


def test_failures_between_successes_are_a_blip_told_once_a_minute() -> None:
    """Slack failing 40 % of calls in an incident is degraded, not gone: one line a minute, not "unavailable" and
    "back after 0 s" for every failure (the soak's log had hundreds of them)."""
    now = [0.0]
    outage, lines = _logged("Slack", "test.blips", now)
    for t in range(0, 130):  # every second a call; every other one fails
        now[0] = float(t)
        outage.failed("chat.update: http_503") if t % 2 else outage.ok()
    assert not outage.down
    assert lines == ["Slack is failing intermittently: 30 of 60 calls failed in the last 60 s; "
                     "last: chat.update: http_503"] * 2
    outage.failed("chat.update: TimeoutError")  # then only failures (since t=129): after a second, an outage
    now[0] = 129.5
    outage.failed("chat.update: TimeoutError")
    assert not outage.down
    now[0] = 130.2
    outage.failed("chat.update: TimeoutError")
    assert outage.down and lines[-1].startswith("Slack is unavailable: chat.update: TimeoutError")


def _card_now(slack: FakeSlack, card: dict) -> dict:
    return slack.messages[(CHANNEL, card["ts"])]


async def test_a_click_during_an_outage_is_acknowledged_on_its_card_then_closed(own_redis: OwnRedis, prefix: str,
                                                                               slack: FakeSlack) -> None:
    """Recording the decision waits for Redis; the person who clicked sees at once, on the card, that the click
    arrived and nothing has run yet (no button to click again into the same wait); then the outcome."""
    ws = await open_workspace(own_redis.url, prefix, slack)
    try:
        card = await ask_restart(ws, thread="50.1")
        own_redis.stop()
        click = confirm(card, "UAPPROVER") | {"response_url": slack.response_url(CHANNEL, card["ts"])}
        status, _ = await ws.sender.action(click)
        assert status == 200
        await until(lambda: ":inbox_tray:" in all_text(_card_now(slack, card)), 10)
        now = _card_now(slack, card)
        assert buttons(now) == [] and "Nothing has run yet" in all_text(now) and "<@UAPPROVER>" in all_text(now)
        assert ws.toolbox.restarts.done == []
        own_redis.start()
        await until(lambda: "Confirmed by" in all_text(_card_now(slack, card)), 30)
        await ws.settle(60)
        assert len(ws.toolbox.restarts.done) == 1 and ":inbox_tray:" not in all_text(_card_now(slack, card))
    finally:
        if own_redis.proc is None:
            own_redis.start()
        await ws.stop()


@pytest.mark.parametrize(("question", "lost", "confirmed"), [
    ("look at the payment service's recent errors", "could not record this", "Confirmed by"),
    (QUESTION, "无法记录", "确认")])
async def test_a_click_the_store_never_recorded_gets_its_card_back(own_redis: OwnRedis, prefix: str, slack: FakeSlack,
                                                                  question: str, lost: str, confirmed: str) -> None:
    """Redis away past the grace: the click is lost and said so, in the thread's language (read from the card: the
    thread's is in the store that is away); the card shows its Confirm button again (a hidden button for a decision
    nobody will make would strand the run), and a later click runs the change once."""
    ws = await open_workspace(own_redis.url, prefix, slack, outage_grace_s=6.0, language="auto")
    try:
        card = await ask_restart(ws, thread="51.1", question=question)
        own_redis.stop()
        click = confirm(card, "UAPPROVER") | {"response_url": slack.response_url(CHANNEL, card["ts"])}
        await ws.sender.action(click)
        await until(lambda: ":inbox_tray:" in all_text(_card_now(slack, card)), 10)
        await until(lambda: any(b["action_id"] == "opspilot_confirm" for b in buttons(_card_now(slack, card))), 30)
        await until(lambda: any(lost in t for t in slack.ephemeral_texts("UAPPROVER")), 10)
        own_redis.start()
        await ws.sender.action(confirm(_card_now(slack, card), "UAPPROVER"))
        await ws.settle(60)
        assert len(ws.toolbox.restarts.done) == 1 and confirmed in all_text(_card_now(slack, card))
    finally:
        if own_redis.proc is None:
            own_redis.start()
        await ws.stop()


async def test_after_an_outage_a_live_workers_click_is_not_taken_from_it(own_redis: OwnRedis, prefix: str) -> None:
    """An outage makes every pending entry look idle (its holder's touches fail too): a worker back from one took
    a click from the live worker doing it, in the quick lane's 2 s, and the click was done twice. It now waits
    until every live holder has had a touch; a holder that really died is still replaced."""
    store = RedisStore(connect(own_redis.url, timeout_s=0.5), keys=Keys(prefix), outage_grace_s=0.0)
    other = Worker(queue=store.queue, executor=SimpleNamespace(metrics=Metrics()),  # type: ignore[arg-type]
                   reclaim_after_s=1.0, retry_after_s=(0.05,))
    try:
        await store.queue.put("a click", lane="quick")
        (held,) = await store.queue.take("holder", block_ms=500)
        own_redis.stop()
        with pytest.raises(StoreError):
            await other.round(block_ms=0)
        await asyncio.sleep(1.5)  # longer than the quick lane's idle period (1 s here)
        own_redis.start()
        assert await other.round(block_ms=0) == 0  # the holder has not touched yet: it may be alive
        assert await store.queue.touch("holder", held.id, lane="quick")  # it is
        await asyncio.sleep(0.3)
        assert await other.round(block_ms=0) == 0
        deadline = time.monotonic() + 10
        while not await other.round(block_ms=0):  # the holder goes quiet for good: handed on
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
    finally:
        if own_redis.proc is None:
            own_redis.start()
        await other.stop()
        await store.close()


async def test_a_process_starting_in_an_outage_waits_for_redis(redis_url: str) -> None:
    """serve and worker exited 3 two seconds after starting while Redis was out of reach: on Kubernetes a
    CrashLoopBackOff, up to 5 minutes after Redis was back. They ask again through the outage grace."""
    from urllib.parse import urlsplit

    from bot.assembly import open_store
    from bot.config import Settings
    from tests.conftest import free_port

    upstream = urlsplit(redis_url)
    port = free_port(1)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(upstream.hostname, upstream.port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def redis_back_later() -> asyncio.Server:
        await asyncio.sleep(1.5)
        return await asyncio.start_server(forward, "127.0.0.1", port)

    back = asyncio.create_task(redis_back_later())
    settings = Settings(redis_url=f"redis://127.0.0.1:{port}{upstream.path}", redis_outage_grace_s=20)
    store = await open_store(settings, fallback=False, wait_s=20)
    try:
        assert isinstance(store, RedisStore) and back.done()
    finally:
        await store.close()
        server = await back
        server.close()


async def test_a_click_lost_in_an_outage_is_told_in_the_thread_s_language(own_redis: OwnRedis, prefix: str,
                                                                           slack: FakeSlack) -> None:
    """An English thread whose answer quotes the (Chinese) payments runbook: 👎 pressed while Redis was away was
    told "无法记录这次操作…", the clicked answer's words weighed rather than the thread's language."""
    from bot.demo.sender import block_action, mention

    ws = await open_workspace(own_redis.url, prefix, slack, outage_grace_s=1.0, language="auto")
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "look at the payment service's recent errors", "52.1"))
        await ws.settle()
        answer = next(m for m in slack.thread(CHANNEL, "52.1")
                      if any(b["action_id"] == "opspilot_feedback_down" for b in buttons(m)))
        down = next(b for b in buttons(answer) if b["action_id"] == "opspilot_feedback_down")
        own_redis.stop()
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=answer, action_id=down["action_id"],
                                            value=down["value"]))
        await until(lambda: bool(slack.ephemeral_texts("UREQ")), 30)
        assert "could not record this" in slack.ephemeral_texts("UREQ")[-1], slack.ephemeral_texts("UREQ")
    finally:
        if own_redis.proc is None:
            own_redis.start()
        await ws.stop()
