"""Shared fixtures. Tests talk to a real Redis: $REDIS_URL (or 127.0.0.1:6379) when it answers,
otherwise a throwaway redis-server on a free port; with neither, the run stops with a clear message."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import pytest

from bot.agent.deps import RunDeps
from bot.agent.engine import Engine, EngineOptions
from bot.agent.events import Event, EventBus
from bot.agent.limits import Limits
from bot.agent.models.base import ChatModel
from bot.demo.workspace import LocalSlack as FakeSlack
from state import Keys, RedisStore, Ttls, connect
from tests.cluster import RedisClusterProcess
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.ops_servers import OpsFakes
from tools import ops
from tools.registry import Registry, ToolSpec


def _dump_tasks(signum: int, frame: Any) -> None:
    """``kill -USR1 <pytest worker>``: every asyncio task's stack and the test it runs, to
    $TMPDIR/opspilot-tasks-<pid>.txt (what a test that hangs is waiting for; py-spy sees only the event loop)."""
    import traceback

    try:
        tasks = asyncio.all_tasks(asyncio.get_running_loop())
    except RuntimeError:
        tasks = set()
    with open(os.path.join(tempfile.gettempdir(), f"opspilot-tasks-{os.getpid()}.txt"), "w") as out:
        out.write(f"test: {os.environ.get('PYTEST_CURRENT_TEST')}\n")
        traceback.print_stack(frame, file=out)
        for task in tasks:
            out.write(f"\n--- {task!r}\n")
            task.print_stack(file=out)


if hasattr(signal, "SIGUSR1"):
    signal.signal(signal.SIGUSR1, _dump_tasks)


def _answers_ping(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


async def until(predicate: Any, timeout_s: float = 20.0) -> None:
    """Wait until ``predicate()`` holds (something another task or process does), or fail."""
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


_PORTS_PER_WORKER = 1200
_next_port = [random.randrange(_PORTS_PER_WORKER)]  # two runs at once start apart


def _worker_ports() -> range:
    """This test process's own ports, below the kernel's ephemeral range (32768 and up): parallel test processes
    (pytest-xdist) never pick each other's, nor a port the kernel hands out for an outgoing connection."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(name[2:]) if name[2:].isdigit() else 0
    start = 20_000 + (index % 10) * _PORTS_PER_WORKER
    return range(start, start + _PORTS_PER_WORKER)


def free_port(span: int = 4) -> int:
    """A TCP port nobody listens on right now, with the ``span - 1`` after it free too (``serve`` puts its workers
    on the next ones), from this test process's own range."""
    ports = _worker_ports()
    for _ in range(len(ports) // span):
        base = ports.start + _next_port[0] % (len(ports) - span)
        _next_port[0] += span
        try:
            for port in range(base, base + span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {span} free ports in a row in {ports}")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if _answers_ping(url):
        yield url
        return
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.exit(f"No Redis answers at {url} and redis-server is not installed: "
                    "install it (apt-get install redis-server) or set REDIS_URL.", returncode=3)
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="opspilot-redis-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while not _answers_ping(url):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.exit(f"started redis-server on port {port} but it never answered", returncode=3)
        time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def cluster_url() -> Iterator[str]:
    """A real three-master Redis Cluster, started once for the session."""
    cluster = RedisClusterProcess(base_port=free_port(span=6))  # this test process's own ports: never ephemeral
    try:
        url = cluster.start()
    except (RuntimeError, subprocess.SubprocessError) as exc:
        pytest.fail(f"could not start a Redis Cluster: {exc}")
    yield url
    cluster.stop()


@pytest.fixture
async def cluster_store(cluster_url: str, prefix: str) -> AsyncIterator[RedisStore]:
    s = RedisStore(connect(cluster_url), keys=Keys(prefix), ttls=Ttls(interrupt_s=600))
    await s.ping()
    yield s
    keys = [k async for k in s.client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await s.client.delete(*keys)
    await s.close()


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def store(redis_url: str, prefix: str) -> AsyncIterator[RedisStore]:
    s = RedisStore(connect(redis_url), keys=Keys(prefix), ttls=Ttls(interrupt_s=600))
    yield s
    keys = [k async for k in s.client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await s.client.delete(*keys)
    await s.close()


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    """The local Anthropic Messages API (the real SDK talks to it; it enforces the API's tool-use rules)."""
    fake = FakeAnthropic()
    await fake.server.start()
    yield fake
    for model in fake.models:
        await model.aclose()
    await fake.server.stop()


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    """A fake Slack Web API (and Socket Mode endpoint) on a free local port."""
    fake = FakeSlack()
    await fake.server.start()
    yield fake
    await fake.server.stop()


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Any]:
    """A Slack workspace in a box (``tests.slack_harness.Workspace``) on the fake Slack above."""
    from tests.slack_harness import open_workspace  # the whole app: only for the tests that ask for it

    workspace = await open_workspace(redis_url, prefix, slack)
    yield workspace
    await workspace.stop()


@dataclass
class Harness:
    engine: Engine
    store: RedisStore
    events: list[Event] = field(default_factory=list)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


def make_harness(model: ChatModel, store: RedisStore, specs: list[ToolSpec] | None = None, *,
                 limits: Limits | None = None, options: EngineOptions | None = None,
                 toolbox: ops.Toolbox | None = None, **deps: Any) -> Harness:
    events: list[Event] = []
    bus = EventBus()
    bus.listen(events.append)
    registry = Registry.of(specs if specs is not None else (toolbox or ops.build()).specs)
    run_deps = RunDeps(model=model, registry=registry, store=store, bus=bus,
                       limits=limits or Limits(), **deps)
    return Harness(Engine(run_deps, options or EngineOptions(lease_wait_s=5, cancel_poll_s=0.05)), store, events)


@dataclass
class OwnRedis:
    """A redis-server this test owns and may stop and start again (its data survives, in an append-only file)."""

    port: int
    workdir: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed (apt-get install redis-server): the outage tests need one")
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "yes", "--appendfsync", "always", "--dir", self.workdir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not _answers_ping(self.url):
            if time.monotonic() > deadline:
                pytest.fail(f"redis-server on port {self.port} never answered")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    server = OwnRedis(free_port(), tempfile.mkdtemp(prefix="opspilot-own-redis-"))
    server.start()
    yield server
    server.stop()
    shutil.rmtree(server.workdir, ignore_errors=True)


@pytest.fixture
async def fakes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[OpsFakes]:
    """The ops backends' stand-ins (Loki, Prometheus, Kubernetes, webhooks), with the token they expect."""
    monkeypatch.setenv("OPS_TOKEN", "secret-token")
    f = OpsFakes()
    await f.server.start()
    yield f
    await f.server.stop()
