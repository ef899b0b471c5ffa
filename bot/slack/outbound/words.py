"""Everything OpsPilot itself says in Slack, in English and Chinese. A thread speaks the language of its
question (``slack.language: auto``), or the one configured; the model is told to answer in it too."""

from __future__ import annotations

from bot.slack.outbound.words_incidents import INCIDENT_WORDS
from bot.slack.outbound.words_timers import TIMER_WORDS
from bot.slack.outbound.words_work import WORK_WORDS
from core.language import Lang, signal
from core.stops import StopReason

__all__ = ["Lang", "language_of", "say", "signal"]


def language_of(text: str, configured: str = "auto") -> Lang:
    """The configured language, else ``text``'s (English when it says nothing: see :func:`signal`)."""
    if configured in ("en", "zh"):
        return "zh" if configured == "zh" else "en"
    return signal(text) or "en"


_WORDS: dict[str, tuple[str, str]] = {
    # the progress message
    "working": ("Working on it…", "正在处理…"),
    "step": ("step {n}", "第 {n} 步"),
    "waiting": ("Waiting for you", "等你处理"),
    "stop": ("Stop", "停止"),
    "no_model_key": ("No model key (ANTHROPIC_API_KEY or OPENAI_API_KEY): the scripted demo model answers, "
                     "rule-based (not an LLM), reading the systems configured here and proposing changes to them.",
                     "没有配置模型密钥（ANTHROPIC_API_KEY 或 OPENAI_API_KEY）：由脚本化的演示模型按规则回答"
                     "（不是大模型），读取这里配置的系统，并对它们提出变更。"),
    "resume": ("Resume", "继续"),
    "earlier_calls": ("… {n} earlier calls", "…… 之前还有 {n} 个调用"),
    "earlier_calls_one": ("… 1 earlier call", "…… 之前还有 1 个调用"),
    "interrupted": ("Interrupted by a restart", "因重启而中断"),
    "interrupted_note": ("This stopped partway (its worker stopped, or lost the state store). Finished steps are "
                         "kept; a change that was running is reported as outcome unknown, never re-run.",
                         "它中途停了下来（运行它的进程停止，或与状态存储断开）。已完成的步骤都保留；"
                         "正在执行的变更记为结果未知，绝不会重跑。"),
    "stopped_by": ("Stopped by {by} at {at}", "已被 {by} 于 {at} 停止"),
    "already_finished": ("This run has already finished: there is nothing to stop.",
                         "这次运行已经结束，没有可停止的。"),
    "resume_finished": ("This run has already finished: there is nothing to resume (its answer is in the thread).",
                        "这次运行已经结束，无需继续（答复在对话里）。"),
    "resume_paused": ("This run is waiting for a person: answer its card in the thread.",
                      "这次运行在等人处理：请在对话里回答它的卡片。"),
    "resume_running": ("This run's thread is busy right now, most likely because someone resumed it a moment ago: "
                       "its progress is in the thread.",
                       "这个对话正在处理中，多半是刚才有人让这次运行继续了：进度见对话。"),
    "waiting_below": ("Waiting for a person: see the question below.", "等人处理：见下方的问题。"),
    # a paused (or interrupted) stretch once the run moved on: what it showed is past
    "answered_continued": ("Answered by {by} — continued below", "已由 {by} 回答，下文继续"),
    "expired_continued": ("Nobody answered in time — continued below", "无人及时回答，下文继续"),
    "stopped_continued": ("Stopped by {by} — continued below", "已被 {by} 停止，见下文"),
    "ended_below": ("It ended without moving again — see below", "之后没有继续运行，已结束，见下文"),
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
    "unnamed_env_confirms": ("Who may confirm: nobody (this `{tool}` call names no environment I can read, and its "
                             "approvers are set per environment)",
                             "可以确认的人：无人（这次 `{tool}` 调用没有我能读出的环境，而它的批准人按环境设置）"),
    "two_person_unnamed": ("Two-person rule: this change names no environment, so it may be in one the rule covers: "
                           "{name} asked for this and cannot approve their own request; someone else must confirm.",
                           "双人规则：这次变更没有指明环境，可能属于规则所覆盖的环境：{name} 发起了请求，不能自己批准；"
                           "必须由其他人确认。"),
    "nobody_confirms": ("Who may confirm: nobody (the approvers for `{tool}` in `{env}` list no one)",
                        "可以确认的人：没有（`{env}` 中 `{tool}` 的批准人名单为空）"),
    "unknown_env_confirms": ("Who may confirm: nobody — `{env}` is not an environment I know (known: {known}), so "
                             "no approvers rule can match it; fix the request or the config",
                             "可以确认的人：无 — `{env}` 不是已知的环境（已知：{known}），"
                             "没有批准规则能匹配它；请修改请求或配置"),
    "unread_group_confirms": ("Who may confirm: {names} — I could not read {groups} from Slack, so its members "
                              "cannot confirm until it can be read",
                              "可以确认的人：{names} — 无法从 Slack 读取 {groups}，在能读取之前其成员无法确认"),
    "only_requester_confirms": ("Who may confirm: no one — {name} asked for this and is the only approver of "
                                "`{tool}` in `{env}`, and the two-person rule lets nobody approve their own "
                                "request; cancel it, or have another approver added to the config",
                                "可以确认的人：无 — 这是 {name} 发起的，而 {name} 是 `{env}` 中 `{tool}` 的唯一批准人，"
                                "双人规则不允许批准自己的请求；请取消，或在配置中增加批准人"),
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
    # true for a change too: an answer does not skip the confirmation a change needs
    "form_for_one": ("For {calls}{on}: it goes ahead as soon as you answer (a change still asks for any "
                     "confirmation it needs).", "用于 {calls}{on}：你回答后立即继续（变更如需确认，仍会先请人确认）。"),
    "form_for_many": ("For {calls}{on}: they go ahead as soon as you answer (a change still asks for any "
                      "confirmation it needs).",
                      "用于 {calls}{on}：你回答后立即继续（变更如需确认，仍会先请人确认）。"),
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
    # refusals (bot/slack/inbound/access.py): a private note to whoever asked or clicked
    "no_channel": ("I am not enabled in this channel. Ask your Slack admin to add it to `slack.allowed_channels`.",
                   "这个频道没有启用我。请 Slack 管理员把它加到 `slack.allowed_channels`。"),
    "no_user": ("You are not on the list of people who may use OpsPilot (`slack.allowed_users` / "
                "`slack.allowed_usergroups`).",
                "你不在可以使用 OpsPilot 的名单里（`slack.allowed_users` / `slack.allowed_usergroups`）。"),
    "outsider": ("Guests and other organisations' accounts may not use OpsPilot here. If you should, ask an admin "
                 "to set `slack.allow_outsiders`.",
                 "访客和其他组织的账号不能在这里使用 OpsPilot。如果你需要使用，请管理员设置 "
                 "`slack.allow_outsiders`。"),
    "no_change_here": ("Changes can only be confirmed in {where}.", "变更只能在 {where} 确认。"),
    "no_own_approval": ("Two-person rule: the person who asked cannot approve a `{tool}` in `{env}`. Ask another "
                        "approver.", "双人规则：发起人不能批准自己在 `{env}` 的 `{tool}`。请另一位批准人确认。"),
    "no_env": ("`{env}` is not an environment I know (known: {known}), so no approvers rule for `{tool}` can match "
               "it: nobody may confirm this. Nothing was changed.",
               "`{env}` 不是已知的环境（已知：{known}），没有 `{tool}` 的批准规则能匹配它：无人可以确认。"
               "什么都没有改变。"),
    "no_env_unknown": ("I cannot tell which environment this `{tool}` call changes, and who may confirm it depends "
                       "on the environment (its approvers are set per environment): nobody may confirm this. Nothing "
                       "was changed. An operator can name the argument that holds it (`confirm: {{field: …}}` for "
                       "this tool).",
                       "我无法判断这次 `{tool}` 调用改动的是哪个环境，而谁可以确认它取决于环境"
                       "（它的批准人按环境设置）："
                       "无人可以确认。什么都没有改变。运维人员可以指明保存环境的参数（为这个工具设置 "
                       "`confirm: {{field: …}}`）。"),
    "no_group_read": ("I could not read the approver group from Slack, so I cannot tell whether you are in it. "
                      "Nothing was changed; try again in a minute.",
                      "无法从 Slack 读取批准人用户组，无法判断你是否在其中。什么都没有改变；请稍后再试。"),
    "no_approver_in": ("You are not an approver for `{tool}` in `{env}`. Nothing was changed.",
                       "你不是 `{env}` 中 `{tool}` 的批准人。什么都没有改变。"),
    "no_approver": ("You are not an approver for `{tool}`. Nothing was changed.",
                    "你不是 `{tool}` 的批准人。什么都没有改变。"),
    "misplaced": ("This button does not belong to this message. Nothing was changed.",
                  "这个按钮不属于这条消息。什么都没有改变。"),
    # private notes to one person
    "slash_usage": ("Usage: `/opspilot <question>`, e.g. `/opspilot payments recent errors`",
                    "用法：`/opspilot <问题>`，例如 `/opspilot 支付服务最近的报错`"),
    "files_unread": ("I cannot read attached files yet: paste the text you want me to look at, and mention me "
                     "again.", "我还不能读取附件：请把要我看的内容以文字粘贴出来，然后再 @ 我。"),
    "still_working": ("I am still working on the previous message in this thread; send it again in a moment.",
                      "我还在处理这个对话里的上一条消息，请稍后再发一次。"),
    "card_waits": ("This thread is waiting for an answer on its card, from whoever asked for the change or may "
                   "confirm it. Your message was not taken up and nothing changed; ask again once the card is "
                   "answered, or in a new thread.",
                   "这个对话在等待卡片上的答复（来自发起这个变更的人或有权确认的人）。你的消息没有被处理，什么都没有"
                   "改变；请在卡片答复后再问，或在新的对话里问。"),
    "request_expired": ("This request expired.", "这个请求已过期。"),
    "handled_by": ("Already handled by {by}.", "已由 {by} 处理。"),
    "own_claim_unsettled": ("Your earlier click on this is still being recorded, or was cut off (the state store was "
                            "away): if the card is still open in {s} s, press again.",
                            "你之前的点击仍在记录中，或被中断了（状态存储一度不可用）："
                            "如果 {s} 秒后卡片仍然打开，请再按一次。"),
    "handled": ("This request was already handled{how}.", "这个请求已经处理过了{how}。"),
    "click_received": (":inbox_tray: {who}'s {what} received; recording it (the state store is slow to answer). "
                       "Nothing has run yet.",
                       ":inbox_tray: 已收到 {who} 的「{what}」，正在记录（状态存储响应较慢）。尚未执行任何操作。"),
    "not_pending": ("This request is no longer pending.", "这个请求已不在等待中。"),
    "card_unknown": (":grey_question: No longer pending: OpsPilot holds no record of this request (its state was lost "
                     "or has lapsed). Ask again in the thread if it is still needed.",
                     ":grey_question: 已不在等待中：OpsPilot 没有这个请求的记录（状态已丢失或已过期）。"
                     "如仍需要，请在线程里重新提出。"),
    "rated": ("You already rated this answer. Thanks!", "你已经评价过这个回答了，谢谢！"),
    "fb_form_unknown": ("Slack did not confirm that the feedback form opened: if it did, send it; if not, press 👎 "
                        "again.", "Slack 没有确认反馈表单是否已打开：如果打开了，请提交；如果没有，请再按一次 👎。"),
    "thanks_up": ("Thanks for the feedback.", "谢谢反馈。"),
    "thanks_down": ("Thanks: noted. Tell me in the thread what was missing or wrong.",
                    "谢谢，已记录。请在对话里告诉我缺了什么或哪里不对。"),
    # the answer
    "helpful": ("👍 Helpful", "👍 有用"),
    "not_helpful": ("👎 Not helpful", "👎 没用"),
    "audit": ("Audit", "变更记录"),
    "continued": ("(continued)", "（续）"),  # atop each part of an answer too long for one section
    # the terminal (`opspilot chat`): a question left by Ctrl-C or by the end of input
    "chat_interrupted": ("Cancelled (Ctrl-C)", "已取消（Ctrl-C）"),
    "chat_input_ended": ("Input ended before an answer", "输入在回答之前就结束了"),
    "chat_not_run": ("{why}: {tools} did not run — nothing was changed.", "{why}：{tools} 没有执行，没有做任何改动。"),
    "chat_not_run_after": ("{why}: {tools} did not run; what ran earlier in this run stands (see above).",
                           "{why}：{tools} 没有执行；这次运行中之前执行过的操作仍然有效（见上文）。"),
    "chat_stopping": ("Stopping… (Ctrl-C again to leave at once)", "正在停止……（再按 Ctrl-C 立即退出）"),
    # the terminal's own lines: the banner (before the first question: slack.language, else the locale), steps,
    # questions at the prompt
    "chat_banner": ("OpsPilot chat — type a question; `quit` to leave.",
                    "OpsPilot 对话：输入问题；输入 `quit` 或 `退出` 离开。"),
    "chat_store_durable": ("store: Redis (durable)", "存储：Redis（持久）"),
    "chat_store_memory": ("store: in-process — NOT durable: runs are lost when this process exits",
                          "存储：进程内 —— 不持久：这个进程退出后运行记录就没有了"),
    "chat_you": ("you> ", "你> "),
    "chat_bye": ("bye", "再见"),
    "chat_step_tools": ("· step {n}: model asks for tools ({ms} ms)", "· 第 {n} 步：模型请求调用工具（{ms} ms）"),
    "chat_step_answers": ("· step {n}: model answers ({ms} ms)", "· 第 {n} 步：模型给出回答（{ms} ms）"),
    "chat_changes": ("  [changes things]", "  [会改动系统]"),
    "chat_failed": ("{tool} {status}: {code}", "{tool} {status}：{code}"),
    "chat_waiting_one": ("⏸ waiting for you (1 question)", "⏸ 等你处理（1 个问题）"),
    "chat_waiting": ("⏸ waiting for you ({n} questions)", "⏸ 等你处理（{n} 个问题）"),
    "chat_finished": ("■ {headline}{code} after {n} step(s)", "■ {headline}{code}（共 {n} 步）"),  # code: en only
    "chat_will_run": ("will run: {what}", "将执行：{what}"),
    "chat_confirm": ("confirm? [y/N] ", "确认执行？[y/N] "),
    "requested_by": ("requested by {by}", "发起人 {by}"),
    "approved_by": ("approved by {by}", "批准人 {by}"),
    "declined_by_person": ("declined by {by}", "拒绝人 {by}"),
    # an audit line: what ran where (the order each language reads it in), then how it ended
    "audit_on_in": ("`{tool}` on `{target}` in `{env}`", "在 `{env}` 对 `{target}` 执行 `{tool}`"),
    "audit_on": ("`{tool}` on `{target}`", "对 `{target}` 执行 `{tool}`"),
    "audit_in": ("`{tool}` in `{env}`", "在 `{env}` 执行 `{tool}`"),
    "audit_with": (" with {args}", "，参数 {args}"),
    "audit_ok": ("done", "已完成"),
    "audit_issued": ("issued, {how}", "已发出，{how}"),
    "audit_unknown": ("started, outcome unknown: check before retrying", "已开始，结果未知：重试前请先检查"),
    "audit_declined": ("declined: not run", "已拒绝，未执行"),
    "audit_expired": ("nobody answered in time: not run", "无人及时回答，未执行"),
    "audit_replied": ("not run: answered in the thread instead", "未执行：已改为在对话中回复"),
    "audit_stopped": ("not run: the run stopped first", "未执行：运行先停止了"),
    "audit_failed": ("failed ({code})", "失败（{code}）"),
    # alert threads: OpsPilot's status notes under an alert, and what it says when it holds back
    "alert_fired_again": ("Fired again at {at} ({n} firing). Already looked at in this thread; mention me for a "
                          "fresh look.",
                          "{at} 再次触发（{n} 条告警）。这个对话里已经排查过；需要重新排查请 @ 我。"),
    "alert_fired_again_unseen": ("Fired again at {at} ({n} firing). Not looked at yet: mention me here to "
                                 "investigate.", "{at} 再次触发（{n} 条告警）。还没有排查过：在这里 @ 我即可排查。"),
    "alert_resolved": ("Resolved at {at}: {title}", "{at} 已恢复：{title}"),
    "alert_partly_resolved": ("Partly resolved at {at}: {resolved} resolved, {n} still firing.",
                              "{at} 部分恢复：{resolved} 条已恢复，{n} 条仍在告警。"),
    "alert_offer": ("Want me to look into this alert?", "要我排查这条告警吗？"),
    "alert_offer_resolved": ("It resolved at {at}. Want me to look into it anyway?",
                             "它已于 {at} 恢复。还要我排查吗？"),
    "alert_held": ("Not investigating automatically: more than {n} alerts in this channel in {minutes} min.",
                   "没有自动排查：这个频道 {minutes} 分钟内的告警超过 {n} 条。"),
    "alert_storm": ("Many alerts at once: I stopped investigating them automatically until {until} (limit {n} per "
                    "{minutes} min). Press *Investigate* under the alerts that matter.",
                    "告警太多：{until} 之前我不再自动排查（上限为每 {minutes} 分钟 {n} 条）。"
                    "请在重要的告警下按“排查”。"),
    "investigate": ("Investigate", "排查"),
    "alert_taken": ("Investigating, as {who} asked: see this thread.", "正在排查（{who} 发起）：请看这个对话。"),
    "alert_too_old": ("I no longer have this alert (it is too old); mention me in its thread instead.",
                      "这条告警太久了，我已经没有它的记录；请在它的对话里 @ 我。"),
    "rollback_on_it": ("{who} already asked for this rollback: see this thread.",
                       "{who} 已经要求了这次回滚：请看这个对话。"),
    "rollback_taken": ("Rollback to {release} asked by {who}: see below.", "{who} 已要求回滚到 {release}：见下文。"),
    "alert_on_it": ("I am already on it: see this thread.", "我已经在排查了：请看这个对话。"),
    # feedback on an answer: the 👎 form, its refusals and thanks, and the latest 👎 on App Home
    "fb_title": ("What was wrong?", "哪里不对？"),
    "fb_send": ("Send", "发送"),
    "fb_reason": ("What was wrong with this answer?", "这个回答哪里不对？"),
    "fb_note": ("Anything to add? (optional)", "还有什么要补充的？（可选）"),
    "reason_wrong_facts": ("Wrong facts", "事实有误"),
    "reason_missed": ("Missed something", "漏掉了什么"),
    "reason_too_slow": ("Too slow", "太慢"),
    "reason_other": ("Other", "其他"),
    "reason_": ("not said", "未说明"),
    "fb_choose": ("Choose what was wrong.", "请选择哪里不对。"),
    "fb_too_long": ("Keep it to {n} characters.", "请不要超过 {n} 个字符。"),
    "fb_forged": ("This form is not one OpsPilot opened for you: nothing was stored.",
                  "这个表单不是 OpsPilot 为你打开的：什么都没有保存。"),
    "fb_gone": ("I have no record of this answer any more (old ones expire), so nothing was stored.",
                "我已经没有这个回答的记录了（旧的会过期），所以什么都没有保存。"),
    "fb_misplaced": ("This button does not belong to this message. Nothing was stored.",
                     "这个按钮不属于这条消息。什么都没有保存。"),
    "thanks_reason": ("Thanks: noted ({reason}), with this answer, for whoever looks after OpsPilot.",
                      "谢谢，已记录（{reason}），连同这个回答，供维护 OpsPilot 的人查看。"),
    "home_latest_down": ("Latest 👎", "最近的 👎"),
    "home_no_down": ("No answer was rated 👎 lately.", "最近没有回答被评为 👎。"),
    "home_no_down_read": ("None you can see among the latest {n} 👎.", "在最近 {n} 个 👎 中没有你能看到的。"),
    "home_thread": ("the thread", "对话"),
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
    "cut_off": ("Answer cut off: it reached the model's output limit", "答复被截断：达到了模型的输出上限"),
    "interrupted": ("Ended without an answer to my question", "没有人回答我的问题，已结束"),
    "max_steps": ("Stopped at the step limit", "达到步数上限，已停止"),
    "timeout": ("Stopped: out of time", "超时，已停止"),
    "loop_detected": ("Stopped: I was repeating myself", "在重复同样的调用，已停止"),
    "too_many_fails": ("Stopped: too many tool failures", "工具连续失败太多次，已停止"),
    "cancelled": ("Stopped", "已停止"),
    "model_error": ("Stopped: model error", "模型出错，已停止"),
    "internal_error": ("Stopped: internal error", "内部错误，已停止"),
    "worker_lost": ("Stopped partway: its worker stopped or lost the state store",
                    "中途停止：运行它的进程停止了，或与状态存储断开"),
}


# One catalog, in files by surface for length: a key means one thing.
for _part in (WORK_WORDS, TIMER_WORDS, INCIDENT_WORDS):
    if _WORDS.keys() & _part.keys():
        raise RuntimeError(f"catalog keys defined twice: {sorted(_WORDS.keys() & _part.keys())}")
    _WORDS.update(_part)

def say(lang: str, key: str, **values: object) -> str:
    """The words for ``key`` in ``lang`` (English when the language is unknown), filled in."""
    en, zh = _WORDS[key]
    return (zh if lang == "zh" else en).format(**values)


def has_word(key: str) -> bool:
    return key in _WORDS


def plural(lang: str, key: str, n: int) -> str:
    """``key``'s words for ``n`` things: ``<key>_one`` for one (English needs it; Chinese says both alike)."""
    return say(lang, key + ("_one" if n == 1 else ""), n=n)


def headline(lang: str, reason: StopReason) -> str:
    en, zh = _HEADLINES[reason]
    return zh if lang == "zh" else en


def catalog() -> dict[str, tuple[str, str]]:
    """Every entry (tests check both languages are complete and carry the same placeholders)."""
    return dict(_WORDS)
