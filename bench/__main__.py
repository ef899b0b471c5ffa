"""``python -m bench`` runs every benchmark, prints its tables (markdown) and writes every figure as JSON
under ``bench/results/`` (machine, versions, date), from which ``python -m bench.readme`` regenerates the
tables in docs/benchmarks.md. ``--small`` runs tiny sizes (what CI does to check that they still run; no file unless
``--json``; fresh_install, a whole install, is not in it). ``--only storage,overhead`` picks some."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import (
    ack_latency,
    burst,
    concurrency,
    fresh_install,
    overhead,
    scaleout,
    slack_economy,
    soak,
    startup,
    storage,
)
from bench.common import Table

FULL = {
    "storage": lambda: storage.run((10, 20, 40)),
    "overhead": lambda: overhead.run(50, 5),
    "concurrency": lambda: concurrency.run(500),
    "scaleout": lambda: scaleout.run(500),
    "slack_economy": lambda: slack_economy.run(50),
    "ack_latency": lambda: ack_latency.run(200, 200),
    "burst": lambda: burst.run(200, 10.0, 20),
    "startup": lambda: startup.run(5),
    "soak": lambda: soak.run(),
    "fresh_install": lambda: fresh_install.run(1),
}
SMALL = {
    "storage": lambda: storage.run((3, 5)),
    "overhead": lambda: overhead.run(6, 2, 1),
    "concurrency": lambda: concurrency.run(20),
    "scaleout": lambda: scaleout.run(10),
    "slack_economy": lambda: slack_economy.run(3),
    "ack_latency": lambda: ack_latency.run(10, 20, 1),
    "burst": lambda: burst.run(6, 1.0, 2),
    "startup": lambda: startup.run(1),
    "soak": lambda: soak.run(soak.SMALL),
}


async def main(small: bool, only: list[str]) -> list[Table]:
    chosen = SMALL if small else FULL
    tables: list[Table] = []
    for name, bench in chosen.items():
        if only and name not in only:
            continue
        tables.extend(await bench())
    return tables


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
    args = parser.parse_args()
    started = time.time()
    results = asyncio.run(main(args.small, [s for s in args.only.split(",") if s]))
    stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(started))
    print(f"<!-- {stamp} UTC, {platform.python_version()}, {platform.machine()}, one run, all figures from "
          "this run -->\n")
    for table in results:
        print(table.render())
    target = Path(args.json) if args.json else None if args.small else \
        RESULTS / f"{time.strftime('%Y-%m-%dT%H%MZ', time.gmtime(started))}.json"
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        body = {"date": f"{stamp} UTC", "small": args.small, "only": args.only, "machine": machine(),
                "seconds": round(time.time() - started, 1), "tables": [t.to_json() for t in results]}
        target.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")
        print(f"<!-- results written to {target} -->")
