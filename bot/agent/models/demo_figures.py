"""Figures as the demo model shows them: one way of writing a rate everywhere it writes one (a lookup, a
comparison, a change's before and after, a follow-up), and comparisons made on the figures as written — so that
"the same", "better" or "highest" never stands beside figures that say otherwise."""

from __future__ import annotations

import math

_TRENDS_ZH = {"flat": "平稳", "rising": "上升", "falling": "下降", "steady high": "持续偏高", "steady low": "持续偏低",
              "spiked and recovered": "曾飙升，已恢复", "dipped and recovered": "曾下跌，已恢复", "elevated": "偏高",
              "lowered": "偏低", "single point": "只有一个数据点", "no data": "无数据"}


def trend_word(word: str, zh: bool) -> str:
    return _TRENDS_ZH.get(word, word) if zh else word


def percent(rate: float) -> str:
    """``rate`` as a percentage: two significant figures, one decimal at least (13.0%, 4.3%, 0.30%, 0.040%) — a
    rate that is not zero never reads 0.0%."""
    value = float(f"{rate * 100:.2g}")
    if value == 0 or abs(value) >= 1:
        return f"{rate * 100:.1f}%"
    return f"{value:.{1 - math.floor(math.log10(abs(value)))}f}%"


def shown(rate: float) -> float:
    """``rate`` as :func:`percent` writes it: what "the same", "higher" and "lower" are judged on."""
    return float(percent(rate)[:-1])


def highest(rates: dict[str, float]) -> list[str]:
    """The names whose rate, as written, is the highest: one, or several that read alike."""
    top = max(shown(r) for r in rates.values())
    return [name for name, r in rates.items() if shown(r) == top]
