"""The ``opspilot`` command: ``chat`` (terminal conversation), ``serve``/``worker``/``demo`` (Slack), ``tools``
(what the model may call), ``eval`` (investigation quality over scenarios) and ``stats`` (figures from Redis)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any, cast

from bot import exits, log_format, startup
from bot.slack.outbound.words import say
from core.text import show

if TYPE_CHECKING:
    from bot.config import Settings

# What a command needs is imported by that command (the engine, Redis, MCP, Slack): `opspilot --help` or
# `opspilot config` loads none of it, and `worker` loads what it runs once (bench/startup.py measures it).

_COMMON_ENV = ("OPSPILOT_CONFIG (the config file), REDIS_URL, ANTHROPIC_API_KEY or OPENAI_API_KEY (the model; "
               "none: the scripted demo model), OPSPILOT_MODEL, OPSPILOT_<SECTION>__<KEY> (any setting)")
_SLACK_ENV = "SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET (HTTP mode), SLACK_APP_TOKEN (Socket Mode), SLACK_API_URL, PORT"
_HELP = {
    "chat": ("Talk to OpsPilot in the terminal: steps appear live, questions are answered at the prompt.",
             "opspilot chat --user alice", ""),
    "serve": ("Serve Slack: a front (Socket Mode with SLACK_APP_TOKEN, otherwise HTTP on --port/$PORT) and worker "
              "processes beside it.", "opspilot serve --workers 2 --port 8080", _SLACK_ENV),
    "worker": ("Run the engine for fronts elsewhere: reads the work queue in Redis.", "opspilot worker --port 3001",
               _SLACK_ENV),
    "demo": ("A Slack-like channel in your browser at http://127.0.0.1:PORT: no Slack workspace, no key needed.",
             "opspilot demo --port 3000", "PORT"),
    "tools": ("Every tool the model may call: where it comes from, read-only or a change, when a person confirms.",
              "opspilot tools", ""),
    "check": ("Would serve start, and work? The configuration validated as serve validates it, then Redis, Slack, "
              "the configured model, MCP servers and every toolbox backend probed read-only (each within 8–16 s, "
              "all within 20 s). Exit 0 ready, 1 a required check failed, 2 serve would refuse the configuration.",
              "opspilot check\n  opspilot check --json", _SLACK_ENV),
    "eval": ("Score investigations over incident scenarios (evals/), with the scripted model or a real one.",
             "opspilot eval --model demo\n  opspilot eval --repeat 3 --json results.json", ""),
    "config": ("The configuration in effect (file, environment and defaults merged; secrets hidden), or with "
               "--reference every key with its type, default, environment variable and meaning (Markdown).",
               "opspilot config\n  opspilot config --reference --write docs/configuration.md", ""),
    "report": ("A thread's incident summary (timeline, changes with requester, approver and verification, state, "
               "open questions) as Markdown, from Redis. The records part needs no model.",
               "opspilot report --thread C0OPS:1718000000.000100 --tz Asia/Shanghai", ""),
    "stats": ("Runs, steps, failure and resume rates and stop reasons, from Redis (a 👎's words only for a channel "
              "Slack says is public: with SLACK_BOT_TOKEN).", "opspilot stats --window 7d", "SLACK_BOT_TOKEN"),
}


def _add(sub: Any, name: str, common: argparse.ArgumentParser, short: str) -> argparse.ArgumentParser:
    description, example, env = _HELP[name]
    reads = _COMMON_ENV + (f"; {env}" if env else "")
    return cast(argparse.ArgumentParser, sub.add_parser(
        name, help=short, description=description, parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=f"example:\n  {example}\n\nenvironment: {reads}"))


def _at_least_0(value: str) -> int:
    if not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of 0 or more")
    return int(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opspilot", description="OpsPilot, the ops assistant for on-call engineers")
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    parser.add_argument("--config", help="YAML config file (default: $OPSPILOT_CONFIG or ./opspilot.yml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    # The same flags after the subcommand (`opspilot chat -v`): suppressed defaults keep the ones given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="YAML config file")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    report_cmd = _add(sub, "report", common, "a thread's incident summary as Markdown, from Redis")
    report_cmd.add_argument("--thread", required=True, help="<channel id>:<thread ts>")
    report_cmd.add_argument("--tz", default=None, help="a second time zone for the timeline (e.g. Asia/Shanghai)")
    report_cmd.add_argument("--no-model", action="store_true", help="the records only: no narrative")
    report_cmd.add_argument("--demo", action="store_true", help="a thread of `opspilot demo` (its own key prefix)")
    chat_cmd = _add(sub, "chat", common, "talk to OpsPilot in the terminal")
    chat_cmd.add_argument("--user", default="local-user", help="who you are (for confirmations and audit)")
    serve_cmd = _add(sub, "serve", common, "serve Slack: Socket Mode with SLACK_APP_TOKEN, otherwise HTTP on $PORT")
    serve_cmd.add_argument("--workers", type=_at_least_0, default=None,
                           help="worker processes beside the front (default: one per CPU the container may use, "
                                "its CPU quota; at most 4; 0: one process)")
    serve_cmd.add_argument("--port", type=int, default=None,
                           help="HTTP port of the front (default: $PORT or 3000); workers use the next ones")
    serve_cmd.add_argument("--demo-data", action="store_true", help="answer from the bundled demo data on purpose "
                           "(without it, serve refuses to start when nothing points the toolbox at your systems)")
    worker_cmd = _add(sub, "worker", common, "run the engine for fronts elsewhere (reads the work queue in Redis)")
    worker_cmd.add_argument("--port", type=int, default=None,
                            help="serve /healthz, /readyz and /metrics on this port (default: $PORT, else none)")
    demo_cmd = _add(sub, "demo", common, "a Slack-like channel in your browser, no Slack workspace needed")
    demo_cmd.add_argument("--port", type=int, default=None, help="default: $PORT or 3000")
    _add(sub, "tools", common, "every tool: where it comes from, read-only or a change, when a person confirms")
    check_cmd = _add(sub, "check", common, "would serve start and work? config, Redis, Slack, model, backends")
    check_cmd.add_argument("--json", action="store_true",
                           help="print {ready, exit_code, checks: [{name, status, detail, fix}]} instead of lines")
    eval_cmd = _add(sub, "eval", common, "score investigations over incident scenarios (evals/), with any model")
    eval_cmd.add_argument("--model", default=None, help="'demo' (the scripted model), or a model name for the "
                                                          "configured provider (default: as configured)")
    eval_cmd.add_argument("--dir", default="evals", help="where the scenarios are (default: ./evals)")
    eval_cmd.add_argument("--only", default="", help="comma-separated scenario names")
    eval_cmd.add_argument("--repeat", type=int, default=1, help="play each scenario N times (pass rate, variance)")
    eval_cmd.add_argument("--min-pass", type=float, default=1.0, help="exit 1 below this pass rate (default 1.0)")
    eval_cmd.add_argument("--json", default=None, help="also write the results here")
    eval_cmd.add_argument("--record", default=None, help="save every model request/response under this directory")
    eval_cmd.add_argument("--replay", default=None, help="answer from a recording instead of a model (offline)")
    config_cmd = _add(sub, "config", common, "the configuration in effect, or (--reference) every key")
    config_cmd.add_argument("--reference", action="store_true", help="every key: type, default, variable, meaning")
    config_cmd.add_argument("--write", metavar="PAGE", default=None,
                            help="with --reference: update the generated part of this Markdown page in place")
    stats_cmd = _add(sub, "stats", common, "runs, steps, failure and resume rates, stop reasons")
    stats_cmd.add_argument("--window", choices=["1h", "1d", "7d"], default="1d")
    return parser


class _Version(argparse.Action):
    """``--version``, read from the installed package only when asked (importlib.metadata: ~15 ms a start)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"opspilot {_version()}")  # on stdout, as argparse's own version action writes it
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("opspilot")
    except PackageNotFoundError:  # run from a checkout without installing
        return "unknown (not installed)"


async def _tools(config: str | None) -> int:
    from bot.assembly import build_registry, build_toolbox
    from bot.config import ConfigError
    from tools.mcp import McpHub, McpStartupError

    settings = _settings(config)
    toolbox = build_toolbox(settings)
    hub = McpHub(settings.mcp_servers)
    try:
        registry = build_registry(settings, toolbox, await hub.start())
        show(f"{'tool':<34} {'source':<16} {'kind':<10} confirmation")
        for spec in registry:
            kind = "change" if spec.mutating else "read-only"
            rule = spec.confirmation_rule() + (f" ({say('en', 'provenance_' + spec.provenance)})"
                                               if spec.provenance else "")
            show(f"{spec.name:<34} {spec.source:<16} {kind:<10} {rule}")
        for name, health in hub.health().items():
            if health["state"] != "up":
                show(f"\nMCP server {name}: {health['state']} ({health.get('error', '')}): its tools are missing")
    except McpStartupError as exc:
        raise ConfigError(str(exc)) from exc
    finally:
        await hub.stop()
    return 0


async def _check(config: str | None, as_json: bool = False) -> int:
    from bot import check
    from bot.config import ConfigError, config_path

    try:
        settings = _settings(config)
    except ConfigError as exc:  # serve's words and serve's exit code
        checks = [check.Check("config", False, str(exc), "correct the key or variable named here", refused=True)]
    else:  # read; what serve would refuse of its rules is a "Config" check below
        read = f"read from {config_path(config)} and the environment" if config_path(config) else "read (no file)"
        checks = [check.Check("config", True, read), *await check.run(settings)]
    show(check.report(checks, as_json=as_json))
    return check.exit_code(checks)


def _config(reference: bool, write: str | None, config: str | None) -> int:
    from bot import reference as ref

    if write and not reference:
        print("opspilot: --write goes with --reference", file=sys.stderr)
        return exits.CONFIG
    if not reference:
        import yaml

        print(yaml.safe_dump(ref.in_effect(_settings(config)), sort_keys=False, allow_unicode=True), end="")
        return 0
    if write is None:
        print(ref.markdown(), end="")
        return 0
    from pathlib import Path

    page = Path(write)
    try:
        before = page.read_text(encoding="utf-8")
        after = ref.updated(before)
        if after != before:
            page.write_text(after, encoding="utf-8")
    except (OSError, ValueError) as exc:
        print(f"opspilot: cannot update {page}: {exc}", file=sys.stderr)
        return exits.FAILED
    print(f"updated {page}" if after != before else f"{page} is up to date")
    return exits.OK


async def _chat(user: str, config: str | None) -> int:
    from bot.assembly import assemble
    from bot.chat import chat  # the terminal's rich, not loaded by the serve and worker processes

    settings = _settings(config)
    app = await assemble(settings)
    try:
        return await chat(app, user=user, language=settings.slack.language)
    finally:
        await app.close_tools()
        await app.close_connections()


def _store_error(exc: Exception) -> bool:
    """Whether ``exc`` is the store's: only a command that loaded the store can raise one, so one that did not
    is not made to load it (with Redis's client) just to tell."""
    errors = sys.modules.get("state.store_errors")
    return errors is not None and isinstance(exc, errors.StoreError)


def _settings(config: str | None) -> Settings:
    # bot.config imports the toolbox, Redis and aiohttp: not at this module's import (`opspilot --help`), and
    # for `serve` and `worker` only once the collector is paused (bot.startup).
    from bot.config import load_settings

    return load_settings(config)


def _port(given: int | None) -> int | None:
    from bot.config import port_number

    return None if given is None else port_number(given, "--port")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    log_format.configure(args.verbose)
    if args.command in ("serve", "worker"):  # a server's start-up: see bot.startup
        startup.begin()
    try:
        code = _command(args)
        sys.stdout.flush()  # here, not at exit: a reader gone meanwhile (`| head`) is caught below
        return code
    except BrokenPipeError:  # `opspilot check --json | head`: the reader left, which is no error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python flushes stdout at exit)
        return exits.OK
    finally:
        startup.ready()  # one that stopped before it served (or an in-process caller) collects again


def _command(args: argparse.Namespace) -> int:
    from bot.config import ConfigError

    try:
        if args.command == "tools":
            return asyncio.run(_tools(args.config))
        if args.command == "config":
            return _config(args.reference, args.write, args.config)
        if args.command == "check":
            return asyncio.run(_check(args.config, args.json))
        if args.command == "chat":
            return asyncio.run(_chat(args.user, args.config))
        if args.command == "eval":
            from pathlib import Path

            from bot.eval import evaluate

            return asyncio.run(evaluate(
                _settings(args.config), directory=Path(args.dir), model_name=args.model, repeat=args.repeat,
                only=[s for s in args.only.split(",") if s], min_pass=args.min_pass,
                json_out=Path(args.json) if args.json else None, record=Path(args.record) if args.record else None,
                replay=Path(args.replay) if args.replay else None))
        if args.command == "demo":
            from bot.demo.server import run_demo

            settings = _settings(args.config)
            return asyncio.run(run_demo(settings, _port(args.port) or settings.slack.port))
        if args.command == "serve":
            from bot.slack.serve import ForkedWorker, Front, prepare, serve

            if args.demo_data:  # its workers (child processes) inherit it
                os.environ["OPSPILOT_DEMO_DATA"] = "1"
            settings = _settings(args.config)
            settings.slack.port = _port(args.port) or settings.slack.port
            started = prepare(settings, workers=args.workers, config=args.config)
            if isinstance(started, ForkedWorker):  # forked from the front: `opspilot worker`, its imports done
                return main(started.argv)
            return asyncio.run(serve(settings, started)) if isinstance(started, Front) else started
        if args.command == "report":
            from bot.report import report

            settings = _settings(args.config)
            if args.demo:
                from bot.demo.server import demo_prefix

                settings = settings.model_copy(update={"key_prefix": demo_prefix(settings.key_prefix)})
            return asyncio.run(report(settings, args.thread, tz=args.tz, use_model=not args.no_model))
        if args.command == "worker":
            from bot.slack.serve import work

            settings = _settings(args.config)  # $PORT or slack.port, when set, as the image's health check asks
            given = "port" in settings.slack.model_fields_set
            return asyncio.run(work(settings, port=_port(args.port) or (settings.slack.port if given else None)))
        from bot.stats import stats

        return asyncio.run(stats(_settings(args.config), args.window))
    except ConfigError as exc:
        print(f"opspilot: {exc}", file=sys.stderr)
        return exits.CONFIG
    except Exception as exc:
        if not _store_error(exc):
            raise
        print(f"opspilot: {exc}", file=sys.stderr)  # Redis not reachable at start: waiting may be all it takes
        return exits.UNAVAILABLE
    except KeyboardInterrupt:
        return exits.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
