"""What others wrote reaches an operator's terminal shown, never obeyed: a 👎 note or a question holding ESC
sequences (an OSC 8 hyperlink hiding its target, a cleared screen, a forged "all checks passed" line) is printed
by ``opspilot stats`` with each control character as ``<U+001B>`` (core/text.py ``inert``)."""

from __future__ import annotations

import io
from pathlib import Path

from bot.chat import Console
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.slack.outbound.thread_meta import thread_key
from core.text import inert
from state import RedisStore
from state.feedback_store import FeedbackEntry
from tests.test_cli import run_cli

LINK = "\x1b]8;;https://evil.example/sso\x1b\\the runbook\x1b]8;;\x1b\\"
WIPE = "\x1b[2J\x1b[H\ropspilot: all checks passed\x07"


def test_inert_shows_every_control_character() -> None:
    assert inert("a\x1b[31mb") == "a<U+001B>[31mb"
    assert inert("tab\tand\nnewline stay") == "tab\tand\nnewline stay"
    assert inert("\x00\x7f\x9b\x85") == "<U+0000><U+007F><U+009B><U+0085>"  # C0, DEL, C1 (CSI, NEL)
    assert inert("pay\u202estnemy") == "pay<U+202E>stnemy"  # bidi too
    assert inert("支付服务 👩\u200d💻 ok") == "支付服务 👩\u200d💻 ok"  # ordinary text untouched


def test_the_chat_prints_the_models_words_inert() -> None:
    out = io.StringIO()
    console = Console(out)
    console.answer(f"see {LINK}")
    console.say(WIPE)
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    assert "<U+001B>]8;;https://evil.example/sso" in out.getvalue()


async def test_stats_prints_a_notes_and_a_questions_escape_bytes_inert(redis_url: str, prefix: str,
                                                                       store: RedisStore, slack: FakeSlack,
                                                                       tmp_path: Path) -> None:
    await store.feedback.add(FeedbackEntry.of(
        run_id="r1", thread_id=thread_key("C0OPS", "100.1"), rating="down", reason="missed",
        note=f"read {LINK}", question=f"why {WIPE}", answer="…", model="demo", user="UREQ"))
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix,
           # The channel is public in the local Slack: a note is shown only where the workspace may read it.
           "OPSPILOT_SLACK__BOT_TOKEN": "xoxb-test-token", "OPSPILOT_SLACK__API_URL": slack.api_url}
    code, out, err = await run_cli(["stats", "--window", "1h"], "", env, tmp_path)
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "<U+001B>]8;;https://evil.example/sso<U+001B>\\the runbook" in out
    assert "<U+001B>[2J<U+001B>[H opspilot: all checks passed<U+0007>" in out  # its CR: a space
