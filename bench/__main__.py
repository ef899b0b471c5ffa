"""``python -m bench`` runs every benchmark and prints its tables (markdown); ``--small`` runs tiny sizes,
which is what CI does to check that they still run. ``--only storage,overhead`` picks some."""

from __future__ import annotations

import argparse
import asyncio
import platform
import time

from bench import ack_latency, burst, concurrency, overhead, scaleout, slack_economy, storage
from bench.common import Table

FULL = {
    "storage": lambda: storage.run((10, 20, 40)),
    "overhead": lambda: overhead.run(50, 5),
    "concurrency": lambda: concurrency.run(500),
    "scaleout": lambda: scaleout.run(500),
    "slack_economy": lambda: slack_economy.run(50),
    "ack_latency": lambda: ack_latency.run(200, 200),
    "burst": lambda: burst.run(200, 10.0, 20),
}
SMALL = {
    "storage": lambda: storage.run((3, 5)),
    "overhead": lambda: overhead.run(6, 2),
    "concurrency": lambda: concurrency.run(20),
    "scaleout": lambda: scaleout.run(10),
    "slack_economy": lambda: slack_economy.run(3),
    "ack_latency": lambda: ack_latency.run(10, 20, 1),
    "burst": lambda: burst.run(6, 1.0, 2),
}


async def main(small: bool, only: list[str]) -> list[Table]:
    chosen = SMALL if small else FULL
    tables: list[Table] = []
    for name, bench in chosen.items():
        if only and name not in only:
            continue
        tables.extend(await bench())
    return tables


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--small", action="store_true", help="tiny sizes (CI)")
    parser.add_argument("--only", default="", help="comma-separated: " + ",".join(FULL))
    args = parser.parse_args()
    started = time.time()
    results = asyncio.run(main(args.small, [s for s in args.only.split(",") if s]))
    print(f"<!-- {time.strftime('%Y-%m-%d %H:%M', time.gmtime(started))} UTC, {platform.python_version()}, "
          f"{platform.machine()}, one run, all figures from this run -->\n")
    for table in results:
        print(table.render())
