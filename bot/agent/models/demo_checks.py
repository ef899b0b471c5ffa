"""The scripted demo model on follow-ups and scheduled checks.

A follow-up ("Follow-up requested by … at …: is it holding?") looks at the service the thread was about, then
answers with its numbers now beside the ones found earlier in the thread (each with its source), and says
whether it is better, the same or worse. A scheduled check's answer ends with the status line its question asks
for: ``Status: ATTENTION`` when a tool failed, an error log pattern showed up or the error rate is above 1%,
else ``Status: OK``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from bot.agent.models.demo_answers import data, ok_data, trend_word
from core.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from core.quote import split

Reply = Callable[[Sequence[Message], Sequence[str]], AssistantMessage]
FOLLOW_UP = re.compile(r"^(?:Follow-up requested by .+? at .+?: |.+? 在 .+? 请求的跟进：)", re.S)
CHECK_MARK = "(This is a scheduled check"
ATTENTION_RATE = 0.01


def _target(earlier: Sequence[Message]) -> tuple[str, str | None] | None:
    """The service (and environment) the thread's last lookup or change was about."""
    for m in reversed(earlier):
        if isinstance(m, ToolResultMessage) and m.status == "ok":
            found = data(m).get("data") or {}
            if found.get("service_id"):
                return str(found["service_id"]), found.get("environment")
            candidates = found.get("candidates") or []
            if m.name == "search_resource" and candidates:
                return str(candidates[0]["id"]), None
    return None


def _earlier_rates(earlier: Sequence[Message], service: str) -> list[tuple[float, str]]:
    """Error rates the thread found before, oldest first, each with where it came from."""
    rates: list[tuple[float, str]] = []
    for m in earlier:
        if not isinstance(m, ToolResultMessage) or m.status != "ok":
            continue
        found = data(m).get("data") or {}
        if found.get("service_id") != service:
            continue
        if m.name == "query_metrics":
            current = ((found.get("metrics") or {}).get("error_rate") or {}).get("current")
            if isinstance(current, int | float):
                rates.append((float(current), "query_metrics"))
        elif m.name == "restart_service" and isinstance(found.get("error_rate_after"), int | float):
            if isinstance(found.get("error_rate_before"), int | float):
                rates.append((float(found["error_rate_before"]), "restart_service, before the restart"))
            rates.append((float(found["error_rate_after"]), "restart_service, right after the restart"))
    return rates


def _compare(now: float, before: float, zh: bool) -> str:
    if abs(now - before) < 0.0005:
        return "和之前一样。" if zh else "The same as before."
    if now < before:
        return "比之前好。" if zh else "Better than before."
    return "比之前差。" if zh else "Worse than before."


def follow_up(messages: Sequence[Message], last_user: int, tools: Sequence[str], zh: bool) -> AssistantMessage | None:
    earlier, since = messages[:last_user], messages[last_user + 1:]
    target = _target(earlier)
    if target is None or "query_metrics" not in tools:
        return None  # nothing to look at again: the ordinary reply handles the question
    service, env = target
    results = [m for m in since if isinstance(m, ToolResultMessage)]
    if not results:
        args: dict[str, Any] = {"service_id": service, **({"environment": env} if env else {})}
        calls = tuple(ToolCall(id=f"demo_fu_{last_user}_{name}", name=name, arguments=args)
                      for name in ("query_metrics", "query_logs") if name in tools)
        return AssistantMessage(content=f"再看一次 {service}。" if zh else f"Looking at {service} again.",
                                tool_calls=calls)
    metrics = ok_data(results, "query_metrics", service)
    rate = ((metrics or {}).get("metrics") or {}).get("error_rate") or {}
    where = f"{service} ({(metrics or {}).get('environment') or env or '?'})"
    if "current" not in rate:
        return AssistantMessage(content=f"跟进 {where}：这次读不到错误率。" if zh else
                                f"Follow-up on {where}: I could not read the error rate this time.")
    now = float(rate["current"])
    head = (f"*跟进 {where}*：错误率现在 {now:.1%}（{trend_word(str(rate.get('trend')), zh)}）— _来源: query_metrics_"
            if zh else f"*Follow-up on {where}*: error rate now {now:.1%} ({rate.get('trend')}) — "
                       "_source: query_metrics_")
    lines = [head]
    before = _earlier_rates(earlier, service)
    if before:
        lines += [f"  • {'之前' if zh else 'Earlier in this thread'}: {v:.1%} ({src})" for v, src in before]
        lines.append(_compare(now, before[-1][0], zh))
    else:
        lines.append("这个线程之前没有错误率可比。" if zh else "This thread had no earlier error rate to compare with.")
    return AssistantMessage(content="\n".join(lines))


def _status(messages: Sequence[Message], last_user: int) -> str:
    results = [m for m in messages[last_user + 1:] if isinstance(m, ToolResultMessage)]
    worrying = any(not data(r).get("ok") for r in results)
    for r in results:
        found = data(r).get("data") or {}
        if r.name == "query_logs" and found.get("patterns"):
            worrying = True
        rate = ((found.get("metrics") or {}).get("error_rate") or {}).get("current")
        if r.name == "query_metrics" and isinstance(rate, int | float) and rate > ATTENTION_RATE:
            worrying = True
    return "Status: ATTENTION" if worrying else "Status: OK"


def with_followups(reply: Reply) -> Reply:
    """``reply`` that also answers follow-ups, and ends a scheduled check with its status line."""
    def answer(messages: Sequence[Message], tools: Sequence[str]) -> AssistantMessage:
        last_user = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=-1)
        content = messages[last_user].content if last_user >= 0 else ""
        question = split(content)[1].strip()
        zh = "请求的跟进" in question
        message = follow_up(messages, last_user, tools, zh) if FOLLOW_UP.match(question) and tools else None
        message = message or reply(messages, tools)
        if CHECK_MARK in content and not message.tool_calls:
            message = AssistantMessage(content=f"{message.content}\n{_status(messages, last_user)}")
        return message

    return answer
