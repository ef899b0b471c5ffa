"""Figures as the demo model shows them: rates written as everywhere else (:mod:`core.figures`), comparisons made
on the figures as written — so that "the same", "better" or "highest" never stands beside figures that say
otherwise — and trend words in the reader's language."""

from __future__ import annotations

from core.figures import percent, shown

__all__ = ["highest", "percent", "shown", "trend_word"]

_TRENDS_ZH = {"flat": "平稳", "rising": "上升", "falling": "下降", "steady high": "持续偏高", "steady low": "持续偏低",
              "spiked and recovered": "曾飙升，已恢复", "dipped and recovered": "曾下跌，已恢复", "elevated": "偏高",
              "lowered": "偏低", "single point": "只有一个数据点", "no data": "无数据"}


def trend_word(word: str, zh: bool) -> str:
    return _TRENDS_ZH.get(word, word) if zh else word


def highest(rates: dict[str, float]) -> list[str]:
    """The names whose rate, as written, is the highest: one, or several that read alike."""
    top = max(shown(r) for r in rates.values())
    return [name for name, r in rates.items() if shown(r) == top]
