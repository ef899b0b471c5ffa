"""The configuration reference is generated from the settings models: the checked-in page is today's, every key
says what it means, the environment variables it names work, and `opspilot config` hides secrets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bot.config import load_settings
from bot.reference import END, START, markdown, rows, updated

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_the_checked_in_page_is_the_generated_one() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert page == updated(page), ("docs/configuration.md is stale: run "
                                   "`./scripts/opspilot config --reference --write docs/configuration.md`")
    assert page.count(START) == page.count(END) == 1


def test_every_key_says_what_it_means() -> None:
    silent = [key for key, kind, _, _, meaning in rows() if not meaning.strip() and not kind.startswith("with")]
    assert not silent, f"keys without a description in their settings model: {silent}"


def test_a_section_under_a_new_key_would_show_up() -> None:
    keys = {key for key, *_ in rows()}
    # one key of each shape: plain, nested, list of sections, map of sections, a backend's variant
    for key in ("redis_url", "limits.max_steps", "slack.alert_sources[].channel", "tools.<name>.confirm_in",
                "toolbox.metrics.url", "toolbox.changes[].url", "mcp_servers[].tools.<name>.confirm.in"):
        assert key in keys, key
    assert "| `toolbox.metrics` | with `backend: prometheus` |" in markdown()


@pytest.mark.parametrize(("variable", "value", "read"), [
    ("OPSPILOT_LIMITS__MAX_STEPS", "5", lambda s: s.limits.max_steps == 5),
    ("OPSPILOT_TOOLBOX__VERIFY__POLL_S", "3.5", lambda s: s.toolbox.verify.poll_s == 3.5),
    ("OPSPILOT_SLACK__ALLOWED_CHANNELS", '["c0ops"]', lambda s: s.slack.allowed_channels == ["C0OPS"]),
    ("OPSPILOT_KEY_PREFIX", "ops2", lambda s: s.key_prefix == "ops2"),
])
def test_the_variables_the_page_names_are_read(monkeypatch: pytest.MonkeyPatch, variable: str, value: str,
                                               read: object) -> None:
    assert f"`{variable}`" in markdown()
    monkeypatch.setenv(variable, value)
    monkeypatch.delenv("OPSPILOT_CONFIG", raising=False)
    assert read(load_settings())  # type: ignore[operator]


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120, check=False)


def test_opspilot_config_shows_what_is_in_effect_with_secrets_hidden(tmp_path: Path) -> None:
    (tmp_path / "opspilot.yml").write_text(yaml.safe_dump({
        "limits": {"max_steps": 6},
        "mcp_servers": [{"name": "gh", "command": "gh-mcp", "env": {"GITHUB_TOKEN": "ghp_sekrit"}}]}))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PAGE.parents[1]), "SLACK_BOT_TOKEN": "xoxb-sekrit",
           "REDIS_URL": "redis://:hunter2@redis.internal:6379/0", "OPSPILOT_LIMITS__MAX_WALL_TIME_S": "90"}
    shown = _cli("config", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    effective = yaml.safe_load(shown.stdout)
    assert effective["limits"] == {**effective["limits"], "max_steps": 6, "max_wall_time_s": 90.0}
    assert effective["redis_url"] == "redis://:***@redis.internal:6379/0"
    assert effective["slack"]["bot_token"] == "(set, hidden)"
    assert effective["mcp_servers"][0]["env"] == {"GITHUB_TOKEN": "(set, hidden)"}
    assert "sekrit" not in shown.stdout and "hunter2" not in shown.stdout


def test_opspilot_config_reference_prints_and_writes_the_page(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PAGE.parents[1])}
    printed = _cli("config", "--reference", env=env, cwd=tmp_path)
    assert printed.returncode == 0 and printed.stdout == markdown()
    page = tmp_path / "page.md"
    page.write_text(f"# Mine\n\n{START}\nold\n{END}\n\nkept\n")
    written = _cli("config", "--reference", "--write", str(page), env=env, cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert page.read_text() == f"# Mine\n\n{START}\n{markdown()}{END}\n\nkept\n"
    (tmp_path / "bare.md").write_text("no markers\n")
    refused = _cli("config", "--reference", "--write", str(tmp_path / "bare.md"), env=env, cwd=tmp_path)
    assert refused.returncode == 1 and "markers" in refused.stderr and "Traceback" not in refused.stderr
