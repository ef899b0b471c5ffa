"""Scoring a played scenario: one check per expectation, each with what was seen when it failed."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.eval.runner import Played
from bot.eval.scenario import Scenario

_CJK = re.compile(r"[\u3400-\u9fff]")
_LATIN = re.compile(r"[A-Za-z]")
_CITES_DOC = re.compile(r"\.md\b|docs/")
_CODE = re.compile(r"`[^`]*`|_source:[^_]*_|\(`[^`]*`\)")


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str = ""


def chinese_share(text: str) -> float:
    """Chinese characters among the letters of the answer's own prose: code spans, source notes and lines that
    quote a document (a runbook is quoted in its own language) left out."""
    prose = _CODE.sub("", "\n".join(line for line in text.splitlines() if not _CITES_DOC.search(line)))
    cjk, latin = len(_CJK.findall(prose)), len(_LATIN.findall(prose))
    return cjk / (cjk + latin) if cjk + latin else 0.0


def in_language(text: str, lang: str) -> bool:
    """Answers quote the other language (English log lines and titles in a Chinese answer, a Chinese runbook
    in an English one): Chinese needs a tenth of the letters, English needs most of them."""
    share = chinese_share(text)
    return share >= 0.1 if lang == "zh" else share < 0.5


def score(scenario: Scenario, played: Played) -> list[Check]:
    expect = scenario.expect
    if played.error is not None:
        return [Check("ran", False, played.error)]
    checks = [Check("ran", True)]
    for want in expect.calls:
        seen = [f"{name}({args})" for name, args in played.proposed if name == want.tool]
        checks.append(Check(f"calls {want}", any(want.matches(n, a) for n, a in played.proposed),
                            f"saw {', '.join(seen) or f'no {want.tool} call'}"))
    for tool in expect.not_called:
        checks.append(Check(f"never calls {tool}", all(n != tool for n, _ in played.proposed),
                            f"proposed {tool}"))
    for tool in expect.proposed_not_run:
        proposed = any(n == tool for n, _ in played.proposed)
        checks.append(Check(f"proposes {tool}", proposed, f"{tool} was not proposed"))
        checks.append(Check(f"{tool} waits for a person", played.results.get(tool) != "ok",
                            f"{tool} ran: {played.results.get(tool)}"))
    for tool in expect.ran:
        checks.append(Check(f"runs {tool}", played.results.get(tool) == "ok",
                            f"{tool}: {played.results.get(tool, 'never ran')}"))
    if expect.asks is not None:
        checks.append(Check("asks a person" if expect.asks else "asks nobody", bool(played.asked) == expect.asks,
                            f"asked: {', '.join(played.asked) or 'nothing'}"))
    for pattern in expect.facts:
        checks.append(Check(f"says /{pattern}/", re.search(pattern, played.answer) is not None,
                            _excerpt(played.answer)))
    for pattern in expect.not_facts:
        found = re.search(pattern, played.answer)
        checks.append(Check(f"never says /{pattern}/", found is None, found.group(0) if found else ""))
    if expect.language is not None and played.answer:
        checks.append(Check(f"answers in {expect.language}", in_language(played.answer, expect.language),
                            f"Chinese is {chinese_share(played.answer):.0%} of its letters"))
    if expect.max_steps is not None:
        checks.append(Check(f"within {expect.max_steps} steps", played.steps <= expect.max_steps,
                            f"{played.steps} steps"))
    return checks


def _excerpt(answer: str, limit: int = 160) -> str:
    flat = " ".join(answer.split())
    return f"answer: {flat[:limit]}{'…' if len(flat) > limit else ''}" if flat else "no answer"
