"""Investigation quality you can measure: incident scenarios as data (``evals/``), played through the real
engine and tools with any model, scored per expectation (:mod:`bot.eval.score`), with tokens, latency and
cost; ``--record``/``--replay`` turn a real model's run into an offline regression test.

Public API: :func:`load_scenarios`, :func:`run_eval`, :func:`evaluate` (what ``opspilot eval`` does)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from bot.agent.models.base import ChatModel
from bot.config import ConfigError, Settings
from bot.eval.replay import Recorder, Replayer
from bot.eval.scenario import Scenario, ScenarioError, load_scenarios
from bot.eval.suite import EvalResult, run_eval
from bot.eval.table import render

__all__ = ["EvalResult", "Scenario", "ScenarioError", "evaluate", "load_scenarios", "run_eval"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _model(settings: Settings, name: str | None, replay: Path | None) -> ChatModel:
    from bot.agent.models.demo import demo_model
    from bot.assembly import build_model

    if replay is not None:
        try:
            return Replayer(replay)
        except FileNotFoundError as exc:
            raise ConfigError(str(exc)) from exc
    if name == "demo":
        return demo_model()
    if name:
        settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"name": name})})
    return build_model(settings)


async def evaluate(settings: Settings, *, directory: Path, model_name: str | None = None, repeat: int = 1,
                   only: list[str] | None = None, min_pass: float = 1.0, json_out: Path | None = None,
                   record: Path | None = None, replay: Path | None = None) -> int:
    """Run the scenarios, print the table, write JSON; 0 when the pass rate reaches ``min_pass``, else 1."""
    if record is not None and replay is not None:
        raise ConfigError("--record and --replay do not go together")
    try:
        scenarios = load_scenarios(directory, only)
    except ScenarioError as exc:
        raise ConfigError(str(exc)) from exc
    model = _model(settings, model_name, replay)
    if record is not None:
        if model.scripted:
            raise ConfigError("--record keeps a real model's answers: configure one (ANTHROPIC_API_KEY, "
                              "OPENAI_API_KEY) or pass --model")
        model = Recorder(model, record)
    skipped = [s.name for s in scenarios if model.scripted and not isinstance(model, Replayer) and not s.demo]
    playable = [s for s in scenarios if s.name not in skipped]
    if not playable:
        raise ConfigError("no scenario to play with this model")
    try:
        result = await run_eval(playable, model, repeat=max(repeat, 1), prices=settings.eval.prices)
    finally:
        await model.aclose()
    print(render(result))
    if skipped:
        print(f"\nnot played by the scripted demo model (they need a real model): {', '.join(skipped)}")
    if json_out is not None:
        body = result.to_json() | {"skipped": skipped, "min_pass": min_pass}
        await asyncio.to_thread(_write, json_out, json.dumps(body, indent=1, ensure_ascii=False) + "\n")
    if result.pass_rate < min_pass:
        print(f"\npass rate {result.pass_rate:.0%} is below --min-pass {min_pass:.0%}", file=sys.stderr)
        return 1
    return 0
