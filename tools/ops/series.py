"""A metric's series described as an on-call engineer reads a graph: where it sat before (baseline), when it
left that level (onset), how far it went (peak) and when, whether it came back (recovery), and one trend word
derived from those facts — never from the first and last point alone (a spike that recovered is not "flat").

Only the points the backend returned are used: NaN and missing steps are counted as gaps, never filled in;
a counter's resets are counted and its increases used instead of its raw values."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

from tools.ops.samples import Series, edges, increases, missing

# A level is a point's distance from the baseline as a share of the whole excursion (0 = baseline, 1 = peak).
BAND_MADS = 3.0  # a point this many robust standard deviations (1.4826 × MAD) off the baseline has left it
BACK_LEVEL = 0.2  # back within the baseline's band, or within this share of the excursion: recovered
HIGH_LEVEL = 0.7  # still near the peak
AWAY_LEVEL = 0.5  # half-way to the peak has left the baseline, whatever its band (a two-level series' resolution
# is its whole step: read as a band, a step up that stayed up never left, so it "spiked and recovered")
TAIL_MOVE = 0.2  # how much the last stretch must move (as a share of the excursion) to be rising or falling
INTERMITTENT_SHARE = 0.25  # a quarter of the points since the onset back inside the band: it comes and goes
RECOVERY_POINTS = 3  # a stretch back inside the band this long, and twice any pause around it, is a recovery: what
# follows it is a new excursion, not the same one "not back yet"
NOISE_FACTOR = 3.0  # an excursion within 3× the typical step-to-step jitter is noise
RELATIVE_FLOOR = 0.1  # …or within a tenth of the baseline itself (a latency 100 → 140 ms is news; 100 → 105 is not)


@dataclass(frozen=True)
class Shape:
    """What a series did. ``direction`` is the way it left its baseline (None: it did not)."""

    trend: str
    points: int
    current: float | None = None
    baseline: float | None = None
    direction: str | None = None
    extreme: float | None = None
    extreme_at: float | None = None
    onset_at: float | None = None
    recovered_at: float | None = None
    minimum: float | None = None
    maximum: float | None = None
    mean: float | None = None
    gaps: int = 0
    resets: int = 0
    onset_after_gap: bool = False
    """No point in the step before the onset (a scrape gap, or the window's start): it left its baseline at some
    time in that gap, not at ``onset_at``."""
    last_at: float | None = None
    """When the last point was, when it is older than the window's end by two steps or more: ``current`` is then
    that point's value, not now's (a target down, a service with no traffic)."""
    first_at: float | None = None
    """The first point's time: nothing is known of the series before it (a change before it has no "before")."""
    step_s: float = 0.0
    """The spacing of its points: an onset is only known to within one step before ``onset_at``."""
    excursions: int = 1
    """How many times it left its baseline and came back before the excursion described (``onset_at``, ``extreme``)
    began, plus that one: 2 or more when it recovered and left again."""
    earlier_onset_at: float | None = None
    """When the first of the earlier excursions began (``excursions`` > 1)."""
    earlier_recovered_at: float | None = None
    """When it was last back before the excursion described began."""
    earlier_extreme: float | None = None
    earlier_extreme_at: float | None = None

    @property
    def changed(self) -> bool:
        return self.direction is not None


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hhmm(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M")


def _typical_step(values: list[float]) -> float:
    steps = [abs(b - a) for a, b in pairwise(values)]
    return statistics.median(steps) if steps else 0.0  # one point: no jitter to measure


def _slope(values: list[float]) -> float:
    """Theil–Sen: the median of the slopes between every pair of points, so that the end of the climb into a
    plateau does not pass for a plateau still climbing."""
    recent = values[-120:]
    slopes = [(b - a) / (j - i) for i, a in enumerate(recent) for j, b in enumerate(recent) if j > i]
    return statistics.median(slopes)


def _before_step(head: list[float], quiet: list[float]) -> list[float]:
    """``quiet`` (the window's first third), unless its level is clearly not the window's first points' (``head``):
    then those of the first points at their own level. A series that stepped up early and stayed there has the
    old level as its baseline ("steady high since 07:06"), not the new one (which made it "dipped and
    recovered")."""
    start = statistics.median(head)
    spread = max(BAND_MADS * 1.4826 * statistics.median(abs(v - start) for v in head),
                 NOISE_FACTOR * _typical_step(head), RELATIVE_FLOOR * abs(start), 1e-12)
    if abs(statistics.median(quiet) - start) <= spread:
        return quiet
    return [v for v in head if abs(v - start) <= spread] or head


def describe(series: Series, *, counter: bool = False, window: tuple[float, float, float] | None = None) -> Shape:
    """``window``: (start, end, step) the series was asked for, so that points missing at its edges count too
    (a target down for the last ten minutes left no gap between points, and its last value read as now's)."""
    ordered = sorted(series)
    edge, last_at = edges([t for t, _ in ordered], [t for t, v in ordered if math.isfinite(v)], window)
    gaps = missing([t for t, _ in ordered]) + sum(1 for _, v in ordered if not math.isfinite(v)) + edge
    points = [(t, v) for t, v in ordered if math.isfinite(v)]
    resets, sampled = 0, points
    if counter:
        points, resets = increases(points)
        gaps += resets  # the step across each reset: its increase is not known
    if not points:  # a counter's first sample is there, with no increase yet: not "no data"
        one = counter and len(sampled) == 1
        return Shape("single point" if one else "no data", int(one), gaps=gaps, resets=resets, last_at=last_at,
                     first_at=sampled[0][0] if one else None)
    times, values = [t for t, _ in points], [v for _, v in points]
    current = values[-1]
    spacing = window[2] if window is not None else \
        statistics.median([b - a for a, b in pairwise(times)]) if len(times) > 1 else 0.0
    plain = Shape("single point", len(values), current=current, minimum=min(values), maximum=max(values),
                  mean=sum(values) / len(values), gaps=gaps, resets=resets, last_at=last_at, first_at=times[0],
                  step_s=spacing)
    if len(values) == 1:
        return plain
    quiet = values[:max(1, len(values) // 3)]
    if len(values) >= 6:  # it changed inside the first third: the level before the change is the baseline
        quiet = _before_step(values[:max(2, len(values) // 10)], quiet)
    baseline = statistics.median(quiet)
    up, down = max(values) - baseline, baseline - min(values)
    sign = 1.0 if up >= down else -1.0
    excursion = max(up, down)
    # Jitter: the smaller of the quiet start's and the whole window's typical step, so that neither a ramp
    # nor a step caught in the first third passes for noise.
    # (A quiet start of one point has no jitter of its own to measure: the whole window's steps are all there is,
    # but its largest, which may be the change itself.)
    noise = NOISE_FACTOR * (min(_typical_step(quiet), _typical_step(values)) if len(quiet) > 1 else
                            statistics.median(sorted(abs(b - a) for a, b in pairwise(values))[:-1] or [0.0]))
    if excursion <= max(noise, RELATIVE_FLOOR * abs(baseline), 1e-12):
        return replace(plain, trend="flat", baseline=baseline)

    # The baseline's own noise band — 3 robust standard deviations, never narrower than the step jitter nor one
    # step of the values' resolution (values reported in coarse steps have a MAD of 0): a point outside it has
    # left the baseline, however large the excursion that follows (a share of the excursion would hide the
    # beginning of a large one — the very time "was it the deploy?" compares).
    levels = sorted(set(quiet))
    resolution = min((b - a for a, b in pairwise(levels)), default=0.0)
    resolution = min(resolution, AWAY_LEVEL * excursion)  # (only the resolution: noise keeps its whole band)
    band = max(BAND_MADS * 1.4826 * statistics.median(abs(v - baseline) for v in quiet), resolution, noise, 1e-12)

    def level(v: float) -> float:
        return sign * (v - baseline) / excursion

    def clear(v: float) -> bool:  # outside the baseline's band, on the side the series went
        return sign * (v - baseline) > band

    extreme = max(range(len(values)), key=lambda i: level(values[i]))
    onset = _start(extreme, values, clear)  # of the stretch outside the band that leads to the extreme (not a blip)
    if onset > 0:  # the baseline is what came before the change, not a fixed share of the window
        baseline = statistics.median(values[:onset])
        excursion = max(sign * (v - baseline) for v in values)
    def returned(v: float) -> bool:  # a baseline with no noise at all has a band of zero: a share of the way counts
        # (and never near the peak: a band sized on a ramp caught in the first third would call a value holding at
        # its peak "back"; noise after a spike can reach half-way and still be noise)
        return level(v) < HIGH_LEVEL and (not clear(v) or level(v) < BACK_LEVEL)

    def inside(v: float) -> bool:  # back inside the baseline's band (never near the peak: see returned)
        return level(v) < HIGH_LEVEL and not clear(v)

    # Back inside the band for a while, then away again: "now" and "when did it begin" are the excursion under way's,
    # the earlier ones (at least half-way to the peak: a blip is no excursion) said as recovered.
    far = next((i for i, v in enumerate(values) if clear(v) and level(v) >= AWAY_LEVEL), extreme)
    first = _start(far, values, clear)
    backs = [b for b in _recoveries(values, first, inside)  # away again after: half-way, or held outside the band
             if any(level(v) >= AWAY_LEVEL for v in values[b[1]:]) or _held(values[b[1]:], clear)]
    earlier: dict[str, Any] = {}
    if backs:
        ended, start = backs[-1]
        went = sum(any(level(v) >= AWAY_LEVEL for v in values[a:b])  # the excursions before, each recovered
                   for a, b in zip([first, *(end for _, end in backs)], [a for a, _ in backs], strict=False))
        top = max(range(first, ended), key=lambda i: level(values[i]))
        excursion = max(sign * (v - baseline) for v in values[start:])  # the one under way is its own scale
        extreme = max(range(start, len(values)), key=lambda i: level(values[i]))
        onset = max(start, _start(extreme, values, clear))
        earlier = {"excursions": 1 + went, "earlier_onset_at": times[first], "earlier_recovered_at": times[ended],
                   "earlier_extreme": values[top], "earlier_extreme_at": times[top]}
    recovered = None
    if returned(current):
        recovered = len(values) - 1
        while recovered > extreme + 1 and returned(values[recovered - 1]):
            recovered -= 1
        if len(values) - recovered <= _longest_inside(values[onset:recovered], inside):
            recovered = None  # it was back inside its band as long before, and left again: intermittent, not over
    # An intermittent series (sparse low counts: 0, 1, 0, 0, 1…) ends on a high point or a low one by chance: it
    # is neither "steady high" because its last point is high nor back because its last points are low.
    since = values[onset:]
    intermittent = recovered is None and _longest_inside(since, inside) >= 2 and \
        sum(map(inside, since)) >= INTERMITTENT_SHARE * len(since)
    tail = values[max(onset, len(values) - max(3, len(values) // 3)):]
    move = sign * (tail[-1] - tail[0]) / excursion if len(tail) > 1 else 1.0
    away, back = ("rising", "falling") if sign > 0 else ("falling", "rising")
    if recovered is not None:
        trend = "spiked and recovered" if sign > 0 else "dipped and recovered"
    elif intermittent:
        trend = "elevated" if sign > 0 else "lowered"
    elif level(current) >= HIGH_LEVEL:
        # Near the peak: still climbing, or holding since it first got this far?
        reached = next(i for i in range(onset, len(values)) if level(values[i]) >= HIGH_LEVEL)
        held = values[reached:]
        moved = sign * _slope(held) * (len(held) - 1) / excursion if len(held) >= 3 else TAIL_MOVE
        # still climbing, sliding back (near the peak still, but not holding there), or holding
        trend = away if moved >= TAIL_MOVE else back if moved <= -TAIL_MOVE else \
            ("steady high" if sign > 0 else "steady low")
    elif move <= -TAIL_MOVE:
        trend = back
    elif move >= TAIL_MOVE:
        trend = away
    else:
        trend = "elevated" if sign > 0 else "lowered"
    step = statistics.median([b - a for a, b in pairwise(times)]) if len(times) > 2 else 0.0
    blind = onset == 0 or (step > 0 and times[onset] - times[onset - 1] > 1.5 * step)
    return replace(plain, trend=trend, baseline=baseline, direction="up" if sign > 0 else "down",
                   onset_after_gap=blind and onset < len(values) - 1 and bool(gaps),
                   extreme=values[extreme], extreme_at=times[extreme], onset_at=times[onset],
                   recovered_at=times[recovered] if recovered is not None else None, **earlier)


def _start(i: int, values: list[float], clear: Callable[[float], bool]) -> int:
    """The first point of the stretch outside the band that leads to ``values[i]``."""
    while i > 0 and clear(values[i - 1]):
        i -= 1
    return i


def _recoveries(values: list[float], start: int, inside: Callable[[float], bool]) -> list[tuple[int, int]]:
    """The stretches back inside the band after ``start`` that were recoveries, not pauses (first, after last):
    at least ``RECOVERY_POINTS`` long and twice any shorter one — the longest of a series that comes and goes
    (0, 1, 0, 0, 1, 0, 0, 0, 1…) is no recovery. The stretch running to the window's end is not one of them."""
    runs: list[tuple[int, int]] = []
    i = start
    while i < len(values):
        j = i
        while j < len(values) and inside(values[j]):
            j += 1
        if i < j < len(values):
            runs.append((i, j))
        i = j + 1
    lengths = sorted((b - a for a, b in runs), reverse=True)
    cut = next((n for n, m in zip(lengths, [*lengths[1:], 0], strict=False)
                if n >= RECOVERY_POINTS and n >= 2 * m), None)
    return [(a, b) for a, b in runs if cut is not None and b - a >= cut]


def _held(values: list[float], clear: Callable[[float], bool]) -> bool:
    """Whether ``values`` leave the baseline's band and stay out for ``RECOVERY_POINTS`` points in a row: a new rise,
    however small beside an earlier spike (ten times the baseline is no blip because the spike was a hundred)."""
    run = 0
    for v in values:
        run = run + 1 if clear(v) else 0
        if run >= RECOVERY_POINTS:
            return True
    return False


def _longest_inside(values: list[float], inside: Callable[[float], bool]) -> int:
    """The longest run of points back inside the baseline's band in ``values``."""
    longest = run = 0
    for v in values:
        run = run + 1 if inside(v) else 0
        longest = max(longest, run)
    return longest


def _n(value: float) -> float:
    return round(value, 4) if abs(value) >= 1e-4 or value == 0 else float(f"{value:.3g}")


def figures(shape: Shape) -> dict[str, Any]:
    """The shape as the tool's result: every fact with its time."""
    if shape.current is None:
        note = "one sample of a counter: no increase yet" if shape.points else "no data in this window"
        return {"points": shape.points, "trend": shape.trend, "note": note, "gaps": shape.gaps,
                **({"first_point_at": iso(shape.first_at)} if shape.first_at is not None else {})}
    out: dict[str, Any] = {"current": _n(shape.current), "trend": shape.trend, "points": shape.points}
    if shape.baseline is not None:
        out["baseline"] = _n(shape.baseline)
    if shape.minimum is not None and shape.maximum is not None and shape.mean is not None:
        out.update(min=_n(shape.minimum), max=_n(shape.maximum), avg=_n(shape.mean))
    if shape.changed:
        key = "peak" if shape.direction == "up" else "low"
        assert shape.extreme is not None
        out.update({key: _n(shape.extreme), f"{key}_at": iso(shape.extreme_at), "onset_at": iso(shape.onset_at),
                    "recovered_at": iso(shape.recovered_at), "step_s": _n(shape.step_s)})
    if shape.excursions > 1 and shape.earlier_extreme is not None:  # what came and went before the one described
        out.update({"excursions": shape.excursions, "earlier_onset_at": iso(shape.earlier_onset_at),
                    f"earlier_{key}": _n(shape.earlier_extreme), f"earlier_{key}_at": iso(shape.earlier_extreme_at),
                    "earlier_recovered_at": iso(shape.earlier_recovered_at)})
    if shape.first_at is not None:  # what came before it was not read, whatever its shape
        out["first_point_at"] = iso(shape.first_at)
    if shape.gaps:
        out["gaps"] = shape.gaps
    if shape.last_at is not None:
        out["last_point_at"] = iso(shape.last_at)
    if shape.onset_after_gap:
        out["onset_after_gap"] = True
    if shape.resets:
        out["counter_resets"] = shape.resets
    return out


def story(fig: dict[str, Any]) -> str:
    """How a metric's figures read, one rule for every surface (the tool's summary, Slack's line, the demo
    model's answer): ``plain`` (it never left its baseline), ``back`` (it left and came back), ``since`` (away
    and still going that way: "rising since 09:43"), ``not_back`` (on its way back or part way: "falling, not
    back yet: began 17:58" — never "falling since" the time it rose)."""
    if "current" not in fig or not fig.get("onset_at"):
        return "plain"
    if fig.get("recovered_at"):
        return "back"
    trend = fig.get("trend")
    away = (trend in ("rising", "steady high") and "peak" in fig) or \
        (trend in ("falling", "steady low") and "low" in fig)
    return "since" if away else "not_back"


def gist(name: str, shape: Shape) -> str:
    """One line from the same facts: ``error_rate 0.043, steady high since 09:42 (baseline 0.002, peak 0.044 at
    09:56)``."""
    if shape.current is None:
        return f"{name}: a single point (a counter's first sample: no increase yet)" if shape.points else \
            f"{name}: no data"
    head = f"{name} {_n(shape.current):g}"
    if not shape.changed or shape.extreme is None or shape.extreme_at is None or shape.onset_at is None:
        return f"{head} ({shape.trend}){_gaps_note(shape)}"
    what = "peak" if shape.direction == "up" else "low"
    base = f"baseline {_n(shape.baseline or 0):g}, {what} {_n(shape.extreme):g} at {hhmm(shape.extreme_at)}"
    told = story(figures(shape))
    if told == "back" and shape.recovered_at is not None:
        line = f"{shape.trend}: began {hhmm(shape.onset_at)}, back by {hhmm(shape.recovered_at)}"
    elif told == "since":
        line = f"{shape.trend} since {hhmm(shape.onset_at)}"
    else:  # on its way back (or part way): when it left the baseline, and that it is not back yet
        line = f"{shape.trend}, not back yet: began {hhmm(shape.onset_at)}"
    return f"{head}, {_earlier(shape)}{line} ({base}){_gaps_note(shape)}"


def _earlier(shape: Shape) -> str:
    """``spiked at 09:21 (peak 0.05 at 09:21), back by 09:24, then ``: the excursions before the one described."""
    if shape.excursions < 2 or shape.earlier_onset_at is None or shape.earlier_recovered_at is None \
            or shape.earlier_extreme is None or shape.earlier_extreme_at is None:
        return ""
    went, what = ("spiked", "peak") if shape.direction == "up" else ("dipped", "low")
    times = f" {shape.excursions - 1} times from" if shape.excursions > 2 else " at"
    return (f"{went}{times} {hhmm(shape.earlier_onset_at)} ({what} {_n(shape.earlier_extreme):g} at "
            f"{hhmm(shape.earlier_extreme_at)}), back by {hhmm(shape.earlier_recovered_at)}, then ")


def _gaps_note(shape: Shape) -> str:
    stale = f", last point at {hhmm(shape.last_at)}, none since" if shape.last_at is not None else ""
    return stale + (f", {shape.gaps} missing point{'s' if shape.gaps != 1 else ''}" if shape.gaps else "")
