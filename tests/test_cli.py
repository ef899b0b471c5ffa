"""The README's first command, as a newcomer runs it: `opspilot chat` plays the OpsPilot scenario."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

from bot.demo.workspace import LocalSlack as FakeSlack
from state import RedisStore
from tests.conftest import free_port
from tests.slack_harness import open_workspace

QUESTION = "看看支付服务最近报错，顺便对照一下文档里的处理建议"


def opspilot() -> list[str]:
    exe = shutil.which("opspilot", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "bot.cli"]


async def run_cli(args: list[str], stdin: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OPSPILOT_")}
    base["OPSPILOT_DEMO_DATA"] = "1"  # serve's and worker's cases here are about ports and config, not data
    proc = await asyncio.create_subprocess_exec(
        *opspilot(), *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**base, **env}, cwd=cwd)
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_chat_plays_the_opspilot_scenario_on_redis(redis_url: str, prefix: str, store: RedisStore,
                                                         tmp_path: Path) -> None:
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
    code, out, err = await run_cli(["chat", "--user", "U_ONCALL"],
                                   f"{QUESTION}\nrestart it in prod\ny\nquit\n", env, tmp_path)

    assert code == 0, err
    assert "scripted demo model" in out and "store: Redis (durable)" in out
    # Parallel lookups, then an answer with its evidence.
    assert "→ search_resource" in out and "→ search_docs" in out
    # Then the dependent step: logs and metrics of the service it found.
    assert '→ query_logs(service_id="payments", environment="prod")' in out and "→ query_metrics" in out
    assert "docs/payments-db-timeouts.md" in out and "83× timeout acquiring connection from pool" in out
    assert "错误率 4.3% (持续偏高" in out  # the question is Chinese: so is the answer's wording, trend words too
    # "restart it in prod" is answered in the conversation's language, its first question's.
    assert "错误率从 4.3% 降到 0.30%" in out
    # The restart is gated, confirmed, executed and reported.
    assert "restart_service 会改动 prod，需要有人确认" in out and "确认执行？[y/N]" in out  # the conversation's words
    assert "已重启 payments（prod），滚动发布已完成" in out
    assert "`" not in out.split("opspilot>")[-1] and "_source" not in out  # rendered, not raw mrkdwn
    assert "Traceback" not in out + err
    stats = await store.stats(3600)
    assert stats.runs == 2 and stats.get("resumed") == 1

    code, out, err = await run_cli(["stats", "--window", "1h"], "", env, tmp_path)
    assert code == 0, err
    assert "runs                        2" in out and "final_answer" in out


async def test_chat_answers_questions_about_restarts_without_offering_one(redis_url: str, prefix: str,
                                                                          tmp_path: Path) -> None:
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
    code, out, err = await run_cli(["chat", "--user", "U_ONCALL"],
                                   "how many restarts did payments have in prod?\nwhat happened at 09:11?\nquit\n",
                                   env, tmp_path)
    assert code == 0, err
    assert "Metric restarts (prod, 60 min): now 0" in out and "Restarts in the change history, last 24 h: 0" in out
    assert "restart_service" not in out and "[y/N]" not in out  # never proposed, never asked
    assert "Around 09:11 UTC" in out and "no service named" not in out


async def test_chat_refuses_a_form_answer_in_the_conversation_s_language(redis_url: str, prefix: str,
                                                                          tmp_path: Path) -> None:
    """A Chinese conversation's every line is Chinese; its form's refusals were the engine's English ("invalid
    values: environment: nothing chosen")."""
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
    code, out, err = await run_cli(["chat", "--user", "alice"], "重启 payments\n\n3\n2\n", env, tmp_path)
    assert code == 0, err
    assert "未接受：请选择环境" in out and "须为以下之一" in out, out
    assert "invalid values" not in out and "nothing chosen" not in out


async def test_chat_rolls_back_only_after_a_card_showing_from_and_to(redis_url: str, prefix: str,
                                                                    tmp_path: Path) -> None:
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
    code, out, err = await run_cli(["chat", "--user", "U_ONCALL"],
                                   "was it the deploy that broke orders in staging?\nroll back orders in staging\n"
                                   "y\nquit\n", env, tmp_path)
    assert code == 0, err
    asked, _, after = out.partition("[y/N]")
    assert "Yes: the errors began 5 s after 2026.12.02-1" in asked
    assert "Release: 2026.12.02-1 → 2026.12.01-4" in asked and "orders-api:4.2.0 → orders-api:4.1.9" in asked
    assert "Rolled back orders in staging: 2026.12.02-1 → 2026.12.01-4, rollout complete" in after


async def test_chat_without_redis_says_it_is_not_durable(tmp_path: Path) -> None:
    code, out, err = await run_cli(["chat"], "restart payments\n2\nquit\n",
                                   {"REDIS_URL": "redis://127.0.0.1:9/0"}, tmp_path)
    assert code == 0, err
    assert "NOT durable" in out
    # "restart payments" as a first message: the service is looked up, then the restart asks where.
    assert "→ restart_service" in out and "environment — 1) prod / 2) staging" in out
    assert "Restarted payments in staging" in out


async def test_a_bad_config_is_one_readable_line(tmp_path: Path) -> None:
    (tmp_path / "opspilot.yml").write_text("limits:\n  max_stepz: 2\n")
    code, _, err = await run_cli(["chat"], "", {}, tmp_path)
    assert code == 2
    assert "limits.max_stepz" in err and "did you mean 'max_steps'" in err and "Traceback" not in err


async def test_stats_without_redis_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = await run_cli(["stats"], "", {"REDIS_URL": "redis://127.0.0.1:9/0"}, tmp_path)
    assert code == 3 and "Redis unreachable" in err and "Traceback" not in err  # unavailable at start


async def test_a_redis_that_refuses_the_url_is_the_configuration_not_an_outage(redis_url: str,
                                                                               tmp_path: Path) -> None:
    wrong = redis_url.rsplit("/", 1)[0] + "/99"  # a database it does not have: waiting will not help
    code, _, err = await run_cli(["stats"], "", {"REDIS_URL": wrong}, tmp_path)
    assert code == 2 and "refused: DB index is out of range (check REDIS_URL" in err and "Traceback" not in err


@pytest.mark.parametrize("answer", ["n"])
async def test_declining_at_the_prompt_runs_nothing(redis_url: str, prefix: str, store: RedisStore,
                                                    tmp_path: Path, answer: str) -> None:
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
    code, out, _ = await run_cli(["chat"], f"payments errors\nrestart it\n1\n{answer}\nquit\n", env, tmp_path)
    assert code == 0
    assert "environment — 1) prod / 2) staging" in out
    assert "The restart did not run" in out and "⊘ restart_service declined" in out  # said no: not a failure


# What a process loads only where it is configured. (Not "opentelemetry" itself: redis-py imports the OpenTelemetry
# API and metrics SDK on its own whenever they are installed; the tracing SDK and bot.telemetry are ours.)
INTEGRATIONS = ("kubernetes_asyncio", "mcp", "openai", "anthropic", "jsonschema", "bot.telemetry",
                "opentelemetry.sdk.trace")
_LOADED = """
import asyncio, sys
import bot.cli
print(*sys.modules)
from bot.assembly import assemble
from bot.config import load_settings
async def start() -> None:
    app = await assemble(load_settings(None))
    await app.close_tools()
    await app.close_connections()
asyncio.run(start())
print(*sys.modules)
"""


async def _loaded(env: dict[str, str], cwd: Path) -> tuple[set[str], set[str]]:
    """The integrations a fresh process holds after importing the worker's entry module (`opspilot serve` runs
    each worker as ``python -m bot.cli worker``), and after assembling the engine as a worker does at start."""
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OPSPILOT_")}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _LOADED, env={**base, **env}, cwd=cwd,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    imported, started = (set(line.split()) for line in out.decode().splitlines()[-2:])
    return set(INTEGRATIONS) & imported, set(INTEGRATIONS) & started


async def test_a_worker_loads_no_integration_that_is_not_configured(redis_url: str, prefix: str, store: RedisStore,
                                                                    tmp_path: Path) -> None:
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
    assert await _loaded(env, tmp_path) == (set(), set())

    # Configured, it is loaded where its backend is built: at start, not by the import.
    (tmp_path / "opspilot.yml").write_text("toolbox:\n  restart:\n    backend: kubernetes\n"
                                           "    api_url: https://127.0.0.1:9\n    token_env: KUBE_TOKEN\n")
    # (kubernetes_asyncio imports kubernetes_validate, and so jsonschema, when it is installed: the dev extra's)
    with_it = {"jsonschema"} if importlib.util.find_spec("kubernetes_validate") else set()
    assert await _loaded(env | {"KUBE_TOKEN": "t"}, tmp_path) == (set(), {"kubernetes_asyncio"} | with_it)


def test_cli_conventions(capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import _parser

    with pytest.raises(SystemExit) as done:
        _parser().parse_args(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("opspilot ")
    after = _parser().parse_args(["chat", "-v", "--config", "team.yml"])  # global flags after the subcommand
    assert after.verbose and after.config == "team.yml"
    before = _parser().parse_args(["--config", "ops.yml", "-v", "tools"])  # …and still before it
    assert before.verbose and before.config == "ops.yml"
    assert _parser().parse_args(["serve", "--port", "8080"]).port == 8080
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "--help"])
    page = capsys.readouterr().out
    assert "Serve Slack: a front" in page and "example:" in page and "SLACK_SIGNING_SECRET" in page
    assert "REDIS_URL" in page


async def test_a_start_does_not_warn_about_the_token(redis_url: str, prefix: str, slack: FakeSlack,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    ws = await open_workspace(redis_url, prefix, slack)
    await ws.stop()
    assert not [r for r in caplog.records if "`token`" in r.getMessage()]


async def test_demo_on_a_port_in_use_is_one_line_and_exit_3(redis_url: str, prefix: str, tmp_path: Path) -> None:
    """As `serve` says it (the same words), with nothing the demo opened left unclosed."""
    port = free_port()
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        code, out, err = await run_cli(["demo", "--port", str(port)], "", env, tmp_path)
    assert code == 3 and out == "", err
    assert err.count("\n") == 1 and f"port {port} is in use (Address already in use)" in err, err


@pytest.mark.parametrize(("args", "env"), [(["demo", "--port", "99999"], {}), (["demo"], {"PORT": "70000"}),
                                           (["serve", "--port", "99999"], {}), (["worker", "--port", "65536"], {})])
async def test_a_port_out_of_range_is_one_line_and_exit_2(args: list[str], env: dict[str, str],
                                                         tmp_path: Path) -> None:
    code, out, err = await run_cli(args, "", {"REDIS_URL": "redis://127.0.0.1:9/0", **env}, tmp_path)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and "must be a port number from 1 to 65535" in err, err
    assert ("PORT" if env else "--port") in err


BAD_CONFIG_COMMANDS = [["check"], ["chat"], ["demo"], ["stats"], ["report", "--thread", "C0OPS:1.1", "--no-model"],
                       ["config"]]


@pytest.mark.parametrize("args", BAD_CONFIG_COMMANDS[:5], ids=lambda a: a[0])
async def test_a_redis_url_without_a_scheme_is_refused_at_load(args: list[str], tmp_path: Path) -> None:
    code, out, err = await run_cli(args, "quit\n", {"REDIS_URL": "localhost:6379"}, tmp_path)
    said = out if args == ["check"] else err  # check says it as its failed config line, on stdout
    assert code == 2, out + err  # bad config is 2 everywhere, check included
    assert "redis_url (REDIS_URL): Value error, 'localhost:6379' is not a Redis URL" in said
    assert "redis://, rediss:// (TLS) or unix://" in said
    assert "Traceback" not in out + err
    if args == ["check"]:
        assert out.startswith("✗ config: invalid configuration")


@pytest.mark.parametrize("args", [a for a in BAD_CONFIG_COMMANDS if a[0] != "demo"], ids=lambda a: a[0])
async def test_a_config_file_that_is_not_utf8_is_one_line(args: list[str], tmp_path: Path) -> None:
    (tmp_path / "opspilot.yml").write_bytes(b"\xff\xfegarbage")
    code, out, err = await run_cli(args, "quit\n", {"REDIS_URL": "redis://127.0.0.1:9/0"}, tmp_path)
    said = out.split("not ready")[0] if args == ["check"] else err  # check's verdict follows its config line
    assert code == 2, out + err
    assert said.count("\n") == 1 and "opspilot.yml is not UTF-8 text (at byte 0): save it as UTF-8" in said, said
    assert "Traceback" not in out + err


async def test_workers_ports_past_65535_are_one_line(tmp_path: Path) -> None:
    env = {"REDIS_URL": "redis://127.0.0.1:9/0", "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}
    code, _, err = await run_cli(["serve", "--port", "65535", "--workers", "2"], "", env, tmp_path)
    assert code != 0 and "Traceback" not in err, err
    assert "port 65536 is out of range" in err and err.strip().count("\n") == 0, err


# One exit-code table (docs/configuration.md), obeyed by every subcommand (issue 37).


async def test_check_and_serve_refuse_a_misspelled_tool_alike(redis_url: str, prefix: str, tmp_path: Path) -> None:
    (tmp_path / "opspilot.yml").write_text("tools: {restart_servise: {confirm_in: [prod]}}\n")
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix, "SLACK_BOT_TOKEN": "xoxb-1",
           "SLACK_SIGNING_SECRET": "s", "SLACK_API_URL": "http://127.0.0.1:9/api/"}
    said = "tools.restart_servise: there is no tool named 'restart_servise'"
    serve_code, _, serve_err = await run_cli(["serve", "--workers", "0", "--port", str(free_port())], "", env,
                                             tmp_path)
    check_code, check_out, _ = await run_cli(["check"], "", env, tmp_path)
    assert serve_code == check_code == 2, (serve_err, check_out)
    assert said in serve_err and f"✗ Config: {said}" in check_out


@pytest.mark.parametrize("command", ["serve", "worker", "demo"])
async def test_a_port_in_use_is_exit_3_everywhere(command: str, redis_url: str, prefix: str, tmp_path: Path) -> None:
    port = free_port()
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix, "SLACK_BOT_TOKEN": "xoxb-1",
           "SLACK_SIGNING_SECRET": "s"}
    extra = ["--workers", "0"] if command == "serve" else []
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", port))
        squatter.listen()
        code, _, err = await run_cli([command, "--port", str(port), *extra], "", env, tmp_path)
    assert code == 3 and f"port {port} is in use" in err, err


async def test_a_worker_serves_its_health_on_dollar_port(redis_url: str, prefix: str, tmp_path: Path) -> None:
    """The image sets PORT and its health check asks $PORT: a worker without --port served nothing at all (here the
    port is taken, so a worker that reads $PORT says so and exits 3)."""
    port = free_port()
    env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix, "SLACK_BOT_TOKEN": "xoxb-1", "PORT": str(port)}
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", port))
        squatter.listen()
        code, _, err = await run_cli(["worker"], "", env, tmp_path)
    assert code == 3 and f"port {port} is in use" in err, err


def test_serve_refuses_a_negative_number_of_workers(capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["serve", "--workers", "-1"])
    assert exited.value.code == 2 and "not a whole number of 0 or more" in capsys.readouterr().err


def test_config_write_says_updated_only_when_it_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    page = tmp_path / "configuration.md"
    page.write_text("# stale\n<!-- reference:start -->\nold\n<!-- reference:end -->\n", encoding="utf-8")
    assert main(["config", "--reference", "--write", str(page)]) == 0
    assert capsys.readouterr().out == f"updated {page}\n"
    written = page.stat().st_mtime_ns
    assert main(["config", "--reference", "--write", str(page)]) == 0
    assert capsys.readouterr().out == f"{page} is up to date\n" and page.stat().st_mtime_ns == written


def test_the_exit_code_table_is_the_one_the_code_uses() -> None:
    from bot import exits

    page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = {int(line.split("|")[1]) for line in page.splitlines() if line.startswith("| ") and
            line.split("|")[1].strip().isdigit()}
    assert rows == {exits.OK, exits.FAILED, exits.CONFIG, exits.UNAVAILABLE, exits.INTERRUPTED}


async def test_the_demo_names_the_store_it_uses(redis_url: str, prefix: str, tmp_path: Path) -> None:
    """"Offline, nothing to configure" must not mean "silently on whatever Redis answers on localhost"."""
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OPSPILOT_")}
    for url, says in ((redis_url, f"store: Redis at {redis_url}, keys under {prefix}-demo:"),
                      ("redis://127.0.0.1:9/0", "store: in-process, NOT durable (no Redis answered at "
                                                "redis://127.0.0.1:9/0)")):
        env = base | {"REDIS_URL": url, "OPSPILOT_KEY_PREFIX": prefix}
        proc = await asyncio.create_subprocess_exec(*opspilot(), "demo", "--port", str(free_port()), env=env,
                                                    cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            banner = (await asyncio.wait_for(proc.stdout.readline(), 90)).decode()
            assert says in banner, banner
        finally:
            proc.kill()  # (a demo has nothing to finish)
            await asyncio.wait_for(proc.wait(), 30)


def test_a_server_starts_without_the_collector_and_collects_once_it_stops_or_serves(tmp_path: Path) -> None:
    import gc

    from bot import startup
    from bot.cli import main

    assert gc.isenabled()
    startup.begin()
    assert not gc.isenabled()
    startup.ready()  # what start-up made is frozen, collecting resumes
    assert gc.isenabled() and gc.get_freeze_count() > 0
    gc.unfreeze()
    gc.disable()  # someone else's choice (an embedding process): ready() turns on only what begin() turned off
    try:
        startup.ready()
        assert not gc.isenabled()
    finally:
        gc.enable()
    # A worker that stops before it serves (its config file is broken) collects again; others never paused it.
    (tmp_path / "broken.yml").write_text("toolbox: [\n")
    assert main(["--config", str(tmp_path / "broken.yml"), "worker"]) != 0 and gc.isenabled()
    assert main(["--config", str(tmp_path / "broken.yml"), "tools"]) != 0 and gc.isenabled()


async def test_the_command_line_imports_no_engine_before_a_command_needs_it() -> None:
    # `opspilot --help` (and the parsing of every command) loads neither the config (the toolbox, Redis, aiohttp)
    # nor the package metadata: a worker pauses the collector before those imports (bot.startup).
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys, bot.cli; bot.cli._parser().parse_args(['worker']); "
                              "print(*[m for m in ('bot.config', 'redis', 'aiohttp', 'importlib.metadata') "
                              "if m in sys.modules])",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert out.decode().split() == []

