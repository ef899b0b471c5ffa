"""`opspilot check`: one line per check with the fix; exit 1 when a required one fails — against a Redis the
test owns (persistence on, then an evicting policy), the local Slack (a token and the scopes it reports) and
the demo toolbox."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from bot.cli import _check
from bot.demo.workspace import LocalSlack as FakeSlack
from tests.conftest import OwnRedis
from tests.slack_harness import SECRET


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, own_redis: OwnRedis, slack: FakeSlack) -> FakeSlack:
    for name in ("OPSPILOT_CONFIG", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "SLACK_APP_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REDIS_URL", own_redis.url)
    monkeypatch.setenv("SLACK_BOT_TOKEN", slack.token)
    monkeypatch.setenv("SLACK_API_URL", slack.api_url)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    return slack


async def test_a_ready_installation_passes_and_says_what_is_optional(env: FakeSlack,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from bot.check import manifest_scopes

    env.scopes = sorted(manifest_scopes())
    assert await _check(None) == 0  # in this loop: the local Slack answers from it
    out = capsys.readouterr().out
    assert "✓ Redis persistence: AOF on" in out and "✓ Redis eviction: maxmemory-policy is noeviction" in out
    assert "✓ Slack token: valid for workspace Fake (T0001)" in out and "✓ Slack mode: HTTP mode" in out
    assert "✓ Slack scopes: every scope manifest.yml asks for" in out
    assert "! Model: no key: the scripted demo model will answer" in out and out.rstrip().endswith("ready")
    assert "**" not in out  # a terminal shows Markdown's stars literally


async def test_failures_say_the_fix_and_exit_1(env: FakeSlack, own_redis: OwnRedis, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from bot.check import manifest_scopes

    env.scopes = sorted(manifest_scopes() - {"usergroups:read"})
    redis.Redis.from_url(own_redis.url).config_set("maxmemory-policy", "allkeys-lru")
    config = tmp_path / "opspilot.yml"
    config.write_text("slack:\n  approvers: {restart_service: {Production: {users: [UBOSS]}}}\n")
    assert await _check(None) == 1  # the rule is what serve warns about and starts without: said as "!"
    out = capsys.readouterr().out
    assert "✗ Redis eviction: maxmemory-policy is allkeys-lru: paused runs and transcripts can be evicted — fix: " \
           "CONFIG SET maxmemory-policy noeviction" in out
    assert "✗ Slack scopes: missing usergroups:read — fix: add them" in out
    assert "! Config rule: slack.approvers.restart_service.production: no service in the catalog has environment " \
           "'production' (known: prod, staging) — fix: name an environment the catalog has" in out
    assert "not ready: 2 required check(s) failed" in out


async def test_slack_refusing_the_token_and_redis_away(env: FakeSlack, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-not-the-right-one")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:9/0")
    assert await _check(None) == 1
    out = capsys.readouterr().out
    assert "✗ Redis: not reachable at redis://127.0.0.1:9/0" in out
    assert "✗ Slack token: refused by Slack (invalid_auth)" in out and "Traceback" not in out


async def test_every_start_warns_loudly_about_an_evicting_redis(own_redis: OwnRedis, prefix: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    from bot.assembly import open_store
    from bot.config import Settings

    redis.Redis.from_url(own_redis.url).config_set("maxmemory-policy", "volatile-lru")
    store = await open_store(Settings(redis_url=own_redis.url, key_prefix=prefix), fallback=False)
    await store.close()
    assert any("maxmemory-policy is volatile-lru" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records)


async def test_scopes_granted_beyond_the_manifest_are_said_not_failed(env: FakeSlack,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """An app installed from an older manifest keeps scopes nothing uses any more: said, with the fix."""
    from bot.check import manifest_scopes

    env.scopes = sorted(manifest_scopes() | {"im:write", "reactions:write"})
    assert await _check(None) == 0
    out = capsys.readouterr().out
    assert "✓ Slack scopes: every scope manifest.yml asks for" in out
    assert "! Slack scopes beyond the manifest: granted but unused: im:write, reactions:write — fix: remove them" \
           in out
