"""The seed article's checklist, against a real Redis."""

from __future__ import annotations

import json

import pytest

from bot.agent.limits import Limits
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.agent.transcript import violations
from core.messages import AssistantMessage, ToolResultMessage, UserMessage
from state import RedisStore
from tests.conftest import make_harness
from tests.toolkit import Probe, toolkit


def body(result: ToolResultMessage) -> dict:
    return json.loads(result.content)


async def test_two_read_only_tools_give_two_call_and_two_result_events(store: RedisStore) -> None:
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("lookup_a", q="1"), call("lookup_b", q="2")), reply("both done")])
    h = make_harness(model, store, [tools["lookup_a"], tools["lookup_b"]])

    out = await h.engine.ask("t", "look", user_id="U1")

    assert out.stop_reason == "final_answer" and out.answer == "both done"
    assert h.types() == ["run_started", "model_step", "tool_call", "tool_call", "tool_result", "tool_result",
                         "model_step", "run_finished"]
    assert [e.seq for e in h.events] == list(range(len(h.events)))
    transcript = await store.load_transcript("t")
    assert violations(transcript) == []
    assert [body(m)["data"] for m in transcript if isinstance(m, ToolResultMessage)] == [{"a": "1"}, {"b": "2"}]


async def test_a_raising_tool_is_an_observation_and_the_run_still_answers(store: RedisStore) -> None:
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("broken"), call("lookup_a")), reply("broken failed, A worked")])
    h = make_harness(model, store, [tools["broken"], tools["lookup_a"]])

    out = await h.engine.ask("t", "go")

    assert out.stop_reason == "final_answer"
    failed = next(m for m in await store.load_transcript("t") if isinstance(m, ToolResultMessage) and m.is_error)
    payload = body(failed)
    assert payload["ok"] is False and payload["errorCode"] == "internal_error"
    assert "Traceback" not in failed.content and "hunter2" not in failed.content and "line 3" not in failed.content
    # The model saw the failure on its second step.
    second = model.requests[1].messages
    assert any(isinstance(m, ToolResultMessage) and m.is_error for m in second)


async def test_parallel_batch_with_a_question_keeps_the_other_result_before_pausing(store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe, slow_s=0.05)
    model = ScriptedModel([reply("", call("needs_env", "c1"), call("lookup_a", "c2", q="slow"))])
    h = make_harness(model, store, [tools["needs_env"], tools["lookup_a"]])

    out = await h.engine.ask("t", "logs please")

    assert out.status == "paused" and [p.call_id for p in out.pending] == ["c1"]
    assert out.pending[0].interrupt_type == "params_required"
    assert out.pending[0].payload["fields"] == [{"name": "environment", "choices": ["prod", "staging"]}]
    transcript = await store.load_transcript("t")
    results = [m for m in transcript if isinstance(m, ToolResultMessage)]
    assert [r.call_id for r in results] == ["c2"] and body(results[0])["data"] == {"a": "slow"}
    # The slow result was written and announced before the interrupt.
    types = h.types()
    assert types.index("tool_result") < types.index("loop_interrupt")
    record = await store.load_run(out.run_id)
    assert record is not None and record.status == "paused" and record.pending[0].call.id == "c1"


async def test_identical_calls_in_a_row_stop_as_loop_detected(store: RedisStore) -> None:
    tools = toolkit(Probe())
    same = [reply("", call("lookup_a", q="same")) for _ in range(3)]
    model = ScriptedModel([*same, reply("summary: kept getting the same answer")])
    h = make_harness(model, store, [tools["lookup_a"]], limits=Limits(identical_call_limit=3, max_steps=10))

    out = await h.engine.ask("t", "loop")

    assert out.stop_reason == "loop_detected"
    assert "repeating the same call" in out.answer and "summary: kept getting" in out.answer
    assert sum(1 for e in h.of("tool_call")) == 3
    # The summary request offered no tool use.
    assert model.requests[-1].tool_choice.mode == "none"


async def test_tight_max_steps_stops_with_a_readable_answer(store: RedisStore) -> None:
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("lookup_a", q=str(i))) for i in range(2)] + [reply("found 2 things")])
    h = make_harness(model, store, [tools["lookup_a"]], limits=Limits(max_steps=2))

    out = await h.engine.ask("t", "dig")

    assert out.stop_reason == "max_steps"
    assert out.answer.startswith("_Stopped early: it reached its step limit._") and "found 2 things" in out.answer
    assert h.of("run_finished")[0].stop_reason == "max_steps"
    assert violations(await store.load_transcript("t")) == []


async def test_limit_stop_falls_back_to_a_plain_message_when_the_summary_fails(store: RedisStore) -> None:
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("lookup_a", q="1"))])  # the summary request exhausts the script
    h = make_harness(model, store, [tools["lookup_a"]], limits=Limits(max_steps=1))

    out = await h.engine.ask("t", "dig")

    assert out.stop_reason == "max_steps"
    assert "What ran:" in out.answer and "`lookup_a`: done" in out.answer


async def test_failures_in_a_row_stop_the_run(store: RedisStore) -> None:
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("broken", q=str(i))) for i in range(3)] + [reply("all failed")])
    h = make_harness(model, store, [tools["broken"]], limits=Limits(max_tool_fails_in_row=3))

    out = await h.engine.ask("t", "try")

    assert out.stop_reason == "too_many_fails"


async def test_declines_are_decisions_not_failures(store: RedisStore) -> None:
    """Four changes declined by a person ended the run "too many tool calls failed in a row", and stats counted
    four failures where nothing ran."""
    from bot.agent.decisions import Decline

    tools = toolkit(Probe())
    model = ScriptedModel([*(reply("", call("change", f"c{i}", target=f"t{i}", environment="prod")) for i in range(4)),
                           reply("nothing changed, as you asked")])
    h = make_harness(model, store, [tools["change"]], limits=Limits(max_tool_fails_in_row=3))
    out = await h.engine.ask("t", "change things")
    while out.status == "paused":
        out = await h.engine.resume_token(out.pending[0].token, Decline("not now"), by="U2")
    assert (out.stop_reason, out.answer) == ("final_answer", "nothing changed, as you asked")
    stats = await store.stats(3600)
    assert (stats.get("tool_calls"), stats.get("tool_failures")) == (4, 0)


async def test_wall_time_stops_a_slow_run_and_answers_every_call(store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1"), call("lookup_a", "a1")), reply("partial summary")])
    h = make_harness(model, store, [tools["blocker"], tools["lookup_a"]], limits=Limits(max_wall_time_s=0.3))

    out = await h.engine.ask("t", "slow")

    assert out.stop_reason == "timeout"
    transcript = await store.load_transcript("t")
    assert violations(transcript) == []
    results = {m.call_id: m for m in transcript if isinstance(m, ToolResultMessage)}
    assert results["a1"].status == "ok"  # finished before the deadline: kept, not overwritten
    assert results["b1"].status == "cancelled" and body(results["b1"])["errorCode"] == "timeout"
    # Exactly one tool_result event per call id.
    assert sorted(e.call_id for e in h.of("tool_result")) == ["a1", "b1"]


async def test_unknown_tool_and_invalid_arguments_are_observations(store: RedisStore) -> None:
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("nope"), call("lookup_a", q=5), call("change", environment="x")),
                           reply("ok")])
    h = make_harness(model, store, [tools["lookup_a"], tools["change"]])

    await h.engine.ask("t", "go")

    codes = [body(m)["errorCode"] for m in await store.load_transcript("t") if isinstance(m, ToolResultMessage)]
    assert codes == ["unknown_tool", "validation_error", "validation_error"]
    messages = [body(m)["message"] for m in await store.load_transcript("t") if isinstance(m, ToolResultMessage)]
    assert "q" in messages[1] and "target" in messages[2]


async def test_only_one_change_runs_per_step(store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("change", "w1", target="a"), call("change_b", "w2", target="b"),
                                 call("lookup_a", "r1")), reply("done")])
    h = make_harness(model, store, [tools["change"], tools["change_b"], tools["lookup_a"]])

    await h.engine.ask("t", "change both")

    results = {m.call_id: body(m) for m in await store.load_transcript("t") if isinstance(m, ToolResultMessage)}
    assert results["w1"]["ok"] and results["r1"]["ok"]
    assert results["w2"]["errorCode"] == "deferred_one_write_per_step"
    assert "ran first" not in results["w2"]["message"]  # said before it runs: it may yet wait for a person
    assert probe.count("change") == 1 and probe.count("change_b") == 0
    # The read-only call ran before the change.
    assert probe.log.index("lookup_a") < probe.log.index("change")


async def test_a_thread_keeps_its_history_across_turns(store: RedisStore) -> None:
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("lookup_a")), reply("first"), reply("second")])
    h = make_harness(model, store, [tools["lookup_a"]])

    await h.engine.ask("t", "one")
    await h.engine.ask("t", "two")

    seen = model.requests[-1].messages
    assert [m.content for m in seen if isinstance(m, UserMessage)] == ["one", "two"]
    assert any(isinstance(m, AssistantMessage) and m.content == "first" for m in seen)


async def test_the_trace_records_steps_calls_and_the_stop_reason(store: RedisStore) -> None:
    from state.records import CallTrace, FinishTrace, StepTrace

    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("lookup_a", "t1", q="1"), call("broken", "t2")), reply("done")])
    h = make_harness(model, store, [tools["lookup_a"], tools["broken"]])

    out = await h.engine.ask("thread-9", "trace me", user_id="U7")

    trace = (await store.load_run(out.run_id) or pytest.fail("no run")).trace
    steps = [e for e in trace if isinstance(e, StepTrace)]
    calls = [e for e in trace if isinstance(e, CallTrace)]
    finish = [e for e in trace if isinstance(e, FinishTrace)]
    assert [(s.step, s.asked_for_tools) for s in steps] == [(1, True), (2, False)]
    assert all(s.model_latency_ms >= 0 for s in steps)
    assert [(c.call_id, c.tool, c.status, c.error_code) for c in calls] == [
        ("t1", "lookup_a", "ok", None), ("t2", "broken", "error", "internal_error")]
    assert calls[0].args_digest.startswith("lookup_a:") and all(c.latency_ms >= 0 for c in calls)
    assert [(f.stop_reason, f.steps) for f in finish] == [("final_answer", 2)]
    record = await store.load_run(out.run_id)
    assert record is not None and (record.thread_id, record.user_id, record.step) == ("thread-9", "U7", 2)


async def test_the_run_record_keeps_previews_the_transcript_keeps_the_text(store: RedisStore) -> None:
    long_answer = "finding " * 300
    out = await make_harness(ScriptedModel([reply(long_answer)]), store, []).engine.ask("t", "q" * 1000)
    assert out.answer == long_answer
    record = await store.load_run(out.run_id)
    assert record is not None and len(record.answer) <= 200 and len(record.text) <= 200
    transcript = await store.load_transcript("t")
    assert transcript[0].content == "q" * 1000 and transcript[-1].content == long_answer


async def test_a_call_id_the_model_repeats_is_made_new_to_the_thread(store: RedisStore) -> None:
    """Some OpenAI-compatible servers number calls from ``call_0`` in every reply: two calls of one reply with one
    id, and an id a later step uses again, each get a result of their own, and the transcript stays valid."""
    tools = toolkit(Probe())
    model = ScriptedModel([reply("", call("lookup_a", "call_0", q="1"), call("lookup_b", "call_0", q="2")),
                           reply("", call("lookup_a", "call_0", q="3")), reply("all done")])
    h = make_harness(model, store, [tools["lookup_a"], tools["lookup_b"]])

    out = await h.engine.ask("t", "look", user_id="U1")

    assert out.stop_reason == "final_answer"
    transcript = await store.load_transcript("t")
    assert violations(transcript) == []
    ids = [c.id for m in transcript if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert ids == ["call_0", "call_0_2", "call_0_3"]
    results = [(m.call_id, body(m)["data"]) for m in transcript if isinstance(m, ToolResultMessage)]
    assert results == [("call_0", {"a": "1"}), ("call_0_2", {"b": "2"}), ("call_0_3", {"a": "3"})]


async def test_a_step_of_several_calls_made_again_and_again_is_a_loop(store: RedisStore) -> None:
    """[lookup_a q=1, lookup_b q=1] asked step after step never made one call repeat in a row: it ran to the step
    limit (8 steps) instead of stopping as a loop after 3."""
    tools = toolkit(Probe())
    same = [reply("", call("lookup_a", q="1"), call("lookup_b", q="1")) for _ in range(8)]
    model = ScriptedModel([*same, reply("summary: the same two lookups again")])
    h = make_harness(model, store, [tools["lookup_a"], tools["lookup_b"]],
                     limits=Limits(identical_call_limit=3, max_steps=10))
    out = await h.engine.ask("t", "loop")
    assert out.stop_reason == "loop_detected" and sum(1 for _ in h.of("tool_call")) == 6
