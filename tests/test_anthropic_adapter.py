"""The real anthropic SDK against a local server that enforces the Messages API's tool-use rules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.agent.decisions import Confirm
from bot.agent.limits import Limits
from bot.agent.models.anthropic import AnthropicModel, to_wire
from bot.agent.models.base import ModelError
from bot.assembly import Assembly
from core.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from state import Keys, RedisStore, connect
from tests.conftest import make_harness
from tests.fakes.anthropic_api import FakeAnthropic, error, text, tool_use, violations
from tests.toolkit import Probe, toolkit
from tools import ops


@pytest.fixture
def fake(fake_anthropic: FakeAnthropic) -> FakeAnthropic:
    return fake_anthropic


def model_for(fake: FakeAnthropic, **kw: Any) -> AnthropicModel:
    model = AnthropicModel("claude-test", api_key="test-key", base_url=fake.server.url, max_retries=2, **kw)
    fake.models.append(model)
    return model


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in request["messages"] if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b["type"] == "tool_result"]


async def test_the_fake_rejects_what_the_real_api_rejects(fake: FakeAnthropic) -> None:
    """Guard for the guard: a missing result, an orphan and text-before-result are all 400s."""
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]}
    tools = [{"name": "t", "description": "d", "input_schema": {"type": "object"}}]
    base = {"model": "m", "max_tokens": 10, "tools": tools}
    missing = {**base, "messages": [{"role": "user", "content": "hi"}, use, {"role": "user", "content": "next"}]}
    orphan = {**base, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]}
    text_first = {**base, "messages": [{"role": "user", "content": "hi"}, use, {"role": "user", "content": [
        {"type": "text", "text": "hm"}, {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]}]}
    assert "without `tool_result` blocks immediately after: toolu_1" in (violations(missing) or "")
    assert "unexpected `tool_use_id`" in (violations(orphan) or "")
    assert "must come before" in (violations(text_first) or "")
    assert violations({**base, "messages": [{"role": "user", "content": " "}]}) is not None

    # And through the SDK, a broken transcript is the provider's 400, surfaced as a ModelError.
    model = model_for(fake)
    broken = [UserMessage(content="hi"), AssistantMessage(tool_calls=(ToolCall(id="toolu_x", name="t"),)),
              UserMessage(content="and?")]
    with pytest.raises(ModelError) as info:
        await model.complete(broken, [])
    assert info.value.kind == "bad_request" and fake.rejections


async def test_parallel_tools_failures_and_an_answer_through_the_sdk(fake: FakeAnthropic, store: RedisStore) -> None:
    tools = toolkit(Probe())
    fake.queue(tool_use(("lookup_a", {"q": "1"}), ("broken", {"q": "2"}), say="checking both"),
               text("A says 1; broken failed."))
    h = make_harness(model_for(fake), store, [tools["lookup_a"], tools["broken"]])

    out = await h.engine.ask("t", "look at both")

    assert out.stop_reason == "final_answer" and out.answer == "A says 1; broken failed."
    assert fake.rejections == []
    second = fake.requests[1]
    results = tool_results(second)
    assert [r["is_error"] for r in results] == [False, True]
    # All results of the turn are in ONE user message, results first.
    last_user = second["messages"][-1]
    assert last_user["role"] == "user" and [b["type"] for b in last_user["content"]] == ["tool_result"] * 2
    assert json.loads(results[1]["content"])["errorCode"] == "internal_error"
    assert second["system"][0]["text"].startswith("You are OpsPilot")
    assert {t["name"] for t in second["tools"]} == {"lookup_a", "broken"}
    assert second["tools"][0]["input_schema"]["type"] == "object"


async def test_pause_resume_and_a_follow_up_stay_valid_for_the_api(fake: FakeAnthropic, store: RedisStore) -> None:
    toolbox = ops.build()
    fake.queue(
        tool_use(("search_resource", {"query": "支付服务"}), ("search_docs", {"query": "支付 超时"})),
        text("Payments has DB pool timeouts (search_resource); runbook says restart if DB is healthy."),
        tool_use(("restart_service", {"service_id": "payments", "environment": "prod"}), say="Restarting."),
        text("Restarted payments in prod."),
    )
    h = make_harness(model_for(fake), store, toolbox=toolbox)

    first = await h.engine.ask("t", "看看支付服务最近报错，顺便对照一下文档里的处理建议")
    paused = await h.engine.ask("t", "restart it in prod")
    assert paused.status == "paused"
    done = await h.engine.resume_token(paused.pending[0].token, Confirm(), by="U2")

    assert first.stop_reason == "final_answer" and done.answer == "Restarted payments in prod."
    assert fake.rejections == [] and len(toolbox.restarts.done) == 1
    last = fake.requests[-1]["messages"]
    # user, assistant(tools), user(2 results), assistant, user, assistant(tool), user(result)
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]


async def test_reply_instead_puts_results_before_the_text_in_one_message(
        fake: FakeAnthropic, store: RedisStore) -> None:
    toolbox = ops.build()
    fake.queue(tool_use(("restart_service", {"service_id": "payments", "environment": "prod"})),
               text("Understood, no restart."))
    h = make_harness(model_for(fake), store, toolbox=toolbox)
    await h.engine.ask("t", "restart payments in prod")

    out = await h.engine.ask("t", "wait, don't")

    assert out.answer == "Understood, no restart." and fake.rejections == []
    last = fake.requests[-1]["messages"][-1]
    assert [b["type"] for b in last["content"]] == ["tool_result", "text"]
    assert last["content"][0]["is_error"] is True


async def test_truncated_tool_use_is_retried_once_and_never_executed(fake: FakeAnthropic, store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe)
    fake.queue(tool_use(("lookup_a", {"q": "cut"}), stop="max_tokens"),
               tool_use(("lookup_a", {"q": "whole"})), text("done"))
    h = make_harness(model_for(fake, max_tokens=100), store, [tools["lookup_a"]])

    out = await h.engine.ask("t", "go")

    assert out.answer == "done" and probe.log == ["lookup_a"]
    assert [r["max_tokens"] for r in fake.requests[:2]] == [100, 200]
    assert json.loads(tool_results(fake.requests[2])[0]["content"])["data"] == {"a": "whole"}


async def test_truncated_twice_ends_with_a_readable_message(fake: FakeAnthropic, store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe)
    fake.queue(tool_use(("lookup_a", {}), stop="max_tokens"), tool_use(("lookup_a", {}), stop="max_tokens"))
    h = make_harness(model_for(fake), store, [tools["lookup_a"]])

    out = await h.engine.ask("t", "go")

    assert out.stop_reason == "model_error" and "cut off" in out.answer and probe.log == []


async def test_a_retry_past_the_model_s_output_limit_is_said_as_cut_off(fake: FakeAnthropic,
                                                                          store: RedisStore) -> None:
    """A tool call cut off at llm.max_tokens is retried with twice the room; above the model's output limit that
    retry got a 400 and the run ended "the model service rejected the request" — the reply was cut off."""
    fake.max_output = 150
    probe = Probe()
    tools = toolkit(probe)
    fake.queue(tool_use(("lookup_a", {}), stop="max_tokens"))
    h = make_harness(model_for(fake, max_tokens=100), store, [tools["lookup_a"]])

    out = await h.engine.ask("t", "go")

    assert [r["max_tokens"] for r in fake.requests] == [100, 200] and probe.log == []
    assert out.stop_reason == "model_error" and "cut off" in out.answer and "rejected" not in out.answer, out.answer


@pytest.mark.parametrize(("stop", "words"), [("refusal", "declined"),
                                             ("model_context_window_exceeded", "no longer fits")])
async def test_refusal_and_context_overflow_end_readably(fake: FakeAnthropic, store: RedisStore,
                                                         stop: str, words: str) -> None:
    fake.queue(text("", stop=stop) | {"content": []}, text("", stop=stop) | {"content": []})
    h = make_harness(model_for(fake), store, [])
    out = await h.engine.ask("t", "go")
    assert out.stop_reason == "model_error" and words in out.answer
    assert "Traceback" not in out.answer


async def test_pause_turn_is_continued(fake: FakeAnthropic, store: RedisStore) -> None:
    fake.queue(text("Part one.", stop="pause_turn"), text("Part two."))
    h = make_harness(model_for(fake), store, [])
    out = await h.engine.ask("t", "long one")
    assert out.answer == "Part one.\nPart two."
    assert fake.requests[1]["messages"][-1]["role"] == "assistant"


async def test_overloaded_is_retried_by_the_sdk_and_a_final_failure_is_a_readable_stop(
        fake: FakeAnthropic, store: RedisStore) -> None:
    fake.queue(error(529, "overloaded_error", "Overloaded"), text("after retry"))
    h = make_harness(model_for(fake), store, [])
    assert (await h.engine.ask("t", "one")).answer == "after retry"

    fake.queue(*[error(500, "api_error", "boom")] * 3)
    out = await h.engine.ask("t", "two")
    assert out.stop_reason == "model_error" and "HTTP 500" in out.answer
    assert h.of("run_finished")[-1].stop_reason == "model_error"
    # The step that failed has its row in the trace: how long it took and why (it had none).
    from state.records import StepTrace

    record = await store.load_run(out.run_id)
    assert record is not None
    [failed] = [e for e in record.trace if isinstance(e, StepTrace)]
    assert failed.model_stop == "error:api_error" and failed.model_latency_ms > 0


async def test_unreachable_api_is_a_readable_stop(store: RedisStore) -> None:
    model = AnthropicModel("m", api_key="k", base_url="http://127.0.0.1:9", max_retries=0, timeout_s=2)
    h = make_harness(model, store, [])
    out = await h.engine.ask("t", "hello")
    await model.aclose()
    assert out.stop_reason == "model_error" and "could not be reached" in out.answer


async def test_a_long_thread_is_fitted_to_the_budget_and_stays_valid(fake: FakeAnthropic, store: RedisStore) -> None:
    tools = toolkit(Probe())
    for _ in range(12):
        fake.queue(tool_use(("lookup_a", {"q": "x" * 3000})), text("ok"))
    h = make_harness(model_for(fake), store, [tools["lookup_a"]], context_budget_tokens=2500,
                     limits=Limits(identical_call_limit=50))
    for i in range(12):
        await h.engine.ask("t", f"turn {i}")

    assert fake.rejections == []
    sizes = [len(json.dumps(r["messages"])) for r in fake.requests]
    assert max(sizes[-6:]) < 4 * 2500 * 1.5  # bounded, although the thread keeps growing
    assert len(await store.load_transcript("t")) == 12 * 4  # the stored thread is complete


def test_wire_format_merges_results_into_one_user_message() -> None:
    calls = (ToolCall(id="a", name="x"), ToolCall(id="b", name="y"))
    system, wire = to_wire([UserMessage(content="q"), AssistantMessage(content="", tool_calls=calls),
                            ToolResultMessage(call_id="b", name="y", content="2"),
                            ToolResultMessage(call_id="a", name="x", content="1", status="error"),
                            UserMessage(content="more")])
    assert system == ""
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert [b["type"] for b in wire[1]["content"]] == ["tool_use", "tool_use"]  # no empty text block
    assert [(b["type"], b.get("is_error")) for b in wire[2]["content"]] == [
        ("tool_result", False), ("tool_result", True), ("text", None)]


async def test_prompt_caching_pays_full_price_only_for_what_is_new(fake: FakeAnthropic, store: RedisStore) -> None:
    """Six steps of an investigation: the tools, the system prompt and the conversation so far are read from
    Anthropic's prompt cache (breakpoints within the API's limit of four); only each step's new part is not."""
    steps = [("search_resource", {"query": "payments"}), ("search_docs", {"query": "payments timeouts"}),
             ("query_logs", {"service_id": "payments", "environment": "prod"}),
             ("query_metrics", {"service_id": "payments", "environment": "prod"}),
             ("query_logs", {"service_id": "payments", "environment": "prod", "minutes": 15})]
    fake.queue(*(tool_use(step) for step in steps), text("Payments: pool timeouts; see the runbook."))
    h = make_harness(model_for(fake), store)
    out = await h.engine.ask("t-cache", "看看支付服务最近报错", user_id="U1")
    assert out.stop_reason == "final_answer" and not fake.rejections and len(fake.requests) == 6
    for body in fake.requests:
        assert "cache_control" in body["tools"][-1] and "cache_control" in body["system"][-1]
        assert "cache_control" in body["messages"][-1]["content"][-1]  # the end: written for the next step
    full = sum(u["input_tokens"] for u in fake.usages)
    read = sum(u["cache_read_input_tokens"] for u in fake.usages)
    written = sum(u["cache_creation_input_tokens"] for u in fake.usages)
    total = full + read + written
    assert read > 0 and all(u["cache_read_input_tokens"] > 0 for u in fake.usages[1:])
    assert (full + written) / total <= 0.30, (full, read, written)  # not read from the cache: ≤ 30%
    # What the engine recorded, for `opspilot stats` and /metrics.
    stats = await store.stats(3600)
    assert stats.get("cache_read_tokens") == read and stats.get("cache_write_tokens") == written
    assert stats.get("input_tokens") == full
    steps_seen = [e for e in h.events if e.type == "model_step"]
    assert sum(e.cache_read_tokens for e in steps_seen) == read


async def test_closing_the_engine_lets_go_of_the_models_connections(fake: FakeAnthropic, redis_url: str,
                                                                    prefix: str) -> None:
    """At shutdown the SDK's client is closed on the loop that opened it: left to the garbage collector, it closes
    itself on whatever loop runs then (the next test's, in a test run) and logs "Event loop is closed" there."""
    model = model_for(fake)
    fake.queue(text("hi"))
    assert (await model.complete([UserMessage(content="hi")], [])).message.content == "hi"
    assert not model._client.is_closed()  # a keep-alive connection to the provider, held
    store = RedisStore(connect(redis_url), keys=Keys(prefix))
    await Assembly.around(make_harness(model, store, []).engine, store, model, ops.build()).close_connections()
    assert model._client.is_closed()


@pytest.mark.parametrize("given", [["payments", "prod"], "service_id=payments", {"q": "timeout \ud83d"}])
async def test_odd_tool_input_is_an_observation_not_the_end_of_the_run(fake: FakeAnthropic, store: RedisStore,
                                                                       given: Any) -> None:
    """An ``input`` that is not an object ended the run ("internal error", the model never told); half an emoji in
    one (a lone surrogate) crashed the engine and left the run "running" in Redis."""
    tools = toolkit(Probe())
    fake.queue(tool_use(("lookup_a", given)), text("done"))  # type: ignore[arg-type]
    h = make_harness(model_for(fake), store, [tools["lookup_a"]])
    out = await h.engine.ask("t", "look")
    assert (out.stop_reason, out.answer) == ("final_answer", "done") and fake.rejections == []
    [result] = tool_results(fake.requests[1])
    assert result["is_error"] == (not isinstance(given, dict))
    if result["is_error"]:
        assert json.loads(result["content"])["errorCode"] == "validation_error"


async def test_an_answer_cut_off_at_the_output_limit_is_never_done(fake: FakeAnthropic, store: RedisStore) -> None:
    """stop_reason max_tokens on the answer: it stopped mid-sentence ("…the payments deploy at 09:1") under ✅ Done."""
    from bot.slack.outbound.words import headline

    cut = "Root cause: the payments deploy at 09:1"
    fake.queue(tool_use(("lookup_a", {"q": "deploys"})), text(cut, stop="max_tokens"))
    h = make_harness(model_for(fake), store, [toolkit(Probe())["lookup_a"]])
    out = await h.engine.ask("t", "why is payments failing?", user_id="U1")
    assert out.stop_reason == "cut_off" and out.answer == cut  # shown as it came, said to be cut
    assert headline("en", "cut_off") == "Answer cut off: it reached the model's output limit"
    assert "截断" in headline("zh", "cut_off")
