"""Which points a series has: the steps missing between and around them, and a raw counter's increases (its
resets' steps not known) — what :mod:`tools.ops.series` describes."""

from __future__ import annotations

import statistics
from itertools import pairwise

Series = list[tuple[float, float]]


def missing(times: list[float]) -> int:
    """Missing steps: intervals longer than 1.5× the usual step, counted in steps."""
    if len(times) < 3:
        return 0
    deltas = [b - a for a, b in pairwise(times) if b > a]
    if not deltas:
        return 0
    step = statistics.median(deltas)
    return sum(round(d / step) - 1 for d in deltas if d > 1.5 * step)


def increases(points: Series) -> tuple[Series, int]:
    """A counter's per-step increases, and its resets (a drop: the counter restarted from zero). The step with a
    reset has no increase: what it counted before the restart is lost with it, and the value after it is only
    what came since (read as the step's increase, a steady counter "dipped" at every restart) — it is missing, as
    a scrape gap is. An increase across missing steps is spread over them (the rate it kept), not read as one
    step's: a scrape gap in a steady counter is no spike."""
    out: Series = []
    resets = 0
    deltas = [b - a for (a, _), (b, _) in pairwise(points) if b > a]
    step = statistics.median(deltas) if deltas else 0.0
    for (was, before), (t, after) in pairwise(points):
        if after < before:
            resets += 1
            continue
        grown = after - before
        out.append((t, grown * step / (t - was) if step and t - was > 1.5 * step else grown))
    return out, resets


def edges(times: list[float], finite: list[float],
          window: tuple[float, float, float] | None) -> tuple[int, float | None]:
    """Steps missing before the first point and after the last within ``window`` (start, end, step) — points
    returned as NaN are counted once, as such, not here — and the last finite point's time when the window's end
    is two steps or more past it."""
    if window is None or not times:
        return 0, None
    start, end, step = window
    before = int((times[0] - start) / step + 0.5) if times[0] - start > 1.5 * step else 0  # the first is at start
    after = int((end - times[-1]) / step + 0.5) if end - times[-1] >= 2 * step else 0
    last = finite[-1] if finite else None
    return before + after, last if last is not None and end - last >= 2 * step else None
