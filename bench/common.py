"""What the benchmarks share: an isolated redis-server, a scripted OpsPilot engine, a LangGraph twin."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import shutil
import socket
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from pydantic import BaseModel
from redis.asyncio.client import Pipeline

from bot.agent.deps import RunDeps
from bot.agent.engine import Engine, EngineOptions
from bot.agent.events import EventBus
from bot.agent.limits import Limits
from bot.agent.models.scripted import ScriptedModel
from core.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from state import Keys, RedisStore, connect
from state.client import is_cluster_url
from state.store import Store
from tools import ToolContext, tool
from tools.registry import Registry, ToolSpec


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (its workers), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs, from /proc (a zombie has exited: its parent just has not reaped it)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def core_split() -> tuple[set[int], set[int]] | None:
    """Two disjoint sets of the cores this process may use (the first core; the rest), or None on one core."""
    cores = sorted(os.sched_getaffinity(0))
    return ({cores[0]}, set(cores[1:])) if len(cores) >= 2 else None


def pin(pids: Sequence[int], cores: set[int]) -> None:
    """Keep ``pids`` on ``cores`` (a process gone meanwhile is skipped)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, cores)


def free_port(span: int = 1) -> int:
    """A port with the ``span - 1`` after it free too (a front's workers take the next ones), below both the
    kernel's ephemeral range (32768 and up: a connection tried before its server listens can meet itself
    there, a TCP self-connect, and read its own request as the answer) and the tests' ports (20000–31999)."""
    for _ in range(200):
        port = random.randint(10_000, 19_990)
        try:
            for p in range(port, port + span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise RuntimeError("no free ports from 10000 to 20000")


@asynccontextmanager
async def isolated_redis() -> AsyncIterator[str]:
    """A redis-server of our own on a free port, so its byte counters see only this benchmark."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("the benchmarks need redis-server (apt-get install redis-server)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="opspilot-bench-")
    proc = await asyncio.create_subprocess_exec(
        binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = connect(url)
    try:
        for _ in range(200):
            try:
                await client.ping()
                break
            except Exception:
                await asyncio.sleep(0.05)
        yield url
    finally:
        await client.aclose()
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


@asynccontextmanager
async def isolated_cluster(masters: int = 3) -> AsyncIterator[str]:
    """A Redis Cluster of our own: the tests' (tests/cluster.py, three masters), on ports from the benchmarks'
    range so that no outgoing connection can hold one; yields its ``redis+cluster://`` URL."""
    from tests.cluster import RedisClusterProcess

    cluster = RedisClusterProcess(masters=masters, base_port=free_port(2 * masters))
    url = await asyncio.to_thread(cluster.start)
    try:
        yield url
    finally:
        await asyncio.to_thread(cluster.stop)


def redis_nodes(url: str) -> list[tuple[str, int]]:
    """Each server a URL names (a Cluster URL names all its masters when the benchmarks made it)."""
    hosts = urlsplit(url).netloc.rpartition("@")[2]
    names = hosts.split(",") if is_cluster_url(url) else [hosts]
    return [(h.rpartition(":")[0] or "127.0.0.1", int(h.rpartition(":")[2] or 6379)) for h in names if h]


@dataclass(frozen=True)
class ServerSample:
    """What the servers say about themselves at one moment: ``INFO cpu`` and ``INFO commandstats``."""

    at: float
    main_thread_s: list[float]
    """Each server's main-thread CPU seconds: the one thread that executes commands, what saturates first."""
    calls: Counter[str]
    """Commands executed, summed over the servers, by name; commands called inside scripts count too."""

    def since(self, before: ServerSample) -> ServerUse:
        seconds = max(self.at - before.at, 1e-9)
        cores = [(b - a) / seconds for a, b in zip(before.main_thread_s, self.main_thread_s, strict=True)]
        calls = Counter({name: n - before.calls[name] for name, n in self.calls.items()
                         if n - before.calls[name] > 0})
        return ServerUse(seconds, cores, calls)


@dataclass(frozen=True)
class ServerUse:
    seconds: float
    cores: list[float]
    """Each server's main thread, in cores (CPU seconds per second)."""
    calls: Counter[str]


# INFO is the sampling itself (HELLO its connection's handshake, as any new connection's), CONFIG RESETSTAT a
# reset: none is work a run does.
_OWN = ("info", "hello", "config|resetstat")


async def server_sample(url: str) -> ServerSample:
    cpu_s: list[float] = []
    calls: Counter[str] = Counter()
    for host, port in redis_nodes(url):
        client = aioredis.Redis(host=host, port=port)
        try:
            usage = await client.info("cpu")
            stats = await client.info("commandstats")
        finally:
            await client.aclose()
        # Redis 7 reports the main thread apart from its I/O and background threads; older ones the process.
        main = ("used_cpu_sys_main_thread", "used_cpu_user_main_thread")
        keys = main if main[0] in usage else ("used_cpu_sys", "used_cpu_user")
        cpu_s.append(sum(float(usage[k]) for k in keys))
        for key, value in stats.items():
            name = str(key).removeprefix("cmdstat_")
            if name not in _OWN and isinstance(value, dict):
                calls[name] += int(value["calls"])
    return ServerSample(time.perf_counter(), cpu_s, calls)


class Payload(BaseModel):
    q: str = "x"


def payload_tools(result_bytes: int, latency_s: float = 0.0) -> list[ToolSpec]:
    """Two read-only tools whose results are ``result_bytes`` of distinct text (distinct per call)."""
    counter = itertools.count()

    def body(name: str) -> str:
        seed = f"{name}-{next(counter)}-"
        return (seed * (result_bytes // len(seed) + 1))[:result_bytes]

    @tool(description="Look up A.", max_result_chars=result_bytes * 4)
    async def lookup_a(args: Payload, ctx: ToolContext) -> str:
        if latency_s:
            await asyncio.sleep(latency_s)
        return body("a")

    @tool(description="Look up B.", max_result_chars=result_bytes * 4)
    async def lookup_b(args: Payload, ctx: ToolContext) -> str:
        if latency_s:
            await asyncio.sleep(latency_s)
        return body("b")

    return [lookup_a, lookup_b]


_ids = itertools.count()


def steps_script(tool_steps: int) -> Callable[[Sequence[Message], Sequence[str]], AssistantMessage]:
    """``tool_steps`` steps of two calls each, then an answer."""
    def reply(messages: Sequence[Message], tools: Sequence[str]) -> AssistantMessage:
        since = 0
        for m in reversed(messages):
            if isinstance(m, UserMessage):
                break
            if isinstance(m, AssistantMessage):
                since += 1
        if since < tool_steps:
            calls = (ToolCall(id=f"c{next(_ids)}", name="lookup_a", arguments={"q": str(since)}),
                     ToolCall(id=f"c{next(_ids)}", name="lookup_b", arguments={"q": str(since)}))
            return AssistantMessage(content="", tool_calls=calls)
        return AssistantMessage(content="done")
    return reply


def engine(store: Store, model: ScriptedModel, specs: list[ToolSpec], *, limits: Limits | None = None,
           bus: EventBus | None = None) -> Engine:
    deps = RunDeps(model=model, registry=Registry.of(specs), store=store, bus=bus or EventBus(),
                   limits=limits or Limits(max_steps=50, identical_call_limit=1000, max_wall_time_s=3600),
                   context_budget_tokens=10_000_000)
    return Engine(deps, EngineOptions(lease_wait_s=30))


def redis_store(url: str, prefix: str) -> RedisStore:
    return RedisStore(connect(url, timeout_s=60, max_connections=128), keys=Keys(prefix))


class CountingPipeline(Pipeline):
    trips: list[str]

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        self.trips.append("pipeline")
        return await super().execute(raise_on_error)


class CountingRedis(aioredis.Redis):
    """A Redis client that records every request it sends (a command, a script call, or a whole pipeline):
    round trips counted at the client, through the public API."""

    trips: list[str]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.trips.append(str(args[0]))
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        pipe = CountingPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.trips = self.trips
        return pipe


def counting_store(url: str, prefix: str) -> tuple[RedisStore, list[str]]:
    client = cast(CountingRedis, CountingRedis.from_url(url, decode_responses=True))  # from_url builds a cls
    client.trips = []
    return RedisStore(client, keys=Keys(prefix)), client.trips


def unique_bytes(messages: Sequence[Message]) -> int:
    """The thread's content: each message's text, call arguments and result content, once."""
    total = 0
    for m in messages:
        if isinstance(m, AssistantMessage):
            total += len(m.content.encode()) + sum(len(c.name) + len(str(c.arguments)) for c in m.tool_calls)
        elif isinstance(m, ToolResultMessage | UserMessage):
            total += len(m.content.encode())
    return total


class Verdict(str):
    """A verdict's line under its table, and the same figures for the results file (:meth:`Table.to_json`'s
    ``goals``): a run's targets read by a program, not parsed out of sentences."""

    goal: dict[str, Any]


def verdict(name: str, measured: float, target: float, unit: str = "×", lower_is_better: bool = True) -> Verdict:
    """One line under a table: the target, the measurement, and by how much it is met or missed."""
    met = measured <= target if lower_is_better else measured >= target
    if met:
        line = Verdict(f"{name}: target {target:g}{unit}, measured {measured:.3g}{unit} — met")
    else:
        by = f"{measured / target:.2f}×" if target else f"{measured:g}{unit}"
        line = Verdict(f"{name}: target {target:g}{unit}, measured {measured:.3g}{unit} — MISSED by {by}")
    line.goal = {"name": name, "target": target, "measured": measured, "unit": unit.strip(),
                 "lower_is_better": lower_is_better, "met": met}
    return line


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[Any]]
    notes: Sequence[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        goals = [note.goal for note in self.notes if isinstance(note, Verdict)]
        return {"title": self.title, "header": self.header, "rows": self.rows, "notes": list(self.notes),
                **({"goals": goals} if goals else {})}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Table:
        return cls(str(body["title"]), list(body["header"]), [list(r) for r in body["rows"]], list(body["notes"]))

    def render(self) -> str:
        cells = [self.header] + [[_fmt(c) for c in row] for row in self.rows]
        widths = [max(len(str(r[i])) for r in cells) for i in range(len(self.header))]
        line = "| " + " | ".join(str(h).ljust(w) for h, w in zip(self.header, widths, strict=True)) + " |"
        sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        body = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
                for r in cells[1:]]
        notes = ["", *(f"- {note}" for note in self.notes)] if self.notes else []
        return "\n".join([f"### {self.title}", "", line, sep, *body, *notes, ""])


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def cpu() -> float:
    return time.process_time()
