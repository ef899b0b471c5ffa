"""``opspilot eval``: every scenario (``--repeat`` times), scored, with its cost; the pass rate gates CI."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from bot.agent.models.base import ChatModel
from bot.eval.replay import Recorder, Replayer
from bot.eval.runner import Played, play
from bot.eval.scenario import Scenario
from bot.eval.score import Check, score

Price = tuple[float, float, float, float]

PRICES: dict[str, Price] = {
    # USD per million tokens: input, output, cache read, cache write (5-minute). Anthropic's list prices at the
    # time of writing; override or add models with eval.prices in the config.
    "claude-opus-4-1": (15.0, 75.0, 1.50, 18.75),
    "claude-sonnet-4-5": (3.0, 15.0, 0.30, 3.75),
    "claude-haiku-4-5": (1.0, 5.0, 0.10, 1.25),
    "gpt-4o-mini": (0.15, 0.60, 0.075, 0.15),
}


@dataclass
class Attempt:
    played: Played
    checks: list[Check]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


@dataclass
class ScenarioResult:
    scenario: Scenario
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def pass_rate(self) -> float:
        return sum(a.passed for a in self.attempts) / len(self.attempts)

    def mean(self, name: str) -> float:
        return statistics.fmean(getattr(a.played, name) for a in self.attempts)


@dataclass
class EvalResult:
    model: str
    results: list[ScenarioResult]
    prices: Price | None

    @property
    def pass_rate(self) -> float:
        attempts = [a for r in self.results for a in r.attempts]
        return sum(a.passed for a in attempts) / len(attempts) if attempts else 0.0

    def cost(self, played: Played) -> float | None:
        if self.prices is None:
            return None
        p = self.prices
        return (played.input_tokens * p[0] + played.output_tokens * p[1] + played.cache_read_tokens * p[2]
                + played.cache_write_tokens * p[3]) / 1e6

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model, "pass_rate": self.pass_rate,
            "scenarios": [{
                "name": r.scenario.name, "pass_rate": r.pass_rate,
                "pass_rate_stdev": statistics.pstdev([float(a.passed) for a in r.attempts]),
                "attempts": [{
                    "passed": a.passed, "steps": a.played.steps, "model_calls": a.played.model_calls,
                    "input_tokens": a.played.input_tokens, "output_tokens": a.played.output_tokens,
                    "cache_read_tokens": a.played.cache_read_tokens,
                    "cache_write_tokens": a.played.cache_write_tokens, "latency_s": round(a.played.latency_s, 3),
                    "cost_usd": self.cost(a.played), "stop_reason": a.played.stop_reason,
                    "answer": a.played.answer, "error": a.played.error,
                    "checks": [{"name": c.name, "passed": c.passed, "detail": "" if c.passed else c.detail}
                               for c in a.checks],
                } for a in r.attempts],
            } for r in self.results],
        }


def price_of(model: ChatModel, prices: dict[str, Price]) -> Price | None:
    """The price row whose name the model's label contains (the scripted model costs nothing)."""
    if model.scripted and not isinstance(model, Replayer):
        return (0.0, 0.0, 0.0, 0.0)
    return next((row for name, row in sorted(prices.items(), key=lambda kv: -len(kv[0])) if name in model.label),
                None)


async def run_eval(scenarios: list[Scenario], model: ChatModel, *, repeat: int = 1,
                   prices: dict[str, Price] | None = None) -> EvalResult:
    results = []
    for scenario in scenarios:
        result = ScenarioResult(scenario)
        for _ in range(repeat):
            if isinstance(model, Recorder | Replayer):
                await model.begin(scenario.name)
            played = await play(scenario, model)
            result.attempts.append(Attempt(played, score(scenario, played)))
        results.append(result)
    return EvalResult(model.label, results, price_of(model, {**PRICES, **(prices or {})}))
