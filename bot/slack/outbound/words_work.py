"""Part of the one catalog (:mod:`bot.slack.outbound.words` merges it, kept apart only for length): the words for
the work itself — what a tool call found, what a run did when OpsPilot composed its answer, forms, reminders, App Home.

Placeholders hold data (a count, a time, a name in a code span): the sentence around them is ours."""

from __future__ import annotations

WORK_WORDS: dict[str, tuple[str, str]] = {
    # what a finished call found (a task card's output, a progress line): bot/slack/outbound/outputs.py
    "out_done": ("done", "完成"),
    "out_unknown": ("outcome_unknown: the change was started and may or may not have completed; check its effect "
                    "before retrying", "结果未知：变更已经开始，不确定是否完成；重试前请先检查它的效果"),
    "out_failed": ("{code}: {message}", "失败（{code}）：{message}"),
    "out_candidates": ("{n} candidates", "{n} 个候选"),
    "out_candidates_one": ("{n} candidate", "{n} 个候选"),
    "out_results": ("{n} results", "{n} 条结果"),
    "out_results_one": ("{n} result", "{n} 条结果"),
    "out_items": ("{n} items", "{n} 项"),
    "out_items_one": ("{n} item", "{n} 项"),
    "out_logs_capped": ("the newest {n} error lines only (more in {minutes} min); most often {pattern} ×{count}",
                        "仅最新的 {n} 条错误日志（{minutes} 分钟内还有更多）；最常见 {pattern} ×{count}"),
    "out_logs": ("{n} error lines in {minutes} min; most often {pattern} ×{count}",
                 "{minutes} 分钟内 {n} 行错误日志；最多的是 {pattern} ×{count}"),
    "out_no_logs": ("no error lines in {minutes} min", "{minutes} 分钟内没有错误日志"),
    "out_metric": ("{name} {value} ({trend})", "{name} {value}（{trend}）"),
    "out_metric_none": ("{name}: no data", "{name}：无数据"),
    "out_metric_single": ("{name}: a single point, no increase yet", "{name}：只有一个数据点，还没有增量"),
    "out_metric_stale": (" — last point at {at}, none since", "——最后一个数据点在 {at}，之后没有数据"),
    "out_metric_gaps": (" ({n} missing points)", "（缺 {n} 个数据点）"),
    "out_metric_gaps_one": (" (1 missing point)", "（缺 1 个数据点）"),
    "out_metric_partial": (" (partial data: the backend warned)", "（数据不完整：后端有警告）"),
    "out_metric_back": ("{name} {value}, {trend}: began {onset}, back by {back}",
                        "{name} {value}，{trend}：{onset} 开始，{back} 恢复"),
    "out_metric_since": ("{name} {value}, {trend} since {onset}", "{name} {value}，{onset} 起{trend}"),
    "out_metric_not_back": ("{name} {value}, {trend}, not back yet: began {onset}",
                            "{name} {value}，{trend}，尚未恢复：{onset} 开始"),
    # before the excursion under way, it had come back (tools.ops.series: excursions, earlier_*)
    "out_metric_earlier": ("; earlier: {went} at {onset}, back by {back}", "；此前 {onset} 曾{went}，{back} 已恢复"),
    "out_metric_earlier_many": ("; earlier: {went} {n} times from {onset}, last back by {back}",
                                "；此前自 {onset} 起曾{went} {n} 次，最近一次 {back} 已恢复"),
    "metric_went_up": ("spiked", "升高"),
    "metric_went_down": ("dipped", "下降"),
    "out_changes": ("{n} changes in {minutes} min: {listed}", "{minutes} 分钟内 {n} 次变更：{listed}"),
    "out_changes_one": ("{n} change in {minutes} min: {listed}", "{minutes} 分钟内 {n} 次变更：{listed}"),
    # a change's kind (tools.ops.rollouts and CI/CD records); rollback and scale are followed by their target
    "change_image": ("image change", "镜像变更"),
    "change_config": ("config change", "配置变更"),
    "change_restart": ("restart", "重启"),
    "change_rollback": ("rollback to", "回滚到"),
    "change_scale": ("scale to", "扩缩容至"),
    "change_pause": ("pause", "暂停发布"),
    "change_resume": ("resume", "恢复发布"),
    "change_deploy": ("deploy", "部署"),
    "change_rollout": ("rollout", "滚动发布"),
    "out_no_changes": ("no change in {minutes} min", "{minutes} 分钟内没有变更"),
    "out_changes_more": ("at least {n} changes in {minutes} min (the newest {listed_n} listed): {listed}",
                         "{minutes} 分钟内至少 {n} 次变更（列出最新的 {listed_n} 次）：{listed}"),
    "out_none_found": ("no change found in {minutes} min; records unreadable: {unread}",
                       "{minutes} 分钟内没有找到变更，另有 {unread} 条记录读不懂"),
    "out_unread": ("; records unreadable: {unread}", "；另有 {unread} 条记录读不懂"),
    "change_after": ("after {at}", "{at} 之后"),
    "change_about": ("about {at}", "约 {at}"),
    "out_not_checked": (" (not checked: {sources})", "（未检查：{sources}）"),
    "out_error_rate": ("; error rate {before} → {after}", "；错误率 {before} → {after}"),
    "out_partial": (" (partial data, Prometheus warned: {warning})", "（数据不完整，Prometheus 警告：{warning}）"),
    "dm_unknown": ("I could not check this conversation with Slack just now: try again in a moment.",
                   "刚才无法向 Slack 确认这个对话：请稍后再试。"),
    "not_my_dm": ("I am not in this conversation: ask me in a channel I am in, or in a direct message to me.",
                  "我不在这个对话里：请在我所在的频道里问我，或直接私信我。"),
    "rollout_complete": ("rollout complete", "滚动发布已完成"),
    "rollout_timed_out": ("rollout did not finish in time: not verified", "滚动发布未在时限内完成：未经验证"),
    "rollout_failed": ("rollout failed", "滚动发布失败"),
    "rollout_unknown": ("rollout progress could not be followed", "无法跟踪滚动发布的进度"),
    "rollout_superseded": ("rolled out, then changed by someone or something else: not as planned",
                           "已完成滚动发布，但随后被其他人或组件改动：与计划不符"),
    "rollout_other": ("rollout {state}", "滚动发布 {state}"),
    # a metric's trend word (tools.ops.series), as query_metrics reports it
    "trend_flat": ("flat", "平稳"),
    "trend_rising": ("rising", "上升"),
    "trend_falling": ("falling", "下降"),
    "trend_steady_high": ("steady high", "持续偏高"),
    "trend_steady_low": ("steady low", "持续偏低"),
    "trend_spiked_and_recovered": ("spiked and recovered", "曾飙升，已恢复"),
    "trend_dipped_and_recovered": ("dipped and recovered", "曾下跌，已恢复"),
    "trend_elevated": ("elevated", "偏高"),
    "trend_lowered": ("lowered", "偏低"),
    "trend_single_point": ("single point", "只有一个数据点"),
    "trend_no_data": ("no data", "无数据"),
    # a progress line's state, in the plain text of the progress message (notifications, screen readers)
    "st_running": ("running", "进行中"),
    "st_ok": ("done", "完成"),
    "st_error": ("failed", "失败"),
    "st_waiting": ("waiting", "等待中"),
    "st_cancelled": ("cancelled", "已取消"),
    "st_skipped": ("skipped", "已跳过"),
    "st_expired": ("expired", "已过期"),
    "st_declined": ("declined", "已拒绝"),
    "st_unknown": ("outcome unknown", "结果未知"),
    # an answer OpsPilot composed itself (Stop, a limit, a failure): bot.agent.fallback's facts
    "ran_title": ("What ran:", "执行情况："),
    "ran_line": ("• `{tool}`{on}: {outcome}", "• `{tool}`{on}：{outcome}"),
    "ran_on": (" on {target}", "（{target}）"),
    "ran_none": ("• no tool calls completed", "• 没有完成任何工具调用"),
    "ran_unknown": ("started, outcome unknown", "已开始，结果未知"),
    "ran_not_started": ("not started", "未开始"),
    "ran_stopped": ("stopped before it finished", "未完成就停止了"),
    "ran_declined": ("declined", "已拒绝"),
    "ran_warning": (":warning: `{tool}` was started and may or may not have completed: check its effect before "
                    "retrying.", ":warning: `{tool}` 已经开始执行，不确定是否完成：重试前请先检查它的效果。"),
    "ran_next": ("Ask me to continue, or narrow the question.", "可以让我继续，或者把问题问得更具体一些。"),
    "stopped_at": ("Stopped at {at}", "于 {at} 停止"),
    "failed_because": ("{why} — {detail}", "{why} —— {detail}"),
    # why a run failed (bot.agent.fallback.Fallback.code), in the thread's language; its English is the transcript's
    "why_unreachable": ("the model service could not be reached", "无法连接模型服务"),
    "why_api_error": ("the model service failed", "模型服务出错"),
    "why_api_error_detail": ("the model service answered with HTTP {detail}", "模型服务返回了 HTTP {detail}"),
    "why_rate_limited": ("the model service is rate limiting us; try again shortly", "模型服务正在限流，请稍后再试"),
    "why_truncated": ("the model's reply was cut off before its tool call was complete",
                      "模型的回复在工具调用完整之前就被截断了"),
    "why_refusal": ("the model declined to continue with this request", "模型拒绝继续这个请求"),
    "why_context_window_exceeded": ("the conversation no longer fits the model's context",
                                    "对话已超出模型的上下文长度"),
    "why_bad_response": ("the model service answered with something that is not a reply",
                         "模型服务返回的不是有效的回复"),
    "why_bad_request": ("the model service rejected the request", "模型服务拒绝了这个请求"),
    "why_internal_error": ("an internal error occurred", "发生了内部错误"),
    "why_internal_error_detail": ("an internal error occurred (ref {detail})", "发生了内部错误（编号 {detail}）"),
    "why_worker_lost": ("its worker stopped, or lost the state store, before it finished; the newer message in this "
                        "thread is answered with what it found",
                        "运行它的进程在完成前停止了，或与状态存储断开；这个对话里较新的消息会用它已查到的内容来回答"),
    "no_answer": ("(no answer)", "（没有回答）"),
    "colon": (": ", "："),  # before what follows a label (a form's answers)
    "semi": ("; ", "；"),  # between the parts of one output (metrics)
    "period": (".", "。"),
    "paren": (" ({text})", "（{text}）"),
    # the progress message's note when the scripted demo model answers (any other model is named as it is)
    "demo_model_note": ("model: the scripted demo model (no API key configured; rule-based, not an LLM)",
                        "模型：脚本化的演示模型（没有配置 API 密钥；基于规则，不是大模型）"),
    "model_note": ("model: {model}", "模型：{model}"),
    "demo_model_name": ("the scripted demo model", "脚本化的演示模型"),
    # forms: what is asked for, and what for (the tool's own reason is for the model)
    "form_choose": ("choose {fields}", "请选择 {fields}"),
    "more_chars": ("({n} more characters not shown)", "（另有 {n} 个字符未显示）"),
    "form_invalid": ("Not accepted: {problem}", "未接受：{problem}"),
    "form_missing": ("choose {fields}", "请选择{fields}"),
    "form_not_a_choice": ("{fields} must be one of {choices}", "{fields}须为以下之一：{choices}"),
    # the bold ends before the full-width colon: Slack closes a marker only before a boundary
    "form_needed": ("*Needed:* {fields} — for {calls}{on}", "*需要*：{fields} —— 用于 {calls}{on}"),
    "field_environment": ("environment", "环境"),
    "field_service_id": ("service", "服务"),
    # the reminder before a question expires
    "reminder": (":alarm_clock: {who}still waiting for a decision on `{tool}`; it expires in about {minutes} min.",
                 ":alarm_clock: {who}`{tool}` 还在等待决定，大约 {minutes} 分钟后过期。"),
    # when a run cannot start or a click cannot be recorded (the engine's reason, or the store being away)
    "could_not_start": (":warning: I could not start: {why}", ":warning: 无法开始：{why}"),
    "nothing_changed": ("Nothing changed: {why}", "什么都没有改变：{why}"),
    "store_down": ("I can't take questions right now: my state store is unavailable. Ask again in a few minutes.",
                   "我现在无法接收问题：状态存储不可用。请过几分钟再问。"),
    "inc_unconfirmed": ("Slack did not confirm whether the incident summary's {what} was made ({why}). Look in "
                        "{link} before asking again: it may be there.",
                        "Slack 没有确认事件总结的{what}是否已创建（{why}）。"
                        "再次请求前请先在 {link} 里看看：它可能已经在那里了。"),
    "inc_what_canvas": ("canvas", "画布"),
    "inc_what_file": ("file", "文件"),
    "store_lost_mid_run": (":hourglass_flowing_sand: My state store became unavailable while I was working on this. "
                           "What was done is saved; once the store is back this carries on from its last saved "
                           "step, or, if a change was under way, asks for a Resume (it is never run twice).",
                           ":hourglass_flowing_sand: 处理过程中状态存储变得不可用。已完成的部分都已保存；"
                           "存储恢复后会从最后保存的步骤继续，如果当时有变更正在进行，则会请你点“继续”"
                           "（变更不会被执行两次）。"),
    "click_lost_midway": ("Your click was received, and my state store became unavailable while acting on it. In a "
                          "few minutes, check the thread: a change that started is reported, never run twice; if the "
                          "card is still open, click again.",
                          "已收到你的操作，但执行时状态存储变得不可用。请过几分钟查看对话：已开始的变更会如实报告，"
                          "不会执行两次；如果卡片仍然可以操作，请再点一次。"),
    "click_lost": ("I could not record this: my state store is unavailable. In a few minutes, check the thread for "
                   "what happened before you try again.",
                   "无法记录这次操作：状态存储不可用。请过几分钟查看对话里的情况，再重试。"),
    "ref": ("{text} (ref {ref})", "{text}（编号 {ref}）"),
    "auto_resumed": (":arrows_counterclockwise: This stopped partway (its worker stopped, or lost the state store) "
                     "while no change was under way; it carries on from where it was last saved.",
                     ":arrows_counterclockwise: 它中途停了下来（运行它的进程停止，或与状态存储断开），"
                     "当时没有正在进行的变更；现在从最后保存处继续。"),
    "work_failed": (":warning: I could not handle this: it failed every time I tried, so I stopped trying. Ask again "
                    "in a moment; if it fails again, an operator can look it up with `opspilot stats` (ref {ref}).",
                    ":warning: 这条我没能处理：每次尝试都失败了，所以停止了重试。请稍后再问一次；如果还失败，"
                    "运维可以用 `opspilot stats` 查到它（编号 {ref}）。"),
    "click_failed": ("I could not record this click: it failed every time I tried. Check the thread for what happened "
                     "before you try again (ref {ref}).",
                     "无法记录这次操作：每次尝试都失败了。请先查看对话里的情况，再重试（编号 {ref}）。"),
    # the slash command's thread, and where it cannot post
    "slash_asked": ("{who} asked: {text}", "{who} 提问：{text}"),
    "cannot_post_not_in_channel": ("I am not in this channel, so I cannot answer here. Invite me with "
                                   "`/invite @OpsPilot`, or ask me in a direct message.",
                                   "我不在这个频道里，所以无法在这里回答。"
                                   "请用 `/invite @OpsPilot` 邀请我，或者私信问我。"),
    "cannot_post_channel_not_found": ("I cannot post in this conversation (a direct message between people, or a "
                                      "private channel I am not in). Ask me in a direct message with me, or in a "
                                      "channel I am in.",
                                      "我无法在这个对话里发消息（这是人与人之间的私信，或我不在的私有频道）。"
                                      "请私信我，或在我所在的频道里问。"),
    "cannot_post_is_archived": ("This channel is archived: ask me somewhere else.", "这个频道已归档：请在别处问我。"),
    "cannot_post": ("Slack did not take my reply just now; send the command again.",
                    "Slack 刚才没有接收我的回复；请再发一次命令。"),
    "cannot_post_unconfirmed": ("Slack did not confirm my post of your question, so I have not started on it "
                                "(a thread for it may still appear, unanswered): send the command again.",
                                "Slack 没有确认我发出了你的问题，所以我还没有开始处理（它的线程可能仍会出现，"
                                "但不会有回答）：请再发一次命令。"),
    # App Home (in the language of the person's latest question, or slack.language)
    "home_intro": ("Ask me in any channel I am in (mention @OpsPilot), in a DM, or with `/opspilot <question>`.",
                   "在我所在的任何频道 @OpsPilot、私信我，或用 `/opspilot <问题>` 提问。"),
    "home_recent": ("Your recent questions", "你最近的问题"),
    "home_changes": ("Recent changes", "最近的变更"),
    "home_nothing_waiting": ("Nothing is waiting for you.", "没有等你处理的事。"),
    "home_no_questions": ("No questions yet.", "还没有提问。"),
    "home_no_changes": ("No changes recorded.", "没有变更记录。"),
    "home_no_changes_read": ("None you can see among the latest {n} changes.", "在最近 {n} 次变更中没有你能看到的。"),
    "home_confirm": ("confirm", "确认"),
    "home_fill": ("fill in", "填写"),
    "home_wait_line": ("• {what} `{tool}`{on} — asked by {who}, expires {at} — {link}",
                       "• {what} `{tool}`{on} —— {who} 发起，{at} 过期 —— {link}"),
    "home_open_thread": ("open the thread", "打开对话"),
    "home_no_text": ("(no text)", "（无文字）"),
    "home_followup": ("• Follow-up at {due} in {thread}: {question}", "• {due} 在{thread}中跟进：{question}"),
    "home_check": ("• Check in {channel} {label}, next {next}", "• {channel} 的计划检查 {label}，下次 {next}"),
    # a run refused by a limit (bot/slack/inbound/run_gate.py): to the person only
    "limit_person": ("You have started {runs} in the last {window}, the most allowed: try again after {until} "
                     "(in {wait}).",
                     "你在 {window} 内已发起 {runs}，已达上限：请在 {until} 之后再试（{wait}后）。"),
    "limit_channel": ("{runs} started in this conversation in the last {window}, the most allowed: try again "
                      "after {until} (in {wait}).",
                      "这个对话在 {window} 内已发起 {runs}，已达上限：请在 {until} 之后再试（{wait}后）。"),
    "n_runs": ("{n} runs", "{n} 次运行"),
    "n_runs_one": ("{n} run", "{n} 次运行"),
    "dur_s": ("{n} s", "{n} 秒"),
    "dur_min": ("{n} min", "{n} 分钟"),
    "sc_too_far": ("Not scheduled: `{cron}` would first fire {next}, more than a year away; a schedule's first run "
                   "may be a year ahead at most.", "未创建：`{cron}` 第一次触发在 {next}，超过一年之后；"
                   "计划检查的第一次运行最多在一年之内。"),
    "sc_too_often": ("Not scheduled: `{cron}` fires every {every}; a schedule may fire at most once every "
                     "{minimum}.", "未创建：`{cron}` 每 {every} 触发一次；计划检查最多每 {minimum} 触发一次。"),
    "sc_person_full": ("Not scheduled: you already have {n} schedules across channels and DMs, the most allowed. "
                       "Cancel one first: from your App Home tab, or with `/opspilot schedules cancel <id>` in its "
                       "own channel.",
                       "未创建：你在各频道和私信中已有 {n} 个计划检查，已达上限。请先取消一个："
                       "在 OpsPilot 的主页（App Home）里，或在它所在的频道里用 `/opspilot schedules cancel <id>`。"),
    "sc_making": ("Not scheduled yet: another of your schedules is being made at this moment. Send this one again in a "
                "moment.", "暂未创建：你的另一个计划检查正在创建。请稍后再发一次。"),
    "fu_skipped_limit": (":warning: Follow-up due at {due} not run: too many runs had just started here or by its "
                         "owner (docs/security.md, limits). Ask me again: {question}",
                         ":warning: {due} 的跟进没有运行：刚才这里或其发起人启动的运行太多（见运行限制）。"
                         "请再问我：{question}"),
    "sc_ended_access": (":no_entry_sign: Scheduled check {label} ended, not run: {who} may no longer use OpsPilot here "
                        "(who may use it, or where, changed since it was made). Ask an admin, or schedule it again "
                        "where you may.",
                        ":no_entry_sign: 计划检查 {label} 已结束，本次没有运行：{who} 已不能在这里使用 OpsPilot"
                        "（创建之后，可使用的人或频道有了变化）。请联系管理员，或在你可以使用的地方重新安排。"),
    "sc_busy": ("the previous check of this schedule is still running", "这个计划的上一次检查还在运行"),
    "sc_report_cancelled": ("_This check had started before its schedule was cancelled: it does not run again._",
                            "_这次检查在计划被取消之前就已开始：之后不会再运行。_"),
    "sc_skipped_limit": (":warning: Scheduled check {label} not run this time: too many runs had just started in "
                         "this channel or by its owner. It runs again at its next time.",
                         ":warning: 计划检查 {label} 本次没有运行：刚才这个频道或其创建人启动的运行太多。"
                         "下次按时再运行。"),
    "plan_will_change": ("Will change", "将会改变"),
    "rollback_offer": ("Roll back to {release}", "回滚到 {release}"),
    "plan_revision": ("Revision", "版本号"),
    "plan_release": ("Release", "发布版本"),
    "plan_images": ("Images", "镜像"),
    "plan_change_cause": ("Change cause", "变更原因"),
    "plan_deployed_at": ("Deployed", "部署时间"),
    "plan_also_changes": ("Also takes back", "同时撤回"),
    "plan_unknown": ("unknown", "未知"),
    "plan_replicas": ("Replicas", "副本数"),
    "alert_busy": ("Not investigating automatically: many runs started in this channel just now. Press Investigate "
                   "when you want me to.", "暂不自动调查：这个频道刚才启动的运行太多。需要时请点“调查”。"),
}
