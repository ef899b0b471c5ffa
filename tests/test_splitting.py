"""Long answers in parts within Slack's 3,000-character section limit: cut between paragraphs, sentences or words,
code blocks whole (or closed and reopened), each part after the first saying it continues."""

from __future__ import annotations

import random
import re
from itertools import pairwise

import pytest

from bot.agent.models.scripted import ScriptedModel, reply
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.slack.outbound import blocks as kit
from core.split import FENCE, Part, split
from tests.slack_harness import CHANNEL, open_workspace

LIMIT = 3000
MARK = "_(continued)_"
WORDS = ("the", "connection", "pool", "was", "exhausted", "after", "deploy", "so", "requests", "to", "payments",
         "timed", "out", "while", "database", "itself", "stayed", "healthy", "and", "its", "replicas", "kept", "up")
HAN = "连接池耗尽数据库本身正常支付服务请求超时重启之后恢复错误率下降副本同步没有延迟慢查询锁等待"


def english(rnd: random.Random, size: int) -> str:
    """Paragraphs of sentences, some paragraphs far longer than a part."""
    paragraphs: list[str] = []
    while sum(map(len, paragraphs)) < size:
        n = rnd.choice([2, 5, 40, 120])
        paragraphs.append(" ".join(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(5, 25))).capitalize()
                                   + rnd.choice(".!?") for _ in range(n)))
    return "\n\n".join(paragraphs)


def chinese(rnd: random.Random, size: int) -> str:
    """Chinese paragraphs: no spaces, sentences ending in 。！？；, clauses in ，."""
    paragraphs: list[str] = []
    while sum(map(len, paragraphs)) < size:
        sentences = ("".join(rnd.choice(HAN) for _ in range(rnd.randint(8, 30))) + "，"
                     + "".join(rnd.choice(HAN) for _ in range(rnd.randint(8, 30))) + rnd.choice("。！？；")
                     for _ in range(rnd.choice([3, 30, 150])))
        paragraphs.append("".join(sentences))
    return "\n\n".join(paragraphs)


def code_heavy(rnd: random.Random, size: int) -> str:
    """Prose with log excerpts in code blocks: most fit in a part, some are far longer than one."""
    pieces: list[str] = []
    while sum(map(len, pieces)) < size:
        lines = "\n".join(f"line{rnd.randint(0, 99999):05d} ERROR timeout acquiring connection from pool "
                          f"(active={rnd.randint(1, 50)})" for _ in range(rnd.choice([3, 20, 35, 200])))
        pieces.append(f"{english(rnd, rnd.randint(50, 900))}\n\n```\n{lines}\n```")
    return "\n\n".join(pieces)


def shown(part: Part) -> str:
    """A part as shown, without what the splitter added: its mark and reopened or closing fences."""
    text = part.text.removeprefix(f"{part.mark}\n").removeprefix(FENCE + "\n" if part.opens else "")
    return text.removesuffix("\n" + FENCE if part.closes else "")


def squeeze(text: str) -> str:
    return re.sub(r"\s", "", text)


def check(text: str, parts: list[Part]) -> None:
    assert "".join(p.body for p in parts) == text  # nothing lost, nothing added
    assert squeeze("".join(shown(p) for p in parts)) == squeeze(text)  # what shows is the text, in order
    for i, part in enumerate(parts):
        assert len(part.text) <= LIMIT
        assert part.text.count(FENCE) % 2 == 0, part.text  # no part leaves a code block open
        assert part.text.startswith(f"{MARK}\n") == (i > 0)
    for before, after in pairwise(parts):
        last, first = before.body.rstrip()[-1], after.body.lstrip()[0]
        # Never inside a word: cut at blank space, after CJK punctuation, or between code lines.
        assert before.body[-1].isspace() or not (last.isascii() and last.isalnum()) or before.closes, \
            (before.body[-40:], after.body[:40])
        assert not (first.isascii() and first.isalnum() and not before.body[-1].isspace())


@pytest.mark.parametrize("size", [3_200, 7_000, 12_000, 20_000])
@pytest.mark.parametrize("seed", range(3))
def test_english_is_cut_between_paragraphs_or_sentences(size: int, seed: int) -> None:
    text = english(random.Random(seed), size)
    parts = split(text, LIMIT, MARK)
    check(text, parts)
    assert len(parts) >= 2
    words = set(WORDS) | {w.capitalize() for w in WORDS}
    for part in parts:
        assert {w.strip(".!?") for w in shown(part).split()} <= words  # every word whole
        assert shown(part).rstrip()[-1] in ".!?"  # these paragraphs have sentences: a part ends after one


@pytest.mark.parametrize("size", [3_200, 9_000, 20_000])
@pytest.mark.parametrize("seed", range(3))
def test_chinese_is_cut_after_its_sentences(size: int, seed: int) -> None:
    text = chinese(random.Random(seed), size)
    parts = split(text, LIMIT, "_（续）_")
    assert "".join(p.body for p in parts) == text
    assert len(parts) >= 2 and all(len(p.text) <= LIMIT for p in parts)
    assert all(p.text.startswith("_（续）_\n") for p in parts[1:])
    for part in parts:
        assert shown(part).rstrip()[-1] in "。！？；"


@pytest.mark.parametrize("size", [3_500, 8_000, 20_000])
@pytest.mark.parametrize("seed", range(3))
def test_code_blocks_stay_whole_or_are_closed_and_reopened(size: int, seed: int) -> None:
    text = code_heavy(random.Random(seed), size)
    parts = split(text, LIMIT, MARK)
    check(text, parts)
    originals = set(text.splitlines())
    for part in parts:  # every log line shown is a whole line of the text (no "line0|0105")
        assert {ln for ln in shown(part).splitlines() if ln.startswith("line")} <= originals
    blocks = re.findall(r"```.*?```", text, re.S)
    fits = LIMIT - len(MARK) - 1 - 4  # a part's room: its mark, and a closing fence should it need one
    for block in blocks:
        if len(block) <= fits:  # found whole in one part
            assert any(block in p.text for p in parts)
    assert any(len(b) > fits for b in blocks) == any(p.closes for p in parts)
    for before, after in pairwise(parts):
        assert before.closes == after.opens
        if before.closes:  # cut between lines of the block
            assert before.body.endswith("\n") and after.text.startswith(f"{MARK}\n{FENCE}\nline")


def test_what_the_old_splitter_cut_inside_words() -> None:
    # One 5,000-character line without a full stop: cut at a space, not at character 3,000 ("exha|usted").
    line = " ".join(["exhausted"] * 500)
    parts = split(line, LIMIT, MARK)
    assert [w for p in parts for w in shown(p).split()] == ["exhausted"] * 500
    # A word longer than a part is the one thing cut inside (at the limit), never an escaped character in two.
    blob = "&amp;" * 1000
    parts = split(blob, LIMIT, MARK)
    check(blob, parts)
    assert all(re.fullmatch(r"(&amp;)+", shown(p)) for p in parts)
    # A code block that would straddle the limit moves to the next part whole.
    code = "```\n" + "\n".join(f"line{i:05d}" for i in range(100)) + "\n```"
    text = "x " * 1200 + "\n\n" + code
    parts = split(text, LIMIT, MARK)
    assert len(parts) == 2 and parts[1].text == f"{MARK}\n{code}"


def test_a_code_block_left_open_is_closed_in_its_last_part() -> None:
    text = "Logs:\n```\n" + "\n".join(f"line{i:05d} timeout" for i in range(400))
    parts = split(text, LIMIT, MARK)
    check(text, parts)
    assert parts[-1].closes and parts[-1].text.endswith("\n```")


def test_short_and_blank_answers() -> None:
    assert [p.text for p in split("All good.", LIMIT, MARK)] == ["All good."]
    assert split("  \n ", LIMIT, MARK) == []
    assert kit.split_answer("") == [[kit.mrkdwn("(no answer)")]]
    with pytest.raises(ValueError):
        split("text", 20, MARK)


async def test_a_long_chinese_answer_arrives_as_valid_blocks(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    rnd = random.Random(7)
    answer = f"{chinese(rnd, 6_000)}\n\n```\n" + "\n".join(f"line{i:05d} 超时 timeout" for i in range(300)) + \
        f"\n```\n\n{chinese(rnd, 4_000)}"
    ws = await open_workspace(redis_url, prefix, slack, model=ScriptedModel([reply(answer)]), specs=[],
                              language="auto")
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "把支付服务的情况全部讲一遍", "1200.1"))
        await ws.settle()
        assert slack.rejected == []  # the local Slack checks every Block Kit limit
        posted = [m for m in slack.thread(CHANNEL, "1200.1")
                  if any(str(b.get("block_id", "")).startswith("feedback:") for b in m["blocks"])]
        assert len(posted) == 1
        sections = [b["text"]["text"] for b in posted[0]["blocks"] if b["type"] == "section"]
        assert len(sections) >= 6 and all(len(s) <= LIMIT for s in sections)
        assert all(s.startswith("_（续）_\n") for s in sections[1:]) and "(continued)" not in "".join(sections)
        assert all(s.count(FENCE) % 2 == 0 for s in sections)
        body = [s.removeprefix("_（续）_\n") for s in sections]
        assert squeeze("".join(body)).replace(FENCE * 2, "") == squeeze(answer)  # closed and reopened once
    finally:
        await ws.stop()
