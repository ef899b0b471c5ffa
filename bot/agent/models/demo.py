"""The scripted demo model: a rule-based stand-in for an LLM, so OpsPilot runs offline.

It is a :class:`ScriptedModel` and says so in its label; it is never chosen when an API
key is configured. It knows the demo tools and plays the OpsPilot scenario: look up a service
and its runbooks in parallel, read its logs and metrics (and its changes for a deploy question;
every service a comparison names), answer with evidence, restart on request.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from bot.agent.models.base import DEMO_LABEL
from bot.agent.models.demo_answers import answer_lookup, answer_restart, cannot_see
from bot.agent.models.demo_answers import data as _data
from bot.agent.models.demo_answers import ok_data as _ok_data
from bot.agent.models.demo_changes import (
    answer_change,
    decline,
    listing,
    wide_answer,
    wide_calls,
)
from bot.agent.models.demo_checks import with_followups
from bot.agent.models.demo_history import restarts_part, rollback_part
from bot.agent.models.demo_intent import Ask, environment, read, request_words, window, window_note
from bot.agent.models.demo_narrative import MARKER, demo_narrative
from bot.agent.models.demo_verdict import deploy_verdict
from bot.agent.models.scripted import ScriptedModel
from bot.agent.prompt import STOP_INSTRUCTION
from core.language import signal
from core.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from core.quote import split as _split

_COMPARE = re.compile(r"compar|\bvs\.?\b|versus|\band\b|\bboth\b|对比|比较|和|与|跟", re.I)


def _call(name: str, **arguments: Any) -> ToolCall:
    # Unique across processes and restarts, like a provider's ids: a thread outlives any one worker.
    return ToolCall(id=f"demo_{uuid.uuid4().hex[:16]}", name=name, arguments=arguments)


def _last_service(messages: Sequence[Message]) -> str | None:
    for m in reversed(messages):
        if isinstance(m, ToolResultMessage) and m.name == "search_resource" and m.status == "ok" \
                and not _data(m).get("data", {}).get("listing"):  # the whole catalog names no one service
            candidates = _data(m).get("data", {}).get("candidates", [])
            if candidates:
                return str(candidates[0]["id"])
    return None


_ID_LIKE = re.compile(r"(?<![\w-])([a-z][a-z0-9]*(?:[-_.][a-z0-9]+)+)(?![\w-])|"
                      r"(?<![\w-])([a-z][a-z0-9]{2,})\s*(?:service|svc|服务)", re.I)
_STOPWORDS = frozenset({
    "a", "an", "the", "is", "are", "was", "were", "why", "what", "whats", "how", "when", "where", "who", "which",
    "look", "at", "on", "in", "of", "for", "to", "and", "or", "with", "me", "my", "our", "it", "its", "this",
    "that", "there", "any", "recent", "errors", "error", "slow", "slowly", "down", "failing", "fails", "broken",
    "service", "services", "logs", "log", "metrics", "please", "check", "show", "tell", "about", "compare",
    "runbook", "runbooks", "advice", "doc", "docs", "wrong", "going", "happening", "can", "could", "you", "help",
    "latest", "today", "now", "up", "since", "did", "does", "do", "done", "has", "have", "had", "happen",
    "happened", "anything", "something", "everything", "nothing", "should", "would", "will", "we", "they", "be",
    "been", "fine", "okay", "healthy", "problem", "problems", "issue", "issues", "yesterday", "many", "much",
    "last", "hour", "hours", "minutes", "all", "still", "again", "ok", "new", "get", "got", "see", "seen",
    "after", "before", "midnight", "morning", "night", "go", "went", "gone", "off", "out", "weird",
})
_QUOTED_SERVICE = re.compile(r"(?:service|服务)\s*`([a-z0-9][\w.-]*)`", re.I)
_WORD = re.compile(r"[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)+|[a-z][a-z0-9]{2,}", re.I)


def _named(text: str, ask: Ask) -> str | None:
    """The word of a question that names a service the catalog lacks: a word shaped like a service id
    (``billing-svc``) or called a service ("the ledger service"); in a question about a plain lookup, a word
    that is not ordinary English ("why is checkout slow?"). A question about changes or a time names no
    service by accident: "did anything change…" never becomes "no service named did"."""
    quoted = _QUOTED_SERVICE.search(text)  # "about service `billing`" (an alert's question) names billing
    if quoted:
        return quoted.group(1)
    for found in _ID_LIKE.finditer(text):
        if found.group(1) or (found.group(2) or "").lower() not in _STOPWORDS:  # "about service" names no "about"
            return found.group(1) or found.group(2)
    if ask.at or ask.about_changes or ask.change:
        return None
    words = [w for w in _WORD.findall(text) if w.lower() not in _STOPWORDS]
    return words[0] if words else None


_NAME_SHOWN = 64


def _not_found(result: ToolResultMessage, text: str, ask: Ask, tools: Sequence[str], zh: bool) -> str:
    """search_resource found nothing: the name it could not find (with "did you mean" from the tool's own
    message), or — when the question names nothing shaped like a service — what was understood and what can be
    asked instead."""
    message = str(_data(result).get("message") or "")
    known = message.partition("known services: ")[2].partition(".")[0]
    maybe = message.partition("did you mean ")[2].partition("?")[0]
    name = _named(text, ask)
    if name is not None and len(name) > _NAME_SHOWN:  # a pasted blob is not a name worth echoing whole
        name = name[:_NAME_SHOWN - 1] + "…"
    if name is None:
        head = decline(text, ask, [k.strip() for k in known.split(",") if k.strip()], tools, zh)
        return (f"你是指 {maybe} 吗？\n" if zh else f"Did you mean {maybe}?\n") + head if maybe else head
    if zh:
        return f"服务目录里没有名为 `{name}` 的服务。" + (f"你是指 {maybe} 吗？" if maybe else "") + \
            (f"已知的服务：{known}。" if known else "")
    return f"There is no service named `{name}` in the catalog." + (f" Did you mean {maybe}?" if maybe else "") + \
        (f" Known services: {known}." if known else "")


def help_text(zh: bool) -> str:
    if zh:
        return ("我是 OpsPilot（演示模型）。可以这样问我：\n• 看看支付服务最近报错，顺便对照一下文档里的处理建议\n"
                "• 订单服务部署后 5xx 变多了，怎么办？\n• 重启 payments（生产环境）")
    return ("I'm OpsPilot (demo model). Try asking:\n• look at the payment service's recent errors and compare with "
            "the runbook's advice\n• why do orders fail since the last deploy?\n• restart payments in prod")


def _services(results: list[ToolResultMessage], question: str) -> list[dict[str, Any]]:
    """The services a question names: the best match, or — when it asks about several ("compare A and B") —
    every service it names outright, so that no part of the question is dropped."""
    found = _ok_data(results, "search_resource")
    candidates = list((found or {}).get("candidates") or [])
    if not candidates:
        return []
    top = [c for c in candidates if c.get("score") == candidates[0].get("score")]
    if len(top) > 1 and _COMPARE.search(question):
        return top[:3]
    return candidates[:1]


def _common(services: list[dict[str, Any]]) -> str | None:
    """The environment to compare several services in when the question names none: where the first one's
    alert fired, else prod — if every service has it (like with like); else none (each its own, said so)."""
    alerts = services[0].get("recent_alerts") or []
    first = alerts[0].get("env") if alerts else None
    for env in (first, "prod"):
        if env and all(env in (s.get("environments") or []) for s in services):
            return str(env)
    return None


def _follow_up(results: list[ToolResultMessage], env: str | None, tools: Sequence[str], zh: bool,
               question: str, ask: Ask) -> AssistantMessage | None:
    """After finding the service(s): read logs and metrics — and the change history when the question is about
    deploys, restarts or rollbacks (a dependent second step)."""
    if any(r.name in ("query_logs", "query_metrics") for r in results) or "query_logs" not in tools:
        return None
    services = _services(results, question)
    if not services:
        return None
    reads = ["query_logs", "query_metrics"] + (["recent_changes"] if ask.about_changes else [])
    if env is None and len(services) > 1:
        env = _common(services)
    calls = []
    for service in services:
        where = env
        if where is None:
            alerts = service.get("recent_alerts") or []
            where = alerts[0].get("env") if alerts else None
        args: dict[str, Any] = {"service_id": service["id"]}
        if where:
            args["environment"] = where
        for name in reads:
            if name in tools:
                minutes = {"minutes": window(name, ask.minutes)} if ask.minutes else {}
                calls.append(_call(name, **args, **minutes))
    service = services[0]
    own = [str(r) for r in service.get("runbooks") or []]
    docs = _ok_data(results, "search_docs") or {}
    if own and "search_docs" in tools and not any(str(h.get("path", "")).endswith(own[0])
                                                  for h in docs.get("results", [])):
        # The question's words missed the service's main runbook (the catalog lists it first; it may be written
        # in another language): look it up by what the service's alerts say.
        alerts = " ".join(str(a.get("summary", "")) for a in service.get("recent_alerts") or [])
        calls.append(_call("search_docs", query=f"{service['id']} {alerts}"[:500]))
    names = ", ".join(s["id"] for s in services)
    what = ("日志、指标和最近的变更" if zh else "logs, metrics and recent changes") if "recent_changes" in reads else \
        ("日志和指标" if zh else "logs and metrics")
    plan = f"找到了 {names}，接着看{what}。" if zh else f"Found {names}; reading {what}."
    return AssistantMessage(content=plan, tool_calls=tuple(calls))


_SERVICE = re.compile(r"(?:\bservice|服务)\s*(?::\s*`?|=\s*\"?|`)([a-z0-9][a-z0-9_.-]+)", re.I)
_ENVIRONMENT = re.compile(r"(?:\benv(?:ironment)?|环境)\s*(?::\s*`?|=\s*\"?|`)([a-z0-9_-]+)", re.I)


def _subject(question: str, quoted: str) -> str:
    """What to look up: a service the question or the quoted thread names (an alert's label), else the quoted
    message when the question only points at it, else the question."""
    named = _SERVICE.search(question) or _SERVICE.search(quoted)
    if named:
        return named.group(1)
    body = [line for line in quoted.splitlines() if line and not line.startswith(("[", "<", "(", "</"))]
    if body and (len(question.split()) <= 6 or "quoted above" in question or "见上方引用" in question):
        return body[-1][:200]
    return question[:200]


def _environment(question: str, quoted: str) -> str | None:
    env = environment(question)
    labelled = _ENVIRONMENT.search(quoted) or _ENVIRONMENT.search(question)
    return env or (labelled.group(1) if labelled else None)


def demo_reply(messages: Sequence[Message], tools: Sequence[str]) -> AssistantMessage:
    last_user = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=-1)
    content = messages[last_user].content if last_user >= 0 else ""
    if MARKER in content:  # an incident summary's narrative (bot/slack/incidents/narrative.py)
        return AssistantMessage(content=demo_narrative(content))
    if content.startswith(STOP_INSTRUCTION.split("(", 1)[0]):  # a stopped run's summary: none of its own (its
        return AssistantMessage(content="")  # answer lists what ran, in the thread's language), never a new plan
    quoted, question = _split(content)
    text = question.strip()
    # The thread's language: this question's, else an earlier one's (a Chinese thread stays Chinese).
    # The thread's language when the front end names it (a Chinese thread stays Chinese), else the question's.
    told = re.search(r"<reply_language>(\w+)</reply_language>", quoted)
    zh = told.group(1) == "Chinese" if told else signal(text) == "zh"
    since = messages[last_user + 1:]
    results = [m for m in since if isinstance(m, ToolResultMessage)]
    if not tools:
        return AssistantMessage(content="(scripted demo model) I stop here.")
    if text.lower() in ("", "hello", "hi", "help", "你好", "帮助", "幫助", "帮我", "幫我"):  # (Traditional too)
        return AssistantMessage(content=help_text(zh))
    ask = read(text)
    if ask.zone_unknown:  # never read as UTC: 17:11 CST is 09:11 or 23:11 UTC
        return AssistantMessage(content=(
            f"我读到了时间 {ask.said_at}，但不确定 `{ask.zone_unknown}` 是哪个时区：请用 UTC 或带偏移量的时间再问一次"
            "（例如 17:11 UTC+8）。" if zh else
            f"I read the time {ask.said_at}, but not which time zone `{ask.zone_unknown}` means: ask again in UTC or "
            "with an offset (for example 17:11 UTC+8)."))
    if results:
        return _after(results, messages[:last_user], ask, text, quoted, tools, zh, messages)
    service = _last_service(messages)
    if ask.change == "restart" and "restart_service" in tools and service is not None:  # "restart it"
        return _restart(service, text, quoted, messages, zh)
    subject = _subject(text, quoted)
    calls = [_call("search_resource", query=subject)] if "search_resource" in tools else []
    docs_query = text if subject == text[:200] else f"{subject} {text}"
    calls += [_call("search_docs", query=docs_query[:500])] if "search_docs" in tools else []
    if not calls:
        return AssistantMessage(content="(scripted demo model) I have no tool for that.")
    plan = "同时查找服务和相关文档。" if zh else "Looking up the service and the runbooks in parallel."
    return AssistantMessage(content=plan, tool_calls=tuple(calls))


def _after(results: list[ToolResultMessage], earlier: Sequence[Message], ask: Ask, text: str, quoted: str,
           tools: Sequence[str], zh: bool, messages: Sequence[Message]) -> AssistantMessage:
    """The next step once this question's tools answered."""
    restarts = [r for r in results if r.name == "restart_service"]
    if restarts:
        return AssistantMessage(content=answer_restart(restarts[-1], zh))
    changed = [r for r in results if r.name in ("rollback_service", "scale_service")]
    if changed:
        return AssistantMessage(content=answer_change(changed[-1], zh))
    catalog = listing(results)
    if catalog is not None:  # a question naming no service, read across the catalog
        if any(r.name != "search_resource" and r.name != "search_docs" for r in results):
            note = window_note([r.name for r in results], ask.minutes, zh)
            return AssistantMessage(content=wide_answer(results, ask, catalog, zh) + (f"\n{note}" if note else ""))
        calls = tuple(_call(name, **args) for name, args in wide_calls(catalog, ask, tools))
        if not calls:
            return AssistantMessage(content=decline(text, ask, [str(c["id"]) for c in catalog], tools, zh))
        plan = "问题里没有具体服务：按时间和环境看整个服务目录。" if zh else \
            "No service named: reading across the catalog for that time and environment."
        return AssistantMessage(content=plan, tool_calls=calls)
    missing = next((r for r in results if r.name == "search_resource" and r.status != "ok"
                    and _data(r).get("errorCode") == "not_found"), None)
    if missing is not None:
        if (seen := cannot_see(text, tools, zh)) is not None:
            return AssistantMessage(content=seen)
        if (ask.at or ask.about_changes) and _named(text, ask) is None and "search_resource" in tools:
            return AssistantMessage(content="列出服务目录。" if zh else "Listing the service catalog.",
                                    tool_calls=(_call("search_resource", query="*"),))
        return AssistantMessage(content=_not_found(missing, text, ask, tools, zh))
    service = _last_service(results)
    if ask.change == "restart" and service and "restart_service" in tools:  # "restart payments in prod"
        return _restart(service, text, quoted, messages, zh)
    if ask.change in ("rollback", "scale") and f"{ask.change}_service" not in tools:
        return AssistantMessage(content=_cannot_change(ask, service, tools, zh))
    if ask.change in ("rollback", "scale") and service:  # the card shows from → to before anything changes
        return _change(service, ask, text, quoted, messages, zh)
    note = window_note([r.name for r in results], ask.minutes, zh)
    return _follow_up(results, _environment(text, quoted), tools, zh, text, ask) or AssistantMessage(
        content=answer_lookup(results, zh, question=text, tools=tools,
                              services=[s["id"] for s in _services(results, text)],
                              topics=_topics(results, earlier, ask, text, zh)) + (f"\n{note}" if note else ""))


def _topics(results: list[ToolResultMessage], earlier: Sequence[Message], ask: Ask, text: str,
            zh: bool) -> Callable[[str], list[str]] | None:
    """What the answer says about the question's subject, per service: was it rolled back (never a deploy
    verdict in its place), restarts (never a new one), or was it the deploy."""
    if not any(r.name == "recent_changes" for r in results):
        return None

    def lines(service: str) -> list[str]:
        out: list[str] = []
        if "rollback" in ask.topics:
            out += rollback_part(results, service, zh)
        if "restarts" in ask.topics:
            out += restarts_part(results, earlier, service, text, zh)
        if not out or ("changes" in ask.topics and ask.cause):
            out += deploy_verdict(results, service, zh)
        return out

    return lines


def _cannot_change(ask: Ask, service: str | None, tools: Sequence[str], zh: bool) -> str:
    """A rollback or scaling asked for with no tool that does it: said plainly, with what can be done."""
    what = {"rollback": ("roll back", "回滚"), "scale": ("scale", "扩缩容")}[ask.change or "rollback"]
    where = f" `{service}`" if service else ""
    if zh:
        return (f"我不能{what[1]}{where}：这里没有做这件事的工具，我不会用别的办法代替。"
                f"我能做的：查看最近的变更和错误（问“{service or '订单服务'} 最近有什么变更？”）"
                + ("，或重启服务（需要确认）" if "restart_service" in tools else "") + "。")
    return (f"I can't {what[0]}{where}: no tool here does that, and I won't do something else in its place. "
            f"What I can do: read the recent changes and errors (ask \"what changed for {service or 'orders'}?\")"
            + (", or restart the service (with a confirmation)" if "restart_service" in tools else "") + ".")


def _change_args(service: str, text: str, quoted: str, messages: Sequence[Message]) -> dict[str, Any]:
    """A requested change's service, reason and environment: asked for, else where the thread's alert fired (an
    earlier turn's quoted labels); none found is left for the tool to ask."""
    env = _environment(text, quoted) or next(
        (e for m in reversed(messages) if isinstance(m, UserMessage)
         for e in [_environment("", _split(m.content)[0])] if e), None)
    return {"service_id": service, "reason": request_words(text)[:200], **({"environment": env} if env else {})}


def _change(service: str, ask: Ask, text: str, quoted: str, messages: Sequence[Message],
            zh: bool) -> AssistantMessage:
    """A rollback (to the release or revision named, else the previous one) or a scale, as asked."""
    args = _change_args(service, text, quoted, messages)
    if ask.change == "scale":
        if ask.replicas_by:  # an amount, not the total: the current count is not read here, so not guessed at
            return AssistantMessage(content=(
                f"“{ask.replicas_by}”是在现有副本数上增减，我在这里看不到 {service} 现在有几个副本：一共要多少个副本？"
                f"例如“把 {service} 扩容到 6 个副本”。" if zh else
                f"\"{ask.replicas_by}\" is a change from the current count, which I can't see here: how many "
                f"replicas in all? For example: \"scale {service} in prod to 6 replicas\"."))
        if ask.replicas is None:
            return AssistantMessage(content="扩缩容到多少个副本？例如“把 payments 扩容到 6 个副本”。" if zh else
                                    "Scale to how many replicas? For example: \"scale payments in prod to 6 "
                                    "replicas\".")
        call = _call("scale_service", **args, replicas=ask.replicas)
        plan = f"按要求把 {service} 调整到 {ask.replicas} 个副本。" if zh else \
            f"Scaling {service} to {ask.replicas} replicas as asked."
        return AssistantMessage(content=plan, tool_calls=(call,))
    target = {"to_release": ask.release} if ask.release else {"to_revision": ask.revision} if ask.revision else {}
    previous = "上一个版本" if zh else "the previous revision"
    shown = ask.release or (f"revision {ask.revision}" if ask.revision else previous)
    plan = f"按要求把 {service} 回滚到 {shown}。" if zh else f"Rolling {service} back to {shown} as asked."
    return AssistantMessage(content=plan, tool_calls=(_call("rollback_service", **args, **target),))


def _restart(service: str, text: str, quoted: str, messages: Sequence[Message], zh: bool = False) -> AssistantMessage:
    restart = _call("restart_service", **_change_args(service, text, quoted, messages))
    plan = f"按要求重启 {service}。" if zh else f"Restarting {service} as asked."
    return AssistantMessage(content=plan, tool_calls=(restart,))


def demo_model(latency_s: float = 0.0) -> ScriptedModel:
    return ScriptedModel(with_followups(demo_reply), label=DEMO_LABEL, latency_s=latency_s, keep_requests=False)
