"""The real openai SDK against a local server that enforces the ``role: tool`` rules."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from bot.agent.decisions import Confirm
from bot.agent.models.base import ModelError
from bot.agent.models.openai import OpenAIModel
from core.messages import AssistantMessage, ToolCall, UserMessage
from state import RedisStore
from tests.conftest import make_harness
from tests.fakes.openai_api import FakeOpenAI, text, tool_calls, violations
from tests.toolkit import Probe, toolkit
from tools import ops


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    f = FakeOpenAI()
    await f.server.start()
    yield f
    for model in f.models:
        await model.aclose()
    await f.server.stop()


def model_for(fake: FakeOpenAI) -> OpenAIModel:
    model = OpenAIModel("gpt-test", api_key="sk-test", base_url=f"{fake.server.url}/v1", max_retries=1)
    fake.models.append(model)
    return model


async def test_the_fake_rejects_missing_and_orphan_tool_messages(fake: FakeOpenAI) -> None:
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}
    assert "did not have response messages: c1" in (violations({"messages": [call, {"role": "user",
                                                                                    "content": "x"}]}) or "")
    assert "must be a response" in (violations({"messages": [{"role": "tool", "tool_call_id": "zz",
                                                              "content": "x"}]}) or "")
    broken = [UserMessage(content="hi"), AssistantMessage(tool_calls=(ToolCall(id="c9", name="t"),)),
              UserMessage(content="?")]
    with pytest.raises(ModelError) as info:
        await model_for(fake).complete(broken, [])
    assert info.value.kind == "bad_request"


async def test_parallel_calls_and_invalid_json_arguments(fake: FakeOpenAI, store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe)
    fake.queue(tool_calls(("lookup_a", {"q": "1"}), ("lookup_b", '{"q": "2"'), ("lookup_b", "[1, 2]")),
               text("A worked; B had bad arguments."))
    h = make_harness(model_for(fake), store, [tools["lookup_a"], tools["lookup_b"]])

    out = await h.engine.ask("t", "both")

    assert out.answer == "A worked; B had bad arguments." and fake.rejections == []
    messages = fake.requests[1]["messages"]
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert len(tool_messages) == 3
    codes = [json.loads(m["content"]).get("errorCode") for m in tool_messages]
    assert codes == [None, "validation_error", "validation_error"]
    assert probe.log == ["lookup_a"]
    # The malformed arguments are sent back as the model produced them, inside valid JSON: vLLM and SGLang parse
    # every earlier call's arguments and refuse the whole request on one that is not (the thread's every later turn).
    assistant = next(m for m in messages if m["role"] == "assistant")
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {"_unparsed": '{"q": "2"'}
    assert fake.requests[0]["tools"][0]["type"] == "function"


async def test_pause_and_resume_stay_valid(fake: FakeOpenAI, store: RedisStore) -> None:
    toolbox = ops.build()
    fake.queue(tool_calls(("restart_service", {"service_id": "payments", "environment": "prod"}),
                          ("search_docs", {"query": "restart"})),
               text("Restarted."))
    h = make_harness(model_for(fake), store, toolbox=toolbox)

    paused = await h.engine.ask("t", "restart payments in prod")
    out = await h.engine.resume_token(paused.pending[0].token, Confirm(), by="U2")

    assert out.answer == "Restarted." and fake.rejections == [] and len(toolbox.restarts.done) == 1


async def test_length_cut_tool_call_is_retried_then_reported(fake: FakeOpenAI, store: RedisStore) -> None:
    probe = Probe()
    tools = toolkit(probe)
    fake.queue(tool_calls(("lookup_a", '{"q": '), finish="length"), tool_calls(("lookup_a", '{"q'), finish="length"))
    h = make_harness(model_for(fake), store, [tools["lookup_a"]])
    out = await h.engine.ask("t", "go")
    assert out.stop_reason == "model_error" and "cut off" in out.answer and probe.log == []
    assert fake.requests[1]["max_tokens"] == 2 * fake.requests[0]["max_tokens"]


async def test_the_output_token_limit_goes_by_the_name_each_endpoint_knows(caplog: pytest.LogCaptureFixture) -> None:
    """OpenAI's newer models take only max_completion_tokens; older compatible servers only max_tokens."""
    openai_like = FakeOpenAI(new_models=frozenset({"gpt-new"}))
    compatible = FakeOpenAI(compatible=True)
    await openai_like.server.start()
    await compatible.server.start()
    try:
        openai_like.queue(text("fine"))
        new = OpenAIModel("gpt-new", api_key="sk-test", base_url=f"{openai_like.server.url}/v1", max_retries=0,
                          token_field="max_completion_tokens", max_tokens=300)
        assert (await new.complete([UserMessage(content="hi")], [])).message.content == "fine"
        assert openai_like.requests[-1]["max_completion_tokens"] == 300 and "max_tokens" not in openai_like.requests[-1]

        wrong = OpenAIModel("gpt-new", api_key="sk-test", base_url=f"{openai_like.server.url}/v1", max_retries=0,
                            token_field="max_tokens")
        with pytest.raises(ModelError) as refused:  # what the real API says, classified, not a crash
            await wrong.complete([UserMessage(content="hi")], [])
        assert refused.value.kind == "bad_request"  # the person is told the service refused; the operator why:
        assert any("Use 'max_completion_tokens' instead" in r.getMessage() for r in caplog.records)

        compatible.queue(text("ok"))
        auto = OpenAIModel("llama3", api_key="sk-test", base_url=f"{compatible.server.url}/v1", max_retries=0)
        assert auto.token_field == "max_tokens"  # any endpoint but OpenAI's own
        assert (await auto.complete([UserMessage(content="hi")], [])).message.content == "ok"
        assert compatible.requests[-1]["max_tokens"] == 2048
        own = OpenAIModel("gpt-new", api_key="sk-test")  # no request made: just which name it would send
        assert own.token_field == "max_completion_tokens"
        for model in (new, wrong, auto, own):
            await model.aclose()
    finally:
        await openai_like.server.stop()
        await compatible.server.stop()


async def test_an_answer_cut_off_at_the_output_limit_is_never_done(fake: FakeOpenAI, store: RedisStore) -> None:
    from tests.toolkit import Probe, toolkit

    fake.queue(tool_calls(("lookup_a", {"q": "deploys"})), text("Root cause: the payments deploy at 09:1",
                                                               finish="length"))
    h = make_harness(model_for(fake), store, [toolkit(Probe())["lookup_a"]])
    out = await h.engine.ask("t", "why is payments failing?", user_id="U1")
    assert out.stop_reason == "cut_off"
