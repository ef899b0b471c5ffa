"""``python -m bench`` runs every benchmark, prints its tables (markdown) and writes every figure as JSON
under ``bench/results/`` (machine, versions, date), from which ``python -m bench.readme`` regenerates the
tables in docs/benchmarks.md; each goal also as figures (a table's ``goals``: name, target, measured, met).
``--small`` runs tiny sizes (what CI does to check that they still run; no file unless
``--json``; fresh_install, a whole install, is not in it). ``--only storage,overhead`` picks some.
``--workers 1,2,4,8``, ``--seconds``, ``--runs`` and ``--cluster``/``--no-cluster`` shape the scale-out series."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import time
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import (
    ack_latency,
    burst,
    concurrency,
    fresh_install,
    overhead,
    redaction,
    scaleout,
    served,
    slack_economy,
    soak,
    speed,
    startup,
    storage,
)
from bench.common import Table

FULL: dict[str, Callable[[], Awaitable[list[Table]]]] = {
    "storage": lambda: storage.run((10, 20, 40)),
    "overhead": lambda: overhead.run(50, 5),
    "redaction": lambda: redaction.run(),
    "concurrency": lambda: concurrency.run(500),
    "scaleout": lambda: scaleout.run(scaleout.Options()),
    "slack_economy": lambda: slack_economy.run(50),
    "ack_latency": lambda: ack_latency.run(200, 200),
    "burst": lambda: burst.run(200, 10.0, 20),
    "startup": lambda: startup.run(5),
    "served": lambda: served.run(40),
    "soak": lambda: soak.run(),
    "fresh_install": lambda: fresh_install.run(1),
}
SMALL: dict[str, Callable[[], Awaitable[list[Table]]]] = {
    "storage": lambda: storage.run((3, 5)),
    "overhead": lambda: overhead.run(6, 2, 1),
    "redaction": lambda: redaction.run(2_000, 2),
    "concurrency": lambda: concurrency.run(20),
    "scaleout": lambda: scaleout.run(scaleout.SMALL),
    "slack_economy": lambda: slack_economy.run(3),
    "ack_latency": lambda: ack_latency.run(10, 20, 1),
    "burst": lambda: burst.run(6, 1.0, 2),
    "startup": lambda: startup.run(1),
    "served": lambda: served.run(3),
    "soak": lambda: soak.run(soak.SMALL),
}


async def main(small: bool, only: list[str], scale: scaleout.Options | None = None) -> list[Table]:
    """``scale``: the scale-out series as the command line shaped it (else the size's own)."""
    chosen = SMALL if small else FULL
    tables: list[Table] = []
    for name, bench in chosen.items():
        if only and name not in only:
            continue
        tables.extend(await (scaleout.run(scale) if name == "scaleout" and scale else bench()))
    return tables


def scale_options(args: argparse.Namespace) -> scaleout.Options | None:
    """The scale-out options the flags ask for, on top of the size's defaults; None when no flag is given."""
    if args.workers is None and args.seconds is None and args.runs is None and args.cluster is None:
        return None
    base = scaleout.SMALL if args.small else scaleout.Options()
    workers = tuple(int(w) for w in args.workers.split(",") if w) if args.workers else base.workers
    if not workers or min(workers) < 1:
        raise SystemExit("--workers: a comma-separated list of worker counts, each 1 or more (e.g. 1,2,4,8)")
    return dataclasses.replace(
        base, workers=workers, seconds=base.seconds if args.seconds is None else args.seconds,
        runs=base.runs if args.runs is None else args.runs,
        cluster=base.cluster if args.cluster is None else args.cluster)


RESULTS = Path(__file__).parent / "results"
_PACKAGES = ("redis", "pydantic", "slack-bolt", "slack-sdk", "aiohttp", "anthropic", "langgraph", "langchain",
             "langchain-core", "langgraph-checkpoint", "uvloop")


def machine() -> dict[str, Any]:
    versions: dict[str, str] = {}
    for package in _PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "machine": platform.machine(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "versions": versions}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--small", action="store_true", help="tiny sizes (CI)")
    parser.add_argument("--only", default="", help="comma-separated: " + ",".join(FULL))
    parser.add_argument("--json", default=None, help="where to write the results (default for full runs: "
                                                     "bench/results/<UTC date-time>.json)")
    parser.add_argument("--workers", default=None, help="scale-out: worker counts, comma-separated (default 1,2)")
    parser.add_argument("--seconds", type=float, default=None, help="scale-out: each point's window at most "
                                                                     "(default 20; 1 with --small)")
    parser.add_argument("--runs", type=int, default=None, help="scale-out: each point stops after this many runs "
                                                               "too (default: by time only; 40 with --small)")
    parser.add_argument("--cluster", action=argparse.BooleanOptionalAction, default=None,
                        help="scale-out: also the series on a 3-master Redis Cluster (default: on; off with --small)")
    args = parser.parse_args()
    started = time.time()
    pace = asyncio.run(speed.measure(1 if args.small else speed.ROUNDS))  # before the benchmarks warm anything
    results = asyncio.run(main(args.small, [s for s in args.only.split(",") if s], scale_options(args)))
    stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(started))
    print(f"<!-- {stamp} UTC, {platform.python_version()}, {platform.machine()}, one run, all figures from "
          "this run;\n     " + speed.describe(pace) + " -->\n")
    for table in results:
        print(table.render())
    target = Path(args.json) if args.json else None if args.small else \
        RESULTS / f"{time.strftime('%Y-%m-%dT%H%MZ', time.gmtime(started))}.json"
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        body = {"date": f"{stamp} UTC", "small": args.small, "only": args.only,
                "machine": machine() | {"speed": pace},
                "seconds": round(time.time() - started, 1), "tables": [t.to_json() for t in results]}
        target.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")
        print(f"<!-- results written to {target} -->")
