"""OpsPilot's words for follow-ups in a thread and scheduled checks (bot/slack/followups/buttons.py, schedules.py,
timers.py, checks.py), in English and Chinese: part of the one catalog in :mod:`bot.slack.outbound.words`."""

from __future__ import annotations

TIMER_WORDS: dict[str, tuple[str, str]] = {
    "fu_firing": ("This follow-up is running right now: it can no longer be cancelled.",
                  "这个跟进正在运行：已经无法取消。"),
    "sc_firing": ("This scheduled check is running right now: cancel it again once it has reported.",
                  "这个定时检查正在运行：等它报告后再取消。"),
    # follow-ups in a thread and scheduled checks (bot/slack/followups/buttons.py, schedules.py, timers.py, checks.py)
    "fu_turn": ("Follow-up requested by {by} at {at}: {question}", "{by} 在 {at} 请求的跟进：{question}"),
    "fu_announce": (":alarm_clock: Follow-up at {due}, requested by {by}: {question}",
                    ":alarm_clock: {due} 跟进（{by} 请求）：{question}"),
    "fu_ran": (":arrow_down: Follow-up ran at {at} (requested by {by}): {question}",
               ":arrow_down: 跟进已于 {at} 运行（{by} 请求）：{question}"),
    "fu_ran_late": (":arrow_down: Follow-up due at {due} started at {at}, {minutes} min late: OpsPilot could not "
                    "run it then (requested by {by}): {question}",
                    ":arrow_down: 原定 {due} 的跟进于 {at} 开始运行，晚了 {minutes} 分钟：当时 OpsPilot 未能运行它"
                    "（{by} 请求）：{question}"),
    "fu_late_line": (":hourglass_flowing_sand: Follow-up due at {due} is {minutes} min late: OpsPilot could not run "
                     "it then (requested by {by}): {question}",
                     ":hourglass_flowing_sand: 原定 {due} 的跟进晚了 {minutes} 分钟：当时 OpsPilot 未能运行它"
                     "（{by} 请求）：{question}"),
    "fu_skipped_failed": (":warning: Follow-up due at {due} not run: its turn could not start (the reason is in "
                          "this thread). Ask me again if it still matters: {question}",
                          ":warning: {due} 的跟进没有运行：它的这一轮没能开始（原因见本线程）。"
                          "如果仍然需要，请再问我：{question}"),
    "fu_cancelled": (":no_entry_sign: Follow-up for {due} cancelled by {by} at {at}: {question}",
                     ":no_entry_sign: {due} 的跟进已被 {by} 于 {at} 取消：{question}"),
    "fu_skipped_late": (":warning: Follow-up due at {due} skipped: OpsPilot could not run it then (stopped, or "
                        "its state store away), and {minutes} min late is past the {grace} min grace. Ask me again "
                        "if it still matters: {question}",
                        ":warning: {due} 的跟进已跳过：当时 OpsPilot 未能运行它（已停止或状态存储不可用），"
                        "晚了 {minutes} 分钟，"
                        "超过了 {grace} 分钟的宽限。如果仍然需要，请再问我：{question}"),
    "fu_skipped_busy": (":warning: Follow-up due at {due} not run: I was busy in this thread (a run under way or "
                        "waiting for a decision). Ask me again when it is done: {question}",
                        ":warning: {due} 的跟进没有运行：这个线程正忙（有运行在进行或在等决定）。"
                        "完成后请再问我：{question}"),
    "fu_skipped_access": (":no_entry_sign: Follow-up due at {due} not run: {who} may no longer use OpsPilot here "
                          "(who may use it, or where, changed since it was asked for): {question}",
                          ":no_entry_sign: {due} 的跟进没有运行：{who} 已不能在这里使用 OpsPilot"
                          "（安排之后，可使用的人或频道有了变化）：{question}"),
    "fu_cancelled_by": ("It was cancelled already, by {by}.", "它已经被 {by} 取消了。"),
    "fu_gone": ("That follow-up is no longer pending (it ran, or was cancelled).",
                "这个跟进已不在等待中（已运行或已取消）。"),
    "fu_recheck": ("Re-check in {minutes} min", "{minutes} 分钟后复查"),
    "fu_recheck_question": ("Is it holding after the change above? Compare with the numbers from before.",
                            "上面的变更之后是否稳定？和之前的数字比较一下。"),
    "fu_recheck_taken": ("A re-check of this answer is already scheduled.", "这个回答的复查已经安排了。"),
    "fu_recheck_no_change": ("No re-check scheduled: that answer changed nothing (no change ran), so there is "
                             "nothing to re-check after it. Ask me in the thread to look again instead.",
                             "没有安排复查：那个回答没有做任何变更（没有变更被执行），没有可复查的。"
                             "如果想让我再看一次，请在线程里问我。"),
    "fu_handover": ("{due}, asked by {by}: {question}", "{due}，{by} 请求：{question}"),
    "fu_refused": ("No follow-up scheduled: {why}", "没有安排跟进：{why}"),
    "fu_refused_busy": ("No follow-up scheduled: another of your follow-ups is being scheduled at this moment. Press "
                        "again in a moment.", "没有安排跟进：你的另一个跟进正在安排。请稍后再按一次。"),
    "fu_refused_person": ("No follow-up scheduled: you already have {n} pending across threads, the most one person "
                          "may have. Cancel one first (App Home lists them).",
                          "没有安排跟进：你已有 {n} 个跟进在等待（各对话合计），已达每人上限。"
                          "请先取消一个（应用主页里有列表）。"),
    "fu_refused_thread": ("No follow-up scheduled: this thread already has {n} pending, the most a thread may have. "
                          "Cancel one first.", "没有安排跟进：这个对话已有 {n} 个跟进在等待，已达上限。请先取消一个。"),
    "sc_never": ("`{cron}` never fires again.", "`{cron}` 以后不会再触发。"),
    "late": (" (due {due}, {minutes} min late: OpsPilot could not run it on time)",
             "（应于 {due}，晚了 {minutes} 分钟：当时 OpsPilot 未能按时运行）"),
    "sc_usage": ("Usage: `/opspilot schedule \"<cron>\" <time zone> <question>`, e.g. `/opspilot schedule \"0 9 * * "
                 "1-5\" Europe/Berlin payments recent errors`; add `--quiet` to post only when something is found. "
                 "`/opspilot schedules` lists this channel's; `/opspilot schedules cancel <id>` cancels one.",
                 "用法：`/opspilot schedule \"<cron>\" <时区> <问题>`，例如 `/opspilot schedule \"0 9 * * 1-5\" "
                 "Asia/Shanghai 支付服务最近的报错`；加 `--quiet` 则只在发现问题时发消息。"
                 "`/opspilot schedules` 列出本频道的计划检查；`/opspilot schedules cancel <id>` 取消一个。"),
    "sc_bad": ("Not scheduled: {why}", "未创建：{why}"),
    "sc_full": ("Not scheduled: this channel already has {n} schedules, the most allowed. Cancel one first "
                "(`/opspilot schedules`).",
                "未创建：本频道已有 {n} 个计划检查，已达上限。请先取消一个（`/opspilot schedules`）。"),
    "sc_created": (":calendar: {by} scheduled a check here: `{cron}` ({tz}){quiet}, next {next}: {question} "
                   "(id `{id}`)",
                   ":calendar: {by} 在这里安排了计划检查：`{cron}`（{tz}）{quiet}，下次 {next}：{question}"
                   "（id `{id}`）"),
    "sc_quiet": (", quiet when OK", "，正常时不发消息"),
    "sc_list": ("Scheduled checks in this channel:", "本频道的计划检查："),
    "sc_none": ("No scheduled checks in this channel.", "本频道没有计划检查。"),
    "sc_line": ("`{id}` — `{cron}` ({tz}){quiet}, next {next}, set by {by}: {question}",
                "`{id}` —— `{cron}`（{tz}）{quiet}，下次 {next}，由 {by} 设置：{question}"),
    "sc_cancelled": (":no_entry_sign: {by} cancelled the scheduled check `{cron}` ({tz}): {question}",
                     ":no_entry_sign: {by} 取消了计划检查 `{cron}`（{tz}）：{question}"),
    "sc_bad_zone": ("unknown time zone {value} (use an IANA name such as UTC, Europe/Berlin or America/New_York)",
                    "未知时区 {value}（请用 IANA 名称，例如 UTC、Asia/Shanghai 或 America/New_York）"),
    "sc_bad_cron": ("{value} is not a crontab expression (five fields: minute hour day-of-month month day-of-week, "
                    "e.g. `0 9 * * 1-5`)",
                    "{value} 不是 crontab 表达式（五个字段：分 时 日 月 星期，例如 `0 9 * * 1-5`）"),
    "sc_unknown": ("There is no scheduled check `{id}` in this channel.", "本频道没有计划检查 `{id}`。"),
    "sc_config": ("That check comes from the configuration (`schedules:`): remove it there.",
                  "这个检查来自配置文件（`schedules:`）：请在那里删除。"),
    "sc_skipped": (":warning: Scheduled check due at {due} skipped: OpsPilot could not run it then (stopped, or "
                   "its state store away; {minutes} min late, past the {grace} min grace). Next: {next}. — {label}",
                   ":warning: {due} 的计划检查已跳过：当时 OpsPilot 未能运行它（已停止或状态存储不可用；"
                   "晚了 {minutes} 分钟，"
                   "超过 {grace} 分钟的宽限）。下次：{next}。—— {label}"),
    "sc_report": (":calendar: *Scheduled check* — {label}{late}", ":calendar: *计划检查* —— {label}{late}"),
    "sc_wants_change": ("It proposed `{tool}`, which needs a person: nothing was changed. Reply in this thread to "
                        "ask me to do it.",
                        "它提出要执行 `{tool}`，这需要有人确认：什么都没有改变。如需执行，请在本线程回复我。"),
    "sc_failed": (":warning: Scheduled check could not run: {why} — {label}",
                  ":warning: 计划检查无法运行：{why} —— {label}"),
    "check_turn": ("Scheduled check ({label}, due {due}): {question}", "计划检查（{label}，应于 {due}）：{question}"),
    "home_timers": ("Your follow-ups and schedules", "你的跟进和计划检查"),
    "home_no_timers": ("Nothing scheduled.", "没有计划的内容。"),
}
