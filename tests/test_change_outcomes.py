"""What a change's backend answered, told as it is: a job that says it failed failed; a change sent whose answer
was lost may have been carried out (never "did not run", which invites doing it twice); a change made whose
progress could not be followed is issued, not verified, and never "done" in the audit; a long answer is read to
its end."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from bot.agent.fallback import ran
from bot.slack.outbound.audit import audit_line, outcome
from bot.slack.outbound.outputs import what_ran
from core.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from tests.fakes.ops_servers import OpsFakes, loki_line
from tests.test_ops import data, error_code, live, run
from tools import ops
from tools.ops import toolbox_config as cfg


def webhooks(fakes: OpsFakes) -> ops.Toolbox:
    restart = cfg.WebhookRestarts(backend="webhook", url=f"{fakes.url}/hooks/restart", token_env="OPS_TOKEN")
    change = cfg.WebhookActions(backend="webhook", url=f"{fakes.url}/hooks/change", token_env="OPS_TOKEN")
    return live(fakes, restart=restart, rollback=change, scale=change)


RESTART = {"service_id": "payments", "environment": "prod"}
ROLLBACK = {"service_id": "orders", "environment": "staging", "to_release": "2026.12.01-4"}


@pytest.mark.parametrize(("tool", "args"), [("restart_service", RESTART), ("rollback_service", ROLLBACK)])
async def test_a_job_that_answers_failed_at_once_failed(fakes: OpsFakes, tool: str, args: dict[str, Any]) -> None:
    fakes.webhook_answer = (200, {"id": "job-1", "status": "failed", "message": "pipeline refused: freeze window"})
    done = data(await run(webhooks(fakes), tool, confirmed_by="UBOB", **args))
    assert done["rollout"] == "failed" and "freeze window" in done["rollout_detail"], done
    assert outcome({"status": "ok", "rollout": done["rollout"]}, "en") == "issued, rollout failed"


@pytest.mark.parametrize(("tool", "args"), [("restart_service", RESTART), ("rollback_service", ROLLBACK)])
async def test_a_job_accepted_then_lost_is_issued_and_not_verified(fakes: OpsFakes, tool: str,
                                                                   args: dict[str, Any]) -> None:
    fakes.job_status = 500  # the POST was taken; following its job fails
    done = data(await run(webhooks(fakes), tool, confirmed_by="UBOB", **args))
    assert done["rollout"] == "unknown" and "could not be followed" in done["rollout_detail"], done
    assert "HTTP 500" in done["rollout_detail"]
    said = outcome({"status": "ok", "rollout": "unknown"}, "en")
    assert said == "issued, rollout progress could not be followed" and "done" not in said


@pytest.mark.parametrize("answer", [(502, {"error": "bad gateway"}), (200, "<html>accepted</html>")])
async def test_a_change_sent_whose_answer_is_unreadable_may_have_run(fakes: OpsFakes, answer: tuple[int, Any]) -> None:
    fakes.webhook_answer = answer
    obs = await run(webhooks(fakes), "restart_service", confirmed_by="UBOB", **RESTART)
    assert error_code(obs) == "outcome_unknown"
    assert obs.result is not None and "may or may not have been carried out" in json.loads(obs.result.content)[
        "message"]


async def test_a_change_that_could_not_be_sent_did_not_run(fakes: OpsFakes) -> None:
    dead = ops.build(cfg.OpsConfig(restart=cfg.WebhookRestarts(backend="webhook", url="http://127.0.0.1:9/x")))
    obs = await run(dead, "restart_service", confirmed_by="UBOB", **RESTART)
    assert error_code(obs) == "upstream_error"
    assert obs.result is not None and "unreachable" in json.loads(obs.result.content)["message"]


def test_a_stopped_runs_summary_says_issued_not_done() -> None:
    call = ToolCall(id="c1", name="restart_service", arguments=RESTART)
    body = {"ok": True, "data": {"rollout": "timed_out", "verdict": "restart issued, but…"}}
    transcript = [UserMessage(content="restart payments"), AssistantMessage(tool_calls=(call,)),
                  ToolResultMessage(call_id="c1", name="restart_service", content=json.dumps(body))]
    [entry] = ran(transcript)
    assert (entry.outcome, entry.code) == ("issued", "timed_out")
    text = what_ran((entry,), "en")
    assert "issued, rollout did not finish in time: not verified" in text and "done" not in text, text


def test_a_tools_own_rollout_word_is_shown_as_text_in_the_audit() -> None:
    """A tool (an MCP server's, say) names its rollout state in words of its own: data, never Slack markup that
    pings a channel or links somewhere (the answer's Audit list and App Home's Recent changes show this line)."""
    entry = {"tool": "apply_change", "status": "ok", "rollout": "<!channel> <https://evil.example|log in>"}
    line = audit_line(entry, "en")
    assert "<!channel>" not in line and "<https:" not in line and "&lt;!channel&gt;" in line, line


async def test_a_long_answer_is_read_to_its_end(fakes: OpsFakes) -> None:
    """One read of a socket returns what has arrived so far: a Loki answer of ~250 KB came back as "not JSON"."""
    now = time.time()
    fakes.loki_lines = [loki_line(now - i, "error", f"timeout acquiring connection {i} " + "x" * 180)
                        for i in range(1000)]
    found = data(await run(live(fakes), "query_logs", service_id="payments", environment="prod", minutes=30))
    _, _, params = next(r for r in fakes.requests if r[0] == "loki")
    assert int(params["limit"]) >= 1000 and found["patterns"][0]["count"] == 1000, found["patterns"][0]


@pytest.mark.parametrize("raw", [{"data": {"resultType": "streams", "result": ["not a stream"]}},
                                 {"data": {"resultType": "streams", "result": [{"values": [["x", "y"]]}]}},
                                 {"status": "success", "data": [1, 2]}])
async def test_an_answer_of_a_shape_nobody_expected_is_the_backends_fault(fakes: OpsFakes, raw: Any) -> None:
    """JSON, but not Loki's shape: upstream_error, as the docs classify it (it was internal_error, a stack trace in
    the log), never a question to the model about its query."""
    fakes.loki_raw = raw
    obs = await run(live(fakes), "query_logs", service_id="payments", environment="prod")
    assert error_code(obs) == "upstream_error"


async def test_logs_capped_by_the_limit_say_so(fakes: OpsFakes) -> None:
    """1,000 lines back for a limit of 1,000: "1000× … (first 06:16)" read as the whole story."""
    now = time.time()
    fakes.loki_lines = [loki_line(now - i, "error", "timeout acquiring connection") for i in range(1200)]
    found = data(await run(live(fakes), "query_logs", service_id="payments", environment="prod", minutes=30))
    assert found["limit_reached"] is True and "counts and first-seen times are partial" in found["summary"]
    fakes.loki_lines = fakes.loki_lines[:10]
    few = data(await run(live(fakes), "query_logs", service_id="payments", environment="prod", minutes=30))
    assert few["limit_reached"] is False and "partial" not in few["summary"]


async def test_a_change_cut_off_by_its_time_limit_may_have_run() -> None:
    """A change past its tool's time limit after it started (its request sent) was "timeout", a failure: nothing
    ran, by the audit and the stopped run's summary."""
    import asyncio

    from core.messages import ToolCall as Call
    from state import MemoryStore
    from tests.toolkit import Change
    from tools import tool
    from tools.registry import Registry, ToolContext
    from tools.runtime import execute_one

    @tool(description="A change that takes longer than its limit.", mutating=True, timeout_s=0.2, args=Change)
    async def slow(args: Change, ctx: ToolContext) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {}

    ctx = ToolContext(run_id="r", thread_id="t", user_id="U", call_id="c1", confirmed_by="UBOB")
    obs = await execute_one(Call(id="c1", name="slow", arguments={"target": "payments", "environment": "staging"}),
                            registry=Registry.of([slow]), ctx=ctx, journal=MemoryStore().journal)
    assert error_code(obs) == "outcome_unknown"
    assert obs.result is not None and "may or may not have completed" in obs.result.content


async def test_a_change_refused_for_now_did_not_run(fakes: OpsFakes) -> None:
    """HTTP 429 is a refusal before acting: "did not run, try later", not "may have been carried out"."""
    fakes.webhook_answer = (429, {"error": "slow down"})
    obs = await run(webhooks(fakes), "restart_service", confirmed_by="UBOB", **RESTART)
    assert error_code(obs) == "upstream_error"
    assert obs.result is not None and "nothing was done" in json.loads(obs.result.content)["message"]
