"""Follow-ups and scheduled checks in Slack: ``buttons`` (Re-check, the commands), ``schedules``, ``checks``,
``firing`` (due timers → runs) and ``reminders`` (questions about to expire)."""
