"""The architecture, as the imports say it (docs/architecture.md): layers point down, and inside the Slack layer
what comes in and what goes out never reach into a feature, and a feature reaches another feature only through
that feature's package (what its ``__init__`` offers), never into its modules."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Each layer may import only these (its own included): core ← state, tools ← bot.agent ← bot.slack, bot (the rest).
LAYERS = {
    "core": {"core"},
    "state": {"core", "state"},
    "tools": {"core", "tools", "state"},
    "bot.agent": {"core", "state", "tools", "bot.agent"},
}
SLACK = "bot.slack"
OUT, IN = f"{SLACK}.outbound", f"{SLACK}.inbound"
FEATURES = ("alerts", "followups", "incidents", "feedback", "home", "rollbacks")


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(ROOT.glob("**/*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("core", "state", "tools", "bot"):
            name = ".".join(rel.with_suffix("").parts)
            yield name.removesuffix(".__init__"), path


def imports(source: str) -> Iterator[str]:
    """Every module a file imports at run time or for typing (both are dependencies a reader follows)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def feature_of(name: str) -> str | None:
    return next((f for f in FEATURES if _under(name, f"{SLACK}.{f}")), None)


def problems(planted: dict[str, str] | None = None) -> list[str]:
    """Every import that breaks the rule; ``planted``: extra modules (name → source) to judge with the rest."""
    sources = {name: path.read_text(encoding="utf-8") for name, path in modules()} | (planted or {})
    found: list[str] = []
    for name, source in sources.items():
        deps = [d for d in imports(source) if d in sources]
        for layer, allowed in LAYERS.items():
            if _under(name, layer):
                found += [f"{name} imports {d} (upward: {layer} may import {sorted(allowed)})" for d in deps
                          if d.split(".")[0] in ("core", "state", "tools", "bot")
                          and not any(_under(d, a) for a in allowed)]
        if _under(name, OUT):  # what goes out to Slack: nothing above it in the Slack layer
            found += [f"{name} imports {d} (outbound may import only outbound)" for d in deps
                      if _under(d, SLACK) and not _under(d, OUT)]
        elif _under(name, IN):
            found += [f"{name} imports {d} (inbound may import inbound and outbound)" for d in deps
                      if _under(d, SLACK) and not (_under(d, IN) or _under(d, OUT))]
        elif (own := feature_of(name)) is not None:
            for d in deps:
                other = feature_of(d)
                if other is not None and other != own and d != f"{SLACK}.{other}":
                    found.append(f"{name} imports {d} (another feature's internals: import {SLACK}.{other})")
                if _under(d, SLACK) and other is None and not (_under(d, IN) or _under(d, OUT)):
                    found.append(f"{name} imports {d} (a feature may import inbound, outbound and features)")
    return found


def test_no_import_runs_upward_or_into_another_features_internals() -> None:
    assert problems() == []


@pytest.mark.parametrize(("planted", "line", "says"), [
    ("bot.slack.outbound.planted", "from bot.slack.alerts import threads\n", "outbound may import only outbound"),
    ("bot.slack.inbound.planted", "import bot.slack.router\n", "inbound may import inbound and outbound"),
    ("bot.slack.home.planted", "from bot.slack.feedback.votes import Feedback\n", "another feature's internals"),
    ("state.planted", "from bot.slack.outbound import words\n", "upward"),
    ("bot.agent.planted", "import bot.slack.outbound.outbox\n", "upward"),
])
def test_the_rule_catches_a_planted_import(planted: str, line: str, says: str) -> None:
    found = problems({planted: line})
    assert any(planted in p and says in p for p in found), found


def test_one_name_per_idea_no_basename_twice() -> None:
    """Two modules with the same name in different places make a reader ask which one: the store's, the Slack
    surface's, or the engine's part of an idea say which they are."""
    seen: dict[str, list[str]] = {}
    for name, path in modules():
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(name)
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}


def test_no_module_over_400_lines() -> None:
    long = {name: n for name, path in modules() if (n := len(path.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}


def test_every_module_is_on_the_architecture_map() -> None:
    """A newcomer finds a module from docs/architecture.md: one the map does not name is one they cannot find."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [name for name, path in modules() if path.name != "__init__.py" and path.stem not in page]
    assert missing == []
