"""The two ways Slack reaches OpsPilot: Socket Mode (a websocket) and `opspilot serve` over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.agent.models.base import label_of
from bot.agent.models.unloaded import ModelNotLoaded, Unloaded
from bot.demo.sender import SlackSender, block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from tests.conftest import free_port
from tests.fakes.anthropic_api import text
from tests.slack_harness import CHANNEL, SECRET, open_workspace

QUESTION = "看看支付服务最近报错，顺便对照一下文档里的处理建议"


def envelope_body(event: dict, event_id: str) -> dict:
    return {"token": "legacy", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
            "event_id": event_id, "event_time": 1, "event": event,
            "authorizations": [{"team_id": "T0001", "user_id": "UBOT", "is_bot": True}]}


async def test_socket_mode_acks_envelopes_and_a_redelivery_runs_once(redis_url: str, prefix: str,
                                                                     slack: FakeSlack) -> None:
    from bot.slack.service import socket_mode_handler

    ws = await open_workspace(redis_url, prefix, slack)
    handler = socket_mode_handler(ws.service, slack.app_token)
    try:
        await handler.connect_async()
        for _ in range(100):
            if slack.sockets:
                break
            await asyncio.sleep(0.02)
        body = envelope_body(mention(CHANNEL, "UREQ", QUESTION, "2000.1"), "EvSOCKET1")
        await slack.push("env-1", body)
        await slack.push("env-1-again", body)  # Socket Mode may redeliver with retry_attempt 0
        for _ in range(200):
            if len(slack.acks) >= 2 and len(slack.called("chat.postMessage")) >= 2:
                break
            await asyncio.sleep(0.05)
        await ws.settle()
        assert {a["envelope_id"] for a in slack.acks} >= {"env-1", "env-1-again"}
        assert len(slack.called("chat.postMessage")) == 2  # one progress message, one answer: one run
        assert "docs/payments-db-timeouts.md" in all_text(slack.thread(CHANNEL, "2000.1")[-1])
    finally:
        await handler.close_async()
        await ws.stop()


async def _ready(url: str, deadline_s: float = 120.0) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(int(deadline_s / 0.1)):
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with session.get(f"{url}/readyz") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url}/readyz never answered 200")


async def test_opspilot_serve_in_http_mode(redis_url: str, prefix: str, slack: FakeSlack, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith(("OPSPILOT_",
                                                                                                    "SLACK_"))}
    env |= {"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.api_url,
            "PORT": str(port), "REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix, "OPSPILOT_SLACK__LANGUAGE": "en",
            "OPSPILOT_DEMO_DATA": "1"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", "--workers", "2", env=env,
                                                cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        banner = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert "HTTP mode" in banner and "2 worker process(es)" in banner and "scripted demo model" in banner
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/healthz") as r:
            assert r.status == 200 and (await r.json())["ok"]
        # Ready means a worker reads the queue: on a busy machine that takes a while after the banner.
        await _ready(f"http://127.0.0.1:{port}")
        sender = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
        status, _ = await sender.event(mention(CHANNEL, "UREQ", QUESTION, "3000.1"))
        assert status == 200
        for _ in range(1200):  # waiting for the answer, not timing it: a generous deadline
            thread = slack.thread(CHANNEL, "3000.1")
            if thread and "docs/payments-db-timeouts.md" in all_text(thread[-1]):
                break
            await asyncio.sleep(0.05)
        assert "docs/payments-db-timeouts.md" in all_text(slack.thread(CHANNEL, "3000.1")[-1])
        forged, _ = await sender.event(mention(CHANNEL, "UREQ", "x", "3000.2"), secret="nope")
        assert forged == 401
        async with aiohttp.ClientSession() as session:
            for worker_port in (port + 1, port + 2):  # each worker answers its own health (once it is up)
                for _ in range(200):
                    with contextlib.suppress(aiohttp.ClientConnectionError):
                        async with session.get(f"http://127.0.0.1:{worker_port}/healthz") as r:
                            assert r.status == 200
                            break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError(f"no worker answers on port {worker_port}")
            async with session.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert "opspilot_work_pending 0" in await r.text()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    async with aiohttp.ClientSession() as session:  # the workers stopped with their front
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"http://127.0.0.1:{port + 1}/healthz")


async def test_serve_without_a_token_is_one_readable_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPSPILOT_"))}
    env["OPSPILOT_DEMO_DATA"] = "1"  # (the refusal of the demo data has its own test)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", env=env, cwd=tmp_path,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "SLACK_BOT_TOKEN is not set" in err.decode() and "Traceback" not in err.decode()


async def test_serve_with_a_bot_token_slack_refuses_stops_with_one_line(slack: FakeSlack, redis_url: str,
                                                                         prefix: str, tmp_path: Path) -> None:
    """Not serving on with every request answered 503 (ready, by /readyz): the configuration is wrong; said, exit 2.
    Slack failing (5xx) as the front starts is no reason not to start: it is an outage, not a wrong token."""
    port = free_port()
    env = _serve_env(slack, redis_url, prefix, port) | {"SLACK_BOT_TOKEN": "xoxb-wrong"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", "--workers", "1", env=env,
                                                cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2, err.decode()
    assert "Slack refused SLACK_BOT_TOKEN (invalid_auth)" in err.decode() and "Traceback" not in err.decode()
    assert "HTTP mode" not in out.decode()  # no banner: it never served
    slack.fault("error", "auth.test", for_s=300, status=503)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", "--workers", "0",
                                                env=_serve_env(slack, redis_url, prefix, port), cwd=tmp_path,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        assert "HTTP mode" in (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


async def test_serve_refuses_the_demo_data_unless_asked(slack: FakeSlack, redis_url: str, prefix: str,
                                                        tmp_path: Path) -> None:
    """No opspilot.yml: on-call questions would be answered from the bundled demo catalog, logs and metrics."""
    port = free_port()
    env = _serve_env(slack, redis_url, prefix, port) | {"OPSPILOT_DEMO_DATA": "0"}
    for command in (["serve", "--workers", "0"], ["worker"]):
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", *command, env=env, cwd=tmp_path,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 2, err.decode()
        assert "not starting: the toolbox would answer from the bundled demo data" in err.decode()
        assert "--demo-data" in err.decode() and "Traceback" not in err.decode()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", "--workers", "0",
                                                "--demo-data", env=env, cwd=tmp_path,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        banner = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert "answering from the bundled DEMO data (--demo-data), not your systems" in banner, banner
    finally:
        proc.terminate()  # handled from before the banner: a graceful stop
        await asyncio.wait_for(proc.wait(), 60)


async def test_serve_refuses_the_demo_restarts_unless_asked(slack: FakeSlack, redis_url: str, prefix: str,
                                                            tmp_path: Path) -> None:
    """Own data and no toolbox.restart: serve started with nothing in its banner, and a confirmed prod restart ran
    the demo backend ("Restarted payments in prod: the rollout completed") while nothing was restarted."""
    import shutil

    from tools import ops

    shutil.copytree(ops.DEMO_DATA, tmp_path / "data")
    (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  data_dir: {tmp_path / 'data'}\n")
    env = _serve_env(slack, redis_url, prefix, free_port()) | {"OPSPILOT_DEMO_DATA": "0"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", "--workers", "0", env=env,
                                                cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:  # it started: not left serving after the test
            proc.kill()
            await proc.wait()
    assert proc.returncode == 2, err.decode()
    assert "restart_service, rollback_service, scale_service would use the demo backends" in err.decode(), err
    assert "set toolbox.restart" in err.decode() and "Traceback" not in err.decode()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _serve_env(slack: FakeSlack, redis_url: str, prefix: str, port: int) -> dict[str, str]:
    """A clean environment for `opspilot serve` with short sweeps, so a dead worker's run is found fast."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith(("OPSPILOT_",
                                                                                                    "SLACK_"))}
    return env | {"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.api_url,
                  "PORT": str(port), "REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix, "OPSPILOT_DEMO_DATA": "1",
                  "OPSPILOT_SWEEPS__STALE_AFTER_S": "2", "OPSPILOT_SWEEPS__LEASE_TTL_S": "2",
                  "OPSPILOT_SWEEPS__INTERVAL_S": "1", "OPSPILOT_SLACK__LANGUAGE": "en",
                  "OPSPILOT_SLACK__PROGRESS": "update",
                  # Bursts from one person on purpose: the run limits have their own tests (test_run_limits.py).
                  "OPSPILOT_SLACK__LIMITS__PER_PERSON": "0", "OPSPILOT_SLACK__LIMITS__PER_CHANNEL": "0"}


async def _serve_with_workers(env: dict[str, str], cwd: Path) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", "--workers", "2", env=env,
                                                cwd=cwd, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    await asyncio.wait_for(proc.stdout.readline(), 30)
    port = int(env["PORT"])
    async with aiohttp.ClientSession() as session:  # both workers are up
        for worker_port in (port + 1, port + 2):
            for _ in range(300):
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    async with session.get(f"http://127.0.0.1:{worker_port}/healthz"):
                        break
                await asyncio.sleep(0.1)
    return proc


async def _eventually(predicate: Any, timeout_s: float = 60.0, shows: Any = None) -> None:
    for _ in range(int(timeout_s / 0.1)):
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"condition not met in time; {shows() if shows else ''}")


def _kill_workers(front_pid: int) -> list[int]:
    workers = _children(front_pid)
    assert len(workers) == 2
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    return workers


async def test_workers_killed_mid_run_are_replaced_and_the_answer_arrives_once(
        redis_url: str, prefix: str, slack: FakeSlack, tmp_path: Path) -> None:
    port = free_port()
    env = _serve_env(slack, redis_url, prefix, port) | {"OPSPILOT_LLM__SCRIPTED_LATENCY_S": "1.0"}
    proc = await _serve_with_workers(env, tmp_path)
    try:
        sender = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
        await sender.event(mention(CHANNEL, "UREQ", QUESTION, "3100.1"))
        # The run is under way (its progress message is up) when both worker processes die.
        await _eventually(lambda: any("step" in all_text(m) for m in slack.thread(CHANNEL, "3100.1")), 10)
        workers = _kill_workers(proc.pid)
        answer = "docs/payments-db-timeouts.md"
        await _eventually(lambda: any(answer in all_text(m) and "step" not in all_text(m)
                                      for m in slack.thread(CHANNEL, "3100.1")))
        await asyncio.sleep(2.0)  # anything that would come twice has time to
        bot = [m for m in slack.thread(CHANNEL, "3100.1") if m.get("bot")]
        assert len([m for m in bot if answer in all_text(m) and "step" not in all_text(m)]) == 1, \
            [all_text(m)[:80] for m in bot]
        progress = [m for m in bot if "step" in all_text(m)]
        assert len(progress) == 1 and ":white_check_mark: Done" in all_text(progress[0])
        assert sorted(_children(proc.pid)) != sorted(workers) and len(_children(proc.pid)) == 2  # replaced
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 60)


async def test_workers_killed_mid_confirmed_change_the_change_is_never_run_again(
        redis_url: str, prefix: str, slack: FakeSlack, tmp_path: Path) -> None:
    """Both workers die between pause and click, and again while the restart backend (a webhook) has the
    request: recovery reports the outcome as unknown, Resume carries on, the webhook is never called again."""
    calls: list[dict[str, Any]] = []

    async def restart_hook(request: web.Request) -> web.Response:
        calls.append(await request.json())
        await asyncio.sleep(3600)  # the job is in flight when the worker dies
        return web.json_response({})

    hook = web.Application()
    hook.router.add_post("/restart", restart_hook)
    runner = web.AppRunner(hook)
    await runner.setup()
    hook_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", hook_port).start()
    (tmp_path / "opspilot.yml").write_text(
        f"toolbox:\n  restart: {{backend: webhook, url: 'http://127.0.0.1:{hook_port}/restart'}}\n")
    port = free_port()
    proc = await _serve_with_workers(_serve_env(slack, redis_url, prefix, port), tmp_path)
    try:
        sender = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
        await sender.event(mention(CHANNEL, "UREQ", QUESTION, "3200.1"))
        await _eventually(lambda: any("docs/payments-db-timeouts.md" in all_text(m)
                                      for m in slack.thread(CHANNEL, "3200.1")))
        await sender.event(message(CHANNEL, "UREQ", "restart it in prod", "3200.19", thread_ts="3200.1"))
        await _eventually(lambda: any(b["action_id"] == "opspilot_confirm"
                                      for m in slack.thread(CHANNEL, "3200.1") for b in buttons(m)))
        card = next(m for m in slack.thread(CHANNEL, "3200.1")
                    if any(b["action_id"] == "opspilot_confirm" for b in buttons(m)))
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
        # Both workers die between the pause and the click: the paused run waits in Redis for whoever is next.
        paused_by = _kill_workers(proc.pid)
        await _eventually(lambda: len(set(_children(proc.pid)) - set(paused_by)) == 2, 30)
        await sender.action(block_action(user="UAPPROVER", channel=CHANNEL, message=card,
                                         action_id="opspilot_confirm", value=token))
        await _eventually(lambda: len(calls) == 1, 30)
        _kill_workers(proc.pid)

        def progress() -> dict[str, Any]:
            return [m for m in slack.thread(CHANNEL, "3200.1") if "step" in all_text(m)][-1]

        await _eventually(lambda: "Interrupted by a restart" in all_text(progress()))
        assert "may or may not have completed" in all_text(progress())  # the change's own line says so
        resume = next(b for b in buttons(progress()) if b["action_id"] == "opspilot_resume")
        await sender.action(block_action(user="UREQ", channel=CHANNEL, message=progress(),
                                         action_id="opspilot_resume", value=resume["value"]))

        def live_cards() -> list[dict[str, Any]]:
            return [m for m in slack.thread(CHANNEL, "3200.1")
                    if any(b["action_id"] == "opspilot_decline" for b in buttons(m))]

        # The run goes on; if the model wants the restart again, that is a new question to a person.
        await _eventually(lambda: "Audit" in all_text(slack.thread(CHANNEL, "3200.1")[-1]) or bool(live_cards()),
                          shows=lambda: [all_text(m)[:200] for m in slack.thread(CHANNEL, "3200.1")])
        for card in live_cards():
            decline = next(b for b in buttons(card) if b["action_id"] == "opspilot_decline")
            await sender.action(block_action(user="UREQ", channel=CHANNEL, message=card,
                                             action_id="opspilot_decline", value=decline["value"]))
        await _eventually(lambda: "Audit" in all_text(slack.thread(CHANNEL, "3200.1")[-1]),
                          shows=lambda: [all_text(m)[:200] for m in slack.thread(CHANNEL, "3200.1")])
        await asyncio.sleep(2.0)
        answer = all_text(slack.thread(CHANNEL, "3200.1")[-1])
        assert "`restart_service`" in answer and "outcome_unknown" in answer and "approved by <@UAPPROVER>" in answer
        assert "nothing was run" not in answer
        assert len(calls) == 1  # never run again: not by recovery, not by Resume
        assert len([m for m in slack.thread(CHANNEL, "3200.1") if "Audit" in all_text(m)]) == 1
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 60)
        await runner.cleanup()


_BUILT = """
import asyncio, sys
from bot.config import load_settings
from bot.slack.service import build_service
async def build() -> None:
    service = await build_service(load_settings(None), role=sys.argv[1])
    print(service.core.model.label, "anthropic" in sys.modules, "bot.agent.models.demo" in sys.modules)
    await service.stop()
    await service.core.close_connections()
asyncio.run(build())
"""


async def test_a_front_names_the_model_and_leaves_its_sdk_to_the_workers(
        redis_url: str, prefix: str, slack: FakeSlack, fake_anthropic: Any, tmp_path: Path) -> None:
    """A front never runs the model: it is built without importing the provider's SDK (seconds, before its
    first acknowledgement after a restart), under the label its workers show; a worker loads it. Neither loads
    the offline demo model, which is not theirs. Through `serve --workers 1`, the worker then answers with the real
    SDK."""
    env = _serve_env(slack, redis_url, prefix, free_port()) | {
        "ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": fake_anthropic.server.url}
    built = {}
    for role in ("front", "worker"):
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _BUILT, role, env=env, cwd=tmp_path,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()[-2000:]
        built[role] = out.decode().split()
    assert built["front"][0] == built["worker"][0] and built["front"][0].startswith("anthropic:claude")
    assert (built["front"][1], built["worker"][1]) == ("False", "True")
    assert (built["front"][2], built["worker"][2]) == ("False", "False")

    fake_anthropic.queue(text("From the runbook: raise the payments DB pool, then watch p99 latency."))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", "--workers", "1", env=env,
                                                cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        banner = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
        assert f"model: {built['front'][0]}" in banner
        sender = SlackSender(f"http://127.0.0.1:{env['PORT']}/slack/events", SECRET)
        # The front listens before its banner; the question waits in the queue for its worker, still starting.
        status, _ = await sender.event(mention(CHANNEL, "UREQ", QUESTION, "3400.1"))
        assert status == 200
        await _eventually(lambda: any("raise the payments DB pool" in all_text(m)
                                      for m in slack.thread(CHANNEL, "3400.1")), 120,
                          shows=lambda: [all_text(m)[:120] for m in slack.thread(CHANNEL, "3400.1")])
        assert len(fake_anthropic.requests) == 1 and not fake_anthropic.rejections
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 60)


async def test_a_run_that_reaches_a_front_says_it_is_a_wiring_bug() -> None:
    model = Unloaded(label_of("anthropic", "claude-x"))
    assert (model.label, model.scripted) == ("anthropic:claude-x", False)
    with pytest.raises(ModelNotLoaded, match="built without anthropic:claude-x"):
        await model.complete([], [])
