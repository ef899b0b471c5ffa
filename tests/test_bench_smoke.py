"""The benchmarks still run (tiny sizes). Figures are not asserted here: they are measured by `python -m bench`."""

from __future__ import annotations

from bench.__main__ import SMALL, main


async def test_every_benchmark_runs_at_a_small_size() -> None:
    tables = await main(small=True, only=[name for name in SMALL if name != "soak"])  # tests/test_soak.py runs it
    titles = " ".join(t.title for t in tables)
    for part in ("Storage", "CPU per model step", "concurrent runs in one process", "one channel", "Ack latency",
                 "worker processes", "1 vs 2 worker processes", "A burst", "Start-up", "Import cost"):
        assert part in titles
    assert all(t.rows for t in tables)
    economy = next(t for t in tables if "one channel" in t.title)
    header = economy.header
    row = economy.rows[0]
    assert row[header.index("final answers")] == "3/3"  # nothing lost under Slack's limits
    assert row[header.index("progress messages final")] == "3/3"
