"""Transcript pairing repair and context budget fitting."""

from __future__ import annotations

import json

from bot.agent.transcript import fit, message_tokens, repair, violations
from core.messages import (
    AssistantMessage,
    Message,
    MessageAdapter,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    dump_message,
    load_message,
)


def turn(i: int, size: int = 10) -> list[Message]:
    c = ToolCall(id=f"c{i}", name="t", arguments={"i": i})
    return [UserMessage(content=f"question {i}"), AssistantMessage(tool_calls=(c,)),
            ToolResultMessage(call_id=c.id, name="t", content=json.dumps({"ok": True, "data": "x" * size})),
            AssistantMessage(content=f"answer {i}")]


def test_every_kind_round_trips_through_json() -> None:
    messages: list[Message] = [SystemMessage(content="s"), UserMessage(content="看看", user_id="U1"),
                               AssistantMessage(content="a", tool_calls=(ToolCall(id="1", name="t",
                                                                                  arguments={"k": [1]}),)),
                               ToolResultMessage(call_id="1", name="t", content="{}", status="expired")]
    for m in messages:
        assert load_message(dump_message(m)) == m
    assert MessageAdapter.validate_python({"role": "tool", "call_id": "1", "name": "t", "content": "x"}).status == "ok"


def test_a_valid_transcript_is_untouched() -> None:
    messages = turn(1) + turn(2)
    fixed = repair(messages)
    assert fixed.problems == [] and fixed.messages == messages


def test_missing_results_orphans_and_misplaced_results_are_repaired() -> None:
    a, b = ToolCall(id="a", name="t"), ToolCall(id="b", name="t")
    messages: list[Message] = [
        UserMessage(content="q"), AssistantMessage(tool_calls=(a, b)),
        ToolResultMessage(call_id="a", name="t", content="1"),
        UserMessage(content="later"),
        ToolResultMessage(call_id="zz", name="t", content="orphan"),
    ]
    assert violations(messages)
    fixed = repair(messages)
    assert violations(fixed.messages) == []
    results = [m for m in fixed.messages if isinstance(m, ToolResultMessage)]
    assert [r.call_id for r in results] == ["a", "b"]
    assert json.loads(results[1].content)["errorCode"] == "missing_result"
    assert any("orphan" in p for p in fixed.problems)


def test_results_in_any_order_directly_after_their_turn_are_valid() -> None:
    a, b = ToolCall(id="a", name="t"), ToolCall(id="b", name="t")
    messages: list[Message] = [UserMessage(content="q"), AssistantMessage(tool_calls=(a, b)),
                               ToolResultMessage(call_id="b", name="t", content="2"),
                               ToolResultMessage(call_id="a", name="t", content="1")]
    assert violations(messages) == []


def test_fit_condenses_old_outputs_first_then_drops_whole_turns() -> None:
    messages = [m for i in range(10) for m in turn(i, size=4000)]
    total = sum(message_tokens(m) for m in messages)

    condensed = fit(messages, budget_tokens=total // 2)
    assert len(condensed) == len(messages)  # condensing was enough
    assert violations(condensed) == []
    assert "condensed" in condensed[2].content and "condensed" not in condensed[-2].content

    small = fit(messages, budget_tokens=400)
    assert violations(small) == []
    assert sum(message_tokens(m) for m in small) <= 400
    assert isinstance(small[0], UserMessage) and "left out" in small[0].content
    assert small[-1] == messages[-1]


def test_a_call_id_reused_by_a_later_turn_is_flagged_and_repaired() -> None:
    """Some providers (and buggy proxies) reuse a call id in a later turn: sent as is, the second result would
    pair with the first call. The check flags it and the repair keeps each id once, every call answered."""
    first, again = turn(1), turn(2)
    reused = ToolCall(id="c1", name="t", arguments={"i": 2})
    again[1] = AssistantMessage(tool_calls=(reused,))
    again[2] = ToolResultMessage(call_id="c1", name="t", content=json.dumps({"ok": True, "data": "second"}))
    messages = first + again
    assert "a call id was issued twice" in violations(messages)
    fixed = repair(messages)
    assert violations(fixed.messages) == [] and fixed.problems
    ids = [c.id for m in fixed.messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert ids == ["c1"]
    assert [m.call_id for m in fixed.messages if isinstance(m, ToolResultMessage)] == ["c1"]
