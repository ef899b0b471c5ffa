"""The soak's small version (issue 33): ``opspilot serve`` with two workers through a short incident — Slack failing
a quarter of its calls, a worker killed every few seconds, Redis stopped and started — then the faults stop. Every
question is answered exactly once, every card shown and closed, no restart runs twice, no stream is left open, no key
lacks a TTL. (Latency figures are the benchmark's: ``python -m bench --only soak``.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.soak import SMALL, run_soak
from bench.storm import ALERT_RUNS


async def test_nothing_is_lost_or_done_twice_through_a_small_incident(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "serve.log"
    monkeypatch.setenv("SOAK_LOG", str(log))  # serve's log: what the operator saw, shown when a figure is off
    f = await run_soak(SMALL)

    def why() -> str:
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        told = [line for line in lines if "alert" in line.lower() or "ERROR" in line or "failed" in line][-60:]
        return json.dumps({k: v for k, v in f.items() if k != "alert_threads"}, sort_keys=True) + "\n" + \
            str(f["alert_threads"]) + "\n" + "\n".join(told)

    assert f["worker_kills"] >= 1 and f["front_kills"] == 1, why()  # the incident did happen
    assert f["undelivered"] == 0, why()  # every request reached the front in the end
    assert (f["answered"], f["answered_twice"], f["duplicates"]) == (f["questions"], 0, 0), why()
    assert f["cards"] == f["confirms"] and f["cards_closed"] == f["cards"] == f["cards_ended"], why()
    assert f["restarts_twice"] == 0 and f["restarts"] == f["cards"], why()
    assert (f["streams_open"], f["keys_without_ttl"], f["dead_letters"]) == (0, 0, 0), why()
    # The alert storm: at most the channel's automatic runs, each answered once; the rest offered; said once.
    assert f["alerts_unhandled"] == 0, why()  # each alert: investigated, offered, or noted where it first fired
    assert 0 < f["alerts_investigated"] <= ALERT_RUNS and f["alerts_answered"] == f["alerts_investigated"], why()
    assert f["alerts_answered_twice"] == 0 and f["storm_notices"] == 1 and f["alerts_offered"] >= 1, why()
