"""A worker dies between 'started' and 'finished' of a change: it is answered outcome_unknown, never re-run."""

from __future__ import annotations

import asyncio
import json
import sys

from pydantic import BaseModel

from bot.agent.models.scripted import ScriptedModel, reply
from bot.agent.transcript import violations
from core.messages import ToolResultMessage
from state import RedisStore
from tests.conftest import make_harness
from tools import ToolContext, tool


class Target(BaseModel):
    service_id: str


async def test_crash_mid_change_gives_outcome_unknown_and_no_second_execution(
        store: RedisStore, redis_url: str, prefix: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.crash_worker", redis_url, prefix,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 17, stderr.decode()
    assert stdout.decode().count("RESTARTING") == 1

    run_id = await store.thread_run("crash-thread")
    assert run_id is not None
    record = await store.load_run(run_id)
    assert record is not None and record.status == "running"
    assert await store.journal.states(run_id) == {"crash1": "started"}
    assert await store.journal.arguments(run_id) == {"crash1": {"service_id": "payments"}}
    # As a worker whose call was completed by a form (its environment chosen there) journals it: the audit of a
    # change cut off by the crash names what may have run, not the model's call without the environment.
    key = store.keys.journal(run_id)
    mark = json.loads(await store.client.hget(key, "crash1"))
    await store.client.hset(key, "crash1", json.dumps({**mark, "arguments": {"service_id": "payments",
                                                                               "environment": "prod"}}))

    executions: list[str] = []

    @tool(description="Would restart again.", mutating=True, args=Target)
    async def restart_service(args: Target, ctx: ToolContext) -> dict[str, str]:
        executions.append(ctx.call_id)
        return {"restarted": args.service_id}

    model = ScriptedModel([reply("I cannot tell whether payments restarted; please check.")])
    h = make_harness(model, store, [restart_service])
    await asyncio.sleep(0.4)  # the dead worker's lease lapses

    out = await h.engine.recover(run_id)

    assert executions == []
    assert out.stop_reason == "final_answer"
    transcript = await store.load_transcript("crash-thread")
    assert violations(transcript) == []
    res = {m.call_id: json.loads(m.content) for m in transcript if isinstance(m, ToolResultMessage)}
    assert res["crash1"]["errorCode"] == "outcome_unknown"
    # The second change never started (one change per step): it was deferred, not lost.
    assert res["crash2"]["errorCode"] in {"deferred_one_write_per_step", "interrupted_by_restart"}
    assert any(isinstance(m, ToolResultMessage) and m.call_id == "crash1" for m in model.requests[0].messages)
    [audited] = [e for e in await store.read_audit(run_id=run_id) if e.get("call_id") == "crash1"]
    assert json.loads(audited["arguments"]) == {"service_id": "payments", "environment": "prod"}, audited
