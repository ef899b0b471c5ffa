"""Tools from MCP servers nobody here wrote, from the package registry (installed by scripts/mcp-servers.sh):
``mcp-server-git`` on a throwaway repository and ``prometheus-mcp-server`` against a real Prometheus, through
the real engine and, end to end, ``opspilot serve`` with the local Slack and the local Anthropic API."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.cli import main as opspilot
from bot.demo.sender import SlackSender, block_action, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.outbound.change_card import confirm_card
from core.messages import ToolCall
from state import RedisStore
from tests.conftest import free_port, until
from tests.fakes.anthropic_api import FakeAnthropic, text, tool_use
from tests.monitoring import MetricsTarget, Prometheus
from tests.slack_harness import CHANNEL, SECRET
from tools.mcp import McpHub, McpServerConfig, McpToolRule
from tools.registry import Registry, ToolContext
from tools.runtime import execute_one

ROOT = Path(__file__).resolve().parent.parent


def server_bin(package: str, program: str) -> str:
    where = Path(os.environ.get("MCP_SERVERS_HOME") or ROOT / ".mcp-servers") / package / "bin" / program
    if not where.exists():
        pytest.fail(f"{where} is missing: scripts/mcp-servers.sh installs the MCP servers the tests use")
    return str(where)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "ops@example.com")
    git(path, "config", "user.name", "Ops")
    (path / "README").write_text("one\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "first")
    (path / "fix.txt").write_text("the fix\n")
    git(path, "add", "fix.txt")  # staged, waiting for a commit
    return path


def git_server(repo: Path, **kw: Any) -> McpServerConfig:
    return McpServerConfig(name="git", command=server_bin("mcp-server-git", "mcp-server-git"),
                           args=["--repository", str(repo)], **kw)


def am_server(**kw: Any) -> dict[str, Any]:
    """The local alertmanager-mcp-server look-alike: its tools unannotated, ``delete_silence`` destructive."""
    return {"name": "am", "command": sys.executable, "args": [str(ROOT / "tests/fakes/alertmanager_mcp.py")], **kw}


UNANNOTATED = "not annotated by its server: treated as a change"


async def test_tools_gating_and_schema_come_from_the_server_but_the_rules_from_us(repo: Path,
                                                                                store: RedisStore) -> None:
    hub = McpHub([git_server(repo, deny=["git_checkout"], tools={
        "git_log": McpToolRule(read_only=False),  # stricter than the server: a change
        "git_add": McpToolRule(read_only=True),   # looser than the server: ignored
        "git_create_branch": McpToolRule(confirm="never")})])
    try:
        registry = Registry.of(await hub.start())
        assert hub.health()["git"]["state"] == "up"
        status, commit, reset = registry.get("git__git_status"), registry.get("git__git_commit"), \
            registry.get("git__git_reset")
        assert status is not None and commit is not None and reset is not None
        assert not status.mutating and status.source == "mcp:git"
        assert commit.mutating and commit.confirmation_rule() == "always" and commit.provenance is None
        assert reset.provenance == "server_destructive"  # the server says so; shown on its card
        assert status.provenance == "server_read_only"
        assert "git__git_checkout" not in registry
        log, add = registry.get("git__git_log"), registry.get("git__git_add")
        assert log is not None and log.mutating and add is not None and add.mutating
        assert log.provenance is None and add.provenance is None  # neither says "read-only" nor "destructive"
        branch = registry.get("git__git_create_branch")
        assert branch is not None and branch.mutating and branch.confirmation_rule() == "never"
        assert status.definition().input_schema["required"] == ["repo_path"]  # the server's own schema

        ctx = ToolContext(run_id="r", thread_id="t", user_id="U1", call_id="c1")
        journal = store.journal
        ran = await execute_one(ToolCall(id="c1", name="git__git_status", arguments={"repo_path": str(repo)}),
                                registry=registry, ctx=ctx, journal=journal)
        assert ran.result is not None and "fix.txt" in ran.result.content and '"ok": true' in ran.result.content
        bad = await execute_one(ToolCall(id="c2", name="git__git_status", arguments={"repo": 1}),
                                registry=registry, ctx=ctx, journal=journal)
        assert bad.result is not None and "validation_error" in bad.result.content
        assert "repo_path" in bad.result.content  # what is missing, in the schema's words
        gated = await execute_one(ToolCall(id="c3", name="git__git_commit",
                                           arguments={"repo_path": str(repo), "message": "fix"}),
                                  registry=registry, ctx=ctx, journal=journal)
        assert gated.interrupt is not None and gated.interrupt.interrupt_type == "confirm_risky"
        assert git(repo, "rev-list", "--count", "HEAD").strip() == "1"  # asked, not run
        failed = await execute_one(ToolCall(id="c4", name="git__git_show",
                                            arguments={"repo_path": str(repo), "revision": "no-such-rev"}),
                                   registry=registry, ctx=ctx, journal=journal)
        assert failed.result is not None and '"ok": false' in failed.result.content  # the server's error, read

        # The server dies: its calls fail as observations, and it is reconnected.
        killer = await asyncio.create_subprocess_exec("pkill", "-f", f"mcp-server-git --repository {repo}")
        await killer.wait()
        await until(lambda: hub.health()["git"]["reconnects"] == 1, 30)
        again = await execute_one(ToolCall(id="c5", name="git__git_status", arguments={"repo_path": str(repo)}),
                                  registry=registry, ctx=ctx, journal=journal)
        assert again.result is not None and "fix.txt" in again.result.content
    finally:
        await hub.stop()


async def test_a_card_says_what_the_server_said_and_config_trusts_only_what_it_left_unsaid(
        repo: Path, store: RedisStore, caplog: pytest.LogCaptureFixture) -> None:
    trust = McpToolRule(read_only=True)
    hub = McpHub([McpServerConfig.model_validate(am_server(tools={"get_alerts": trust, "delete_silence": trust})),
                  git_server(repo, tools={"git_add": trust, "git_reset": trust})])
    try:
        registry = Registry.of(await hub.start())
        spec = {name: registry.get(name) for name in ("am__get_alerts", "am__post_silence", "am__delete_silence",
                                                       "git__git_add", "git__git_reset")}
        assert all(s is not None for s in spec.values())
        kinds = {n: (s.mutating, s.provenance) for n, s in spec.items() if s is not None}
        assert kinds == {"am__get_alerts": (False, "config_read_only"), "am__post_silence": (True, "unannotated"),
                         "am__delete_silence": (True, "server_destructive"),  # destructiveHint: trust ignored
                         "git__git_add": (True, None),  # readOnlyHint false: trust ignored
                         "git__git_reset": (True, "server_destructive")}
        ignored = {m.split(".")[3] for r in caplog.records if "ignored" in (m := r.getMessage())}
        assert ignored == {"delete_silence", "git_add", "git_reset"}

        # An alert's run (unattended) reads a trusted tool at once; an unannotated one waits for a person.
        ctx = ToolContext(run_id="r", thread_id="t", user_id=None, call_id="c1", unattended=True)
        read = await execute_one(ToolCall(id="c1", name="am__get_alerts", arguments={}), registry=registry,
                                 ctx=ctx, journal=store.journal)
        assert read.interrupt is None and read.result is not None and "PaymentsHighErrorRate" in read.result.content
        cards: dict[str, dict[str, str]] = {}
        for name, arguments in (("am__post_silence", {"matchers": [{"name": "service", "value": "payments-api"}],
                                                      "comment": "deploying the fix"}),
                                ("am__delete_silence", {"silence_id": "s1"})):
            gated = await execute_one(ToolCall(id=name, name=name, arguments=arguments), registry=registry,
                                      ctx=ctx, journal=store.journal)
            assert gated.interrupt is not None and gated.result is None
            cards[name] = {lang: all_text({"blocks": confirm_card("tok", gated.interrupt.reason,
                                                                  gated.interrupt.payload, lang)})
                           for lang in ("en", "zh")}
        silence, delete = cards["am__post_silence"], cards["am__delete_silence"]
        assert UNANNOTATED in silence["en"] and "destructive" not in silence["en"]
        assert "其服务端未作标注：按变更处理" in silence["zh"] and "破坏" not in silence["zh"]
        assert ":rotating_light: marked destructive by its server" in delete["en"]
        assert "其服务端标为破坏性操作" in delete["zh"]
    finally:
        await hub.stop()
    # A card paused before provenance was carried: its bare ``destructive: true`` also meant "unannotated",
    # so nothing is claimed for it.
    old = all_text({"blocks": confirm_card("tok", "r", {"tool": "am__post_silence", "destructive": True})})
    assert "am__post_silence" in old and "destructive" not in old and "annotated" not in old


async def test_a_server_that_cannot_start_is_a_warning_unless_required(caplog: pytest.LogCaptureFixture) -> None:
    broken = McpServerConfig(name="nope", command="/nonexistent/mcp-server", startup_timeout_s=5)
    hub = McpHub([broken])
    try:
        assert await hub.start() == []
        assert hub.health()["nope"]["state"] == "down" and hub.health()["nope"]["error"]
        assert any("did not start" in r.getMessage() for r in caplog.records)
    finally:
        await hub.stop()
    with pytest.raises(Exception, match="did not start"):
        await McpHub([broken.model_copy(update={"required": True})]).start()


def test_opspilot_tools_lists_every_tool_with_its_source_kind_and_rule(
        repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "opspilot.yml"
    config.write_text(json.dumps({"mcp_servers": [{
        "name": "git", "command": server_bin("mcp-server-git", "mcp-server-git"), "args": ["--repository", str(repo)],
        "tools": {"git_commit": {"confirm": {"in": ["prod"], "field": "repo_path"}}}},
        am_server(tools={"get_alerts": {"read_only": True}})]}))
    assert opspilot(["--config", str(config), "tools"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    assert rows["query_logs"].split()[1:3] == ["builtin", "read-only"] and "(" not in rows["query_logs"]
    assert rows["restart_service"].split()[2] == "change"
    assert rows["git__git_status"].split()[1:4] == ["mcp:git", "read-only", "-"]
    assert rows["git__git_status"].endswith("- (read-only per its server)")
    assert rows["git__git_reset"].split()[2] == "change"
    assert rows["git__git_reset"].endswith("always (marked destructive by its server)")
    assert rows["git__git_commit"].endswith("in prod (repo_path)")  # the server: a change, not destructive
    assert rows["am__get_alerts"].split()[1:4] == ["mcp:am", "read-only", "-"]
    assert rows["am__get_alerts"].endswith("(read-only per your config)")
    assert rows["am__post_silence"].endswith(f"always ({UNANNOTATED})")
    assert any(r.levelname == "WARNING" and "mcp_servers.am.tools.get_alerts.read_only" in r.getMessage()
               and "trusted" in r.getMessage() for r in caplog.records)  # the operator's trust, said at start


async def serve(cwd: Path, slack: FakeSlack, fake: FakeAnthropic, redis_url: str, prefix: str,
                config: dict[str, Any]) -> tuple[asyncio.subprocess.Process, int]:
    (cwd / "opspilot.yml").write_text(json.dumps(config))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith(("OPSPILOT_",
                                                                                                    "SLACK_"))}
    env |= {"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.api_url,
            "PORT": str(port), "REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix, "OPSPILOT_DEMO_DATA": "1",
            "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.server.url,
            "OPSPILOT_LLM__PROVIDER": "anthropic", "OPSPILOT_LLM__NAME": "claude-test",
            "OPSPILOT_SLACK__LANGUAGE": "en", "OPSPILOT_SLACK__PROGRESS": "update"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "serve", "--workers", "0", env=env,
                                                cwd=cwd, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    await asyncio.wait_for(proc.stdout.readline(), 60)
    return proc, port


def tool_results(request: dict[str, Any]) -> list[str]:
    return [str(block.get("content")) for message in request["messages"] if message["role"] == "user"
            and isinstance(message["content"], list) for block in message["content"]
            if block.get("type") == "tool_result"]


async def test_a_git_commit_through_mcp_waits_for_confirm_in_slack_and_runs_once(
        repo: Path, tmp_path: Path, slack: FakeSlack, redis_url: str, prefix: str) -> None:
    fake = FakeAnthropic()
    await fake.server.start()
    fake.queue(tool_use(("git__git_status", {"repo_path": str(repo)}), say="Checking the repository."),
               tool_use(("git__git_commit", {"repo_path": str(repo), "message": "Ship the fix"})),
               lambda body: text("Committed: " + tool_results(body)[-1][:200]))
    proc, port = await serve(tmp_path, slack, fake, redis_url, prefix, {"mcp_servers": [{
        "name": "git", "command": server_bin("mcp-server-git", "mcp-server-git"),
        "args": ["--repository", str(repo)]}]})
    try:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/healthz") as answer:
            health = await answer.json()
        assert health["mcp_servers"]["git"]["state"] == "up" and health["mcp_servers"]["git"]["tools"] >= 10
        sender = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
        await sender.event(mention(CHANNEL, "UREQ", "commit the staged fix", "700.1"))
        await until(lambda: any(b["action_id"] == "opspilot_confirm" for m in slack.thread(CHANNEL, "700.1")
                                for b in buttons(m)), 60)
        tools = {t["name"]: t for t in fake.requests[0]["tools"]}
        assert tools["git__git_commit"]["input_schema"]["required"] == ["repo_path", "message"]
        assert "fix.txt" in tool_results(fake.requests[1])[0]  # the read ran at once, unasked
        card = next(m for m in slack.thread(CHANNEL, "700.1") if any(b["action_id"] == "opspilot_confirm"
                                                                     for b in buttons(m)))
        assert "git__git_commit" in all_text(card) and "Ship the fix" in all_text(card)
        await asyncio.sleep(1.0)
        assert git(repo, "rev-list", "--count", "HEAD").strip() == "1"  # never before Confirm
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
        click = block_action(user="UAPPROVER", channel=CHANNEL, message=card, action_id="opspilot_confirm",
                             value=token)
        await asyncio.gather(sender.action(click), sender.action(click))  # a double click
        await until(lambda: any("Committed:" in all_text(m) for m in slack.thread(CHANNEL, "700.1")), 60)
        assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"  # exactly once
        assert git(repo, "log", "-1", "--format=%s").strip() == "Ship the fix"
        assert not fake.rejections
    finally:
        proc.terminate()
        await proc.wait()
        await fake.server.stop()


async def test_an_alert_run_reads_a_trusted_unannotated_tool_unasked_and_cards_the_rest_as_unannotated(
        tmp_path: Path, slack: FakeSlack, redis_url: str, prefix: str) -> None:
    """As alertmanager-mcp-server would be configured: ``get_alerts`` trusted read-only, the rest left alone."""
    alerts, fake = "C0ALERTS", FakeAnthropic()
    await fake.server.start()
    fake.queue(tool_use(("am__get_alerts", {}), say="Reading Alertmanager."),
               tool_use(("am__post_silence", {"matchers": [{"name": "service", "value": "payments-api"}],
                                              "comment": "while the fix rolls out"})))
    proc, port = await serve(tmp_path, slack, fake, redis_url, prefix, {
        "slack": {"alert_sources": [{"channel": alerts, "bot_ids": ["B0ALERTS"], "mode": "investigate"}]},
        "mcp_servers": [am_server(tools={"get_alerts": {"read_only": True}})]})
    try:
        slack.deliver = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET).event
        head = "[FIRING:1] PaymentsHighErrorRate payments (prod critical)"
        async with aiohttp.ClientSession() as http, http.post(slack.add_webhook(alerts), json={
                "username": "Alertmanager", "attachments": [{"title": head, "fallback": head, "text": (
                    "*Labels:*\n• alertname: `PaymentsHighErrorRate`\n• service: `payments`\n"
                    "• environment: `prod`")}]}) as answer:
            assert answer.status == 200
        [alert_ts] = [ts for (channel, ts) in slack.messages if channel == alerts]

        def card() -> dict[str, Any] | None:
            return next((m for m in slack.thread(alerts, alert_ts)
                         if any(b["action_id"] == "opspilot_confirm" for b in buttons(m))), None)

        await until(lambda: card() is not None, 60)
        assert "PaymentsHighErrorRate" in tool_results(fake.requests[1])[0]  # read at once, nobody asked
        shown = all_text(card() or {})
        assert "am__post_silence" in shown and UNANNOTATED in shown and "destructive" not in shown
        assert not fake.rejections
    finally:
        proc.terminate()
        await proc.wait()
        await fake.server.stop()


async def test_a_promql_query_through_prometheus_mcp_server_reaches_the_answer(
        tmp_path: Path, slack: FakeSlack, redis_url: str, prefix: str) -> None:
    target, prometheus, fake = MetricsTarget(), Prometheus(), FakeAnthropic()
    await target.start()
    await fake.server.start()
    query = 'sum(rate(http_requests_total{code="500"}[30s])) / sum(rate(http_requests_total[30s]))'

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        result = json.loads(tool_results(body)[-1])["data"]
        value = float(result["result"][0]["value"][1])
        return text(f"The 5xx ratio is {value:.1%}.")

    fake.queue(tool_use(("prom__execute_query", {"query": query}), say="Asking Prometheus."), answer)
    proc = None
    try:
        await prometheus.start(target.server.url.removeprefix("http://") if target.server else "", "127.0.0.1:9")
        proc, port = await serve(tmp_path, slack, fake, redis_url, prefix, {"mcp_servers": [{
            "name": "prom", "command": server_bin("prometheus-mcp-server", "prometheus-mcp-server"),
            "env": {"PROMETHEUS_URL": prometheus.url}}]})
        await prometheus.has_points(query)  # two scrapes at least, so the rate has a value
        sender = SlackSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
        await sender.event(mention(CHANNEL, "UREQ", "what share of payments requests fail?", "710.1"))
        await until(lambda: any("5xx ratio" in all_text(m) for m in slack.thread(CHANNEL, "710.1")), 60)
        final = next(all_text(m) for m in slack.thread(CHANNEL, "710.1") if "5xx ratio" in all_text(m))
        assert "The 5xx ratio is 4.8%." in final or "The 5xx ratio is 4.7%." in final, final
        assert not fake.rejections
    finally:
        if proc is not None:
            proc.terminate()
            await proc.wait()
        prometheus.stop()
        await target.stop()
        await fake.server.stop()


async def test_a_streamable_http_server(store: RedisStore) -> None:
    """prometheus-mcp-server over streamable HTTP (its own HTTP transport), against a real Prometheus."""
    target, prometheus = MetricsTarget(), Prometheus()
    await target.start()
    port = free_port()
    server: asyncio.subprocess.Process | None = None
    hub: McpHub | None = None
    try:
        await prometheus.start(target.server.url.removeprefix("http://") if target.server else "", "127.0.0.1:9")
        env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "PROMETHEUS_URL": prometheus.url,
               "PROMETHEUS_MCP_SERVER_TRANSPORT": "http", "PROMETHEUS_MCP_BIND_HOST": "127.0.0.1",
               "PROMETHEUS_MCP_BIND_PORT": str(port)}
        server = await asyncio.create_subprocess_exec(
            server_bin("prometheus-mcp-server", "prometheus-mcp-server"), env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        for _ in range(150):  # the server takes a moment to listen
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        hub = McpHub([McpServerConfig(name="prom", url=f"http://127.0.0.1:{port}/mcp",
                                      headers_from_env={"X-Scope-OrgID": "HOME"})])
        registry = Registry.of(await hub.start())
        query = registry.get("prom__execute_query")
        assert query is not None and not query.mutating
        content = ""
        for i in range(60):  # until Prometheus has scraped the target once
            ctx = ToolContext(run_id="r", thread_id="t", user_id="U1", call_id=f"q{i}")
            answer = await execute_one(ToolCall(id=f"q{i}", name="prom__execute_query", arguments={"query": "up"}),
                                       registry=registry, ctx=ctx, journal=store.journal)
            assert answer.result is not None and '"ok": true' in answer.result.content
            content = answer.result.content
            if '"job": "payments"' in content:
                break
            await asyncio.sleep(0.5)
        assert '"job": "payments"' in content, content[:500]
    finally:
        if hub is not None:
            await hub.stop()
        if server is not None and server.returncode is None:
            server.terminate()
            await server.wait()
        prometheus.stop()
        await target.stop()


async def test_a_server_printing_a_banner_is_one_log_line_not_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """A server that prints a line of its own on stdout before speaking MCP: the SDK logged its parser's whole
    traceback (the server then worked)."""
    fake = ROOT / "tests/fakes/alertmanager_mcp.py"
    banner = f"print('alertmanager-mcp v1 starting', flush=True); import runpy; runpy.run_path({str(fake)!r}, " \
             "run_name='__main__')"
    hub = McpHub([McpServerConfig(name="am", command=sys.executable, args=["-c", banner])])
    try:
        assert len(await hub.start()) == 3
    finally:
        await hub.stop()
    said = [r for r in caplog.records if r.name.startswith("mcp.")]
    assert said and all(r.exc_info is None and "\n" not in r.getMessage() for r in said), said
