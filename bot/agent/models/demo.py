"""The scripted demo model: a rule-based stand-in for an LLM, so OpsPilot runs offline.

It is a :class:`ScriptedModel` and says so in its label; it is never chosen when an API
key is configured. It knows the three demo tools and plays the OpsPilot scenario:
look up a service and its runbooks in parallel, answer with evidence, restart on request.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from typing import Any

from bot.agent.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from bot.agent.models.scripted import ScriptedModel

LABEL = "scripted demo model (no API key configured; rule-based, not an LLM)"
_RESTART = re.compile(r"restart|重启|bounce", re.I)
_PROD = re.compile(r"\bprod\b|production|生产|线上", re.I)
_STAGING = re.compile(r"staging|预发|测试环境", re.I)
_CJK = re.compile(r"[\u3400-\u9fff]")
_ids = itertools.count(1)


def _call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"demo_{next(_ids):05d}", name=name, arguments=arguments)


def _data(result: ToolResultMessage) -> dict[str, Any]:
    try:
        body = json.loads(result.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _last_service(messages: Sequence[Message]) -> str | None:
    for m in reversed(messages):
        if isinstance(m, ToolResultMessage) and m.name == "search_resource" and m.status == "ok":
            candidates = _data(m).get("data", {}).get("candidates", [])
            if candidates:
                return str(candidates[0]["id"])
    return None


def _answer_lookup(results: list[ToolResultMessage], zh: bool) -> str:
    lines: list[str] = []
    for r in results:
        body = _data(r)
        if not body.get("ok"):
            lines.append(f"• `{r.name}` failed: {body.get('errorCode')} — {body.get('message')}")
            continue
        data = body.get("data", {})
        if r.name == "search_resource":
            for c in data.get("candidates", [])[:1]:
                head = "*服务*" if zh else "*Service*"
                lines.append(f"{head}: {c['name']} (`{c['id']}`, team {c['team']}) — _source: search_resource_")
                for alert in c.get("recent_alerts", []):
                    lines.append(f"  • {alert['at']} [{alert['env']}] {alert['summary']}")
                if not c.get("recent_alerts"):
                    lines.append("  • " + ("没有近期告警" if zh else "no recent alerts"))
        elif r.name == "search_docs":
            head = "*文档建议*" if zh else "*Runbook advice*"
            lines.append(f"{head}:")
            for hit in data.get("results", [])[:2]:
                first = next((ln.strip("-• ").strip() for ln in str(hit["text"]).splitlines() if ln.strip()), "")
                lines.append(f"  • {hit['title']} §{hit['section']} (`{hit['path']}`): {first}")
    if zh:
        lines.append("_未核实：我只看了目录中的告警摘要和文档，没有直接查询日志或指标。_")
    else:
        lines.append("_Not checked: I only read the catalog's alert summary and the runbooks, "
                     "not raw logs or metrics._")
    return "\n".join(lines)


def _answer_restart(result: ToolResultMessage, zh: bool) -> str:
    body = _data(result)
    if body.get("ok"):
        d = body["data"]
        who = f" (confirmed by <@{d['confirmed_by']}>)" if d.get("confirmed_by") else ""
        if zh:
            return (f"已重启 `{d['service_id']}`（{d['environment']}），rollout {d['rollout']}{who}。"
                    "_来源: restart_service_")
        return (f"Restarted `{d['service_id']}` in {d['environment']}: rollout {d['rollout']}{who}. "
                "_source: restart_service_")
    return (f"未执行重启：{body.get('message')}" if zh
            else f"The restart did not run: {body.get('message')} ({body.get('errorCode')}).")


def demo_reply(messages: Sequence[Message], tools: Sequence[str]) -> AssistantMessage:
    last_user = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=-1)
    text = messages[last_user].content if last_user >= 0 else ""
    zh = bool(_CJK.search(text))
    since = messages[last_user + 1:]
    results = [m for m in since if isinstance(m, ToolResultMessage)]
    if not tools:
        return AssistantMessage(content="(scripted demo model) I stop here.")
    if results:
        restarts = [r for r in results if r.name == "restart_service"]
        if restarts:
            return AssistantMessage(content=_answer_restart(restarts[-1], zh))
        return AssistantMessage(content=_answer_lookup(results, zh))
    if _RESTART.search(text) and "restart_service" in tools:
        service = _last_service(messages)
        if service is None:
            return AssistantMessage(content="Which service? Ask me about it first, e.g. “payments recent errors”.")
        env = "prod" if _PROD.search(text) else "staging" if _STAGING.search(text) else None
        args: dict[str, Any] = {"service_id": service, "reason": text[:200]}
        if env:
            args["environment"] = env
        restart = _call("restart_service", **args)
        return AssistantMessage(content=f"Restarting {service} as asked.", tool_calls=(restart,))
    calls = [_call(name, query=text) for name in ("search_resource", "search_docs") if name in tools]
    if not calls:
        return AssistantMessage(content="(scripted demo model) I have no tool for that.")
    return AssistantMessage(content="Looking up the service and the runbooks in parallel.", tool_calls=tuple(calls))


def demo_model() -> ScriptedModel:
    return ScriptedModel(demo_reply, label=LABEL)
