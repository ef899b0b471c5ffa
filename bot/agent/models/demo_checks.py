"""The scripted demo model on follow-ups and scheduled checks.

A follow-up ("Follow-up requested by … at …: is it holding?") looks at the service the thread was about, then
answers with its error rate now beside the one from before the thread's last change (and the one right after it),
each with its source, and says from those two numbers whether it is better, the same or worse — in the thread's
language. A scheduled check's answer ends with the status line its question asks
for: ``Status: ATTENTION`` when a tool failed, an error log pattern showed up or the error rate is above 1% or
could not be read, else ``Status: OK``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.agent.models.demo_answers import data, ok_data
from bot.agent.models.demo_figures import percent, shown, trend_word
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


@dataclass(frozen=True)
class _Before:
    """What a follow-up compares with: the error rate from before the thread's last change (the restart's own
    reading, else the last lookup before it), or, without a change, the last one found; and the reading right
    after the change, when there is one."""

    rate: float
    source: str
    changed: bool
    after: float | None = None
    change: str = "restart_service"
    """The tool that made the change (its words: the restart, the rollback, the scaling)."""


_CHANGES = ("restart_service", "rollback_service", "scale_service")  # each reads the error rate before and after


def _before(earlier: Sequence[Message], service: str) -> _Before | None:
    found: _Before | None = None
    for m in earlier:
        if not isinstance(m, ToolResultMessage) or m.status != "ok":
            continue
        got = data(m).get("data") or {}
        if got.get("service_id") != service:
            continue
        if m.name == "query_metrics":
            current = ((got.get("metrics") or {}).get("error_rate") or {}).get("current")
            if isinstance(current, int | float) and (found is None or not found.changed):
                found = _Before(float(current), "query_metrics", changed=False)
        elif m.name in _CHANGES:
            rate, after = got.get("error_rate_before"), got.get("error_rate_after")
            after = float(after) if isinstance(after, int | float) else None
            if isinstance(rate, int | float):
                found = _Before(float(rate), m.name, changed=True, after=after, change=m.name)
            elif found is not None:  # the change read nothing itself: the last lookup before it stands
                found = _Before(found.rate, found.source, changed=True, after=after, change=m.name)
    return found


_VERDICTS = {  # (Chinese, after a change) → better, the same, worse; {what}: the restart, the rollback…
    (False, False): ("Better than before", "The same as before", "Worse than before"),
    (False, True): ("Better than before {what}", "The same as before {what}", "Worse than before {what}"),
    (True, False): ("比之前好", "和之前一样", "比之前差"),
    (True, True): ("比{what}前好", "和{what}前一样", "比{what}前差"),
}
_WHAT = {"restart_service": ("the restart", "重启"), "rollback_service": ("the rollback", "回滚"),
         "scale_service": ("the scaling", "扩缩容")}


def _what(before: _Before, zh: bool) -> str:
    return _WHAT.get(before.change, _WHAT["restart_service"])[1 if zh else 0]


def _compare(now: float, before: _Before, zh: bool) -> str:
    """Better, the same or worse, from the two numbers it names, as it writes them."""
    was, is_ = shown(before.rate), shown(now)
    verdict = _VERDICTS[(zh, before.changed)][1 if was == is_ else 0 if is_ < was else 2].format(
        what=_what(before, zh))
    figures = f"{percent(before.rate)} → {percent(now)}"
    return f"{verdict}：{figures}。" if zh else f"{verdict}: {figures}."


def _lines(before: _Before, zh: bool) -> list[str]:
    if not before.changed:
        return [f"  • 之前：{percent(before.rate)}（`{before.source}`）" if zh else
                f"  • Earlier in this thread: {percent(before.rate)} (`{before.source}`)"]
    what = _what(before, zh)
    lines = [f"  • {what}前：{percent(before.rate)}（`{before.source}`）" if zh else
             f"  • Before {what}: {percent(before.rate)} (`{before.source}`)"]
    if before.after is not None:
        lines.append(f"  • {what}刚完成时：{percent(before.after)}（`{before.change}`）" if zh else
                     f"  • Right after {what}: {percent(before.after)} (`{before.change}`)")
    return lines


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
    shown_env = (metrics or {}).get("environment") or env or "?"
    where = f"{service}（{shown_env}）" if zh else f"{service} ({shown_env})"
    if "current" not in rate:
        return AssistantMessage(content=f"跟进 {where}：这次读不到错误率。" if zh else
                                f"Follow-up on {where}: I could not read the error rate this time.")
    now = float(rate["current"])
    trend = trend_word(str(rate.get("trend")), zh)
    lines = [f"*跟进 {where}*：错误率现在 {percent(now)}（{trend}）— _来源：`query_metrics`_" if zh else
             f"*Follow-up on {where}*: error rate now {percent(now)} ({trend}) — _source: `query_metrics`_"]
    before = _before(earlier, service)
    if before is None:
        lines.append("这个线程之前没有错误率可比。" if zh else "This thread had no earlier error rate to compare with.")
    else:
        lines += [*_lines(before, zh), _compare(now, before, zh)]
    return AssistantMessage(content="\n".join(lines))


def _status(messages: Sequence[Message], last_user: int) -> str:
    results = [m for m in messages[last_user + 1:] if isinstance(m, ToolResultMessage)]
    worrying = any(not data(r).get("ok") for r in results)
    for r in results:
        found = data(r).get("data") or {}
        if r.name == "query_logs" and found.get("patterns"):
            worrying = True
        rate = ((found.get("metrics") or {}).get("error_rate") or {}).get("current")
        # An error rate that could not be read is no "all well": with --quiet, nothing would be posted at all.
        if r.name == "query_metrics" and (not isinstance(rate, int | float) or rate > ATTENTION_RATE):
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
        if message is None and CHECK_MARK in content:  # the check's own instruction is no part of the question
            asked = messages[last_user].model_copy(update={"content": content[:content.index(CHECK_MARK)].rstrip()})
            message = reply([*messages[:last_user], asked, *messages[last_user + 1:]], tools)
        message = message or reply(messages, tools)
        if CHECK_MARK in content and not message.tool_calls:
            message = AssistantMessage(content=f"{message.content}\n{_status(messages, last_user)}")
        return message

    return answer
