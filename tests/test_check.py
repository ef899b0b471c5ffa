"""`opspilot check`: one line per check with the fix; exit 1 when a required one fails — against a Redis the
test owns (persistence on, then an evicting policy), the local Slack (a token and the scopes it reports) and
the demo toolbox."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import redis

from bot.check import manifest_scopes
from bot.cli import _check
from bot.demo.workspace import LocalSlack as FakeSlack
from tests.conftest import OwnRedis, free_port
from tests.fakes.openai_api import FakeOpenAI, text
from tests.slack_harness import SECRET

FAKES = Path(__file__).resolve().parent / "fakes"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, own_redis: OwnRedis, slack: FakeSlack) -> FakeSlack:
    for name in ("OPSPILOT_CONFIG", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "SLACK_APP_TOKEN", "OPSPILOT_MODEL",
                 "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REDIS_URL", own_redis.url)
    monkeypatch.setenv("SLACK_BOT_TOKEN", slack.token)
    monkeypatch.setenv("SLACK_API_URL", slack.api_url)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    monkeypatch.setenv("OPSPILOT_DEMO_DATA", "1")  # these installations serve the demo data on purpose
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
    assert await _check(None) == 1
    out = capsys.readouterr().out
    assert "✗ Redis eviction: maxmemory-policy is allkeys-lru: paused runs and transcripts can be evicted — fix: " \
           "CONFIG SET maxmemory-policy noeviction" in out
    assert "✗ Slack scopes: missing usergroups:read — fix: add them" in out
    assert "not ready: 2 required check(s) failed" in out


async def test_snapshots_only_are_a_warning_that_says_what_a_crash_loses(
        env: FakeSlack, own_redis: OwnRedis, capsys: pytest.CaptureFixture[str]) -> None:
    """AOF off, RDB's save rules on: it was "✓ Redis persistence: RDB snapshots", though a crash goes back up to an
    hour and a confirmed change could then be said never to have run."""
    from bot.check import manifest_scopes

    env.scopes = sorted(manifest_scopes())
    server = redis.Redis.from_url(own_redis.url)
    server.config_set("appendonly", "no")
    server.config_set("save", "3600 1 300 100")
    assert await _check(None) == 0  # a warning: the installation runs
    out = capsys.readouterr().out
    assert "! Redis persistence: RDB snapshots only (save 3600 1 300 100): a Redis crash loses what was written " \
           "since the last snapshot, decisions and changes run included — fix: appendonly yes, appendfsync " \
           "everysec" in out, out


async def test_slack_refusing_the_token_and_redis_away(env: FakeSlack, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-not-the-right-one")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:9/0")
    assert await _check(None) == 2  # a token Slack refuses is the configuration: serve stops on it too (exit 2)
    out = capsys.readouterr().out
    assert "✗ Redis: not reachable at redis://127.0.0.1:9/0" in out
    assert "✗ Slack token: refused by Slack (invalid_auth)" in out and "Traceback" not in out


async def test_what_serve_refuses_of_slack_check_refuses_too(env: FakeSlack, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN")
    assert await _check(None) == 2  # serve: "SLACK_BOT_TOKEN is not set", exit 2
    assert "✗ Slack: no SLACK_BOT_TOKEN: serve refuses to start without it" in capsys.readouterr().out
    monkeypatch.setenv("SLACK_BOT_TOKEN", env.token)
    monkeypatch.delenv("SLACK_SIGNING_SECRET")
    assert await _check(None) == 2  # HTTP mode without a signing secret: serve refuses it
    assert "✗ Slack mode: HTTP mode: no SLACK_SIGNING_SECRET" in capsys.readouterr().out
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-not-the-right-one")  # said whatever Slack answers about the token
    assert await _check(None) == 2
    out = capsys.readouterr().out
    assert "✗ Slack token: refused by Slack" in out and "✗ Slack mode: HTTP mode: no SLACK_SIGNING_SECRET" in out


async def test_every_start_warns_loudly_about_an_evicting_redis(own_redis: OwnRedis, prefix: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    from bot.assembly import open_store
    from bot.config import Settings

    redis.Redis.from_url(own_redis.url).config_set("maxmemory-policy", "volatile-lru")
    store = await open_store(Settings(redis_url=own_redis.url, key_prefix=prefix), fallback=False)
    await store.close()
    assert any("maxmemory-policy is volatile-lru" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records)


async def test_every_start_warns_about_an_evicting_node_of_a_cluster(cluster_url: str, prefix: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Only the default node was asked: two primaries evicting, three starts, no word."""
    from bot.assembly import open_store
    from bot.config import Settings

    nodes = [redis.Redis(host=host, port=int(port)) for host, port in
             (n.rsplit(":", 1) for n in cluster_url.removeprefix("redis+cluster://").split(","))]
    evicting = nodes[-1]
    evicting.config_set("maxmemory-policy", "allkeys-lru")
    try:
        store = await open_store(Settings(redis_url=cluster_url, key_prefix=prefix), fallback=False)
        await store.close()
    finally:
        evicting.config_set("maxmemory-policy", "noeviction")
    assert any("maxmemory-policy is allkeys-lru" in r.getMessage() and r.levelname == "WARNING"
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


# --- check = what serve would do, every probe within its deadline (issue 37) ---


async def test_a_model_endpoint_that_never_answers_is_said_within_the_deadline(
        env: FakeSlack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """It accepts the connection and never answers: the SDK's defaults would wait 10 minutes, three times."""
    from bot.probes import TOTAL_S
    from bot.probes.model import SDK_TIMEOUT_S

    opened: list[asyncio.StreamWriter] = []

    async def accept_and_stay_silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(writer)

    server = await asyncio.start_server(accept_and_stay_silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    try:
        code = await _check(None)
    finally:
        for writer in opened:
            writer.close()
        server.close()
    took = time.monotonic() - started
    out = capsys.readouterr().out
    assert opened and took < TOTAL_S, took
    assert f"✗ Model: anthropic (claude-sonnet-4-5) did not answer within {SDK_TIMEOUT_S:g}s" in out, out
    assert code == 1 and "not ready: 1 required check(s) failed" in out


async def test_a_tool_serve_does_not_know_is_refused_as_serve_refuses_it(
        env: FakeSlack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.assembly import assemble
    from bot.config import ConfigError, load_settings

    (tmp_path / "opspilot.yml").write_text("tools: {restart_servise: {confirm_in: [prod]}}\n")
    with pytest.raises(ConfigError) as serve_says:  # what `serve` stops with (exit 2)
        await assemble(load_settings(None))
    assert await _check(None) == 2
    out = capsys.readouterr().out
    assert f"✗ Config: {serve_says.value} — fix: name a tool `opspilot tools` lists" in out
    assert "tools.restart_servise: there is no tool named 'restart_servise'" in out
    assert out.rstrip().endswith("not ready: serve would refuse this configuration")


async def test_a_rule_that_can_never_match_is_refused_as_serve_refuses_it(
        env: FakeSlack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A typo in an approvers rule would let anyone confirm the real tool (no rule there): serve refuses it, and
    check says so with the nearest name."""
    from bot.assembly import assemble
    from bot.config import ConfigError, load_settings

    env.scopes = sorted(manifest_scopes())
    (tmp_path / "opspilot.yml").write_text("slack: {approvers: {restart_servise: {prod: {users: [UBOSS]}}, "
                                           "restart_service: {Production: {users: [UBOSS]}}}}\n")
    with pytest.raises(ConfigError) as serve_says:
        await assemble(load_settings(None))
    assert await _check(None) == 2
    out = capsys.readouterr().out
    assert f"✗ Config: {serve_says.value} — fix: name a tool `opspilot tools` lists" in out
    assert "slack.approvers.restart_servise: there is no tool named 'restart_servise' (did you mean " \
           "'restart_service'?)" in out
    assert "slack.approvers.restart_service.production: no service in the catalog has environment 'production' " \
           "(known: prod, staging)" in out
    assert out.rstrip().endswith("not ready: serve would refuse this configuration")


async def test_the_model_probed_is_the_configured_one(env: FakeSlack, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeOpenAI()
    await fake.server.start()
    fake.queue(text("pong"))
    (tmp_path / "opspilot.yml").write_text("llm: {provider: openai, name: gpt-4.1-mini}\n")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{fake.server.url}/v1")
    monkeypatch.setenv("OPSPILOT_MODEL", "")  # docker-compose's ${OPSPILOT_MODEL:-}: unset, as serve reads it
    try:
        await _check(None)
    finally:
        await fake.server.stop()
    assert [r["model"] for r in fake.requests] == ["gpt-4.1-mini"]
    assert "✓ Model: openai answers as gpt-4.1-mini" in capsys.readouterr().out


async def test_a_socket_mode_token_is_asked_to_slack_not_read_by_its_prefix(
        env: FakeSlack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    env.scopes = sorted(manifest_scopes())
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-fake")
    assert await _check(None) == 2  # refused: the configuration, as serve exits on it
    assert "✗ Slack mode: Socket Mode: Slack refused SLACK_APP_TOKEN (invalid_auth) — fix: SLACK_APP_TOKEN is the " \
           "app-level token" in capsys.readouterr().out
    monkeypatch.setenv("SLACK_APP_TOKEN", env.app_token)
    assert await _check(None) == 0
    assert "✓ Slack mode: Socket Mode (SLACK_APP_TOKEN opens a connection)" in capsys.readouterr().out


async def test_a_wrong_redis_password_has_its_own_fix(env: FakeSlack, own_redis: OwnRedis,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from bot.assembly import open_store
    from bot.config import ConfigError, load_settings

    redis.Redis.from_url(own_redis.url).config_set("requirepass", "right-one")  # this test's own server
    for url, said in ((f"redis://:wrong-one@127.0.0.1:{own_redis.port}/0", "✗ Redis: refused the user or password "
                       f"in REDIS_URL at redis://…@127.0.0.1:{own_redis.port}/0 (WRONGPASS)"),
                      (own_redis.url, f"✗ Redis: asks for a password at {own_redis.url} and REDIS_URL gives none "
                                      "(NOAUTH)")):
        monkeypatch.setenv("REDIS_URL", url)
        assert await _check(None) == 2  # the configuration: serve refuses it too (not an outage to wait out)
        out = capsys.readouterr().out
        assert said in out, out
        assert "— fix: put the user and password Redis expects in REDIS_URL" in out
        assert "start Redis" not in out and "wrong-one" not in out
        with pytest.raises(ConfigError, match="refused") as serve_says:
            await open_store(load_settings(None), fallback=False)
        assert "wrong-one" not in str(serve_says.value)


async def test_loki_down_is_not_ready(env: FakeSlack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env.scopes = sorted(manifest_scopes())
    port = free_port(span=1)
    (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  logs: {{backend: loki, url: 'http://127.0.0.1:{port}'}}\n")
    assert await _check(None) == 1
    out = capsys.readouterr().out
    assert "✗ Logs (loki): Loki is unreachable" in out, out
    assert f"fix: check toolbox.logs.url (http://127.0.0.1:{port}) and its token_env: Loki must answer there" in out
    assert "✓ Metrics (fixtures)" in out and "fix: fix" not in out


async def test_json_for_automation(env: FakeSlack, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-fake")
    code = await _check(None, as_json=True)
    body = json.loads(capsys.readouterr().out)
    assert code == body["exit_code"] == 2 and body["ready"] is False  # a refused token: the configuration
    assert all(set(c) == {"name", "status", "detail", "fix"} and c["status"] in {"ok", "warn", "fail"}
               for c in body["checks"])
    by_name = {c["name"]: c for c in body["checks"]}
    assert by_name["config"] == {"name": "config", "status": "ok", "detail": "read (no file)", "fix": ""}
    assert by_name["Slack mode"]["status"] == "fail" and "invalid_auth" in by_name["Slack mode"]["detail"]
    assert by_name["Model"]["status"] == "warn"


async def test_the_bundled_demo_data_is_refused_as_serve_refuses_it(env: FakeSlack, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """No opspilot.yml: check said all ✓ while serve would answer on-call questions from the demo catalog."""
    monkeypatch.delenv("OPSPILOT_DEMO_DATA")
    code = await _check(None)
    out = capsys.readouterr().out
    assert code == 2, out  # what serve refuses to start with: a configuration error, as serve's exit
    assert "the toolbox would answer from the bundled demo data" in out and "--demo-data" in out


async def test_a_redis_that_answers_with_an_error_is_not_called_unreachable(
        env: FakeSlack, own_redis: OwnRedis, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", own_redis.url.rsplit("/", 1)[0] + "/99")  # a database it does not have
    assert await _check(None) == 2  # serve refuses it as the configuration too
    out = capsys.readouterr().out
    assert "DB index is out of range — fix: fix REDIS_URL" in out and "not reachable" not in out


@pytest.mark.parametrize(("raw", "said"), [
    ({"status": "success", "data": ["not", "an", "object"]}, "Prometheus answered without a data object"),
    ({"status": "success", "data": {"resultType": "matrix", "result": ["x"]}}, "a matrix this client cannot read"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"values": [[1, 2, 3]]}]}},
     "a matrix this client cannot read"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"pod": "a"}, "values": []},
                                                                       {"metric": {"pod": "b"}, "values": []}]}},
     "returns 2 series"),
])
async def test_every_metric_is_asked_and_a_shape_nobody_expected_is_a_failed_check(
        env: FakeSlack, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        raw: dict, said: str) -> None:
    """Only the first metric was asked: with the second's query failing, check said ready while query_metrics
    failed on every call; JSON of an unexpected shape ended check with a traceback, no verdict."""
    from tests.fakes.ops_servers import OpsFakes

    env.scopes = sorted(manifest_scopes())
    monkeypatch.setenv("OPS_TOKEN", "secret-token")
    fakes = OpsFakes(prom_series={"error_rate": [0.01, 0.01]}, prom_raw={"p95_latency_ms": raw})
    await fakes.server.start()
    try:
        (tmp_path / "opspilot.yml").write_text(
            f"toolbox:\n  metrics: {{backend: prometheus, url: '{fakes.url}'}}\n")
        assert await _check(None) == 1
        out = capsys.readouterr().out
        assert "✗ Metrics (prometheus): p95_latency_ms: " in out and said in out, out
        assert "Traceback" not in out and "✓ Logs" in out
    finally:
        await fakes.server.stop()


async def test_an_optional_mcp_server_down_is_a_warning_as_serve_takes_it(
        env: FakeSlack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """serve starts without a server that is not ``required`` (and says so): check said ✗ and not ready."""
    env.scopes = sorted(manifest_scopes())
    (tmp_path / "opspilot.yml").write_text("mcp_servers: [{name: gone, command: /nonexistent/mcp-server}]\n")
    await _check(None)
    out = capsys.readouterr().out
    assert "! MCP server gone: " in out and "✗ MCP server gone" not in out, out


async def test_a_redis_that_refuses_writes_is_not_ready(env: FakeSlack, own_redis: OwnRedis,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A full Redis, a read-only ACL user: each answers INFO and PING, and check said ready while the worker could
    write nothing."""
    server = redis.Redis.from_url(own_redis.url)
    server.config_set("maxmemory", "1")  # any write now: OOM
    assert await _check(None) == 1
    out = capsys.readouterr().out
    assert "✗ Redis writes: refused a write: command not allowed when used memory > 'maxmemory'" in out, out
    assert "raise maxmemory or free memory" in out
    server.config_set("maxmemory", "0")
    server.acl_setuser("reader", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@read", "+info",
                                                                                      "+config|get"])
    monkeypatch.setenv("REDIS_URL", f"redis://reader:pw@127.0.0.1:{own_redis.port}/0")
    assert await _check(None) == 1
    out = capsys.readouterr().out
    assert "✗ Redis writes: refused a write" in out and "+@write" in out, out
    assert server.keys("*check*") == []  # nothing of the probe left behind: it lapses in seconds, or never landed


async def test_a_model_endpoint_answering_something_else_is_not_a_model(env: FakeSlack,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A proxy's login page answered 200 at the model's URL: check said "anthropic answers", and every run failed."""
    from aiohttp import web

    async def login_page(_: web.Request) -> web.Response:
        return web.Response(text="<html><body>Sign in to the proxy</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", login_page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    try:
        code = await _check(None)
    finally:
        await runner.cleanup()
    out = capsys.readouterr().out
    assert code == 1, out
    assert "✗ Model: something answered at the anthropic endpoint, but not an Anthropic message" in out, out


async def test_a_server_that_never_answers_has_its_own_line_and_hides_no_other(
        env: FakeSlack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One MCP server that accepts stdin and never answers: the check said "✗ MCP servers: TimeoutError: " (no
    name, no detail, not ready though serve starts without it) and dropped the healthy server's line."""
    import sys

    env.scopes = sorted(manifest_scopes())
    fake = FAKES / "alertmanager_mcp.py"
    (tmp_path / "opspilot.yml").write_text(
        "mcp_servers:\n  - {name: mute, command: sleep, args: ['60'], startup_timeout_s: 1}\n"
        f"  - {{name: am, command: {sys.executable}, args: ['{fake}']}}\n")
    await _check(None)
    out = capsys.readouterr().out
    assert "! MCP server mute: did not start (did not answer within 1s)" in out, out
    assert "✓ MCP server am: up, 3 tools (none called" in out and "TimeoutError" not in out, out


async def test_the_demo_data_is_said_of_the_parts_that_read_it(env: FakeSlack, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """An installation's own catalog beside --demo-data for the rest: the catalog line said "(the bundled DEMO data,
    on purpose)" of its own catalog."""
    env.scopes = sorted(manifest_scopes())
    (tmp_path / "catalog.yml").write_text("services:\n  - {id: billing, name: Billing, environments: [prod]}\n")
    (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  catalog: {tmp_path / 'catalog.yml'}\n")
    await _check(None)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("✓ Catalog"))
    assert line.startswith("✓ Catalog: 1 services, environments prod (the bundled DEMO data for its ") and \
        "catalog" not in line.split("for its", 1)[1], line


async def test_a_prometheus_that_matches_nothing_is_said(env: FakeSlack, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong env_label: every query answered with no series, and check said "answers" of each metric."""
    from tests.fakes.ops_servers import OpsFakes

    env.scopes = sorted(manifest_scopes())
    fakes = OpsFakes(prom_series={})  # every query: an empty matrix
    await fakes.server.start()
    try:
        (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  metrics: {{backend: prometheus, url: '{fakes.url}'}}\n")
        await _check(None)
        out = capsys.readouterr().out
        assert "! Metrics (prometheus): answers, but no series for payments in prod" in out, out
    finally:
        await fakes.server.stop()


async def test_requests_without_the_code_label_are_said(env: FakeSlack, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The default error rate is 0 where no 5xx series matches: requests labelled `status` rather than `code` read
    0% whatever failed, and nothing said so."""
    from tests.fakes.ops_servers import OpsFakes

    env.scopes = sorted(manifest_scopes())
    fakes = OpsFakes(prom_series={"error_rate": [0.0, 0.0], "p95_latency_ms": [90, 95], "restarts": [0, 0]},
                     prom_missing_labels={"code"})
    await fakes.server.start()
    try:
        (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  metrics: {{backend: prometheus, url: '{fakes.url}'}}\n")
        assert await _check(None) == 1
        out = capsys.readouterr().out
        assert "✗ Metrics (prometheus): http_requests_total for payments in prod has no `code` label" in out, out
        fakes.prom_missing_labels.clear()
        await _check(None)
        assert "✓ Metrics (prometheus): answers" in capsys.readouterr().out
        fakes.prom_refuse_counts = True  # the side question refused: no failure of the metrics themselves
        await _check(None)
        assert "✓ Metrics (prometheus): answers" in capsys.readouterr().out
    finally:
        await fakes.server.stop()


# --- the doctor never prints a secret, and tells a forbidden INFO from a refusal ---


async def test_an_acl_user_without_info_is_not_a_refused_configuration(own_redis: OwnRedis, prefix: str) -> None:
    """`+@all -@dangerous` (INFO is dangerous) runs OpsPilot fine: check said "serve would refuse" (exit 2) and never
    tried the write it is there for."""
    from bot.probes.redis_probe import redis_checks

    redis.Redis.from_url(own_redis.url).acl_setuser("app", enabled=True, passwords=["+AppPw1"], keys=["*"],
                                                    channels=["*"], commands=["+@all", "-@dangerous"])
    checks = await redis_checks(f"redis://app:AppPw1@127.0.0.1:{own_redis.port}/0", prefix=prefix)
    said = {c.name: c for c in checks}
    assert not any(c.refused for c in checks), checks
    assert said["Redis"].ok and "may not run INFO" in said["Redis"].says and "AppPw1" not in said["Redis"].says
    assert "Redis writes" not in said  # the write was tried, and taken
    assert said["Redis eviction and persistence"].status == "warn"


async def test_a_wrong_password_is_not_called_missing_and_none_is_shown(own_redis: OwnRedis, prefix: str) -> None:
    from bot.probes.redis_probe import redis_checks

    redis.Redis.from_url(own_redis.url).acl_setuser("app", enabled=True, passwords=["+AppPw1"], keys=["*"],
                                                    commands=["+@all"])
    for url, word in ((f"redis://app:Wrong1@127.0.0.1:{own_redis.port}/0", "WRONGPASS"),
                      (f"redis://127.0.0.1:{own_redis.port}/0?username=app&password=Wrong1", "WRONGPASS")):
        [check] = await redis_checks(url, prefix=prefix)
        assert check.refused and word in check.says and "Wrong1" not in check.says, check


@pytest.mark.parametrize("url", ["redis://app:S3cretPw@host:6379/x", "redis://app:S3cretPw@host:99999/0",
                                 "redis://host:6379/0?password=S3cretPw&socket_timeout=abc",
                                 "redis://host:6379/0?password=S3cretPw&nonsense=1"])
def test_a_redis_url_s_password_is_never_in_its_config_error(url: str, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    monkeypatch.setenv("REDIS_URL", url)
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert "is not a Redis URL" in err and "S3cretPw" not in err, err


def test_config_hides_a_password_given_as_an_option(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0?password=S3cretPw")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "password=***" in out and "S3cretPw" not in out


@pytest.mark.parametrize("line", ["on: true", "1: 2", "~: x"])
def test_a_key_yaml_reads_as_no_name_is_one_line_not_a_traceback(line: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    config = tmp_path / "opspilot.yml"
    config.write_text(line + "\n", encoding="utf-8")
    assert main(["--config", str(config), "config"]) == 2
    err = capsys.readouterr().err
    assert "is not a setting name" in err and "Traceback" not in err, err


@pytest.mark.parametrize(("error", "status"), [
    ({"message": "You exceeded your current quota, please check your plan and billing details.",
      "type": "insufficient_quota", "code": "insufficient_quota"}, "fail"),
    ({"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}, "warn")])
async def test_an_account_out_of_credit_fails_a_rate_limit_only_warns(
        error: dict[str, str], status: str, env: FakeSlack, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """OpenAI's 429 insufficient_quota lasts until billing is fixed and every run fails: it was "overloaded right
    now … wait", a warning, and check said ready."""
    fake = FakeOpenAI()
    await fake.server.start()
    fake.queue({"refuse": (429, error)})
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{fake.server.url}/v1")
    try:
        await _check(None, as_json=True)
    finally:
        await fake.server.stop()
    model = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "Model")
    assert model["status"] == status, model


async def test_anthropic_s_out_of_credit_400_is_said_as_billing_not_as_max_tokens(
        env: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anthropic answers an account out of credit with a 400: the probe's 400 branch said to fix llm.max_tokens
    and tool support."""
    from bot.config import Settings
    from bot.probes.model import model_check
    from tests.fakes.anthropic_api import FakeAnthropic, error

    fake = FakeAnthropic()
    await fake.server.start()
    fake.queue(error(400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API. "
                     "Please go to Plans & Billing to upgrade or purchase credits."))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.server.url)
    try:
        check = await model_check(Settings())
    finally:
        await fake.server.stop()
    assert not check.ok and "out of credit" in check.says and "max_tokens" not in check.fix, check


def test_check_refuses_the_ports_serve_would_refuse() -> None:
    """PORT=65535: serve exits 2 (its workers take the ports after it), check said ready."""
    from bot.check import _ports
    from bot.config import Settings

    settings = Settings()
    settings.slack.port = 65535
    [said] = _ports(settings)
    assert said.refused and "65535" in said.says and "out of range" in said.says
    settings.slack.port = 65530  # room for the front and up to four workers
    assert _ports(settings) == []


async def test_a_slow_mcp_server_and_a_hung_backend_hide_no_other_line(env: FakeSlack, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """An MCP server slow to start and a Prometheus that never answers: the toolbox's whole report was replaced by
    "did not answer within 16s", the demo-data refusal with it (check exited 1 while serve refused: 2)."""
    opened: list[asyncio.StreamWriter] = []

    async def accept_and_stay_silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(writer)

    hung = await asyncio.start_server(accept_and_stay_silent, "127.0.0.1", 0)
    port = hung.sockets[0].getsockname()[1]
    monkeypatch.delenv("OPSPILOT_DEMO_DATA")  # the bundled logs and changes: serve refuses them
    (tmp_path / "opspilot.yml").write_text(
        "mcp_servers:\n  - {name: slow, command: sleep, args: ['60'], startup_timeout_s: 30}\n"
        f"toolbox:\n  metrics: {{backend: prometheus, url: 'http://127.0.0.1:{port}'}}\n")
    try:
        assert await _check(None) == 2  # as serve: refused for the demo data, whatever else hangs
    finally:
        for writer in opened:
            writer.close()
        hung.close()
    out = capsys.readouterr().out
    assert "✗ Data:" in out and "MCP server slow" in out, out
    assert "✗ Metrics (prometheus)" in out or "✗ Toolbox: did not answer" in out, out


def test_stats_reads_a_replica(own_redis: OwnRedis, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """`opspilot stats` only reads, yet it migrated the key layout (exit 2, "refused") and then made the work
    stream's group (READONLY, exit 3 "wait and retry", for good) on a read-only replica."""
    from bot.cli import main

    replica = redis.Redis.from_url(own_redis.url)
    replica.replicaof("127.0.0.1", "6379")  # a replica of the tests' Redis: it refuses every write
    try:
        monkeypatch.setenv("REDIS_URL", own_redis.url)
        monkeypatch.setenv("OPSPILOT_KEY_PREFIX", "stats-on-a-replica")
        assert main(["stats"]) == 0, capsys.readouterr().err
        assert "runs" in capsys.readouterr().out
    finally:
        replica.replicaof("NO", "ONE")


@pytest.mark.parametrize(("status", "body", "said"), [
    (404, "<html>Not Found</html>", "the token could not be checked"),
    (200, '{"ok": true}', "is not Slack's Web API"),
    # unreadable JSON was "failed unexpectedly: AttributeError: 'ClientResponse' object has no attribute 'data'";
    # a login page answering 200 was "Slack answered auth.test with HTTP 200 … check status.slack.com"
    (200, '{"foo": [1,2', "is not Slack's Web API"),
    (200, "<html><body>Login</body></html>", "is not Slack's Web API")])
async def test_what_answers_at_slack_api_url_but_is_not_slack_is_not_blamed_on_the_token(
        status: int, body: str, said: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy's page was "refused by Slack (http_404) — fix: copy the Bot User OAuth Token"; an {"ok": true} stub
    was "valid for workspace None"."""
    from aiohttp import web

    from bot.config import Settings
    from bot.probes.slack import slack_checks

    async def answer(_: web.Request) -> web.Response:
        return web.Response(status=status, text=body, content_type="text/html" if "<" in body else "application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port := free_port())
    await site.start()
    try:
        settings = Settings()
        settings.slack.bot_token, settings.slack.api_url = "xoxb-1", f"http://127.0.0.1:{port}/api/"
        settings.slack.signing_secret = "s"
        token = next(c for c in await slack_checks(settings) if c.name == "Slack token")
    finally:
        await runner.cleanup()
    assert not token.ok and not token.refused and said in token.says and "OAuth" not in token.fix, token


async def test_the_demo_restart_rollback_and_scale_are_demo_data_too(env: FakeSlack, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An installation's own data with no toolbox.restart: check said ready with no word on changes, while every
    confirmed restart, rollback and scale ran the demo backends and was reported done (nothing was changed)."""
    import shutil

    from tools import ops

    env.scopes = sorted(manifest_scopes())
    monkeypatch.delenv("OPSPILOT_DEMO_DATA")
    shutil.copytree(ops.DEMO_DATA, tmp_path / "data")
    (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  data_dir: {tmp_path / 'data'}\n")
    assert await _check(None) == 2  # as serve: refused
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("✗ Restart, rollback, scale:"))
    assert "recorded and reported done" in line and "fix: set toolbox.restart" in line, line
    assert "✗ Data:" not in out, out  # the files are the installation's own
    monkeypatch.setenv("OPSPILOT_DEMO_DATA", "1")  # on purpose: said, not refused
    await _check(None)
    assert "✓ Restart, rollback, scale: the demo backends, on purpose" in capsys.readouterr().out
    monkeypatch.delenv("OPSPILOT_DEMO_DATA")
    (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  data_dir: {tmp_path / 'data'}\n  rollback: {{backend: demo}}\n"
                                           "  restart: {backend: webhook, url: 'http://127.0.0.1:9/restart'}\n")
    await _check(None)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("✗ Rollback:"))
    assert "fix: set toolbox.rollback" in line and "scale" not in line, line  # a webhook restart: scale refused


async def test_no_model_key_says_the_scripted_model_reads_the_configured_systems(
        env: FakeSlack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Own systems and no key: check said the scripted model answers from "demo data only", while it read the
    configured (production) Loki and proposed restarts there."""
    import shutil

    from tools import ops

    env.scopes = sorted(manifest_scopes())
    shutil.copytree(ops.DEMO_DATA, tmp_path / "data")
    (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  data_dir: {tmp_path / 'data'}\n"
                                           "  restart: {backend: webhook, url: 'http://127.0.0.1:9/restart'}\n")
    await _check(None)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("! Model:"))
    assert "demo data only" not in line and "reading the systems configured here" in line, line


async def test_the_runbooks_folder_is_checked(env: FakeSlack, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """toolbox.docs_dir naming a folder that is not there (a typo, an unmounted volume): check said ready with no
    word on runbooks, and every search_docs at serve found nothing."""
    env.scopes = sorted(manifest_scopes())
    (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  docs_dir: {tmp_path / 'runbooks-typo'}\n")
    assert await _check(None) == 1
    out = capsys.readouterr().out
    assert f"✗ Runbooks: {tmp_path / 'runbooks-typo'} is not a folder" in out and "fix: " in out, out
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "payments-db-timeouts.md").write_text("# Payments\n## Timeouts\nraise the pool\n")
    (tmp_path / "opspilot.yml").write_text(f"toolbox:\n  docs_dir: {tmp_path / 'runbooks'}\n")
    assert await _check(None) == 0  # a warning: search works, two runbooks the catalog names are not there
    line = next(x for x in capsys.readouterr().out.splitlines() if "Runbooks:" in x)
    assert line.startswith(f"! Runbooks: 1 Markdown file(s) in {tmp_path / 'runbooks'}; "), line
    missing = line.split("not found there: ", 1)[1].split(" — fix:")[0]
    assert missing == "deploy-5xx-rollback.md, gateway-rate-limits.md", line


async def test_an_mcp_server_url_s_credentials_are_never_printed(env: FakeSlack, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """An MCP server's url with a password and a token in it: check printed it verbatim in its warning, which also
    said "it is retried in the background" (check retries nothing)."""
    from aiohttp import web

    async def refuse(_: web.Request) -> web.Response:
        return web.Response(status=401)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    refusing = runner.addresses[0][1]  # answers 401: the SDK's error quotes the url it asked
    port = free_port()  # nothing listens: it does not start
    (tmp_path / "opspilot.yml").write_text("mcp_servers:\n" + "".join(
        f"  - {{name: {name}, url: 'http://mcpuser:MCPPASS@127.0.0.1:{at}/mcp?token=MCPKEY', startup_timeout_s: 2}}\n"
        for name, at in (("remote", port), ("other", refusing))))
    try:
        with caplog.at_level("WARNING"):  # as serve and check log (INFO is -v: httpx's own lines then)
            await _check(None)
    finally:
        await runner.cleanup()
    said = capsys.readouterr()
    assert "MCP server other: down" in said.out, said.out
    everything = said.out + said.err + caplog.text
    assert "MCP server remote" in said.out and "MCPPASS" not in everything and "MCPKEY" not in everything, everything
    assert f"http://…@127.0.0.1:{port}/mcp?token=***" in caplog.text, caplog.text  # which server, still
    assert "retried in the background" not in caplog.text, caplog.text


async def test_the_model_is_asked_as_serve_asks_it(env: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The probe asked for 1 token with no tools: llm.max_tokens above the model's output limit, or an endpoint
    without tool calling, said ✓ Model while every call serve makes was refused (400)."""
    from tests.fakes.anthropic_api import FakeAnthropic
    from tests.fakes.anthropic_api import text as anthropic_text

    env.scopes = sorted(manifest_scopes())
    anthropic = FakeAnthropic(max_output=64000)
    await anthropic.server.start()
    anthropic.queue(anthropic_text("pong"))
    (tmp_path / "opspilot.yml").write_text("llm: {max_tokens: 100000}\n")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic.server.url)
    try:
        assert await _check(None) == 1
    finally:
        await anthropic.server.stop()
    out = capsys.readouterr().out
    assert "✗ Model: anthropic (claude-sonnet-4-5) refused a request as serve sends it" in out and \
        "maximum allowed number of output tokens" in out and "fix: check llm.max_tokens" in out, out
    assert anthropic.requests[0]["max_tokens"] == 100000 and anthropic.requests[0]["tools"], anthropic.requests

    monkeypatch.delenv("ANTHROPIC_API_KEY")
    openai = FakeOpenAI(tools=False)
    await openai.server.start()
    openai.queue(text("pong"))
    (tmp_path / "opspilot.yml").write_text("llm: {provider: openai, name: served-model}\n")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{openai.server.url}/v1")
    try:
        assert await _check(None) == 1
    finally:
        await openai.server.stop()
    out = capsys.readouterr().out
    assert "✗ Model: openai (served-model) refused a request as serve sends it" in out and \
        "--enable-auto-tool-choice" in out, out


async def test_a_custom_model_endpoint_failing_is_not_ready(env: FakeSlack, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """OPENAI_BASE_URL at an endpoint that always answers 500 (a broken vLLM, a proxy): said "overloaded or failing
    right now" as a warning, and ready, as if it were the provider's passing outage."""
    env.scopes = sorted(manifest_scopes())
    fake = FakeOpenAI()
    await fake.server.start()
    fake.queue({"refuse": (500, {"message": "internal error", "type": "server_error"})})
    (tmp_path / "opspilot.yml").write_text("llm: {provider: openai, name: served-model}\n")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{fake.server.url}/v1")
    try:
        assert await _check(None) == 1
    finally:
        await fake.server.stop()
    out = capsys.readouterr().out
    assert f"✗ Model: openai (served-model) answered HTTP 500 at {fake.server.url}/v1" in out and \
        "fix: check OPENAI_BASE_URL" in out, out
