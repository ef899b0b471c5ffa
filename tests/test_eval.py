"""``opspilot eval``: the scenarios under evals/ played through the real engine and tools, scored; a failing
expectation fails; a broken scenario file is refused readably; a real model's run (the anthropic SDK against
the local Anthropic stand-in) recorded and replayed offline, and a replay that diverges says where."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bot.agent.models.anthropic import AnthropicModel
from bot.cli import main
from bot.eval import load_scenarios, run_eval
from bot.eval.replay import Recorder, Replayer
from tests.fakes.anthropic_api import FakeAnthropic, text, tool_use

EVALS = Path(__file__).resolve().parent.parent / "evals"


def test_the_demo_model_plays_every_scenario_meant_for_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    out = tmp_path / "eval.json"
    assert main(["eval", "--model", "demo", "--dir", str(EVALS), "--json", str(out)]) == 0
    body = json.loads(out.read_text())
    played = {s["name"]: s for s in body["scenarios"]}
    assert len(played) >= 12
    assert all(s["pass_rate"] == 1.0 for s in played.values()), [
        (n, [c for c in s["attempts"][0]["checks"] if not c["passed"]]) for n, s in played.items()]
    assert {"runbook-says-do-not-restart", "ambiguous-service"} <= set(body["skipped"])
    assert {"two-services", "deploy-preceded-errors", "errors-before-deploy", "spike-recovered"} <= set(played)
    confirmed = played["restart-confirmed"]["attempts"][0]
    assert any(c["name"] == "runs restart_service" and c["passed"] for c in confirmed["checks"])
    kept = played["restart-needs-confirmation"]["attempts"][0]
    assert any(c["name"] == "restart_service waits for a person" for c in kept["checks"])
    table = capsys.readouterr().out
    assert "payments-errors-runbook-zh" in table and "passed: " in table


def test_a_bad_investigation_fails_and_gates_the_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    (tmp_path / "strict.yml").write_text(
        "name: strict\nquestion: look at the payment service's recent errors\n"
        "expect:\n  facts: ['error rate 9\\.9%']\n  not_called: [query_logs]\n  language: zh\n")
    assert main(["eval", "--model", "demo", "--dir", str(tmp_path), "--repeat", "2", "--min-pass", "0.5"]) == 1
    printed = capsys.readouterr()
    assert "never calls query_logs — proposed query_logs" in printed.out
    assert "says /error rate 9\\.9%/" in printed.out and "answers in zh" in printed.out
    assert "0%" in printed.out and "below --min-pass 50%" in printed.err


def test_a_broken_scenario_is_refused_with_its_path_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    (tmp_path / "broken.yml").write_text("name: broken\nquestion: hi\nexpect:\n  fatcs: ['x']\n")
    assert main(["eval", "--model", "demo", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "broken.yml: expect.fatcs: Extra inputs are not permitted" in err and "Traceback" not in err
    (tmp_path / "broken.yml").write_text("name: broken\nquestion: hi\nexpect:\n  facts: ['(unclosed']\n")
    assert main(["eval", "--model", "demo", "--dir", str(tmp_path)]) == 2
    assert "is not a regular expression" in capsys.readouterr().err
    assert main(["eval", "--model", "demo", "--dir", str(EVALS), "--only", "no-such"]) == 2
    assert "no scenario named no-such" in capsys.readouterr().err


async def test_a_recorded_model_run_replays_offline_and_a_divergence_is_named(fake_anthropic: FakeAnthropic,
                                                                              tmp_path: Path) -> None:
    fake = fake_anthropic
    scenario = load_scenarios(EVALS, ["unknown-service"])
    fake.queue(tool_use(("search_resource", {"query": "billing-svc"}), say="Looking it up."),
               text("There is no service named `billing-svc` in the catalog. Known services: payments, orders, "
                    "gateway."))
    model = AnthropicModel("claude-test", api_key="test-key", base_url=fake.server.url, max_retries=0)
    fake.models.append(model)
    recorded = await run_eval(scenario, Recorder(model, tmp_path / "rec"))
    assert recorded.pass_rate == 1.0 and len(fake.requests) == 2 and not fake.rejections
    await fake.server.stop()  # offline from here on

    replayed = await run_eval(scenario, Replayer(tmp_path / "rec"))
    assert replayed.pass_rate == 1.0
    before, after = recorded.results[0].attempts[0].played, replayed.results[0].attempts[0].played
    assert (after.answer, after.model_calls, after.input_tokens) == (before.answer, 2, before.input_tokens)
    assert "claude-test" in replayed.model

    # The same recording against a changed scenario (another question): the replay says where it parted.
    changed = tmp_path / "changed"
    changed.mkdir()
    source = (EVALS / "unknown-service.yml").read_text().replace("check the billing-svc errors",
                                                                 "check the billing-svc error rate")
    (changed / "unknown-service.yml").write_text(source)
    shutil.copytree(tmp_path / "rec", tmp_path / "rec2")
    diverged = await run_eval(load_scenarios(changed), Replayer(tmp_path / "rec2"))
    played = diverged.results[0].attempts[0].played
    assert diverged.pass_rate == 0.0 and played.stop_reason == "model_error"
    assert "diverged from the recording at model call 1" in played.answer
