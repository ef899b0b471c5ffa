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
