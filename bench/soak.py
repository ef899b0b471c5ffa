"""The soak (issue 33): ``opspilot serve`` (a front and its workers, HTTP mode) through an incident, as an operator
fears it — questions in bursts over many channels, follow-ups in OpsPilot's threads, confirm flows (some
double-clicked), Slack's Web API failing a share of calls (5xx with JSON or a proxy's page, 429, resets, hangs,
replies lost after the work was done), a worker killed -9 every few seconds, the front killed -9 and started again,
Redis stopped and started again (AOF on), an alert storm in an alerts channel. Then the faults stop and everything
must converge. It reports what a person would check:

- every question answered exactly once (or its asker told plainly why not), no message posted twice;
- every confirm flow's card shown, its restart run exactly once, the card closed soon after the click;
- the storm: at most the channel's automatic runs (each answered once), said once; no stream open, no key sans TTL.

``python -m bench --only soak`` runs the scale below (``SOAK_SCALE=issue``: issue 33's); ``tests/test_soak.py``, SMALL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench import storm
from bench.common import Table, alive, children, free_port, verdict
from bench.processes import RedisProcess
from bot.demo.sender import SlackSender, block_action, mention, message
from bot.demo.workspace import LocalSlack, all_text, buttons
from state import Keys, RedisStore, connect

SECRET = "soak-secret"
QUESTION = "看看支付服务最近报错，顺便对照一下文档里的处理建议"


@dataclass
class Scale:
    questions: int = 300
    channels: int = 24
    confirms: int = 40
    double_clicks: int = 12
    workers: int = 3
    fault_rate: float = 0.4
    kill_every_s: float = 10.0
    redis_stops: tuple[tuple[float, float], ...] = ((20.0, 5.0), (60.0, 30.0), (120.0, 5.0))
    """(seconds after the start, how long Redis stays away)."""
    over_s: float = 180.0
    settle_s: float = 240.0
    front_kills: tuple[float, ...] = (45.0,)
    """Seconds after the start at which the front is killed -9 (its workers follow it) and started again."""
    alert_storm: tuple[float, int, float] = (100.0, 30, 10.0)
    """(seconds after the start, how many alerts, over how many seconds) in the alerts channel; 0 alerts: none."""


SMALL = Scale(questions=16, channels=4, confirms=4, double_clicks=2, workers=2, fault_rate=0.25, kill_every_s=6.0,
              redis_stops=((8.0, 3.0),), over_s=20.0, settle_s=90.0, front_kills=(14.0,), alert_storm=(12.0, 8, 3.0))
ISSUE = Scale(questions=1200, confirms=150, double_clicks=44, redis_stops=((60.0, 5.0), (300.0, 30.0), (600.0, 5.0)),
              over_s=780.0, settle_s=300.0, front_kills=(200.0, 450.0, 700.0), alert_storm=(400.0, 100, 20.0))
"""Issue 33's incident: 1,200 questions and 150 confirm flows (44 double-clicked) in 13 minutes, the front killed
three times, Redis stopped three times (5 s, 30 s, 5 s), an alert storm of 100 messages in 20 s."""


@dataclass
class Soak:
    slack: LocalSlack
    redis: RedisProcess
    port: int
    workers: int
    prefix: str = field(default_factory=lambda: f"soak-{uuid.uuid4().hex[:6]}")
    proc: asyncio.subprocess.Process | None = None
    asked: Counter[str] = field(default_factory=Counter)
    """Questions asked per thread."""
    clicked: dict[str, float] = field(default_factory=dict)
    """Card ts → when it was first clicked."""
    closed: dict[str, float] = field(default_factory=dict)
    """Card ts → when it first showed no Confirm button (the click's receipt, or its outcome)."""
    ended: dict[str, float] = field(default_factory=dict)
    """Card ts → when it first showed its outcome (who decided; not only that the click arrived)."""
    kills: int = 0
    front_kills: int = 0
    alerts: list[tuple[str, str]] = field(default_factory=list)
    """The storm's alert messages in the alerts channel: (ts, alert name)."""
    undelivered: int = 0  # requests the front never took, however often sent (Slack gives up too)

    @property
    def sender(self) -> SlackSender:
        return SlackSender(f"http://127.0.0.1:{self.port}/slack/events", SECRET)

    async def deliver(self, send: Any, *, retries: int = 30) -> None:
        """As Slack does: a request the front did not take (down, killed mid-request, a 5xx) is sent again."""
        for attempt in range(retries):
            with contextlib.suppress(OSError, asyncio.TimeoutError, aiohttp.ClientError):
                status, _ = await asyncio.wait_for(send(attempt or None), 10)
                if status < 500:
                    return
            await asyncio.sleep(1.0)
        self.undelivered += 1

    async def ask(self, channel: str, ts: str, text: str, thread_ts: str | None = None, *,
                  follow: bool = False) -> None:
        thread = thread_ts or ts
        self.asked[f"{channel}:{thread}"] += 1
        user = f"U{thread.split('.')[0]}"  # many people ask during an incident: one per thread
        event = message(channel, user, text, ts, thread_ts=thread_ts) if follow else \
            mention(channel, user, text, ts, thread_ts=thread_ts)
        event_id = f"Ev{uuid.uuid4().hex[:12]}"
        await self.deliver(lambda n: self.sender.event(event, event_id=event_id, retry_num=n))

    async def click(self, channel: str, card: dict[str, Any], twice: bool) -> None:
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
        self.clicked.setdefault(card["ts"], time.monotonic())
        # Each click carries a response URL for the card, as Slack's do (the card closes through it).
        payload = block_action(user="UAPPROVER", channel=channel, message=card, action_id="opspilot_confirm",
                               value=token, response_url=self.slack.response_url(channel, card["ts"]))
        clicks = [self.deliver(lambda n: self.sender.action(payload))]
        if twice:
            other = block_action(user="UAPPROVER2", channel=channel, message=card, action_id="opspilot_confirm",
                                 value=token, response_url=self.slack.response_url(channel, card["ts"]))
            clicks.append(self.deliver(lambda n: self.sender.action(other)))
        await asyncio.gather(*clicks)

    async def watch(self, change: dict[str, Any]) -> None:
        m = change.get("message") or {}
        if m.get("ts") in self.clicked and not any(b["action_id"] == "opspilot_confirm" for b in buttons(m)):
            self.closed.setdefault(m["ts"], time.monotonic())
            if ":inbox_tray:" not in all_text(m):  # not the receipt a slow store gets (bot/slack/inbound/receipt.py)
                self.ended.setdefault(m["ts"], time.monotonic())

    async def start_serve(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")
               and not k.startswith(("OPSPILOT_", "SLACK_"))}
        env |= {"SLACK_BOT_TOKEN": self.slack.token, "SLACK_SIGNING_SECRET": SECRET,
                "SLACK_API_URL": self.slack.api_url, "PORT": str(self.port), "REDIS_URL": self.redis.url,
                "OPSPILOT_KEY_PREFIX": self.prefix, "OPSPILOT_SWEEPS__STALE_AFTER_S": "6",
                "OPSPILOT_SWEEPS__LEASE_TTL_S": "4", "OPSPILOT_SWEEPS__INTERVAL_S": "2",
                "OPSPILOT_SLACK__REQUEST_TIMEOUT_S": "3", "OPSPILOT_LLM__SCRIPTED_LATENCY_S": "0.2",
                "OPSPILOT_REDIS_OUTAGE_GRACE_S": "40", "OPSPILOT_DEMO_DATA": "1",
                # SOAK_UPDATES: the workspace's chat.update budget per minute (Slack's Tier 3: ~50), to see its share
                "OPSPILOT_SLACK__UPDATES_PER_MINUTE": str(_updates_per_minute() * 0.9),
                # questions by the hundred on purpose: no run limits
                "OPSPILOT_SLACK__LIMITS__PER_PERSON": "0", "OPSPILOT_SLACK__LIMITS__PER_CHANNEL": "0",
                "OPSPILOT_SLACK__ALERT_SOURCES": json.dumps([storm.SOURCE])}
        # SOAK_LOG=path keeps serve's log (the operator's view of the incident) for a run worth reading again.
        where = os.environ.get("SOAK_LOG")
        log = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if where else asyncio.subprocess.DEVNULL
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "serve", "--workers", str(self.workers), env=env,
            cwd=tempfile.mkdtemp(prefix="opspilot-soak-"), stdout=asyncio.subprocess.DEVNULL, stderr=log)
        if where:
            os.close(log)  # the child has its own copy
        await self.ready()

    async def ready(self, timeout_s: float = 60.0) -> None:
        """The front answers /readyz (its workers read the queue)."""
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with session.get(f"http://127.0.0.1:{self.port}/readyz") as r:
                        if r.status == 200:
                            return
                await asyncio.sleep(0.2)
        raise RuntimeError("opspilot serve never became ready")

    def kill_a_worker(self) -> None:
        workers = children(self.proc.pid) if self.proc is not None else []
        if workers:
            os.kill(random.choice(workers), signal.SIGKILL)
            self.kills += 1

    async def kill_the_front(self) -> None:
        """The front killed -9 (its workers leave with it: they are tethered), then started again, as a pod is."""
        if self.proc is None:
            return
        workers = children(self.proc.pid)
        self.proc.kill()
        await self.proc.wait()
        self.front_kills += 1
        for _ in range(300):  # up to 30 s
            if not any(alive(pid) for pid in workers):
                break
            await asyncio.sleep(0.1)
        await self.start_serve()

    async def storm(self, count: int, over_s: float) -> None:
        self.alerts += await storm.post(self.slack, count, over_s)


async def _flow(soak: Soak, channel: str, i: int, twice: bool, deadline: float) -> None:
    """A confirm flow: a question, "restart it in prod" in its thread, and an approver's Confirm on the card."""
    ts = f"{5000 + i}.0001"
    await soak.ask(channel, ts, QUESTION)
    if await _answered(soak, channel, ts, 1, deadline):  # as a person does: read the answer, then ask for more
        await soak.ask(channel, f"{5000 + i}.0009", "restart it in prod", thread_ts=ts, follow=True)
    while time.monotonic() < deadline:
        card = next((m for m in soak.slack.thread(channel, ts)
                     if any(b["action_id"] == "opspilot_confirm" for b in buttons(m))), None)
        if card is not None:
            await soak.click(channel, card, twice)
            return
        await asyncio.sleep(0.2)


async def _answered(soak: Soak, channel: str, thread_ts: str, n: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if len(_answers(soak).get(f"{channel}:{thread_ts}", ())) >= n:
            return True
        await asyncio.sleep(0.2)
    return False


async def _follow_up(soak: Soak, channel: str, i: int, earlier: str, deadline: float) -> None:
    """A follow-up in an earlier thread of OpsPilot's, once its answer is there."""
    if await _answered(soak, channel, earlier, soak.asked[f"{channel}:{earlier}"], deadline):
        await soak.ask(channel, f"{5000 + i}.0001", "and the orders service?", thread_ts=earlier)


async def _chaos(soak: Soak, scale: Scale, until: float) -> None:
    """Workers killed every ``kill_every_s``; the front killed, Redis stopped and started, alerts storming."""
    start = time.monotonic()
    stops, fronts = list(scale.redis_stops), list(scale.front_kills)
    next_kill = start + scale.kill_every_s
    storming: asyncio.Task[None] | None = None
    while time.monotonic() < until:
        now = time.monotonic()
        if now >= next_kill:
            soak.kill_a_worker()
            next_kill = now + scale.kill_every_s
        if fronts and now - start >= fronts[0]:
            fronts.pop(0)
            await soak.kill_the_front()
        if storming is None and scale.alert_storm[1] and now - start >= scale.alert_storm[0]:
            storming = asyncio.create_task(soak.storm(*scale.alert_storm[1:]))
        if stops and now - start >= stops[0][0]:
            _, away = stops.pop(0)
            await asyncio.to_thread(soak.redis.stop)
            await asyncio.sleep(away)
            await asyncio.to_thread(soak.redis.start)
        await asyncio.sleep(0.2)
    if storming is not None:
        await storming


async def run_soak(scale: Scale) -> dict[str, Any]:
    slack = LocalSlack()
    slack.per_minute("chat.update", _updates_per_minute())
    fault = slack.fault("mixed", rate=scale.fault_rate, hang_s=4.0)
    redis = RedisProcess(free_port(), tempfile.mkdtemp(prefix="opspilot-soak-redis-"))
    await asyncio.to_thread(redis.start)
    await slack.server.start()
    soak = Soak(slack, redis, free_port(scale.workers + 2), scale.workers)
    slack.watchers.append(soak.watch)

    async def alert_event(event: dict[str, Any]) -> None:  # Slack sends the app each webhook's message event
        event_id = f"Ev{uuid.uuid4().hex[:12]}"
        await soak.deliver(lambda n: soak.sender.event(event, event_id=event_id, retry_num=n))

    slack.deliver = alert_event
    started = time.monotonic()
    try:
        fault.until = 0.0  # Slack is well while OpsPilot starts: the incident begins with the load
        await soak.start_serve()
        fault.until = float("inf")
        load_end = time.monotonic() + scale.over_s
        chaos = asyncio.create_task(_chaos(soak, scale, load_end))
        asks = []
        flows = set(random.Random(3).sample(range(scale.questions), min(scale.confirms, scale.questions)))
        clicks2 = set(sorted(flows)[:scale.double_clicks])
        for i in range(scale.questions):
            channel = f"C{i % scale.channels:03d}"
            if i in flows:
                asks.append(asyncio.create_task(_flow(soak, channel, i, i in clicks2, load_end + scale.settle_s)))
            elif i % 5 == 4 and i >= scale.channels and i - scale.channels not in flows \
                    and (i - scale.channels) % 5 != 4:  # a follow-up in an earlier thread of OpsPilot's
                earlier = f"{5000 + i - scale.channels}.0001"
                asks.append(asyncio.create_task(_follow_up(soak, channel, i, earlier, load_end + scale.settle_s)))
            else:
                asks.append(asyncio.create_task(soak.ask(channel, f"{5000 + i}.0001", QUESTION)))
            await asyncio.sleep(scale.over_s / scale.questions)
        await chaos
        fault.until = 0.0  # the incident is over: everything must now converge
        await asyncio.gather(*asks)
        await _converge(soak, time.monotonic() + scale.settle_s)
        return await _figures(soak, scale, time.monotonic() - started)
    finally:
        if soak.proc is not None and soak.proc.returncode is None:
            soak.proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(soak.proc.wait(), 15)
        await slack.server.stop()
        await asyncio.to_thread(redis.stop)
        shutil.rmtree(redis.workdir, ignore_errors=True)


def _answers(soak: Soak) -> dict[str, Counter[str]]:
    """Per thread: each answer's outbox key → how many messages carry it (more than one is a duplicate)."""
    out: dict[str, Counter[str]] = {}
    for (channel, _), m in list(soak.slack.messages.items()):
        key = str(((m.get("metadata") or {}).get("event_payload") or {}).get("key") or "")
        if (key.startswith("answer:") and key.endswith(":0")) or key.startswith("failed:"):
            out.setdefault(f"{channel}:{m.get('thread_ts') or m['ts']}", Counter())[key] += 1
    return out


async def _converge(soak: Soak, deadline: float) -> None:
    while time.monotonic() < deadline:
        answers = _answers(soak)
        alerts = storm.figures(soak.slack, soak.alerts, answers)
        stormed = alerts["alerts_answered"] >= alerts["alerts_investigated"] and not alerts["alerts_unhandled"] \
            and (alerts["storm_notices"] or not alerts["alerts_offered"])  # an offer: the storm is said too
        if stormed and all(len(answers.get(t, ())) >= n for t, n in soak.asked.items()) and \
                all(ts in soak.ended for ts in soak.clicked) and not soak.slack.unstopped_streams():
            return
        await asyncio.sleep(0.5)


async def _figures(soak: Soak, scale: Scale, wall_s: float) -> dict[str, Any]:
    answers = _answers(soak)
    asked = sum(soak.asked.values())
    answered = sum(min(len(answers.get(t, ())), n) for t, n in soak.asked.items())
    twice = sum(max(len(answers.get(t, ())) - n, 0) for t, n in soak.asked.items())  # a question run twice
    dup_keys = Counter(str(((m.get("metadata") or {}).get("event_payload") or {}).get("key") or "")
                       for m in soak.slack.messages.values())
    duplicates = sum(n - 1 for k, n in dup_keys.items() if k and n > 1)
    store = RedisStore(connect(soak.redis.url), keys=Keys(soak.prefix))
    try:
        audit = await store.read_audit(10_000)
        untimed = 0
        async for key in store.client.scan_iter(match=f"{soak.prefix}:*"):
            untimed += int(await store.client.ttl(key) == -1)
        dead = (await store.queue.stats()).dead
    finally:
        await store.close()
    restarts = Counter((a["run_id"], a["call_id"]) for a in audit if a.get("status") not in ("skipped",))
    latency = [soak.closed[ts] - at for ts, at in soak.clicked.items() if ts in soak.closed]
    ended = sorted(soak.ended[ts] - at for ts, at in soak.clicked.items() if ts in soak.ended)
    return {"questions": asked, "answered": answered, "answered_twice": twice, "duplicates": duplicates,
            "cards": len(soak.clicked), "confirms": min(scale.confirms, scale.questions),
            "restarts_twice": sum(1 for n in restarts.values() if n > 1), "restarts": len(restarts),
            "cards_closed": len(latency), "close_p50_s": statistics.median(latency) if latency else float("nan"),
            "close_p95_s": sorted(latency)[int(0.95 * (len(latency) - 1))] if latency else float("nan"),
            "cards_ended": len(ended), "outcome_p50_s": statistics.median(ended) if ended else float("nan"),
            "outcome_p95_s": ended[int(0.95 * (len(ended) - 1))] if ended else float("nan"),
            "streams_open": len(soak.slack.unstopped_streams()), "keys_without_ttl": untimed, "dead_letters": dead,
            "worker_kills": soak.kills, "front_kills": soak.front_kills, "undelivered": soak.undelivered,
            "wall_s": wall_s, "alert_threads": storm.detail(soak.slack, soak.alerts, soak.clicked, soak.ended)} | \
        storm.figures(soak.slack, soak.alerts, answers)


async def run(scale: Scale | None = None) -> list[Table]:
    scale = scale or (ISSUE if os.environ.get("SOAK_SCALE") == "issue" else Scale())
    f = await run_soak(scale)
    return [Table(
        f"The soak: {f['questions']} questions ({f['confirms']} confirm flows) over {scale.channels} channels in "
        f"{scale.over_s:g} s, {scale.fault_rate:.0%} of Slack calls failing, a worker killed every "
        f"{scale.kill_every_s:g} s, the front killed {len(scale.front_kills)}×, Redis stopped "
        f"{len(scale.redis_stops)}×, {scale.alert_storm[1]} alerts in {scale.alert_storm[2]:g} s",
        ["answered", "answered twice", "posted twice", "cards shown", "restarts run twice", "card close p50 (s)",
         "card close p95 (s)", "outcome on card p50 (s)", "outcome on card p95 (s)", "streams left open",
         "keys without TTL", "dead letters", "kills (workers / front)",
         "alerts investigated / answered / offered / unhandled",
         "storm notices", "wall (s)"],
        [[f"{f['answered']}/{f['questions']}", f["answered_twice"], f["duplicates"], f"{f['cards']}/{f['confirms']}",
          f["restarts_twice"], f["close_p50_s"], f["close_p95_s"], f["outcome_p50_s"], f["outcome_p95_s"],
          f["streams_open"], f["keys_without_ttl"], f["dead_letters"], f"{f['worker_kills']} / {f['front_kills']}",
          f"{f['alerts_investigated']} / {f['alerts_answered']} / {f['alerts_offered']} / {f['alerts_unhandled']} "
          f"of {f['alerts']}",
          f["storm_notices"], f["wall_s"]]],
        [verdict("questions answered exactly once", f["answered"], f["questions"], "", lower_is_better=False),
         verdict("questions answered twice", f["answered_twice"], 0, ""),
         verdict("messages posted twice", f["duplicates"], 0, ""),
         verdict("cards shown", f["cards"], f["confirms"], "", lower_is_better=False),
         verdict("card close p95 after a click", f["close_p95_s"], 5.0, " s"),
         verdict("streams left open", f["streams_open"], 0, ""),
         verdict("alert investigations (at most the channel's automatic runs)", f["alerts_investigated"],
                 storm.ALERT_RUNS, ""),
         verdict("alert investigations answered", f["alerts_answered"], f["alerts_investigated"], "",
                 lower_is_better=False),
         verdict("alert investigations answered twice", f["alerts_answered_twice"], 0, ""),
         verdict("alerts neither investigated, offered nor noted", f["alerts_unhandled"], 0, "")])]


def _updates_per_minute() -> int:
    return int(os.environ.get("SOAK_UPDATES", "50"))


if __name__ == "__main__":
    for table in asyncio.run(run(SMALL if "--small" in sys.argv else None)):
        print(table.render())
