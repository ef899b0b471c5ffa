"""How many CPUs this process may really use: a container's CPU limit (its cgroup's CPU quota), not the
host's core count that ``os.cpu_count()`` reports — a pod limited to 2 CPUs on a 64-core node gets 2.

cgroup v2: ``cpu.max`` ("QUOTA PERIOD", or "max PERIOD" without a limit); cgroup v1: ``cpu.cfs_quota_us``
(-1 without a limit) over ``cpu.cfs_period_us``. The quota is rounded down (at least 1) and never above the
CPUs the process may be scheduled on (``os.sched_getaffinity``: cpusets, ``taskset``), then ``os.cpu_count()``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
# cgroup v1 mounts the cpu controller under one of these names.
V1_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def cgroup_quota(root: Path = CGROUP) -> float | None:
    """The CPU quota in CPUs (1.5 = one and a half), or None when there is none (or no cgroup to read)."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return None if quota == "max" else _ratio(quota, period or "100000")
    for name in V1_DIRS:
        quota_us = _read(root / name / "cpu.cfs_quota_us")
        period_us = _read(root / name / "cpu.cfs_period_us")
        if quota_us is not None and period_us is not None:
            return _ratio(quota_us, period_us)
    return None


def available_cpus() -> int:
    """The CPUs this process may be scheduled on (its affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def effective_cpus(root: Path = CGROUP) -> int:
    """Whole CPUs this process can use: the cgroup quota rounded down (at least 1), at most its affinity."""
    cpus = available_cpus()
    quota = cgroup_quota(root)
    if quota is None:
        return cpus
    return max(1, min(cpus, math.floor(quota)))


def default_workers() -> int:
    """``serve``'s worker processes by default: one per CPU the container may use (its cgroup quota, not the
    node's cores), up to four (each runs hundreds of runs concurrently)."""
    return max(1, min(4, effective_cpus()))


def last_port(port: int, workers: int | None = None) -> int:
    """The highest port ``serve`` binds: the front's and one after it per worker."""
    return port + (default_workers() if workers is None else workers)

