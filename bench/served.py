"""Redis commands per model step as deployed (issue 39): ``opspilot serve --workers 1`` (a front and a worker, HTTP
mode) with the offline demo model against the local fake Slack, N questions in N threads (each its own user and
channel, so no run limit holds one back), everything a question costs on Redis counted: the front's request and its
dedupe, the work stream, the engine, the progress message's saved state and outbox, delivery, pacing, the answer.

The servers' ``INFO commandstats`` (commands inside scripts counted too) are sampled before the questions and after
every answer has arrived and a short settle; the pollers' idle rate (the outbox's due indexes, timers, sweeps,
measured for a few seconds just before) times the window is taken off. Model steps are the assistant messages in the
threads' transcripts. The engine alone is the overhead benchmark's figure; this one is what a deployment pays."""

from __future__ import annotations

import asyncio
import sys
import uuid

from bench.ack_latency import _stop
from bench.common import Table, free_port, isolated_redis, server_sample, verdict
from bench.startup import SECRET, _env, _until
from bot.demo.sender import SlackSender, mention
from bot.demo.workspace import LocalSlack
from state import connect

GOAL = 8.0  # the commands per model step
IDLE_S, SETTLE_S = 5.0, 3.0


def _answered(slack: LocalSlack, channel: str, ts: str) -> bool:
    return any(str(((m.get("metadata") or {}).get("event_payload") or {}).get("key", "")).startswith("answer:")
               for m in slack.thread(channel, ts))


async def _ask(sender: SlackSender, n: int) -> tuple[str, str]:
    channel, ts = f"C{uuid.uuid4().hex[:8].upper()}", f"{100 + n}.1"

    async def acknowledged() -> bool:
        try:
            status, _ = await sender.event(mention(channel, f"UBENCH{n}", "payments errors", ts),
                                           event_id=f"Ev{uuid.uuid4().hex[:10]}")
        except OSError:  # not listening yet
            return False
        return status == 200

    await _until(acknowledged, "serve acknowledging a question")
    return channel, ts


async def run(questions: int = 40) -> list[Table]:
    slack = LocalSlack(token="xoxb-test-token")
    await slack.server.start()
    try:
        async with isolated_redis() as url:
            port = free_port(2)
            env = _env(slack, url, port)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot.cli", "serve", "--workers", "1", env=env,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
            sender = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
            client = connect(url)
            try:
                first = [await _ask(sender, 0)]  # warm: imports, scripts loaded, connections open

                async def answered(threads: list[tuple[str, str]] = first) -> bool:
                    return all(_answered(slack, *t) for t in threads)

                await _until(answered, "the first answer", 120)
                await asyncio.sleep(SETTLE_S)
                quiet = await server_sample(url)
                await asyncio.sleep(IDLE_S)
                idle = (await server_sample(url)).since(quiet)
                before = await server_sample(url)
                threads = [await _ask(sender, n) for n in range(1, questions + 1)]
                await _until(lambda: answered(threads), "every answer", 600)
                await asyncio.sleep(SETTLE_S)
                used = (await server_sample(url)).since(before)
                steps = 0
                async for key in client.scan_iter(match=f"{env['OPSPILOT_KEY_PREFIX']}:*:transcript"):
                    steps += sum('"role":"assistant"' in m for m in await client.lrange(key, 0, -1))
            finally:
                await client.aclose()
                await _stop(proc)
    finally:
        await slack.server.stop()
    steps_each = steps / (questions + 1)  # the warm-up's thread is in the transcripts too
    idle_rate = sum(idle.calls.values()) / idle.seconds
    total = sum(used.calls.values()) - idle_rate * used.seconds
    per_question = total / questions
    per_step = per_question / steps_each
    rows: list[list[object]] = [[name.upper(), n / questions] for name, n in used.calls.most_common(14)]
    return [Table(f"Redis commands per question as deployed: `serve --workers 1`, the demo model, {questions} "
                  f"questions ({steps_each:.1f} model steps each), the pollers' idle rate taken off",
                  ["command", "per question"], rows,
                  [f"per question: {per_question:.1f} commands; per model step: {per_step:.1f}",
                   verdict("Redis commands per model step as deployed (front, worker, outbox and delivery included)",
                           per_step, GOAL, ""),
                   f"idle (nobody asking): {idle_rate:.1f} commands/s for the two processes; "
                   f"the window: {used.seconds:.1f} s"])]


if __name__ == "__main__":
    for table in asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 40)):
        print(table.render())
