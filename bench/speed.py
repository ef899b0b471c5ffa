"""How fast the machine is, measured at the start of every run of ``python -m bench`` and kept with its results.

The absolute figures (a worker's spawn, a serve's first answer) move with the machine as much as with the code:
the same code gave a worker's spawn 0.41 s and 0.55 s on two machines of the same kind. Three fixed workloads,
the same on every machine and independent of OpsPilot's code, say how fast this one is, so that two runs can be
compared: a figure that grew by as much as these did is the machine, not the code.

* ``interpreter_ms``  a Python process that does nothing (``python -c pass``): what every spawn starts with;
* ``imports_ms``      one that imports the libraries every worker needs (aiohttp, pydantic, redis-py, slack-sdk);
* ``python_ms``       a fixed pure-Python workload in this process (JSON both ways, a loop): CPU per step's kind.

Each is the median of five. ``python -m bench.speed`` prints them."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time

LIBRARIES = "import aiohttp, pydantic, redis.asyncio, slack_sdk.web.async_client"
ROUNDS = 5
_DOCUMENT = {"run_id": "s3.0123456789abcdef", "rows": [[i, "lookup", "ok", 1.5 * i, "x" * 40] for i in range(40)]}


async def _process_ms(*argv: str) -> float:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(sys.executable, *argv, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {err.decode()[-500:]}")
    return (time.perf_counter() - start) * 1000


def _workload_ms() -> float:
    start = time.process_time()
    for _ in range(2_000):
        json.loads(json.dumps(_DOCUMENT))
    total = 0
    for i in range(300_000):
        total += i % 7
    return (time.process_time() - start) * 1000


async def measure(rounds: int = ROUNDS) -> dict[str, float]:
    interpreter = [await _process_ms("-c", "pass") for _ in range(rounds)]
    imports = [await _process_ms("-c", LIBRARIES) for _ in range(rounds)]
    python = [_workload_ms() for _ in range(rounds)]
    return {"interpreter_ms": round(statistics.median(interpreter), 1),
            "imports_ms": round(statistics.median(imports), 1), "python_ms": round(statistics.median(python), 1)}


def describe(speed: dict[str, float]) -> str:
    """One line, for a results file's heading."""
    return (f"this machine: an empty Python process {speed['interpreter_ms']:.0f} ms, one importing a worker's "
            f"libraries {speed['imports_ms']:.0f} ms, the fixed Python workload {speed['python_ms']:.0f} ms "
            "(`bench/speed.py`)")


if __name__ == "__main__":
    print(describe(asyncio.run(measure())))
