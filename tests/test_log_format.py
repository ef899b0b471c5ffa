"""One record, one line: what others wrote (a button's value, a tool's error) cannot start a forged log line."""

from __future__ import annotations

import logging

from bot.log_format import FORMAT, OneLineFormatter


def test_a_message_quoting_others_stays_on_one_line_and_a_stack_trace_is_kept() -> None:
    forged = "r1\n2026-12-07 03:40:00,000 CRITICAL bot.security: FORGED\r\x00\u202eevil"
    record = logging.LogRecord("bot.slack.router", logging.WARNING, __file__, 1, "click %s refused", (forged,), None)
    line = OneLineFormatter(FORMAT).format(record)
    assert "\n" not in line and "\r" not in line and "\x00" not in line and "\u202e" not in line
    assert line.endswith("click r1\\x0a2026-12-07 03:40:00,000 CRITICAL bot.security: FORGED\\x0d\\x00\\u202eevil "
                         "refused")
    assert record.getMessage() == f"click {forged} refused"  # the record itself is left as it was, for others
    try:
        raise ValueError("boom")
    except ValueError:
        import sys
        failed = logging.LogRecord("bot", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert "Traceback (most recent call last):\n" in OneLineFormatter(FORMAT).format(failed)
