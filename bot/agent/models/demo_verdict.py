""""Was it the deploy?" in the demo model's answer: the onset and the change times side by side, then yes, no or
can't tell with the reason — by the rule the Slack answer's "Roll back to …" button uses (tools.ops.verdict)."""

from __future__ import annotations

from typing import Any

from bot.agent.models.demo_answers import clock, failed, ok_data, span
from core.messages import ToolResultMessage
from tools.ops.verdict import judge, stamp


def deploy_verdict(results: list[ToolResultMessage], service: str, zh: bool) -> list[str]:
    """The onset and the changes side by side, then yes / no / can't tell with the reason (the rule:
    tools.ops.verdict, the same one that decides the Slack answer's "Roll back to …" button)."""
    changes = ok_data(results, "recent_changes", service)
    rate = ((ok_data(results, "query_metrics", service) or {}).get("metrics") or {}).get("error_rate") or {}
    v = judge(changes, rate, ok_data(results, "query_logs", service))
    kinds = {c.get("kind") for _, c in v.changes}
    if kinds <= {"deploy", "rollout", "image", None}:
        head = "*和发布有关吗？*" if zh else "*Was it the deploy?*"
    else:  # a configuration change, a restart, a rollback: not a deploy, and not called one
        head = "*和变更有关吗？*" if zh else "*Was it a change?*"
    if v.kind == "no_history":
        why = (failed(results, "recent_changes") or {}).get("message") or "no change history"
        return [head, (f"  • 无法判断：读不到变更记录（{why}）。" if zh else
                       f"  • Can't tell: I could not read the change history ({why}).")]
    lines = [head]
    for t, c in v.changes[:3]:
        what = " ".join(str(x) for x in (c.get("kind"), c.get("version")) if x)
        source = f"（来源 `{c.get('source')}`）" if zh else f" (source: `{c.get('source')}`)"  # the tool's label: data
        when = {"unknown": ("{} UTC 之后的某个时间", "an unknown time after {} UTC"),
                "approximate": ("约 {} UTC", "about {} UTC")}.get(str(c.get("time")), ("{} UTC", "{} UTC"))
        lines.append(f"  • {'变更：' if zh else 'Change: '}`{what}` — {when[0 if zh else 1].format(clock(t))}{source}")
    window = ((changes or {}).get("window") or {}).get("minutes")
    unread = "" if not v.unread else f"（另有 {v.unread} 条记录或来源读不到）" if zh else \
        f" ({v.unread} records or sources could not be read)"
    if not v.changes:
        lines.append(f"  • 最近 {window} 分钟内没有变更记录{unread}" if zh else
                     f"  • No change recorded in the last {window} min{unread}")
    if v.began is None and v.hidden == "before_data":
        name = _name(v.change or {})
        lines.append(f"  • 无法判断：{name} 在我读到的第一个指标数据点之前，不知道它之前的错误率。" if zh else
                     f"  • Can't tell: {name} came before the first metric point I read, so the error rate before "
                     "it is not known.")
        return lines
    if v.began is None:
        lines.append({
            "no_data": ("  • 无法判断：这段时间的错误率数据不足。",
                        "  • Can't tell: I could not read enough of the error rate in this window to see when "
                        "it rose."),
            "no_rise": ("  • 看不出影响：这段时间错误率没有明显上升。",
                        "  • No sign of it: the error rate did not clearly rise in this window."),
            "incomplete": ("  • 无法判断是否有变更：部分变更记录读不到；错误率没有明显上升。",
                           "  • Can't tell whether anything changed: part of the change history could not be "
                           "read; the error rate did not clearly rise."),
        }.get(v.kind, ("  • 不是：没有变更，错误率也没有明显上升。",
                       "  • No: nothing changed, and the error rate did not clearly rise."))[0 if zh else 1])
        return lines
    how_zh = "第一条错误日志" if v.how.startswith("first error log") else "错误率首次明显高于基线"
    lines.append(f"  • 报错开始：{clock(v.began)} UTC（{how_zh}）" if zh else
                 f"  • Errors began: {clock(v.began)} UTC ({v.how})")
    gap = abs(v.began - (v.change_at or v.began))
    name = _name(v.change or {})
    if v.kind == "yes":
        lines.append(f"  • 是：报错在 {name} 之后 {span(gap, zh)} 开始，之前错误率处于基线。" if zh else
                     f"  • Yes: the errors began {span(gap, zh)} after {name}, and the error rate was at "
                     "its baseline before it.")
        lines += _came_and_went(rate, zh)
    elif v.kind == "no":
        lines.append(f"  • 不是：报错比 {name} 早 {span(gap, zh)} 就开始了。" if zh
                     else f"  • No: the errors began {span(gap, zh)} before {name}.")
        if v.earlier is not None:
            t, c = v.earlier
            lines.append(f"    更早的变更 {_name(c)} 比报错早 {span(v.began - t, zh)}。" if zh else
                         f"    The change before them, {_name(c)}, came {span(v.began - t, zh)} earlier.")
    elif v.kind == "too_early":
        lines.append(f"  • 无法判断：最近的变更 {name} 比报错早 {span(gap, zh)}，时间上对不上。" if zh else
                     f"  • Can't tell: the last change before the errors, {name}, came {span(gap, zh)} "
                     "earlier — too long before to tie them by timing alone.")
    elif v.kind == "incomplete" and v.hidden == "recurring":
        lines.append(_recurring(rate, v.began, v.change_at, name, zh))
    elif v.kind == "incomplete" and v.hidden == "gap":
        lines.append("  • 无法判断：报错开始前指标有一段没有数据，不知道它具体何时开始。" if zh else
                     "  • Can't tell: the metric has no points just before the errors began, so when they began "
                     "is not known.")
    elif v.kind == "incomplete" and v.hidden == "before_data":
        lines.append(f"  • 无法判断：{name} 在我读到的第一个指标数据点之前，不知道它之前的错误率。" if zh else
                     f"  • Can't tell: {name} came before the first metric point I read, so the error rate before "
                     "it is not known.")
    elif v.kind == "incomplete" and v.hidden == "failed":
        status = (v.change or {}).get("status")
        lines.append(f"  • 无法判断：{name} 的记录说它没有成功（`{status}`），不知道它有没有部分生效；报错在它之后 "
                     f"{span(gap, zh)}开始。" if zh else
                     f"  • Can't tell: {name} is recorded as not successful (`{status}`), so whether any of it took "
                     f"effect is not known; the errors began {span(gap, zh)} after it.")
    elif v.kind == "incomplete" and v.hidden == "unscoped":
        lines.append(f"  • 无法判断：报错在 {name} 之后 {span(gap, zh)}开始，但它的记录没有写明环境，"
                     "不知道它是否部署到了这个环境。" if zh else
                     f"  • Can't tell: the errors began {span(gap, zh)} after {name}, but its record names no "
                     "environment, so whether it reached this one is not known.")
    elif v.kind == "incomplete" and v.hidden == "resolution":
        lines.append(f"  • 无法判断：{name} 距报错开始只有 {span(gap, zh)}，在指标的一个数据间隔之内"
                     "（报错可能在它之前就开始了）。" if zh else
                     f"  • Can't tell: {name} came {span(gap, zh)} before the errors began, within one metric step "
                     "(they may have begun just before it).")
    elif v.kind == "incomplete" and v.hidden == "approximate":
        lines.append("  • 无法判断：有一次回滚的时间只是近似的（Kubernetes 不记录开始时间，所标时间可能晚于开始），"
                     "它可能在报错之前就开始了。" if zh else
                     "  • Can't tell: a rollback's time is only approximate (Kubernetes keeps no start time, and its "
                     "stamp can be minutes after it began), and it may have begun before the errors.")
    elif v.kind == "incomplete" and v.hidden:
        lines.append(("  • 无法判断：报错开始前的变更没有全部列出（列表只有最新的几条）。" if zh else
                      "  • Can't tell: the changes just before the errors began are not all listed (only the newest "
                      "are).") if v.hidden == "cut" else
                     ("  • 无法判断：有一次变更的时间不确定（只知道在所标时间之后），它可能就在报错之前。" if zh else
                      "  • Can't tell: a change's time is not known (only that it came after its stamp), and it may "
                      "have come just before the errors."))
    elif v.kind == "incomplete":
        lines.append("  • 无法判断：读到的记录里这段时间没有变更，但部分记录读不到。" if zh else
                     "  • Can't tell: no change in what could be read, but part of the change history could not "
                     "be read.")
    else:
        lines.append("  • 不是：这段时间没有任何变更。" if zh else "  • No: nothing changed in this window.")
    return lines


def _name(change: dict[str, Any]) -> str:
    """A deploy by its version (2026.12.02-1); any other kind says what it was (config revision 14, rollback
    2026.12.01-4)."""
    kind, version = change.get("kind"), change.get("version")
    if kind in (None, "deploy", "rollout") or not version:
        return str(version or kind or "?")
    return f"{kind} {version}"


def _came_and_went(rate: dict[str, Any], zh: bool) -> list[str]:
    """A "yes" about a rise that came after an earlier one had come and gone: said, not left out."""
    first, back = str(rate.get("earlier_onset_at") or "")[11:16], str(rate.get("earlier_recovered_at") or "")[11:16]
    if not isinstance(rate.get("excursions"), int) or rate["excursions"] < 2 or not first or not back:
        return []
    return [f"    此前 {first} 错误率也曾升高，{back} 已回到基线；这次是之后重新升高。" if zh else
            f"    An earlier rise, from {first}, was back at its baseline by {back}; this is the rise after it."]


def _recurring(rate: dict[str, Any], began: float, change_at: float | None, name: str, zh: bool) -> str:
    """Can't tell: the errors came and went, and no single start of them lines up with one change
    (tools.ops.verdict._again)."""
    first, back = str(rate.get("earlier_onset_at") or "")[11:16], str(rate.get("earlier_recovered_at") or "")[11:16]
    count = rate["excursions"] if isinstance(rate.get("excursions"), int) else 2
    at, now = change_at if change_at is not None else began, clock(began)[11:16]
    if at >= (stamp(rate.get("earlier_recovered_at")) or began):  # it came while the rate was back: the rise
        # before it had come and gone without it
        return (f"  • 无法判断：这次升高在 {name} 之后 {span(began - at, zh)}开始，但在它之前，错误率自 {first} 起已经 "
                f"{count - 1} 次升高又恢复：反复出现的升高不能只凭时间归因于一次变更。" if zh else
                f"  • Can't tell: this rise began {span(began - at, zh)} after {name}, but the error rate had "
                f"already risen and recovered {count - 1} times since {first} before it: a recurring rise is not "
                "tied to one change by timing alone.")
    return (f"  • 无法判断：错误率在 {first} 就已升高（在 {name} 之前），{back} 回到基线，{now} 又升高："
            "报错在它之前就出现过，之后又回来，不能只凭时间归因于它。" if zh else
            f"  • Can't tell: the error rate rose at {first}, before {name}, was back by {back} and rose again at "
            f"{now}: errors that came before it and came back after it are not tied to it by timing alone.")
