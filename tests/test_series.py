"""query_metrics' description of a series, on series whose truth is known: what a person reading the graph
would say, never the first point against the last."""

from __future__ import annotations

import math

import pytest

from tools.ops.series import Series, describe, figures, gist, iso

T0 = 1_796_202_000.0  # 2026-12-02T09:00:00Z
MIN = 60.0


def at(values: list[float], step: float = MIN) -> Series:
    return [(T0 + i * step, v) for i, v in enumerate(values)]


def hm(minutes: int) -> str:
    return f"09:{minutes:02d}"


def test_a_spike_that_recovered_is_not_flat() -> None:
    shape = describe(at([0, 0, .12, .11, .13, .01, 0]))
    assert shape.trend == "spiked and recovered"
    assert (shape.baseline, shape.extreme) == (0, .13)
    assert (shape.onset_at, shape.extreme_at, shape.recovered_at) == (T0 + 2 * MIN, T0 + 4 * MIN, T0 + 5 * MIN)
    line = gist("error_rate", shape)
    assert "flat" not in line and f"began {hm(2)}" in line and f"back by {hm(5)}" in line and "peak 0.13" in line


def test_a_step_up_stays_high() -> None:
    shape = describe(at([1, 1, 1, 1, 5, 5, 5, 5, 5]))
    assert shape.trend == "steady high" and shape.onset_at == T0 + 4 * MIN and shape.recovered_at is None
    assert gist("m", shape).startswith(f"m 5, steady high since {hm(4)}")


def test_a_slow_drift_is_rising() -> None:
    shape = describe(at([1 + 0.1 * i for i in range(12)]))
    assert shape.trend == "rising" and shape.direction == "up" and shape.recovered_at is None


@pytest.mark.parametrize("values", [[0.1, 0.12, 0.09, 0.11, 0.1, 0.13, 0.1], [0, 0, 0, 0], [0.0005, 0.0004, 0.0007],
                                    [180, 185, 181, 183]])
def test_noise_is_flat(values: list[float]) -> None:
    shape = describe(at(values))
    assert shape.trend == "flat" and shape.onset_at is None and "onset_at" not in figures(shape)


def test_all_nan_and_nothing_are_no_data() -> None:
    for series in (at([math.nan] * 4), []):
        shape = describe(series)
        assert shape.trend == "no data" and shape.current is None
        assert figures(shape)["note"] == "no data in this window"
    assert describe(at([math.nan] * 4)).gaps == 4


def test_a_single_point_claims_no_trend() -> None:
    shape = describe(at([3]))
    assert shape.trend == "single point" and shape.current == 3 and "trend" not in gist("m", shape).split("(")[0]


def test_gaps_are_counted_never_filled() -> None:
    series = at([0, 0, 0, .1, .1, .1, .1, .1])
    del series[4:6]  # two missing minutes
    series.insert(2, (T0 + 2 * MIN, math.nan))
    del series[3]
    shape = describe(series)
    assert shape.gaps == 3 and shape.trend == "steady high" and shape.points == 5
    assert gist("m", shape).endswith("3 missing points")


def test_coming_down_but_not_back_is_falling() -> None:
    shape = describe(at([0, 0, 5, 5, 5, 4, 3, 2]))
    assert shape.trend == "falling" and shape.recovered_at is None
    assert "not back yet" in gist("m", shape)


def test_a_dip_is_described_as_a_dip() -> None:
    shape = describe(at([100, 100, 100, 20, 20, 100, 100]))
    assert shape.trend == "dipped and recovered" and shape.direction == "down"
    assert figures(shape)["low"] == 20 and "peak" not in figures(shape)


def test_a_counter_reset_is_a_step_not_known() -> None:
    shape = describe(at([10, 20, 30, 5, 15, 25]), counter=True)
    assert shape.resets == 1 and shape.minimum == 10 and shape.maximum == 10  # neither negative nor 5
    assert figures(shape)["counter_resets"] == 1 and shape.gaps == 1


def test_the_demo_incident_is_described_truthfully() -> None:
    payments = [0.002] * 42 + [0.011, 0.024, 0.031, 0.038, 0.042, 0.041, 0.044, 0.043, 0.042, 0.044, 0.043]
    shape = describe([(T0 + (i + 1) * MIN, v) for i, v in enumerate(payments)])
    assert shape.trend == "steady high" and iso(shape.onset_at) == "2026-12-02T09:43:00Z"
    assert figures(shape)["baseline"] == 0.002
    # What "was it the deploy?" needs besides the onset: from when the series is known, and to within what step.
    assert (figures(shape)["first_point_at"], figures(shape)["step_s"]) == (iso(T0 + MIN), MIN)


# Onsets mark the first departure from the baseline's own noise, whatever the size of what follows (issue 35).

def test_a_large_excursion_does_not_hide_its_own_beginning() -> None:
    """payments prod p95: 179–190 ms for 40 minutes, 240 at 09:43, 610 at 09:44, 2395 from 09:45 (was: 09:45)."""
    base = [179, 185, 190, 182, 188, 181, 186, 184, 189, 183] * 4 + [187, 180, 185]
    shape = describe(at([*base, 240, 610, *[2395] * 10]))
    assert shape.direction == "up" and shape.onset_at == T0 + 43 * MIN  # 09:43
    assert 179 <= (shape.baseline or 0) <= 190 and shape.extreme == 2395


def test_a_slow_ramp_starts_where_it_leaves_the_band() -> None:
    ramp = [100.0] * 20 + [100.0 + 3 * i for i in range(1, 21)]
    shape = describe(at(ramp))
    assert shape.onset_at == T0 + 20 * MIN and shape.trend == "rising"


def test_a_noisy_baseline_is_not_an_onset() -> None:
    noisy = [100, 112, 91, 105, 96, 109, 94, 103, 98, 110, 92, 104, 97, 108, 95, 101]
    shape = describe(at([*noisy, *[200] * 8]))
    assert shape.onset_at == T0 + 16 * MIN  # the jitter before it did not count as leaving


def test_a_one_point_blip_before_the_change_is_not_its_onset() -> None:
    values = [50.0, 51, 49, 50, 52, 50, 49, 51, 90, 50, 51, 49, 50, 50, 51, *[300.0] * 8]
    shape = describe(at(values))
    assert shape.onset_at == T0 + 15 * MIN and shape.extreme == 300  # not the blip at 09:08


@pytest.mark.parametrize(("values", "trend", "onset"), [
    ([0.001] * 5 + [0.04] * 55, "steady high", 5),  # was "dipped and recovered": the baseline was the new level
    ([0.001, 0.002, 0.001, 0.002, 0.001, 0.001] + [0.04, 0.041, 0.039, 0.042] * 13 + [0.04, 0.041], "steady high", 6),
    ([0.05] * 5 + [0.001] * 55, "steady low", 5),  # was "spiked and recovered"
])
def test_a_change_early_in_the_window_keeps_the_level_before_it_as_baseline(values: list[float], trend: str,
                                                                            onset: int) -> None:
    shape = describe(at(values))
    assert (shape.trend, shape.onset_at, shape.recovered_at) == (trend, T0 + onset * MIN, None)
    assert shape.baseline == values[0]


def test_near_the_peak_but_sliding_back_is_falling_not_steady() -> None:
    """10% for four minutes, then down to 7.1%: still over 70% of the way up, but not holding there."""
    shape = describe(at([0.0] * 20 + [0.10] * 4 + [0.095, 0.09, 0.085, 0.08, 0.075, 0.071]))
    assert shape.trend == "falling" and shape.recovered_at is None
    assert "falling, not back yet: began 09:20" in gist("error_rate", shape)


@pytest.mark.parametrize("before, after, trend", [(0.0, 0.2, "steady high"), (0.1, 0.001, "steady low")])
def test_a_two_level_step_inside_the_first_third_is_not_a_recovery(before: float, after: float, trend: str) -> None:
    """Only two values in the window, the step a quarter of the way in: the quiet third's resolution was the step
    itself, so no point ever left the baseline's band and a step that stayed was "spiked (dipped) and
    recovered"."""
    shape = describe(at([before] * 15 + [after] * 45))
    assert (shape.trend, shape.baseline, shape.recovered_at) == (trend, before, None)
    assert shape.onset_at == T0 + 15 * MIN


def test_noise_after_a_spike_keeps_its_band() -> None:
    """The half-way cap on the band is for a two-level series' resolution only: on a noisy 1% error rate a spike
    that ended read "rising since 08:30" once every point of noise past half the spike counted as away."""
    values = [0.0106, 0.0123, 0.0079, 0.008, 0.011, 0.012, 0.0112, 0.0081, 0.0091, 0.0117, 0.0124, 0.0092, 0.0125,
              0.0091, 0.0099, 0.009, 0.0067, 0.0066, 0.0101, 0.009, 0.0092, 0.0097, 0.0117, 0.0127, 0.0082, 0.0088,
              0.0108, 0.0064, 0.0095, 0.0133, 0.0189, 0.0189, 0.0161, 0.0113, 0.0122, 0.0078, 0.0111, 0.0083, 0.007,
              0.0132, 0.0112, 0.0081, 0.0067, 0.0087, 0.0068, 0.009, 0.0096, 0.0083, 0.0138, 0.0088, 0.0112, 0.0127,
              0.0109, 0.0085, 0.0112, 0.009, 0.0078, 0.0114, 0.0112, 0.0152]
    assert describe(at(values)).trend == "spiked and recovered"


def test_a_value_holding_at_its_peak_is_not_back() -> None:
    """A ramp caught in the first third sized the baseline's band: p95 200 → 2000 ms and holding read "spiked and
    recovered … back by", the value at its peak."""
    shape = describe(at([200, 500, 800, 1100, 1400, 1700, 2000, 2000, 2000, 2000, 2000]))
    assert shape.trend == "steady high" and shape.recovered_at is None, gist("p95", shape)


def test_points_missing_at_the_window_s_edges_are_said() -> None:
    """A target down for the last ten minutes: Prometheus returns no points there, nothing counted them, and the
    value ten minutes old read as now's ("0.001 (flat)")."""
    values = at([0.001] * 50)
    start, step = values[0][0], 60.0
    shape = describe(values, window=(start, start + 59 * step, step))  # 60 minutes, the last 10 missing
    fig = figures(shape)
    assert fig["last_point_at"] == iso(values[-1][0]) and fig["gaps"] == 10, fig
    assert "none since" in gist("error_rate", shape) and "10 missing points" in gist("error_rate", shape)
    from bot.agent.models.demo_answers import metric_part
    from bot.slack.outbound.outputs import output

    told = output("ok", None, {"ok": True, "data": {"metrics": {"error_rate": fig}}}, "en")
    assert "last point at" in str(told) and "10 missing points" in str(told), told
    assert "last point at" in metric_part(fig, "error rate", "%", False)
    late = describe(values, window=(start - 10 * step, start + 49 * step, step))  # the first ten minutes missing
    assert figures(late)["gaps"] == 10 and "last_point_at" not in figures(late)


def test_a_capped_log_read_is_not_the_window_s_count() -> None:
    """5,000 matching lines, the newest 1,000 read: Slack's line said "1000 error lines in 60 min"."""
    from bot.slack.outbound.outputs import output

    data = {"error_lines": 1000, "limit_reached": True, "window_minutes": 60,
            "patterns": [{"pattern": "timeout acquiring connection", "count": 1000}]}
    told = output("ok", None, {"ok": True, "data": data}, "en")
    assert told.startswith("the newest 1000 error lines only (more in 60 min)"), told


async def test_an_error_rate_of_no_traffic_is_not_nan_percent() -> None:
    """0/0 after a restart (no requests in the rate's window): "the error rate rose from 4.00% to nan%"."""
    from tools.ops.catalog import Service
    from tools.ops.changing import error_rate

    class Quiet:  # a metrics backend whose error rate is NaN now, as Prometheus answers 0/0
        names = ("error_rate",)

        async def current(self, service: Service, environment: str, metric: str) -> float | None:
            return math.nan

    said = await error_rate(Quiet(), Service(id="payments", name="Payments", environments=["prod"]), "prod")  # type: ignore[arg-type]
    assert said == "unavailable: no requests to compute it from"


def test_an_onset_right_after_a_gap_is_said_to_be_after_one() -> None:
    """0.1%, fifteen minutes with no points, then 5%: the onset was the first point after the gap, taken as exact —
    and "Yes: the errors began 5 min after the deploy" for a deploy inside the gap."""
    quiet, loud = at([0.001] * 20), [(T0 + (35 + i) * MIN, 0.05) for i in range(10)]
    fig = figures(describe(quiet + loud))
    assert fig["onset_at"] == iso(T0 + 35 * MIN) and fig["onset_after_gap"] is True, fig
    from tools.ops.verdict import judge

    deploy = {"kind": "deploy", "version": "1.4.3", "at": iso(T0 + 30 * MIN)}
    verdict = judge({"changes": [deploy]}, fig, None)
    assert (verdict.kind, verdict.hidden) == ("incomplete", "gap")
    assert "onset_after_gap" not in figures(describe(at([0.001] * 20 + [0.05] * 10)))  # no gap: as before


def test_points_returned_as_nan_at_the_edges_are_counted_once() -> None:
    """No traffic for the last ten minutes: Prometheus answers 0/0, NaN, at each step — counted as missing twice
    ("20 missing points"), once as NaN and once past the last finite point."""
    values = at([0.001] * 50 + [math.nan] * 10)
    start, step = values[0][0], 60.0
    fig = figures(describe(values, window=(start, start + 59 * step, step)))
    assert fig["gaps"] == 10 and fig["last_point_at"] == iso(values[49][0]), fig


def test_a_clean_step_of_two_fifths_is_not_flat() -> None:
    """p95 100 → 140 ms read "flat": a move within half the baseline was taken for noise, whatever its shape."""
    assert describe(at([100.0] * 10 + [140.0] * 10)).trend == "steady high"
    assert describe(at([100 + 40 * i / 29 for i in range(30)])).trend == "rising"
    assert describe(at([100.0, 103, 101, 104, 102, 100, 103, 101])).trend == "flat"  # within a tenth: flat


def test_a_jump_at_the_end_of_a_short_series_is_not_flat() -> None:
    assert describe(at([1, 1, 5])).trend == "rising"


def test_a_scrape_gap_in_a_steady_counter_is_no_spike() -> None:
    """The increase across ten missing minutes read as one minute's: "spiked and recovered, peak 110"."""
    steady = [(T0 + i * MIN, 10.0 * i) for i in range(40) if not 15 <= i < 25]
    shape = describe(steady, counter=True)
    assert shape.trend == "flat" and shape.maximum == 10 and shape.gaps == 10, gist("requests_total", shape)


@pytest.mark.parametrize("tail", [[], [0, 0], [0, 0, 0]])
def test_sparse_low_counts_are_elevated_not_steady_high_nor_back(tail: list[float]) -> None:
    """Errors 0, 0, … then 1, 0, 0, 1, 0, 0, 0, 1…: "steady high since 09:20" because the last point was 1, or
    "spiked and recovered" because the last two were 0."""
    values = [0.0] * 20 + [1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1] + tail
    shape = describe(at(values))
    assert shape.trend == "elevated" and shape.recovered_at is None and shape.onset_at == T0 + 20 * MIN
    assert "not back yet" in gist("errors", shape)


def test_sparse_counts_that_stopped_for_longer_than_they_paused_are_back() -> None:
    values = [0.0] * 20 + [1, 0, 0, 1, 0, 0, 0, 1] + [0.0] * 12
    shape = describe(at(values))
    assert shape.trend == "spiked and recovered" and shape.recovered_at == T0 + 28 * MIN
