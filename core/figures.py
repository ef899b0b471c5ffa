"""A rate as people read it, one way everywhere OpsPilot writes one (a tool's verdict, a step's line, an answer,
an incident's record): two significant figures, so a rate that is not zero never reads 0.0%, and "the same",
"rose" or "fell" are judged on the figures as written — never beside figures that say otherwise."""

from __future__ import annotations

import math


def percent(rate: float) -> str:
    """``rate`` as a percentage: two significant figures, one decimal at least (13.0%, 4.3%, 0.30%, 0.040%)."""
    value = float(f"{rate * 100:.2g}")
    if value == 0 or abs(value) >= 1:
        return f"{rate * 100:.1f}%"
    return f"{value:.{1 - math.floor(math.log10(abs(value)))}f}%"


def shown(rate: float) -> float:
    """``rate`` as :func:`percent` writes it: what "the same", "higher" and "lower" are judged on."""
    return float(percent(rate)[:-1])
