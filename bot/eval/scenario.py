"""Incident scenarios as data (``evals/*.yml``): the question, the thread it is asked in, the fixtures it runs
against, and what a good investigation does and says. A scenario file that does not fit is refused with its
path and the offending field, never half-loaded."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

Decision = Literal["confirm", "decline", "never"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CallExpectation(_Strict):
    """A tool call that must happen, with argument predicates: ``{service_id: payments}`` (equal) or
    ``{query: "~(?i)payment"}`` (a leading ``~`` makes the value a regular expression)."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)

    def matches(self, name: str, arguments: dict[str, Any]) -> bool:
        if name != self.tool:
            return False
        for key, want in self.args.items():
            got = arguments.get(key)
            if isinstance(want, str) and want.startswith("~"):
                if got is None or not re.search(want[1:], str(got)):
                    return False
            elif got != want:
                return False
        return True

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.args.items())
        return f"{self.tool}({args})"


class Expect(_Strict):
    calls: list[CallExpectation] = Field(default_factory=list)
    """Calls the model must make (run or proposed)."""
    not_called: list[str] = Field(default_factory=list)
    """Tools the model must not even propose."""
    proposed_not_run: list[str] = Field(default_factory=list)
    """Changes the model must propose, that must not run without a person (with ``decision: never``)."""
    ran: list[str] = Field(default_factory=list)
    """Tools that must have run to completion (e.g. a restart after ``decision: confirm``)."""
    asks: bool | None = None
    """True: the run must stop to ask a person (a missing parameter, an ambiguous name)."""
    facts: list[str] = Field(default_factory=list)
    """Regular expressions the answer must match (figures, runbook paths, log patterns)."""
    not_facts: list[str] = Field(default_factory=list)
    """Regular expressions the answer must not match."""
    language: Literal["en", "zh"] | None = None
    max_steps: int | None = Field(None, ge=1)

    @field_validator("facts", "not_facts")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from exc
        return patterns


class Fixtures(_Strict):
    data_dir: Path | None = None
    """catalog.yml, docs/, logs/, metrics.yml (default: the bundled demo data); relative to the scenario."""
    docs_dir: Path | None = None
    logs_dir: Path | None = None
    changes_file: Path | None = None
    """Deploy events (JSON lines, as changes.jsonl) instead of the data directory's, relative to the scenario."""
    metrics: Literal["fixtures", "unreachable"] = "fixtures"
    """``unreachable``: the metrics backend does not answer (a Prometheus URL nothing listens on)."""


class Scenario(_Strict):
    name: str
    description: str = ""
    question: str
    thread: list[str] = Field(default_factory=list)
    """Earlier messages of the Slack thread (an alert, people's remarks), quoted to the model as Slack does."""
    fixtures: Fixtures = Field(default_factory=Fixtures)
    decision: Decision = "never"
    """How the eval answers a confirmation card."""
    demo: bool = True
    """Whether the scripted demo model is meant to play it (CI runs those)."""
    expect: Expect
    source: Path | None = None


class ScenarioError(ValueError):
    """A scenario file that cannot be used: its path and what is wrong."""


def load_scenarios(directory: Path, only: list[str] | None = None) -> list[Scenario]:
    if not directory.is_dir():
        raise ScenarioError(f"{directory}: no such directory of scenarios")
    scenarios = []
    for path in sorted(directory.glob("*.yml")):
        try:
            body = yaml.safe_load(path.read_text(encoding="utf-8"))
            scenario = Scenario.model_validate({**(body or {}), "source": path})
        except yaml.YAMLError as exc:
            raise ScenarioError(f"{path}: not YAML: {exc}") from exc
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ScenarioError(f"{path}: {where}: {err['msg']}") from exc
        fixtures = scenario.fixtures
        for field in ("data_dir", "docs_dir", "logs_dir", "changes_file"):
            value = getattr(fixtures, field)
            if value is not None and not (path.parent / value).exists():
                raise ScenarioError(f"{path}: fixtures.{field}: {path.parent / value} does not exist")
        scenarios.append(scenario)
    names = [s.name for s in scenarios]
    if len(set(names)) != len(names):
        raise ScenarioError(f"{directory}: two scenarios share a name")
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise ScenarioError(f"no scenario named {', '.join(unknown)} (known: {', '.join(names)})")
        scenarios = [s for s in scenarios if s.name in only]
    return scenarios
