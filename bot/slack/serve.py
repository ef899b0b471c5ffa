"""``opspilot serve`` and ``opspilot worker``: a front that acknowledges and enqueues, and worker processes
that run the engine, render and deliver.

``serve --workers N`` starts the front plus N worker processes on this machine and restarts any that
dies; ``worker`` runs workers alone, so fronts and workers scale separately across machines on one
Redis. ``--workers 0`` is one process that does everything. Each process serves ``/healthz`` and
``/metrics`` (workers on ``PORT + i``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

from aiohttp import web

from bot.config import Settings
from bot.slack.service import Role, SlackService, build_service, socket_mode_handler

log = logging.getLogger(__name__)


def default_workers() -> int:
    """One worker process per core, up to four (each runs hundreds of runs concurrently)."""
    return max(1, min(4, os.cpu_count() or 1))


async def _listen(service: SlackService, port: int) -> web.AppRunner:
    runner = web.AppRunner(service.web_app)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


async def _run(settings: Settings, role: Role, port: int | None, banner: str,
               stopping: asyncio.Event | None = None) -> None:
    socket_mode = role != "worker" and bool(settings.slack.app_token)
    service = await build_service(settings, socket_mode=socket_mode, role=role)
    service.start()
    runner = await _listen(service, port) if port else None
    print(banner.format(model=service.core.model.label), flush=True)
    try:
        if socket_mode:
            handler = socket_mode_handler(service, str(settings.slack.app_token))
            await handler.connect_async()  # type: ignore[no-untyped-call]
        stopping = stopping or asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):  # stop gracefully: finish, deliver, stop the workers
            asyncio.get_running_loop().add_signal_handler(sig, stopping.set)
        await stopping.wait()
    finally:
        await service.stop()
        if runner is not None:
            await runner.cleanup()
        await service.core.store.close()


async def _supervise(index: int, argv: list[str], stopping: asyncio.Event) -> None:
    """Keep one worker process alive: a worker that dies is started again (its work is claimed meanwhile).
    Once the front is stopping, a worker that exits (Ctrl-C reaches the whole process group) stays stopped."""
    while not stopping.is_set():
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", *argv)
        try:
            code = await proc.wait()
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 45)  # a worker finishes its work and deliveries first
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            raise
        if not stopping.is_set():
            log.error("worker %d exited with code %s; starting it again", index, code)
            await asyncio.sleep(1.0)


async def serve(settings: Settings, *, workers: int | None = None, config: str | None = None) -> int:
    count = default_workers() if workers is None else workers
    port = settings.slack.port
    mode = "Socket Mode" if settings.slack.app_token else f"HTTP mode, POST http://0.0.0.0:{port}/slack/events"
    if count == 0:
        await _run(settings, "all", port, f"OpsPilot is serving Slack ({mode}), one process; /healthz and /metrics "
                                          f"on port {port}; model: {{model}}")
        return 0
    base = [*(["--config", config] if config else []), "worker"]
    stopping = asyncio.Event()
    keepers = [asyncio.create_task(_supervise(i, [*base, "--port", str(port + 1 + i)], stopping))
               for i in range(count)]
    try:
        await _run(settings, "front", port, f"OpsPilot is serving Slack ({mode}) with {count} worker process(es) "
                                            f"on ports {port + 1}–{port + count}; /healthz and /metrics on port "
                                            f"{port}; model: {{model}}", stopping)
    finally:
        for keeper in keepers:
            keeper.cancel()
        await asyncio.gather(*keepers, return_exceptions=True)
    return 0


async def work(settings: Settings, *, port: int | None = None) -> int:
    where = f"; /healthz and /metrics on port {port}" if port else ""
    await _run(settings, "worker", port, f"OpsPilot worker {os.getpid()} is reading the work queue{where}; "
                                         "model: {model}")
    return 0
