"""Fresh clone → demo page: `git clone` of this checkout's committed HEAD into a temporary directory, then
`./scripts/opspilot demo --port P` there (which creates .venv and installs the core: no extra), timed until
``http://127.0.0.1:P/`` answers; then the size of that .venv and how many packages it holds. What a newcomer
waits for after the README's first line, on this machine, with pip's index and cache as they are here.

Not in ``--small`` (the smoke run): one install takes tens of seconds and the network or a wheel mirror."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.common import Table, free_port, verdict

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 45.0  # issue 37: fresh clone → demo page on 2 cores


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def _packages(venv: Path) -> int:
    """Installed distributions in the venv (pip and setuptools included, as `pip list` counts them)."""
    return len(list(venv.glob("lib/python*/site-packages/*.dist-info")))


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, TimeoutError, OSError):
        return False


def fresh_demo(timeout_s: float = 300.0) -> tuple[float, float, int]:
    """(seconds from clone to the demo page, .venv MB, packages) for one fresh clone."""
    with tempfile.TemporaryDirectory(prefix="opspilot-fresh-") as tmp:
        clone = Path(tmp) / "opspilot"
        port = free_port()
        # Whatever venv this process runs in stays out of the clone's way: PATH without it, no OPSPILOT_VENV.
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "OPSPILOT_VENV", "PYTHONPATH")
               and not k.startswith(("OPSPILOT_", "SLACK_")) and not k.endswith("_API_KEY")}
        active = os.environ.get("VIRTUAL_ENV")
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                      if not (active and p.startswith(active)))
        start = time.perf_counter()
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
        proc = subprocess.Popen([str(clone / "scripts" / "opspilot"), "demo", "--port", str(port)], cwd=clone,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            while not _answers(f"http://127.0.0.1:{port}/"):
                if proc.poll() is not None:
                    raise RuntimeError(f"the demo exited ({proc.returncode}): {proc.stderr.read()[-2000:]!r}"
                                       if proc.stderr else f"the demo exited ({proc.returncode})")
                if time.perf_counter() - start > timeout_s:
                    raise RuntimeError(f"fresh clone → demo page: not within {timeout_s:g} s")
                time.sleep(0.25)
            seconds = time.perf_counter() - start
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        venv = clone / ".venv"
        size, count = _size_mb(venv), _packages(venv)
        shutil.rmtree(clone, ignore_errors=True)
    return seconds, size, count


async def run(rounds: int = 1) -> list[Table]:
    results = [await asyncio.to_thread(fresh_demo) for _ in range(rounds)]
    rows = [[i + 1, f"{s:.1f}", f"{mb:.0f}", n] for i, (s, mb, n) in enumerate(results)]
    best = min(s for s, _, _ in results)
    return [Table(f"Fresh clone → demo page (s): `git clone`, `./scripts/opspilot demo` (creates .venv, installs the "
                  f"core), until the page answers; {os.cpu_count()} CPUs",
                  ["round", "seconds", ".venv MB", "packages"], rows,
                  [verdict("fresh clone → demo page", best, TARGET_S, " s")])]
