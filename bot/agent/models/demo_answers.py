"""The demo model's answers, composed only from what its tools returned: every figure has its source, and a trend
is the tool's own word ("was it the deploy?": demo_verdict)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from bot.agent.models.demo_figures import highest, percent, trend_word
from core.messages import ToolResultMessage
from tools.ops.series import story
from tools.ops.verdict import stamp as stamp  # (re-exported for the demo model)


def data(result: ToolResultMessage) -> dict[str, Any]:
    try:
        body = json.loads(result.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def ok_data(results: list[ToolResultMessage], name: str, service: str | None = None) -> dict[str, Any] | None:
    for r in reversed(results):
        body = data(r)
        found = body.get("data")
        if r.name == name and body.get("ok") and isinstance(found, dict) and \
                (service is None or found.get("service_id") in (None, service)):
            return found
    return None


def failed(results: list[ToolResultMessage], name: str) -> dict[str, Any] | None:
    return next((data(r) for r in reversed(results) if r.name == name and not data(r).get("ok")), None)


def clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def span(seconds: float, zh: bool) -> str:
    minutes = round(abs(seconds) / 60)
    if minutes < 1:
        return f"{round(abs(seconds))} 秒" if zh else f"{round(abs(seconds))} s"
    if minutes < 120:
        return f"{minutes} 分钟" if zh else f"{minutes} min"
    return f"{round(minutes / 60)} 小时" if zh else f"{round(minutes / 60)} h"


def metric_part(figures: dict[str, Any], label: str, unit: str, zh: bool) -> str:
    """``error rate 0.0% (spiked and recovered: peak 13.0% at 09:13, began 09:11, back by 09:15)`` — told by
    the same rule as the Slack line and the tool's summary (tools.ops.series.story)."""
    pct = unit == "%"

    def show(v: float) -> str:
        return percent(v) if pct else f"{v:.0f} {unit}"

    text = f"{label} {show(figures['current'])} ({trend_word(str(figures['trend']), zh)}"
    key = "peak" if "peak" in figures else "low"
    extreme = figures.get(key) if figures.get(f"{key}_at") else None
    told = story(figures)
    if extreme is not None and told != "plain":
        at, began = str(figures[f"{key}_at"])[11:16], str(figures["onset_at"])[11:16]
        back = str(figures.get("recovered_at") or "")[11:16]
        what = ("峰值" if key == "peak" else "低点") if zh else key
        if zh:
            text += f"：{what} {show(extreme)}（{at}），" + {"back": f"{began} 开始，{back} 恢复",
                                                             "since": f"{began} 起",
                                                             "not_back": f"{began} 开始，尚未恢复"}[told]
        else:
            text += f": {what} {show(extreme)} at {at}, " + {"back": f"began {began}, back by {back}",
                                                             "since": f"since {began}",
                                                             "not_back": f"not back yet: began {began}"}[told]
        text += earlier_part(figures, show, zh)
    if figures.get("last_point_at"):  # the value is not now's
        at = str(figures["last_point_at"])[11:16]
        text += f"；最后一个数据点在 {at}，之后没有数据" if zh else f"; last point at {at}, none since"
    if figures.get("backend_warnings"):
        text += "；数据不完整（后端有警告）" if zh else "; partial data (the backend warned)"
    if figures.get("gaps"):
        n = figures["gaps"]
        text += f"；缺 {n} 个数据点" if zh else f"; {n} point{'s' if n != 1 else ''} missing"
    return text + ")"


def earlier_part(figures: dict[str, Any], show: Callable[[float], str], zh: bool) -> str:
    """``; earlier: spiked at 09:21 to 5.0%, back by 09:24``: what came and went before the excursion described
    (tools.ops.series: it recovered, then left again)."""
    key = "peak" if "peak" in figures else "low"
    count, back, peak = figures.get("excursions"), figures.get("earlier_recovered_at"), figures.get(f"earlier_{key}")
    if not isinstance(count, int) or count < 2 or not back or not isinstance(peak, int | float):
        return ""
    first, back = str(figures.get("earlier_onset_at") or "")[11:16], str(back)[11:16]
    if zh:
        went = "升高" if key == "peak" else "下降"
        times = f"自 {first} 起曾{went} {count - 1} 次" if count > 2 else f" {first} 曾{went}"
        return f"；此前{times}，{'峰值' if key == 'peak' else '低点'} {show(peak)}，{back} 已恢复"
    went = "spiked" if key == "peak" else "dipped"
    times = f"{went} {count - 1} times from {first}" if count > 2 else f"{went} at {first}"
    return f"; earlier: {times} to {show(peak)}, back by {back}"


_UNSEEN = (("cpu|处理器", "CPU usage", "CPU 使用率"), ("memory|\\bram\\b|内存", "memory use", "内存"),
           ("\\bdisk|磁盘", "disk use", "磁盘"), ("on[- ]?call|值班", "the on-call rota", "值班表"),
           ("\\btraces?\\b|链路", "traces", "链路追踪"))
_CAN = {"query_logs": ("error logs", "错误日志"),
        "query_metrics": ("error rate, p95 latency and restarts", "错误率、p95 延迟和重启次数"),
        "recent_changes": ("recent deploys and rollouts", "最近的发布和变更"),
        "search_docs": ("the runbooks", "运维文档"),
        "search_resource": ("the service catalog (owners, environments)", "服务目录（负责团队、环境）")}


def cannot_see(question: str, tools: Sequence[str], zh: bool) -> str | None:
    """A question about something no tool reads: say so, and what can be checked instead."""
    topics = [zh_name if zh else name for pattern, name, zh_name in _UNSEEN if re.search(pattern, question, re.I)]
    if not topics:
        return None
    can = [_CAN[t][1 if zh else 0] for t in tools if t in _CAN]
    if zh:
        return f"我看不到{'、'.join(topics)}：我的工具都读不到它。我能查的是：{'；'.join(can)}。"
    return f"I can't see {' or '.join(topics)}: none of my tools reads it. What I can check: {'; '.join(can)}."


_FILE_QUERY = re.compile(r'^error lines of (\S+) in the last (\d+) min(?: containing "(.*)")?$', re.S)


def query_zh(query: str) -> str:
    """The file log backend's description in Chinese (it is OpsPilot's own prose); a real query (LogQL) is
    data, shown as it ran."""
    found = _FILE_QUERY.match(query)
    if not found:
        return f"`{query}`"
    where, minutes, contains = found.groups()
    return f"`{where}` 最近 {minutes} 分钟的错误行" + (f"（包含 `{contains}`）" if contains else "")


def _service_part(results: list[ToolResultMessage], c: dict[str, Any], zh: bool, several: bool) -> list[str]:
    sid = str(c["id"])
    lines = [f"*服务*：{c['name']}（`{sid}`，团队 `{c.get('team', '?')}`）— _来源：`search_resource`_" if zh else
             f"*Service*: {c['name']} (`{sid}`, team {c.get('team', '?')}) — _source: search_resource_"]
    logs = ok_data(results, "query_logs", sid)
    if logs:
        head = "*近期错误日志*" if zh else "*Recent errors*"
        lines.append(f"{head}（`{logs['environment']}`，{logs['window_minutes']} 分钟，{logs['error_lines']} 行）"
                     f"— _查询：{query_zh(str(logs['query']))}_" if zh else
                     f"{head} ({logs['environment']}, {logs['window_minutes']} min, {logs['error_lines']} lines)"
                     f" — _query: `{logs['query']}`_")
        if logs.get("limit_reached"):  # the newest lines only: a count or "first" below would read as the whole
            lines.append("  • 只读到最新的这些行（达到上限）：次数和首次出现时间并不完整" if zh else
                         "  • the newest lines only (the limit was reached): counts and first times are partial")
        for p in logs.get("patterns", [])[:2 if several else 3]:
            first, last = p['first_seen'][11:16], p.get('last_seen', '')[11:16]
            lines.append(f"  • {p['count']}× `{p['pattern']}`（首次 {first}，最近 {last}）" if zh else
                         f"  • {p['count']}× `{p['pattern']}` (first {first}, last {last})")
        if not logs.get("patterns"):
            lines.append("  • " + ("这段时间没有错误日志" if zh else "no error lines in this window"))
    metrics = ok_data(results, "query_metrics", sid)
    if metrics:
        m = metrics.get("metrics", {})
        parts = []
        if "current" in m.get("error_rate", {}):
            parts.append(metric_part(m["error_rate"], "错误率" if zh else "error rate", "%", zh))
        else:  # said, never left out: an answer without it reads as if nothing were wrong
            parts.append("错误率：无数据" if zh else "error rate: no data")
        if "current" in m.get("p95_latency_ms", {}):
            parts.append(metric_part(m["p95_latency_ms"], "p95", "ms", zh))
        if parts:
            lines.append(f"*指标*（`{metrics['environment']}`）：" + "，".join(parts) + "— _来源：`query_metrics`_"
                         if zh else f"*Metrics* ({metrics['environment']}): " + ", ".join(parts)
                         + " — _source: query_metrics_")
    return lines


def _comparison(results: list[ToolResultMessage], chosen: list[dict[str, Any]], zh: bool) -> list[str]:
    said, read = [], {}
    for c in chosen:
        rate = ((ok_data(results, "query_metrics", str(c["id"])) or {}).get("metrics") or {}).get("error_rate") or {}
        if "current" in rate:
            read[str(c["id"])] = float(rate["current"])
            said.append(f"{c['id']} {percent(float(rate['current']))} ({trend_word(rate['trend'], zh)})")
        else:
            said.append(f"{c['id']}: {'没有读到' if zh else 'not read'}")
    if len(read) < 2:
        return []
    top = highest(read)  # on the figures as written: two that read alike are not ranked
    if len(top) == len(read):
        ranked = f"都是 {percent(read[top[0]])}，一样" if zh else f"{'both' if len(top) == 2 else 'all'} " \
            f"{percent(read[top[0]])}: the same"
    else:
        ranked = f"{'、'.join(top)} 最高" if zh else f"{' and '.join(top)} {'is' if len(top) == 1 else 'are'} highest"
    envs = [str((ok_data(results, "query_metrics", str(c["id"])) or {}).get("environment") or "?") for c in chosen]
    if len(set(envs)) == 1:  # like with like, and which one, since the question may not have said
        where = f"（都在 `{envs[0]}`）" if zh else f" (both in {envs[0]})"
    else:
        where = ("（环境不同：" if zh else " (not the same environment: ") + ", ".join(
            f"{c['id']} {e}" for c, e in zip(chosen, envs, strict=True)) + ("）" if zh else ")")
    return [f"*对比*{where}：错误率 {' vs '.join(said)}；{ranked}。" if zh else
            f"*Comparison*{where}: error rate {' vs '.join(said)}; {ranked}."]


def answer_lookup(results: list[ToolResultMessage], zh: bool, *, question: str = "",
                  tools: Sequence[str] = (), services: list[str] | None = None,
                  topics: Callable[[str], list[str]] | None = None) -> str:
    """The answer: per service its logs and metrics, then what the question asked about (``topics``: the
    deploy verdict, rollbacks, restarts), a comparison when it named several, and the runbooks' advice."""
    lines: list[str] = [note] if (note := cannot_see(question, tools, zh)) else []
    for r in results:
        body = data(r)
        if not body.get("ok") and not (r.name == "search_resource" and body.get("errorCode") == "not_found"):
            lines.append(f"• `{r.name}` 失败：`{body.get('errorCode')}` — `{body.get('message')}`" if zh else
                         f"• `{r.name}` failed: {body.get('errorCode')} — {body.get('message')}")
    found = ok_data(results, "search_resource")
    candidates = list((found or {}).get("candidates") or [])
    chosen = [c for c in candidates if c["id"] in (services or [])] or candidates[:1]
    for c in chosen:
        lines += _service_part(results, c, zh, several=len(chosen) > 1)
        if topics is not None:
            lines += topics(str(c["id"]))
    if len(chosen) > 1:
        lines += _comparison(results, chosen, zh)
    docs = ok_data(results, "search_docs")
    if docs and docs.get("results"):
        lines.append(f"{'*文档建议*' if zh else '*Runbook advice*'}:")
        # The service's own runbooks (the catalog lists them) before any other document that matched.
        own = {r for c in chosen for r in c.get("runbooks") or []}
        hits = sorted(docs.get("results", []), key=lambda h: not any(str(h["path"]).endswith(r) for r in own))
        for hit in hits[:2]:
            first = next((ln.strip("-• ").strip() for ln in str(hit["text"]).splitlines() if ln.strip()), "")
            # A section named like its document is not said twice ("… roll back first §… roll back first").
            where = hit["title"] if hit["section"] in (hit["title"], "") else f"{hit['title']} §{hit['section']}"
            lines.append(f"  • {where} (`{hit['path']}`): {first}")
    lines.append("_以上结论来自上面各工具返回的数据；没有核实数据库本身的状态。_" if zh else
                 "_From what the tools above returned; I did not check the database itself._")
    return "\n".join(lines)
def unverified(rollout: object, zh: bool) -> str:
    """Why a change that was issued is not said to be done: how its rollout ended."""
    words = {"timed_out": ("滚动发布未在时限内完成，尚未验证",
                           "the rollout did not finish in time: it is NOT verified"),
             "failed": ("滚动发布失败", "the rollout failed"),
             "superseded": ("滚动发布完成后又被其他人或组件改动，与计划不符",
                            "it rolled out, then someone or something else changed it: not as planned")}
    zh_words, en_words = words.get(str(rollout), ("无法跟踪其进度", "its progress could not be followed"))
    return zh_words if zh else en_words


def partial(d: dict[str, Any], zh: bool) -> str:
    """That a change's before/after figures stand on part of the data (the backend warned), if they do."""
    warned = d.get("error_rate_warnings") or []
    if not warned:
        return ""
    text = str(warned[0])[:120].replace("`", "'")
    return f"（数据不完整，Prometheus 警告：`{text}`）" if zh else f" (partial data, Prometheus warned: `{text}`)"


def answer_restart(result: ToolResultMessage, zh: bool) -> str:
    body = data(result)
    if body.get("ok"):
        d = body["data"]
        before, after, rollout = d.get("error_rate_before"), d.get("error_rate_after"), d.get("rollout")
        trend = ""
        if isinstance(before, int | float) and isinstance(after, int | float):
            was, now = percent(before), percent(after)  # the words follow the figures as written
            trend = ((f"错误率保持在 {now}" if was == now else
                      f"错误率从 {was} {'降到' if after < before else '升到'} {now}") if zh else
                     (f"the error rate stayed at {now}" if was == now else
                      f"the error rate {'fell' if after < before else 'rose'} from {was} to {now}"))
            trend += partial(d, zh)
        what, where = f"`{d['service_id']}`", d["environment"]
        if rollout != "complete":  # issued, not verified: never "restarted"
            return (f"已发起重启 {what}（{where}），但{unverified(rollout, zh)}。_来源: restart_service_" if zh else
                    f"The restart of {what} in {where} was issued, but {unverified(rollout, zh)}. "
                    "_source: restart_service_")
        if zh:
            return f"已重启 {what}（{where}），滚动发布已完成{'；' + trend if trend else ''}。_来源: restart_service_"
        return (f"Restarted {what} in {where}: the rollout completed{'; ' + trend if trend else ''}. "
                "_source: restart_service_")
    if body.get("errorCode") == "outcome_unknown":  # it was started: never say it did not happen
        return ("重启已开始，但不确定是否完成：请先检查服务的实际状态再决定是否重试。" if zh
                else "The restart was started, but whether it completed is unknown: check the service's rollout "
                     "before restarting it again (outcome_unknown).")
    code = "" if body.get("errorCode") == "declined_by_user" else f" ({body.get('errorCode')})"
    if zh:  # the tool's own message is English, for the model: quoted as it is
        return "未执行重启：已被拒绝。" if not code else f"未执行重启：`{body.get('message')}`{code}。"
    return f"The restart did not run: {body.get('message')}{code}."


