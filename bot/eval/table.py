"""The eval's table (one row per scenario: pass/fail or the pass rate ± its standard deviation, checks passed,
steps, model calls, input tokens with those read from the prompt cache, output tokens, latency, cost) and
what failed, in plain words."""

from __future__ import annotations

import statistics

from bot.eval.suite import EvalResult


def render(result: EvalResult) -> str:
    rows = [["scenario", "pass", "checks", "steps", "model calls", "input (cached) / output tokens", "latency s",
             "cost $"]]
    failures: list[str] = []
    for r in result.results:
        attempts = r.attempts
        checks = attempts[-1].checks
        passed = sum(c.passed for c in checks)
        costs = [result.cost(a.played) for a in attempts]
        cost = "n/a" if any(c is None for c in costs) else f"{sum(c or 0.0 for c in costs) / len(costs):.4f}"
        cached = r.mean("cache_read_tokens") + r.mean("cache_write_tokens")
        tokens = f"{r.mean('input_tokens') + cached:.0f} ({r.mean('cache_read_tokens'):.0f}) / " \
                 f"{r.mean('output_tokens'):.0f}"
        outcome = f"{r.pass_rate:.0%} ±{statistics.pstdev([float(a.passed) for a in attempts]):.2f}" \
            if len(attempts) > 1 else ("PASS" if attempts[0].passed else "FAIL")
        rows.append([r.scenario.name, outcome, f"{passed}/{len(checks)}", f"{r.mean('steps'):.1f}",
                     f"{r.mean('model_calls'):.1f}", tokens, f"{r.mean('latency_s'):.2f}", cost])
        for i, attempt in enumerate(attempts):
            for check in attempt.checks:
                if not check.passed:
                    tag = f" (attempt {i + 1})" if len(attempts) > 1 else ""
                    failures.append(f"- {r.scenario.name}{tag}: {check.name} — {check.detail}")
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    total = sum(len(r.attempts) for r in result.results)
    passed = sum(a.passed for r in result.results for a in r.attempts)
    summary = f"\nmodel: {result.model}\npassed: {passed}/{total} ({result.pass_rate:.0%})"
    if result.prices is None:
        summary += "\ncost: no price for this model (add it under eval.prices in the config)"
    return "\n".join(lines) + "\n\n" + _facts(result) + summary + \
        ("\n\nFailed checks:\n" + "\n".join(failures) if failures else "")


def _facts(result: EvalResult) -> str:
    """What each answer had to state (and must not), as the scenario says it, with whether it did."""
    lines = ["Facts each answer had to state (✓ stated, ✗ missing; ¬ must not say):"]
    for r in result.results:
        checks = {c.name: c.passed for c in r.attempts[-1].checks}
        expect = r.scenario.expect
        told = [f"{'✓' if checks.get(f'says /{f}/', False) else '✗'} /{f}/" for f in expect.facts] + \
            [f"¬ /{f}/ {'✓' if checks.get(f'never says /{f}/', False) else '✗'}" for f in expect.not_facts]
        lines.append(f"- {r.scenario.name}: " + ("; ".join(told) if told else "(none: judged by its calls)"))
    return "\n".join(lines)
