"""Everything OpsPilot itself says in Slack, in English and Chinese. A thread speaks the language of its
question (``slack.language: auto``), or the one configured; the model is told to answer in it too."""

from __future__ import annotations

import re
from typing import Literal

from core.stops import StopReason

Lang = Literal["en", "zh"]

_CJK = re.compile(r"[\u3400-\u9fff]")


def language_of(text: str, configured: str = "auto") -> Lang:
    if configured in ("en", "zh"):
        return "zh" if configured == "zh" else "en"
    return "zh" if _CJK.search(text) else "en"


_WORDS: dict[str, tuple[str, str]] = {
    # the progress message
    "working": ("Working on it…", "正在处理…"),
    "step": ("step {n}", "第 {n} 步"),
    "waiting": ("Waiting for you", "等你处理"),
    "stop": ("Stop", "停止"),
    "no_model_key": ("No model key (ANTHROPIC_API_KEY or OPENAI_API_KEY): the scripted demo model answers, from the "
                     "demo data only, not from your systems.",
                     "没有配置模型密钥（ANTHROPIC_API_KEY 或 OPENAI_API_KEY）：由脚本化的演示模型回答，只用演示数据，"
                     "不是你们系统的数据。"),
    "resume": ("Resume", "继续"),
    "earlier_calls": ("… {n} earlier calls", "…… 之前还有 {n} 个调用"),
    "interrupted": ("Interrupted by a restart", "因重启而中断"),
    "interrupted_note": ("The worker running this stopped. Finished steps are kept; a change that was running is "
                         "reported as outcome unknown, never re-run.",
                         "运行它的进程停止了。已完成的步骤都保留；正在执行的变更记为结果未知，绝不会重跑。"),
    "stopped_by": ("Stopped by {by} at {at}", "已被 {by} 于 {at} 停止"),
    "already_finished": ("This run has already finished: there is nothing to stop.",
                         "这次运行已经结束，没有可停止的。"),
    "waiting_below": ("Waiting for a person: see the question below.", "等人处理：见下方的问题。"),
    # a paused (or interrupted) stretch once the run moved on: what it showed is past
    "answered_continued": ("Answered by {by} — continued below", "已由 {by} 回答，下文继续"),
    "expired_continued": ("Nobody answered in time — continued below", "无人及时回答，下文继续"),
    "stopped_continued": ("Stopped by {by} — continued below", "已被 {by} 停止，见下文"),
    "resumed_continued": ("Resumed — continued below", "已恢复运行，下文继续"),
    "stop_note": ("Working on it: Stop ends this run.", "正在处理：按“停止”结束这次运行。"),
    # the thread's status line ("OpsPilot is looking into it…") until the stream shows the steps
    "status_working": ("is looking into it…", "正在排查…"),
    # confirm cards
    "confirmation_needed": ("Confirmation needed", "需要确认"),
    "gate": ("`{tool}` changes `{env}`: a person must confirm", "`{tool}` 会改动 `{env}`，需要有人确认"),
    "tool": ("Tool", "工具"),
    # whose word an MCP tool's gating rests on (tools.registry.Provenance): the card and `opspilot tools`
    "provenance_server_destructive": ("marked destructive by its server", "其服务端标为破坏性操作"),
    "provenance_unannotated": ("not annotated by its server: treated as a change", "其服务端未作标注：按变更处理"),
    "provenance_server_read_only": ("read-only per its server", "其服务端标为只读"),
    "provenance_config_read_only": ("read-only per your config", "按你的配置视为只读"),
    "target": ("Target", "对象"),
    "environment": ("Environment", "环境"),
    "arguments": ("Arguments", "参数"),
    "none": ("(none)", "（无）"),
    "model_reason": ("The model's reason", "模型给出的理由"),
    # mrkdwn: the markers are written escaped, as the card shows them
    "hidden_chars": ("The tool, target or arguments contain invisible or text-direction characters, shown as "
                     "`&lt;U+…&gt;`: check exactly what will run before you confirm.",
                     "工具、对象或参数中含有不可见字符或改变文字方向的字符（显示为 `&lt;U+…&gt;`），"
                     "确认前请核对实际要执行的内容。"),
    "confirm": ("Confirm", "确认"),
    "cancel": ("Cancel", "取消"),
    "back": ("Back", "返回"),
    "run_this": ("Run this change?", "执行这个变更？"),
    "live_change": ("`{tool}` on `{target}` in `{env}`. This changes a live system.",
                    "在 `{env}` 对 `{target}` 执行 `{tool}`。这会改动线上系统。"),
    "confirmation": ("Confirmation", "确认"),
    "who_confirms": ("Who may confirm: {names}", "可以确认的人：{names}"),
    "nobody_confirms": ("Who may confirm: nobody (the approvers for `{tool}` in `{env}` list no one)",
                        "可以确认的人：没有（`{env}` 中 `{tool}` 的批准人名单为空）"),
    "unknown_env_confirms": ("Who may confirm: nobody — `{env}` is not an environment I know (known: {known}), so "
                             "no approvers rule can match it; fix the request or the config",
                             "可以确认的人：无 — `{env}` 不是已知的环境（已知：{known}），"
                             "没有批准规则能匹配它；请修改请求或配置"),
    "unread_group_confirms": ("Who may confirm: {names} — I could not read {groups} from Slack, so its members "
                              "cannot confirm until it can be read",
                              "可以确认的人：{names} — 无法从 Slack 读取 {groups}，在能读取之前其成员无法确认"),
    "no_one": ("no one", "无人"),
    "anyone_confirms": ("Who may confirm: anyone who may use OpsPilot in this channel",
                        "可以确认的人：任何可以在这个频道使用 OpsPilot 的人"),
    "group_members": ("members of {group}", "{group} 的成员"),
    "comma": (", ", "、"),  # between names
    "sep": (", ", "，"),  # between parts of a sentence
    "more": ("{n} more", "另外 {n} 位"),
    "two_person": ("Two-person rule in `{env}`: {name} asked for this and cannot approve their own request; "
                   "someone else must confirm.",
                   "`{env}` 适用双人规则：这是 {name} 发起的，不能批准自己的请求，需要另一个人确认。"),
    # forms
    "need_more": ("I need a bit more", "还需要一点信息"),
    "needed": ("Needed", "需要"),
    "submit": ("Submit", "提交"),
    "choose": ("Choose {name}", "选择 {name}"),
    "form_for_one": ("For {calls}{on}: it runs as soon as you answer.", "用于 {calls}{on}：你回答后立即执行。"),
    "form_for_many": ("For {calls}{on}: they run as soon as you answer.", "用于 {calls}{on}：你回答后立即执行。"),
    "on": (" on `{target}`", "（`{target}`）"),
    "and": (" and ", " 和 "),
    # how a card ended
    "confirmed_by": ("Confirmed by {by} at {at}", "{by} 于 {at} 确认"),
    "submitted_by": ("Submitted by {by} at {at}", "{by} 于 {at} 提交"),
    "declined_by": ("Declined by {by} at {at}", "{by} 于 {at} 拒绝"),
    "replied": ("Answered in the thread instead", "已改为在对话中回复"),
    "expired": ("Expired — nothing was run", "已过期，什么都没有执行"),
    "cancelled_by": ("Cancelled: the run was stopped by {by} at {at}", "已取消：{by} 于 {at} 停止了这次运行"),
    "cancelled": ("Cancelled: the run was stopped", "已取消：运行已停止"),
    # private notes to one person
    "still_working": ("I am still working on the previous message in this thread; send it again in a moment.",
                      "我还在处理这个对话里的上一条消息，请稍后再发一次。"),
    "request_expired": ("This request expired.", "这个请求已过期。"),
    "handled_by": ("Already handled by {by}.", "已由 {by} 处理。"),
    "handled": ("This request was already handled{how}.", "这个请求已经处理过了{how}。"),
    "not_pending": ("This request is no longer pending.", "这个请求已不在等待中。"),
    "rated": ("You already rated this answer. Thanks!", "你已经评价过这个回答了，谢谢！"),
    "thanks_up": ("Thanks for the feedback.", "谢谢反馈。"),
    "thanks_down": ("Thanks: noted. Tell me in the thread what was missing or wrong.",
                    "谢谢，已记录。请在对话里告诉我缺了什么或哪里不对。"),
    # the answer
    "helpful": ("👍 Helpful", "👍 有用"),
    "not_helpful": ("👎 Not helpful", "👎 没用"),
    "audit": ("Audit", "变更记录"),
    "requested_by": ("requested by {by}", "发起人 {by}"),
    "approved_by": ("approved by {by}", "批准人 {by}"),
    # an audit line: what ran where (the order each language reads it in), then how it ended
    "audit_on_in": ("`{tool}` on `{target}` in `{env}`", "在 `{env}` 对 `{target}` 执行 `{tool}`"),
    "audit_on": ("`{tool}` on `{target}`", "对 `{target}` 执行 `{tool}`"),
    "audit_in": ("`{tool}` in `{env}`", "在 `{env}` 执行 `{tool}`"),
    "audit_with": (" with {args}", "，参数 {args}"),
    "audit_ok": ("done", "已完成"),
    "audit_unknown": ("started, outcome unknown: check before retrying", "已开始，结果未知：重试前请先检查"),
    "audit_declined": ("declined: not run", "已拒绝，未执行"),
    "audit_expired": ("nobody answered in time: not run", "无人及时回答，未执行"),
    "audit_replied": ("not run: answered in the thread instead", "未执行：已改为在对话中回复"),
    "audit_stopped": ("not run: the run stopped first", "未执行：运行先停止了"),
    "audit_failed": ("failed ({code})", "失败（{code}）"),
    # App Home, for someone who may not use OpsPilot
    "home_not_allowed": ("You are not on the list of people who may use OpsPilot, so it will not answer you.",
                         "你不在可以使用 OpsPilot 的名单里，所以它不会回答你。"),
    "home_allowed_are": ("It answers {names}.", "它只回答：{names}。"),
    "home_ask": ("To be added, ask one of them or whoever runs OpsPilot for your team (its config: "
                 "`slack.allowed_users` / `slack.allowed_usergroups`).",
                 "如需加入，请找他们中的一位，或负责为你们团队运行 OpsPilot 的人（配置项 `slack.allowed_users` / "
                 "`slack.allowed_usergroups`）。"),
}

_HEADLINES: dict[StopReason, tuple[str, str]] = {
    "final_answer": ("Done", "完成"),
    "interrupted": ("Ended without an answer to my question", "没有人回答我的问题，已结束"),
    "max_steps": ("Stopped at the step limit", "达到步数上限，已停止"),
    "timeout": ("Stopped: out of time", "超时，已停止"),
    "loop_detected": ("Stopped: I was repeating myself", "在重复同样的调用，已停止"),
    "too_many_fails": ("Stopped: too many tool failures", "工具连续失败太多次，已停止"),
    "cancelled": ("Stopped", "已停止"),
    "model_error": ("Stopped: model error", "模型出错，已停止"),
    "internal_error": ("Stopped: internal error", "内部错误，已停止"),
}


def say(lang: str, key: str, **values: object) -> str:
    """The words for ``key`` in ``lang`` (English when the language is unknown), filled in."""
    en, zh = _WORDS[key]
    return (zh if lang == "zh" else en).format(**values)


def headline(lang: str, reason: StopReason) -> str:
    en, zh = _HEADLINES[reason]
    return zh if lang == "zh" else en


def catalog() -> dict[str, tuple[str, str]]:
    """Every entry (tests check both languages are complete and carry the same placeholders)."""
    return dict(_WORDS)
