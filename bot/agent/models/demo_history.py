"""What an answer says of a service's rollbacks and restarts, from the change history and the metrics: was it
rolled back (and what came after), how many restarts, and did one help — never a verdict about a deploy in
their place, never a new restart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.agent.models.demo_answers import data, metric_part, ok_data, partial, span, stamp
from bot.agent.models.demo_changes import change_line, dated_line, unseen
from bot.agent.models.demo_figures import percent
from core.messages import Message, ToolResultMessage
from tools.ops.verdict import SAME_DEPLOY_S

_HELP = ("help", "helped", "work", "worked", "fix", "fixed", "有用", "效果", "好转", "管用", "帮助")


def rollback_part(results: list[ToolResultMessage], service: str, zh: bool) -> list[str]:
    """"Was it rolled back?": a rollback in the change history, or none — never a verdict about the deploy."""
    found = ok_data(results, "recent_changes", service)
    head = "*回滚了吗？*" if zh else "*Rolled back?*"
    if found is None:
        return [head, "  • 无法判断：读不到变更记录。" if zh else
                "  • Can't tell: I could not read the change history."]
    changes = [c for c in found.get("changes") or [] if isinstance(c, dict)]
    window = span((found.get("window") or {}).get("minutes", 0) * 60, zh)
    backs = [c for c in changes if c.get("kind") == "rollback"]
    if not backs and (gaps := unseen(found, zh)):  # not in the list is not "no" when the list is not all of it
        return [head, f"  • 无法判断：列出的变更里没有回滚，但{gaps}。" if zh else
                f"  • Can't tell: no rollback among the changes listed, but {gaps}."]
    if not backs:
        last = changes[0] if changes else found.get("last_before_window")
        line = (f"  • 没有：最近 {window}内没有回滚记录" if zh else
                f"  • No: no rollback is recorded in the last {window}")
        if isinstance(last, dict):
            line += f"；最近一次变更是{change_line(last, zh, dated=True)}" if zh else \
                f"; the last change: {change_line(last, zh, dated=True)}"
        return [head, line + ("。" if zh else ".")]
    lines = [head] + [f"  • 是：{dated_line(c, found, zh)}" if zh else f"  • Yes: {dated_line(c, found, zh)}"
                      for c in backs[:2]]
    lines += _since(changes, backs, zh)
    metrics = ok_data(results, "query_metrics", service)
    rate = ((metrics or {}).get("metrics") or {}).get("error_rate") or {}
    back, rolled = stamp(rate.get("recovered_at")), stamp(backs[0].get("at"))
    onset = stamp(rate.get("onset_at"))  # a recovery from a rise that began after the rollback is not its doing
    if back is not None and rolled is not None and back >= rolled and backs[0].get("time") != "unknown" \
            and (onset is None or onset <= rolled):
        by = str(rate["recovered_at"])[11:16]
        lines.append(f"  • 回滚后 {span(back - rolled, zh)}，错误率在 {by} 回到基线。" if zh
                     else f"  • The error rate was back to its baseline by {str(rate['recovered_at'])[11:16]}, "
                          f"{span(back - rolled, zh)} after the rollback.")
    elif (was := _came_back(rate, rolled)) is not None and backs[0].get("time") != "unknown":
        by, again = str(rate["earlier_recovered_at"])[11:16], str(rate["onset_at"])[11:16]
        lines.append(f"  • 回滚后 {span(was, zh)}，错误率在 {by} 回到基线，但 {again} 又升高了。" if zh
                     else f"  • The error rate was back to its baseline by {by}, {span(was, zh)} after the rollback, "
                          f"but rose again at {again}.")
    return lines


def _since(changes: list[dict[str, Any]], backs: list[dict[str, Any]], zh: bool) -> list[str]:
    """What came after a rollback: not the end of the story when a later release, or a rollback of the rollback,
    put something else — maybe the very release rolled back — in place again."""
    latest = changes[0]
    version = latest.get("version") or latest.get("to_version")
    if not version:
        return []
    if latest is backs[0]:  # the newest change is a rollback itself: is it the undoing of the one before?
        undone = len(backs) > 1 and any(c.get("version") == version and c.get("kind") != "rollback"
                                        for c in changes[changes.index(backs[1]):])
        if not undone:
            return []
        return [f"  • `{version}` 又回来了：这次回滚撤销了之前那次。" if zh else
                f"  • `{version}` is back: the rollback before this one was undone."]
    return [f"  • 之后：{change_line(latest, zh, dated=True)}——记录里最后上线的是 `{version}`。" if zh else
            f"  • Since then: {change_line(latest, zh, dated=True)} — `{version}` is the release recorded last."]


def _one_per_restart(recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per restart: another source's record of it (CI's event, Kubernetes' revision) lands within
    seconds (as :data:`tools.ops.verdict.SAME_DEPLOY_S` has it for deploys)."""
    kept: list[tuple[float, dict[str, Any]]] = []
    for change in recorded:
        at = stamp(change.get("at"))
        if at is not None and any(abs(at - t) <= SAME_DEPLOY_S and c.get("source") != change.get("source")
                                  for t, c in kept):
            continue
        kept.append((at if at is not None else float("nan"), change))
    return [c for _, c in kept]


def restarts_part(results: list[ToolResultMessage], earlier: Sequence[Message], service: str, question: str,
                  zh: bool) -> list[str]:
    """How many restarts, and did one help: the restarts metric, the restarts in the change history and in
    this thread — never a new restart."""
    head = "*重启*" if zh else "*Restarts*"
    lines = [head]
    metrics = ok_data(results, "query_metrics", service)
    count = ((metrics or {}).get("metrics") or {}).get("restarts") or {}
    if metrics is not None and "current" in count:
        most = count.get("max", count["current"])
        lines.append(f"  • 指标 `restarts`（`{metrics['environment']}`，{metrics['window_minutes']} 分钟）：现在 "
                     f"{count['current']:g}，最多 {most:g} — _来源：`query_metrics`_" if zh
                     else f"  • Metric `restarts` ({metrics['environment']}, {metrics['window_minutes']} min): now "
                          f"{count['current']:g}, at most {most:g} — "
                          "_source: query_metrics_")
    found = ok_data(results, "recent_changes", service)
    recorded = [c for c in (found or {}).get("changes") or [] if isinstance(c, dict) and c.get("kind") == "restart"]
    if found is not None:
        window = span((found.get("window") or {}).get("minutes", 0) * 60, zh)
        gaps = unseen(found, zh)  # then a count is what was found, at least
        distinct = _one_per_restart(recorded)
        found_n = f"{len(distinct)} 次" if zh else str(len(distinct))
        if len(distinct) < len(recorded):  # two sources' records of one restart, seconds apart: one restart
            found_n += f"（{len(recorded)} 条记录，来自不同来源）" if zh else \
                f" ({len(recorded)} records from different sources)"
        n = found_n if not gaps else (f"至少 {found_n}" if zh else f"at least {found_n}") if recorded else \
            ("没有找到" if zh else "none found")
        lines.append((f"  • 变更记录里最近 {window}的重启：{n}" if zh else
                      f"  • Restarts in the change history, last {window}: {n}") +
                     (f"（{gaps}）" if zh and gaps else f" ({gaps})" if gaps else "") +
                     "".join(f"\n    – {dated_line(c, found, zh)}" for c in recorded[:3]))
    ours = [r for r in earlier if isinstance(r, ToolResultMessage) and r.name == "restart_service"
            and (data(r).get("data") or {}).get("service_id") == service]
    if ours:
        d = data(ours[-1]).get("data") or {}
        before, after = d.get("error_rate_before"), d.get("error_rate_after")
        figures = (f"：错误率 {percent(before)} → {percent(after)}" if zh else
                   f": error rate {percent(before)} → {percent(after)}") + \
            partial(d, zh) if isinstance(before, float) and isinstance(after, float) else ""
        lines.append(f"  • 这个线程里通过 OpsPilot 重启过{figures}" if zh else
                     f"  • Restarted through OpsPilot in this thread{figures}")
    if any(w in question.lower() for w in _HELP):
        lines.append(_helped(results, service, recorded, bool(ours), zh))
    return lines


def _helped(results: list[ToolResultMessage], service: str, recorded: list[dict[str, Any]], ours: bool,
            zh: bool) -> str:
    metrics = ok_data(results, "query_metrics", service)
    rate = ((metrics or {}).get("metrics") or {}).get("error_rate") or {}
    if not recorded and not ours:
        return ("  • 没有可判断的重启：这个线程和变更记录里都没有它的重启。" if zh else
                "  • There is no restart to judge: none in this thread and none in the change history.")
    if "current" not in rate:
        return "  • 无法判断：读不到错误率。" if zh else "  • Can't tell: I could not read the error rate."
    at = stamp(recorded[0].get("at")) if recorded and recorded[0].get("time") is None else None  # exact times only
    back, onset = stamp(rate.get("recovered_at")), stamp(rate.get("onset_at"))
    now = metric_part(rate, "错误率" if zh else "error rate", "%", zh)
    # Credited only with a recovery from errors that began before it: a rise after the restart is not its doing.
    if at is not None and (was := _came_back(rate, at)) is not None:
        again = str(rate["onset_at"])[11:16]
        return (f"  • 起初有用：重启后 {span(was, zh)} 回到基线，但 {again} 又升高了：{now}。" if zh
                else f"  • It looked like it at first: back to its baseline {span(was, zh)} after the restart, but "
                     f"the errors came back at {again}: {now}.")
    if at is not None and onset is not None and onset > at:
        return (f"  • 谈不上有没有用：报错是重启之后 {span(onset - at, zh)}才开始的。" if zh else
                f"  • Not something it could help with: the errors began {span(onset - at, zh)} after the restart.")
    if at is not None and back is not None and back >= at and onset is not None and onset <= at:
        return (f"  • 看起来有用：{now}，重启后 {span(back - at, zh)} 回到基线。" if zh else
                f"  • It looks like it: {now}, back to its baseline {span(back - at, zh)} after the restart.")
    if rate.get("trend") in ("steady high", "rising", "elevated"):
        return f"  • 没有：{now}，仍未回到基线。" if zh else f"  • No: {now} — still not back to its baseline."
    return f"  • 现在：{now}。" if zh else f"  • Now: {now}."


def _came_back(rate: dict[str, Any], at: float | None) -> float | None:
    """How long after ``at`` the error rate was back at its baseline, when it was under way at ``at`` and came back
    after it, then rose again (tools.ops.series: the rise under way is ``onset_at``, the one before it earlier_*):
    a rise after it is not its doing, and neither is it undone by one."""
    first, back, again = (stamp(rate.get(k)) for k in ("earlier_onset_at", "earlier_recovered_at", "onset_at"))
    if rate.get("excursions") != 2 or at is None or first is None or back is None or again is None \
            or not first <= at <= back < again:  # (with more, which one was under way at ``at`` is not kept)
        return None
    return back - at

