"""`opspilot chat` as a person uses it: on a real pseudo-terminal (colours, Ctrl-C, Ctrl-D) and through pipes
(stdin closing at a question), in the language of the conversation's first question."""

from __future__ import annotations

import asyncio
import codecs
import os
import re
import signal
import time
from pathlib import Path

import pytest

from state import RedisStore
from tests.language_scan import leaks
from tests.test_cli import opspilot, run_cli

COLOUR = re.compile(r"\x1b\[(?:\d+;)*(?:3[0-7]|9[0-7]|38)(?:;\d+)*m")  # a foreground colour, in any combination


def clean_env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OPSPILOT_")
            and k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM")}
    return {**base, "TERM": "xterm", **extra}


class Terminal:
    """The chat on a pseudo-terminal: stdin, stdout and stderr are a terminal, as when a person runs it."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int) -> None:
        self.proc, self.master = proc, master
        self.output = ""
        self._seen = 0
        # A character's bytes may come in two reads (a busy machine): decoded as one stream, not read by read.
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    @classmethod
    async def open(cls, env: dict[str, str], cwd: Path) -> Terminal:
        master, slave = os.openpty()
        proc = await asyncio.create_subprocess_exec(*opspilot(), "chat", stdin=slave, stdout=slave, stderr=slave,
                                                    env=env, cwd=cwd, start_new_session=True)
        os.close(slave)
        return cls(proc, master)

    async def _read(self, within: float) -> bool:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(self.master, lambda: ready.done() or ready.set_result(None))
        try:
            await asyncio.wait_for(ready, within)
        except TimeoutError:
            return False
        finally:
            loop.remove_reader(self.master)
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every end of the terminal's other side is closed
            return False
        self.output += self._decoder.decode(chunk)
        return bool(chunk)

    async def expect(self, text: str, within: float = 30) -> str:
        """The output up to and including ``text`` (after what earlier calls returned)."""
        deadline = time.monotonic() + within
        while (at := self.output.find(text, self._seen)) < 0:
            left = deadline - time.monotonic()
            assert left > 0 and await self._read(left), f"no {text!r} in:\n{self.output[self._seen:]}"
        seen, self._seen = self.output[self._seen:at + len(text)], at + len(text)
        return seen

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    async def exit_code(self, within: float = 10) -> int:
        while await self._read(within):
            pass
        code = await asyncio.wait_for(self.proc.wait(), within)
        os.close(self.master)
        return code

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


async def test_on_a_terminal_steps_are_coloured_and_ctrl_c_cancels_then_leaves(tmp_path: Path) -> None:
    term = await Terminal.open(clean_env(REDIS_URL="redis://127.0.0.1:9/0"), tmp_path)
    try:
        await term.expect("you> ")
        term.type("check the unicorn service errors\n")
        steps = await term.expect("you> ")
        assert re.search(r"\x1b\[31m\s*✗ search_resource failed: not_found", steps)  # an error: red
        assert re.search(r"\x1b\[32m\s*✓ search_docs", steps)  # ok: green

        term.type("restart payments in prod\n")
        steps = await term.expect("confirm? [y/N] ")
        assert re.search(r"\x1b\[33m\s*⏸ waiting for you", steps)  # waiting: yellow
        term.proc.send_signal(signal.SIGINT)  # Ctrl-C at the question: the change is not made
        said = await term.expect("you> ", within=10)
        assert "Cancelled (Ctrl-C): restart_service did not run — nothing was changed." in said
        assert "Restarted" not in term.output and "Traceback" not in term.output

        asked = time.monotonic()
        term.proc.send_signal(signal.SIGINT)  # Ctrl-C at the prompt: leave, now, on a line of its own
        assert await term.exit_code() == 130
        assert time.monotonic() - asked < 5
        assert term.output.rstrip().endswith("you> \r\nbye") or term.output.rstrip().endswith("\nbye")
        assert "Traceback" not in term.output
    finally:
        term.kill()


async def test_no_color_is_plain_and_ctrl_d_says_bye_on_its_own_line(tmp_path: Path) -> None:
    term = await Terminal.open(clean_env(REDIS_URL="redis://127.0.0.1:9/0", NO_COLOR="1"), tmp_path)
    try:
        await term.expect("you> ")
        term.type("check the unicorn service errors\n")
        steps = await term.expect("you> ")
        assert "✗ search_resource failed: not_found" in steps and not COLOUR.search(term.output)
        term.type("\x04")  # Ctrl-D at the prompt: end of input
        assert await term.exit_code() == 0
        assert re.search(r"you> \r?\nbye", term.output)
    finally:
        term.kill()


async def test_input_ending_at_a_question_changes_nothing_and_says_so(redis_url: str, prefix: str, store: RedisStore,
                                                                      tmp_path: Path) -> None:
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
    code, out, err = await run_cli(["chat"], "restart payments\n", env, tmp_path)
    assert code == 0 and "Traceback" not in out + err
    assert "environment — 1) prod / 2) staging: \n" in out  # nothing glued to the question
    assert "Input ended before an answer: restart_service did not run — nothing was changed." in out
    assert out.rstrip().endswith("you> \nbye")
    audit = await store.read_audit(10)
    assert [(a["tool"], a["status"]) for a in audit] == [("restart_service", "cancelled")]


async def test_a_conversation_keeps_the_language_of_its_first_question(redis_url: str, prefix: str,
                                                                       store: RedisStore, tmp_path: Path) -> None:
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
    question = ("看看支付服务最近报错，对照文档里的处理建议，把最近一小时的延迟和错误率趋势整理出来，"
                "重点看数据库连接池是否耗尽、慢查询和锁等待的情况，以及是否需要扩容或回滚，"
                "再对比上周同一时段的基线，列出受影响的接口和订单数量，给出结论和依据")
    code, out, err = await run_cli(["chat"], f"{question}\nrestart it\n2\nquit\n", env, tmp_path)
    assert code == 0, err
    answers = out.split("opspilot>")[1:]
    assert len(answers) == 2
    assert "已重启 payments（staging）" in answers[1]  # "restart it" is answered in the conversation's language
    assert "Restarted" not in out and "_来源" not in out  # rendered, not raw mrkdwn
    # A value cut for length says so.
    assert re.search(r"→ search_docs\(query=\"[^\n]{90,}…\)", out)

    code, out, err = await run_cli(["chat"], "payments errors\n重启它\n2\nquit\n", env, tmp_path)
    assert code == 0, err
    assert "Restarted payments in staging" in out.split("opspilot>")[-1]  # and an English one stays English


async def test_ctrl_c_while_it_works_stops_the_run_and_a_second_leaves(tmp_path: Path) -> None:
    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # a log backend that never answers: the run is busy until it is stopped

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  logs:\n    backend: loki\n    url: http://127.0.0.1:{port}\n"
                                           "    timeout_s: 60\n")
    term = await Terminal.open(clean_env(REDIS_URL="redis://127.0.0.1:9/0"), tmp_path)
    try:
        await term.expect("you> ")
        term.type("payments errors\n")
        await term.expect("→ query_logs")
        term.proc.send_signal(signal.SIGINT)
        said = await term.expect("you> ", within=10)
        assert "Stopping… (Ctrl-C again to leave at once)" in said and "Stopped (cancelled)" in said
        assert "Stopped at " in said  # the run's own answer: what it had found before
        term.type("payments errors\n")
        await term.expect("→ query_logs")
        term.proc.send_signal(signal.SIGINT)  # Ctrl-C twice in a row: it stops, then leaves
        await term.expect("Stopping…")
        term.proc.send_signal(signal.SIGINT)
        assert await term.exit_code() == 130
        assert "Traceback" not in term.output
    finally:
        term.kill()
        server.close()


# The person's side of each conversation: what they type (their words, echoed by the terminal, are not judged).
TERMINAL_SCENARIOS = {
    "zh": ["看看支付服务最近报错，顺便对照一下文档里的处理建议", "在生产环境重启它", "y", "看看 unicorn 服务的报错",
           "重启 payments", "2", "重启 payments 生产环境"],
    "en": ["look at the payment service's recent errors and the runbook's advice", "restart it in prod", "y",
           "check the unicorn service errors", "restart payments", "2", "restart payments in prod"],
}
_CYAN = re.compile(r"\x1b\[(?:\d+;)*36(?:;\d+)*m([^\x1b]*)")  # code and quoted data: shown in cyan
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ .*$", re.M)  # stderr: the operator's log


def shown_words(output: str, typed: list[str]) -> list[str]:
    """OpsPilot's lines as a person reads them: code and data (cyan) back in code spans, as the scan knows them;
    what the person typed (echoed after a prompt) and log lines left out."""
    text = _ANSI.sub("", _CYAN.sub(lambda m: f"`{m.group(1)}`", output)).replace("\r", "")
    for said in typed:
        text = re.sub(rf"(> |\] |: ){re.escape(said)}\n", r"\1\n", text)
    return [line for line in _LOG.sub("", text).split("\n") if line.strip()]


@pytest.mark.parametrize("lang", ["zh", "en"])
async def test_a_whole_conversation_on_a_terminal_speaks_one_language(lang: str, tmp_path: Path) -> None:
    """Banner, steps, a failing call, a form, a confirmation, answers, a question left by Ctrl-C and the goodbye:
    every line in the conversation's language (the banner in the terminal's locale, as no question is asked yet)."""
    typed = TERMINAL_SCENARIOS[lang]
    locale = "zh_CN.UTF-8" if lang == "zh" else "en_US.UTF-8"
    term = await Terminal.open(clean_env(REDIS_URL="redis://127.0.0.1:9/0", LANG=locale, LC_ALL=locale), tmp_path)
    prompt = "你> " if lang == "zh" else "you> "
    confirm = "[y/N] "
    try:
        await term.expect(prompt)
        term.type(typed[0] + "\n")
        await term.expect(prompt, within=60)
        term.type(typed[1] + "\n")
        await term.expect(confirm)
        term.type(typed[2] + "\n")
        await term.expect(prompt)
        term.type(typed[3] + "\n")
        failed = await term.expect(prompt)
        assert re.search(r"\x1b\[31m\s*✗ search_resource", failed)  # a failing call is among what is judged
        term.type(typed[4] + "\n")
        await term.expect(") prod / 2) staging: ")
        term.type(typed[5] + "\n")
        await term.expect(prompt)
        term.type(typed[6] + "\n")
        await term.expect(confirm)
        term.proc.send_signal(signal.SIGINT)  # a question left: "nothing was changed", in the same words
        await term.expect(prompt)
        term.proc.send_signal(signal.SIGINT)
        assert await term.exit_code() == 130
    finally:
        term.kill()
    lines = shown_words(term.output, typed)
    found = leaks(lines, lang, proper=("opspilot",))
    assert not found, "\n".join(f"{hit!r} in {line!r}" for hit, line in found)
    assert len(lines) > 30 and "Traceback" not in term.output
    said = "\n".join(lines)
    if lang == "zh":  # the words are there, not just the absence of English
        assert "确认执行？" in said and "第 1 步" in said and "没有做任何改动" in said and "再见" in said
    else:
        assert "confirm? " in said and "step 1" in said and "nothing was changed" in said and "bye" in said
