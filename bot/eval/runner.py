"""One scenario through the real engine and tool runtime (an in-process store), answering confirmation cards
as the scenario says, and recording what a score needs: every call proposed and run, the questions asked,
the answer, steps, model calls, tokens and latency."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.agent.decisions import Confirm, Decline
from bot.agent.deps import RunDeps
from bot.agent.engine import Engine
from bot.agent.events import Event, EventBus
from bot.agent.limits import Limits
from bot.agent.models.base import ChatModel
from bot.eval.scenario import Scenario
from bot.slack.inbound.thread_reader import quote_thread
from state import MemoryStore
from tools import ops
from tools.ops.toolbox_config import FileChanges, OpsConfig, PrometheusMetrics, Verification
from tools.registry import Registry

UNREACHABLE = "http://127.0.0.1:9"
"""The discard port: nothing answers there (a metrics backend that is down)."""


@dataclass
class Played:
    """What happened in one scenario run."""

    scenario: str
    answer: str = ""
    status: str = ""
    stop_reason: str | None = None
    proposed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Every call the model asked for, run or not."""
    results: dict[str, str] = field(default_factory=dict)
    """Tool name → the last result status it got (ok, error, cancelled, skipped…)."""
    asked: list[str] = field(default_factory=list)
    """The kinds of question put to a person (params_required, confirm_risky)."""
    steps: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None

    def listen(self, event: Event) -> None:
        if event.type == "tool_call":
            self.proposed.append((event.tool, dict(event.arguments)))
        elif event.type == "tool_result":
            self.results[event.tool] = event.status
        elif event.type == "loop_interrupt":  # (its calls were announced as tool calls when proposed)
            self.asked += [p.interrupt_type for p in event.pending]
        elif event.type == "model_step":
            self.model_calls += 1
            self.input_tokens += event.input_tokens
            self.output_tokens += event.output_tokens
            self.cache_read_tokens += event.cache_read_tokens
            self.cache_write_tokens += event.cache_write_tokens


def toolbox_for(scenario: Scenario) -> ops.Toolbox:
    fixtures, base = scenario.fixtures, scenario.source.parent if scenario.source else Path.cwd()
    # The demo restart backend's rollout and the re-check after it: at once (nothing real to wait for).
    conf = OpsConfig(data_dir=base / fixtures.data_dir if fixtures.data_dir else None,
                     docs_dir=base / fixtures.docs_dir if fixtures.docs_dir else None,
                     verify=Verification(timeout_s=10, poll_s=0.05, settle_s=0))
    if fixtures.logs_dir:
        conf = conf.model_copy(update={"logs": conf.logs.model_copy(update={"dir": base / fixtures.logs_dir})})
    if fixtures.changes_file:
        conf = conf.model_copy(update={"changes": [FileChanges(file=base / fixtures.changes_file)]})
    if fixtures.metrics == "unreachable":
        conf = conf.model_copy(update={"metrics": PrometheusMetrics(backend="prometheus", url=UNREACHABLE,
                                                                    timeout_s=2)})
    return ops.build(conf)


def quoted(thread: list[str]) -> str:
    """The thread as the Slack front end quotes it to the model."""
    return quote_thread("\n".join(thread)) if thread else ""


async def play(scenario: Scenario, model: ChatModel, *, max_steps: int = 10) -> Played:
    played = Played(scenario.name)
    bus = EventBus()
    bus.listen(played.listen)
    deps = RunDeps(model=model, registry=Registry.of(toolbox_for(scenario).specs), store=MemoryStore(), bus=bus,
                   limits=Limits(max_steps=scenario.expect.max_steps or max_steps, max_wall_time_s=300))
    engine = Engine(deps)
    start = time.perf_counter()
    try:
        outcome = await engine.ask(f"eval:{scenario.name}", scenario.question, user_id="UEVAL",
                                   context=quoted(scenario.thread))
        # Cards are answered as the scenario says; a form (a missing parameter) is left open: asking was the point.
        while outcome.status == "paused" and scenario.decision != "never":
            card = next((p for p in outcome.pending if p.interrupt_type == "confirm_risky"), None)
            if card is None:
                break
            ticket = await engine.ticket(card.token)
            decision = Confirm() if scenario.decision == "confirm" else Decline(reason="declined by the eval")
            outcome = await engine.answer(ticket, decision, by="UEVAL")
        record = await engine.run_record(outcome.run_id)
    except Exception as exc:  # one scenario's failure is its score, never the whole eval's end
        played.error = f"{type(exc).__name__}: {exc}"
        played.latency_s = time.perf_counter() - start
        return played
    played.latency_s = time.perf_counter() - start
    played.answer, played.status, played.stop_reason = outcome.answer, outcome.status, outcome.stop_reason
    played.steps = record.step
    return played
