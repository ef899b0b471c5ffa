"""How every ``opspilot`` command logs: one record, one line. Log messages quote what others wrote (a button's
value, a channel name, a tool's error): a line break or a control character in it would start a forged line in
the operator's log, a bidirectional override would make a line read other than it is. They are escaped where
every record is formatted, not at each call."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_UNSAFE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_UNSAFE |= {c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def one_line(text: str) -> str:
    return text.translate(_UNSAFE)


class OneLineFormatter(logging.Formatter):
    """The message on one line; a stack trace after it is the operator's own and stays as it is."""

    def format(self, record: logging.LogRecord) -> str:
        msg, args = record.msg, record.args
        record.msg, record.args = one_line(record.getMessage()), None
        try:
            return super().format(record)
        finally:
            record.msg, record.args = msg, args


def configure(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format=FORMAT)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(OneLineFormatter(FORMAT))
