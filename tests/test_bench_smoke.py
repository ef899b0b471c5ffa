"""The benchmarks still run (tiny sizes). Figures are not asserted here: they are measured by `python -m bench`."""

from __future__ import annotations

import dataclasses
import json
import os

from bench import scaleout, speed
from bench.__main__ import SMALL, machine, main
from bench.common import Table, verdict
from bench.readme import render


async def test_every_benchmark_runs_at_a_small_size() -> None:
    cores = os.sched_getaffinity(0)
    tables = await main(small=True, only=[name for name in SMALL if name != "soak"])  # tests/test_soak.py runs it
    assert os.sched_getaffinity(0) == cores  # the ack-latency split gave this process its cores back
    split = next(t for t in tables if "Ack latency" in t.title and "worker processes" in t.title)
    assert ("the front and the bare Bolt app on core" if len(cores) > 1 else "one core") in split.title
    titles = " ".join(t.title for t in tables)
    for part in ("Storage", "CPU per model step", "concurrent runs in one process", "one channel", "Ack latency",
                 "Scale-out: runs/s by worker processes, one Redis", "by command", "A burst", "Start-up",
                 "Import cost", "as deployed", "Redaction of one tool result"):
        assert part in titles
    assert all(t.rows for t in tables)
    economy = next(t for t in tables if "one channel" in t.title)
    header = economy.header
    row = economy.rows[0]
    assert row[header.index("final answers")] == "3/3"  # nothing lost under Slack's limits
    assert row[header.index("progress messages final")] == "3/3"
    curve = next(t for t in tables if t.title.startswith("Scale-out"))
    assert [r[0] for r in curve.rows] == [1, 2]
    for figure in ("runs/s", "efficiency", "Redis main thread (cores, busiest)", "commands per run"):
        assert all(r[curve.header.index(figure)] > 0 for r in curve.rows), figure
    # The results file carries each goal as figures too, not only as a sentence under its table.
    goals = {g["name"]: g for t in tables for g in t.to_json().get("goals", [])}
    step = goals["Redis commands per model step (INFO commandstats, inside scripts included)"]
    assert step["target"] == 8 and step["measured"] > 0 and step["met"] == (step["measured"] <= 8)
    assert goals["efficiency at 2 workers"]["lower_is_better"] is False


def test_a_verdict_is_a_sentence_and_figures() -> None:
    table = Table("t", ["a"], [[1]], [verdict("commands per step", 8.5, 8, ""), "a plain note",
                                      verdict("efficiency", 0.9, 0.8, "", lower_is_better=False)])
    body = json.loads(json.dumps(table.to_json()))
    assert body["notes"][0] == "commands per step: target 8, measured 8.5 — MISSED by 1.06×"
    assert body["goals"] == [
        {"name": "commands per step", "target": 8, "measured": 8.5, "unit": "", "lower_is_better": True,
         "met": False},
        {"name": "efficiency", "target": 0.8, "measured": 0.9, "unit": "", "lower_is_better": False, "met": True}]
    assert "goals" not in Table("t", ["a"], [[1]], ["a plain note"]).to_json()


async def test_the_scale_out_series_runs_on_a_redis_cluster() -> None:
    tables = await scaleout.run(dataclasses.replace(scaleout.SMALL, workers=(1,), runs=10, cluster=True))
    cluster = next(t for t in tables if "Redis Cluster" in t.title)
    row = cluster.rows[0]
    assert row[cluster.header.index("runs")] >= 1
    assert row[cluster.header.index("commands per run")] > 0
    assert row[cluster.header.index("Redis main threads (cores, all)")] > 0


async def test_a_run_says_how_fast_its_machine_is() -> None:
    """Every results file carries the machine's speed on fixed workloads, and its heading says it."""
    pace = await speed.measure(1)
    assert set(pace) == {"interpreter_ms", "imports_ms", "python_ms"}
    assert 0 < pace["interpreter_ms"] < pace["imports_ms"]  # importing the libraries is more than starting
    assert pace["python_ms"] > 0
    results = {"date": "2026-12-06 23:00 UTC", "machine": machine() | {"speed": pace}, "tables": []}
    assert f"{pace['imports_ms']:.0f} ms" in render(results)
    older = {"date": "2026-12-06 20:32 UTC", "machine": machine(), "tables": []}  # files from before: no speed
    assert "this machine" not in render(older)
