"""The scripted demo model on questions about changes: was it rolled back, how many restarts, did the restart
help, what changed (in one environment, across the catalog), what happened at a time — answered from the change
history and the metrics, each figure with its source; and the honest "I did not understand" with what it can do."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from bot.agent.models.demo_answers import data, metric_part, ok_data, partial, span, stamp, unverified
from bot.agent.models.demo_figures import percent
from bot.agent.models.demo_intent import Ask, window
from core.messages import ToolResultMessage

NEAR_S = 20 * 60  # an alert this close to the time asked about is what happened then
BEFORE_S = 2 * 3600  # the changes this long before a time asked about are what led to it
MOMENT_READ_MIN = 50 * 60  # the change history read for a time asked about: yesterday's any time, and before it
_KINDS_ZH = {"deploy": "发布", "image": "镜像变更", "rollback": "回滚", "restart": "重启", "config": "配置变更",
             "scale": "扩缩容", "rollout": "滚动发布"}
Call = tuple[str, dict[str, Any]]


def listing(results: Sequence[ToolResultMessage]) -> list[dict[str, Any]] | None:
    """The whole catalog, when search_resource was asked for ``*``."""
    for r in results:
        found = data(r).get("data") or {}
        if r.name == "search_resource" and found.get("listing"):
            return [c for c in found.get("candidates") or [] if isinstance(c, dict)]
    return None


def _minute(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def targets(services: list[dict[str, Any]], ask: Ask) -> list[tuple[str, str]]:
    """Which services and environments a question without a service is about: at a time, those whose alerts
    fired near it (else every service in the environment asked, prod by default); about changes, every
    service in the environment asked, or in each of its environments."""
    if ask.at is not None and not ask.yesterday:  # the catalog's alerts are today's
        near = [(str(s["id"]), str(a.get("env") or ask.environment or "prod")) for s in services
                for a in s.get("recent_alerts") or [] if isinstance(a, dict) and ":" in str(a.get("at", ""))
                and abs(_minute(str(a["at"])[:5]) - _minute(ask.at)) * 60 <= NEAR_S
                and (ask.environment is None or a.get("env") == ask.environment)]
        if near:
            return list(dict.fromkeys(near))
        return [(str(s["id"]), ask.environment or "prod") for s in services
                if (ask.environment or "prod") in (s.get("environments") or [])]
    return [(str(s["id"]), env) for s in services for env in s.get("environments") or []
            if ask.environment is None or env == ask.environment]


def wide_calls(services: list[dict[str, Any]], ask: Ask, tools: Sequence[str]) -> list[Call]:
    minutes = ask.minutes or (24 * 60 if ask.today or ask.at is None else 120)
    reads = ["recent_changes"] + (["query_metrics", "query_logs"] if ask.at is not None else [])
    calls: list[Call] = []
    for service, env in targets(services, ask):
        for name in reads:
            if name in tools:
                # A time asked about may be yesterday's (14:02 asked at 10:00): the changes from before it.
                wanted = MOMENT_READ_MIN if name == "recent_changes" and ask.at and not ask.minutes else minutes
                span_ = window(name, wanted if name != "query_metrics" else max(wanted, 60))
                calls.append((name, {"service_id": service, "environment": env, "minutes": span_}))
    return calls


def _answers(results: Sequence[ToolResultMessage], name: str) -> list[tuple[ToolResultMessage, dict[str, Any]]]:
    return [(r, data(r)) for r in results if r.name == name]


def kind_word(change: dict[str, Any], zh: bool) -> str:
    kind = str(change.get("kind") or "change")
    return _KINDS_ZH.get(kind, kind) if zh else kind


def change_line(change: dict[str, Any], zh: bool, dated: bool = False) -> str:
    """``deploy 2026.12.02-1`` at 09:10:01 UTC — order DTO mapper rewrite (source: `changes.jsonl`)."""
    at = stamp(change.get("at"))
    when = (datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S" if dated else "%H:%M:%S")
            if at is not None else "?")
    what = " ".join(str(x) for x in (change.get("kind"), change.get("version"), change.get("status")) if x)
    about = change.get("description") or ", ".join(str(i) for i in change.get("images") or [])
    tail = (f" — `{str(about)[:80]}`" if about else "") + \
        (f"（来源 `{change.get('source')}`）" if zh else f" (source: `{change.get('source')}`)")
    # A time the source did not record exactly is said as such (a reused ReplicaSet keeps none of the rollback's).
    zh_when, en_when = {"unknown": ("{} UTC 之后的某个时间", "at an unknown time after {} UTC"),
                        "approximate": ("约 {} UTC", "at about {} UTC")}.get(str(change.get("time")),
                                                                            ("{} UTC", "at {} UTC"))
    if zh:
        status = f"（`{change['status']}`）" if change.get("status") else ""
        return (f"{kind_word(change, zh)} `{change.get('version') or change.get('kind')}`{status}，"
                f"{zh_when.format(when)}{tail}")
    return f"`{what}` {en_when.format(when)}{tail}"


def _day(found: dict[str, Any]) -> str:
    return str((found.get("window") or {}).get("to") or "")[:10]


def dated_line(change: dict[str, Any], found: dict[str, Any], zh: bool) -> str:
    """A change dated when it is not on the window's last day (yesterday's 16:20 read as today's)."""
    return change_line(change, zh, dated=str(change.get("at", ""))[:10] != _day(found))


def unseen(found: dict[str, Any], zh: bool) -> str:
    """What the list cannot vouch for: sources not asked, records unread, older changes left off; "" when none."""
    parts = []
    if found.get("unavailable"):
        names = ", ".join(f"`{u.get('source')}`" for u in found["unavailable"] if isinstance(u, dict))
        parts.append(f"没有查到：{names}" if zh else f"not checked: {names}")
    if found.get("unreadable_records"):
        n = int(found["unreadable_records"])
        parts.append(f"{n} 条记录读不到" if zh else f"{n} record{'s' if n != 1 else ''} could not be read")
    if found.get("more_changes"):
        n = int(found["more_changes"])
        parts.append(f"另有 {n} 条较早的变更没有列出" if zh else
                     f"{n} older change{'s' if n != 1 else ''} not listed")
    return "；".join(parts) if zh else "; ".join(parts)


def moment(ask: Ask, found: dict[str, Any]) -> float | None:
    """The time asked about, on the day it last was before the data's now (14:02 asked at 10:00 is yesterday's);
    "today" and "yesterday" are the asker's, in the zone the time was said in."""
    now = stamp((found.get("window") or {}).get("to"))
    if ask.at is None or now is None:
        return None
    hours, minutes = (int(x) for x in ask.at.split(":"))
    offset = ask.offset_min * 60
    local_day = datetime.fromtimestamp(now + offset, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    local_time = ((hours * 60 + minutes) * 60 + offset) % 86400
    at = local_day.timestamp() + local_time - offset - (86400 if ask.yesterday else 0)
    if ask.today or ask.yesterday:
        return at
    return at - 86400 if at > now else at


def _first_window(results: Sequence[ToolResultMessage]) -> dict[str, Any]:
    return next(((b.get("data") or {}) for _, b in _answers(results, "recent_changes") if b.get("ok")), {})


def wide_answer(results: Sequence[ToolResultMessage], ask: Ask, services: list[dict[str, Any]], zh: bool) -> str:
    lines: list[str] = []
    first = _first_window(results)
    asked, now = moment(ask, first), stamp((first.get("window") or {}).get("to"))
    today = asked is not None and datetime.fromtimestamp(asked, UTC).strftime("%Y-%m-%d") == _day(first)
    if ask.at is not None:
        near = [(s["id"], a) for s in services for a in s.get("recent_alerts") or []
                if isinstance(a, dict) and ":" in str(a.get("at", "")) and (today or asked is None)
                and not ask.yesterday and abs(_minute(str(a["at"])[:5]) - _minute(ask.at)) * 60 <= NEAR_S]
        day = "" if today or asked is None else datetime.fromtimestamp(asked, UTC).strftime("%Y-%m-%d ")
        said = (f"（即你问的 {ask.said_at}）" if zh else f" ({ask.said_at} as asked)") if ask.said_at else ""
        lines.append(f"*{day}{ask.at} UTC 前后*{said}" if zh else f"*Around {day}{ask.at} UTC*{said}")
        for sid, alert in near:
            lines.append(f"  • 告警：`{sid}`（`{alert.get('env')}`）{alert.get('at')} — `{alert.get('summary')}`"
                         " — _来源：服务目录_" if zh else
                         f"  • Alert: `{sid}` ({alert.get('env')}) at {alert.get('at')} — `{alert.get('summary')}`"
                         " — _source: the service catalog_")
        if not near:
            lines.append(f"  • 服务目录里没有这个时间前后 {NEAR_S // 60} 分钟内的告警。" if zh else
                         f"  • No alert in the catalog within {NEAR_S // 60} min of that time.")
    for _result, body in _answers(results, "recent_changes"):
        found = body.get("data") or {}
        if not body.get("ok"):
            lines.append(f"  • `{body.get('errorCode')}`：`{body.get('message')}`" if zh else
                         f"  • could not read changes: {body.get('errorCode')} — {body.get('message')}")
            continue
        sid, env = found.get("service_id"), found.get("environment")
        changes = [c for c in found.get("changes") or [] if isinstance(c, dict)]
        if ask.today:
            changes = [c for c in changes if str(c.get("at", ""))[:10] == _day(found)]
        window = (f"今天（{_day(found)}，UTC）" if zh else f"today ({_day(found)}, UTC)") if ask.today else \
            (f"最近 {span((found.get('window') or {}).get('minutes', 0) * 60, zh)}" if zh else
             f"in the last {span((found.get('window') or {}).get('minutes', 0) * 60, zh)}")
        gaps = unseen(found, zh)
        caveat = "" if not gaps else f"  • _列表可能不完整：{gaps}_" if zh else \
            f"  • _The list may be incomplete: {gaps}_"
        if ask.at is not None:  # what one service did around that time: its changes, error rate and errors
            lines.append(f"*`{sid}`（`{env}`）*" if zh else f"*`{sid}` ({env})*")
            if asked is not None:  # the changes that led up to that time, not the last ones before now
                changes = [c for c in changes if (t := stamp(c.get("at"))) is not None
                           and asked - BEFORE_S <= t <= asked + NEAR_S]
                window = "那个时间前 2 小时内" if zh else "in the 2 h before that time"
            lines += [f"  • {'变更：' if zh else 'Change: '}{dated_line(c, found, zh)}" for c in changes[:3]] or \
                [f"  • {window}没有找到变更" if zh else f"  • No change found {window}"]
            lines += [caveat] if caveat else []
            lines += _moment(results, str(sid), zh, asked, now)
            continue
        head = f"*`{sid}`（`{env}`）{window}的变更*：" if zh else f"*Changes to `{sid}` ({env}) {window}*:"
        if not changes:
            lines.append(f"{head}{'没有找到' if zh else ' none found'}" if gaps else
                         f"{head}{'没有' if zh else ' none'}")
        else:
            lines.append(head)
            lines += [f"  • {dated_line(c, found, zh)}" for c in changes[:5]]
            if len(changes) > 5:
                lines.append(f"  • ……另有 {len(changes) - 5} 条" if zh else f"  • … and {len(changes) - 5} more")
        lines += [caveat] if caveat else []
    if not _answers(results, "recent_changes"):
        lines.append("我读不到任何变更记录。" if zh else "I could not read any change history.")
    lines.append("_以上来自变更记录；时间均为 UTC。_" if zh else "_From the change history; times are UTC._")
    return "\n".join(lines)


def _moment(results: Sequence[ToolResultMessage], service: str, zh: bool, asked: float | None = None,
            now: float | None = None) -> list[str]:
    out = []
    metrics = ok_data(list(results), "query_metrics", service)
    minutes = (metrics or {}).get("window_minutes")
    if asked is not None and now is not None and isinstance(minutes, int) and not now - minutes * 60 <= asked <= now:
        since = datetime.fromtimestamp(now - minutes * 60, UTC).strftime("%H:%M")  # figures of another time: not said
        return [f"  • 错误率和日志只读了最近 {span(minutes * 60, zh)}（{since} 起），不含那个时间。" if zh else
                f"  • Error rate and logs were read for the last {span(minutes * 60, zh)} only (from {since} UTC), "
                "not around that time."]
    rate = ((metrics or {}).get("metrics") or {}).get("error_rate") or {}
    if "current" in rate:
        out.append("  • " + metric_part(rate, "错误率" if zh else "error rate", "%", zh) +
                   (" — _来源：`query_metrics`_" if zh else " — _source: query_metrics_"))
    logs = ok_data(list(results), "query_logs", service) or {}
    for p in (logs.get("patterns") or [])[:1]:
        out.append(f"  • {p['count']}× `{p['pattern']}`（首次 {p['first_seen'][11:19]}）— _来源：`query_logs`_" if zh
                   else f"  • {p['count']}× `{p['pattern']}` (first {p['first_seen'][11:19]}) — _source: query_logs_")
    return out


def decline(question: str, ask: Ask, known: list[str], tools: Sequence[str], zh: bool) -> str:
    """A question the demo cannot map: what it understood, what it can check, and questions it can answer."""
    understood = [t for t in (
        (f"环境 `{ask.environment}`" if zh else f"the environment `{ask.environment}`") if ask.environment else "",
        (f"时间 {ask.at}" if zh else f"the time {ask.at}") if ask.at else "",
        ("关于变更" if zh else "it is about changes") if ask.about_changes else "") if t]
        # (a word of the question is never presented as a service it looked for)
    services = ", ".join(f"`{k}`" for k in known) or "?"
    if zh:
        read_as = f"（我读到的：{'；'.join(understood)}）" if understood else ""
        head = f"我没弄明白你问的是哪个服务、要查什么{read_as}。"
        return (f"{head}\n我能查的服务：{services}；能看的是错误日志、错误率和延迟、最近的发布和变更、运维文档。\n"
                "可以这样问：\n• 看看支付服务生产环境最近的报错\n• 订单服务 staging 的报错是发版引起的吗？\n"
                "• 今天 staging 有什么变更？")
    head = "I could not tell which service or what to check" + \
        (f" (what I understood: {'; '.join(understood)})" if understood else "") + "."
    return (f"{head}\nServices I can look at: {services}; for each: error logs, error rate and latency, recent "
            "deploys and changes, the runbooks.\nTry:\n• look at the payments errors in prod\n"
            "• did the last deploy break orders in staging?\n• what changed in staging today?")


def answer_change(result: ToolResultMessage, zh: bool) -> str:
    """A rollback's or a scale's outcome from its own result: from → to, the rollout, the error rate before and
    after; a refusal or an unknown outcome said as such (never "it did not happen" unless it did not start)."""
    body = data(result)
    rollback = result.name == "rollback_service"
    if not body.get("ok"):
        code = body.get("errorCode")
        if code == "outcome_unknown":
            return ("已开始，但不确定是否完成：请先检查部署的实际状态再决定是否重试。" if zh else
                    "It was started, but whether it completed is unknown: check the deployment before trying again "
                    "(outcome_unknown).")
        if code == "declined_by_user":
            return "未执行：已被拒绝。" if zh else "Not done: declined."
        return f"未执行：`{body.get('message')}`（`{code}`）。" if zh else f"Not done: {body.get('message')} ({code})."
    d = body.get("data") or {}
    was, now = d.get("from") or {}, d.get("to") or {}
    key = "release" if now.get("release") else "revision" if rollback else "replicas"
    moved = f"`{was.get(key, '?')}` → `{now.get(key, '?')}`"
    sid, env = d.get("service_id"), d.get("environment")
    where = f"`{sid}`（`{env}`）" if zh else f"`{sid}` in {env}"
    before, after = d.get("error_rate_before"), d.get("error_rate_after")
    rates = (f"；错误率 {percent(before)} → {percent(after)}" if zh else
             f"; error rate {percent(before)} → {percent(after)}") + \
        partial(d, zh) if isinstance(before, float) and isinstance(after, float) else ""
    source = f"_来源：`{result.name}`_" if zh else f"_source: {result.name}_"
    if d.get("rollout") != "complete":  # issued, not verified: never "rolled back" or "scaled"
        how = unverified(d.get("rollout"), zh)
        if zh:
            return f"已发起{'回滚' if rollback else '副本数调整'} {where}（{moved}），但{how}{rates}。{source}"
        change = "rollback" if rollback else "scaling"
        return f"The {change} of {where} ({moved}) was issued, but {how}{rates}. {source}"
    if zh:
        return f"已{'回滚' if rollback else '调整副本数'} {where}：{moved}，滚动发布已完成{rates}。{source}"
    return f"{'Rolled back' if rollback else 'Scaled'} {where}: {moved}, rollout complete{rates}. {source}"
