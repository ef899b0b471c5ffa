"""bot/cpus.py: the CPUs a container may use, from its cgroup's quota (v2 and v1), not the host's cores."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot import cpus
from bot.cpus import cgroup_quota, effective_cpus


@pytest.fixture(autouse=True)
def _eight_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpus, "available_cpus", lambda: 8)


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="ascii")


@pytest.mark.parametrize(("cpu_max", "quota", "effective"), [
    ("200000 100000", 2.0, 2),
    ("150000 100000", 1.5, 1),  # rounded down: a second process would be throttled
    ("50000 100000", 0.5, 1),  # at least one
    ("max 100000", None, 8),  # no limit: the CPUs the process may run on
    ("1600000 100000", 16.0, 8),  # a quota above the cpuset: the cpuset
])
def test_cgroup_v2_cpu_max(tmp_path: Path, cpu_max: str, quota: float | None, effective: int) -> None:
    _write(tmp_path, "cpu.max", cpu_max)
    assert cgroup_quota(tmp_path) == quota
    assert effective_cpus(tmp_path) == effective


@pytest.mark.parametrize("directory", ["cpu", "cpu,cpuacct"])
def test_cgroup_v1_cfs_quota(tmp_path: Path, directory: str) -> None:
    _write(tmp_path, f"{directory}/cpu.cfs_quota_us", "300000")
    _write(tmp_path, f"{directory}/cpu.cfs_period_us", "100000")
    assert cgroup_quota(tmp_path) == 3.0
    assert effective_cpus(tmp_path) == 3


def test_cgroup_v1_without_a_quota(tmp_path: Path) -> None:
    _write(tmp_path, "cpu/cpu.cfs_quota_us", "-1")
    _write(tmp_path, "cpu/cpu.cfs_period_us", "100000")
    assert cgroup_quota(tmp_path) is None
    assert effective_cpus(tmp_path) == 8


@pytest.mark.parametrize("garbage", ["", "lots 100000", "100000 0", "-5 100000"])
def test_an_unreadable_quota_is_no_quota(tmp_path: Path, garbage: str) -> None:
    _write(tmp_path, "cpu.max", garbage)
    assert cgroup_quota(tmp_path) is None
    assert effective_cpus(tmp_path) == 8


def test_no_cgroup_files_fall_back_to_the_cpus_the_process_may_use(tmp_path: Path) -> None:
    assert cgroup_quota(tmp_path / "missing") is None
    assert effective_cpus(tmp_path / "missing") == 8


def test_the_real_machine_answers_something_sensible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    assert cpus.available_cpus() >= 1 and 1 <= effective_cpus() <= cpus.available_cpus()
