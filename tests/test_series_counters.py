"""A raw counter (``*_total``) as query_metrics reads it: its increases per step, a reset's step unknown (the count
before the restart is lost with it), and a first sample that is no increase yet — through the metric tool over
fixtures, and where its figures are said (the tool's summary, the task card's line)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.slack.outbound.outputs import output
from tests.test_ops import data, run
from tools import ops
from tools.ops import toolbox_config as cfg

# +10 a minute throughout; the process restarted once, between 09:29 and 09:30 (…280, 290, then 3, 13, 23…)
STEADY = [i * 10 for i in range(30)] + [3 + i * 10 for i in range(30)]


async def read(tmp_path: Path, values: list[float]) -> dict[str, Any]:
    metrics = tmp_path / "metrics.yml"
    metrics.write_text(json.dumps({"payments": {"prod": {"errors_total": values}}}))  # JSON is YAML
    toolbox = ops.build(cfg.OpsConfig(metrics=cfg.FixtureMetrics(file=metrics), now="2026-12-02T10:00:00Z"))
    found = data(await run(toolbox, "query_metrics", service_id="payments", environment="prod",
                           metrics=["errors_total"], minutes=60))
    return found


async def test_a_counter_reset_is_a_step_not_known_not_a_dip(tmp_path: Path) -> None:
    """It read "errors_total 10, dipped and recovered: began 09:30, back by 09:31 (baseline 10, low 3 at 09:30)":
    the increase across the reset is not 3, it is not known."""
    found = await read(tmp_path, STEADY)
    fig = found["metrics"]["errors_total"]
    said = (fig["trend"], fig["min"], fig["max"], fig.get("counter_resets"), fig.get("gaps"))
    assert said == ("flat", 10, 10, 1, 1), fig
    assert "low" not in fig and "onset_at" not in fig, fig
    assert found["summary"].startswith("errors_total 10 (flat)"), found["summary"]
    line = output("ok", None, {"ok": True, "data": found}, "en")
    assert "dipped" not in line and "(flat)" in line, line


@pytest.mark.parametrize(("lang", "said"), [("en", "`errors_total`: a single point, no increase yet"),
                                            ("zh", "`errors_total`：只有一个数据点，还没有增量")])
async def test_a_counter_s_first_sample_is_a_single_point_not_no_data(tmp_path: Path, lang: str, said: str) -> None:
    """One sample of a counter has no increase yet: it read "no data"."""
    found = await read(tmp_path, [7])
    fig = found["metrics"]["errors_total"]
    assert (fig["trend"], fig["points"]) == ("single point", 1) and "no data" not in json.dumps(fig), fig
    assert found["summary"] == "errors_total: a single point (a counter's first sample: no increase yet)", found
    assert output("ok", None, {"ok": True, "data": found}, lang) == said
