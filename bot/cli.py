"""The ``opspilot`` command: ``chat`` (terminal conversation), ``serve``/``worker``/``demo`` (Slack), ``tools``
(what the model may call), ``eval`` (investigation quality over scenarios) and ``stats`` (figures from Redis)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from bot.assembly import assemble, build_registry, open_store
from bot.config import ConfigError, load_settings
from bot.slack.words import say
from state import StoreError
from tools import ops
from tools.errors import ToolError
from tools.mcp import McpHub, McpStartupError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opspilot", description="OpsPilot, the ops assistant for on-call engineers")
    parser.add_argument("--config", help="YAML config file (default: $OPSPILOT_CONFIG or ./opspilot.yml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    chat_cmd = sub.add_parser("chat", help="talk to OpsPilot in the terminal")
    chat_cmd.add_argument("--user", default="local-user", help="who you are (for confirmations and audit)")
    serve_cmd = sub.add_parser("serve", help="serve Slack: Socket Mode with SLACK_APP_TOKEN, otherwise HTTP on $PORT")
    serve_cmd.add_argument("--workers", type=int, default=None,
                           help="worker processes beside the front (default: one per core, up to 4; 0: one process)")
    worker_cmd = sub.add_parser("worker", help="run the engine for fronts elsewhere (reads the work queue in Redis)")
    worker_cmd.add_argument("--port", type=int, default=None, help="serve /healthz and /metrics on this port")
    demo_cmd = sub.add_parser("demo", help="a Slack-like channel in your browser, no Slack workspace needed")
    demo_cmd.add_argument("--port", type=int, default=None, help="default: $PORT or 3000")
    sub.add_parser("tools", help="every tool: where it comes from, read-only or a change, when a person confirms")
    sub.add_parser("check", help="is this installation ready? config, Redis, Slack, model, MCP, backends",
                   description="One line per check, with the fix when it fails; exit 1 when a required one fails.")
    eval_cmd = sub.add_parser("eval", help="score investigations over incident scenarios (evals/), with any model")
    eval_cmd.add_argument("--model", default=None, help="'demo' (the scripted model), or a model name for the "
                                                          "configured provider (default: as configured)")
    eval_cmd.add_argument("--dir", default="evals", help="where the scenarios are (default: ./evals)")
    eval_cmd.add_argument("--only", default="", help="comma-separated scenario names")
    eval_cmd.add_argument("--repeat", type=int, default=1, help="play each scenario N times (pass rate, variance)")
    eval_cmd.add_argument("--min-pass", type=float, default=1.0, help="exit 1 below this pass rate (default 1.0)")
    eval_cmd.add_argument("--json", default=None, help="also write the results here")
    eval_cmd.add_argument("--record", default=None, help="save every model request/response under this directory")
    eval_cmd.add_argument("--replay", default=None, help="answer from a recording instead of a model (offline)")
    stats_cmd = sub.add_parser("stats", help="runs, steps, failure and resume rates, stop reasons")
    stats_cmd.add_argument("--window", choices=["1h", "1d", "7d"], default="1d")
    return parser


async def _stats(window: str, config: str | None) -> int:
    settings = load_settings(config)
    store = await open_store(settings, fallback=False)
    try:
        seconds = {"1h": 3600, "1d": 86400, "7d": 7 * 86400}[window]
        s = await store.stats(seconds)
    finally:
        await store.close()
    print(f"OpsPilot — last {window}")
    print(f"  runs                        {s.runs}")
    print(f"  average steps per run       {s.avg_steps:.2f}")
    print(f"  tool calls / failures       {s.get('tool_calls')} / {s.get('tool_failures')}"
          f"  ({s.tool_failure_rate:.1%} failed)")
    print(f"  interrupts → resumed        {s.get('interrupts')} → {s.get('resumed')}  ({s.resume_rate:.1%})")
    print(f"  answers rated 👍 / 👎        {s.get('feedback_up')} / {s.get('feedback_down')}")
    read, written, full = s.get("cache_read_tokens"), s.get("cache_write_tokens"), s.get("input_tokens")
    total = read + written + full
    print(f"  input tokens                {total}: {full} at full price, {read} read from the prompt cache "
          f"({read / total if total else 0:.0%}), {written} written to it; output {s.get('output_tokens')}")
    print("  stop reasons")
    for reason, count in s.stop_reasons.items() or {"(none yet)": 0}.items():
        print(f"    {reason:<24}  {count}")
    return 0


async def _tools(config: str | None) -> int:
    settings = load_settings(config)
    try:
        toolbox = ops.build(settings.toolbox)
    except (ops.CatalogError, ValueError, ToolError) as exc:
        raise ConfigError(f"toolbox: {exc}") from exc
    hub = McpHub(settings.mcp_servers)
    try:
        registry = build_registry(settings, toolbox, await hub.start())
        print(f"{'tool':<34} {'source':<16} {'kind':<10} confirmation")
        for spec in registry:
            kind = "change" if spec.mutating else "read-only"
            rule = spec.confirmation_rule() + (f" ({say('en', 'provenance_' + spec.provenance)})"
                                               if spec.provenance else "")
            print(f"{spec.name:<34} {spec.source:<16} {kind:<10} {rule}")
        for name, health in hub.health().items():
            if health["state"] != "up":
                print(f"\nMCP server {name}: {health['state']} ({health.get('error', '')}): its tools are missing")
    except McpStartupError as exc:
        raise ConfigError(str(exc)) from exc
    finally:
        await hub.stop()
    return 0


async def _check(config: str | None) -> int:
    from bot import check

    try:
        settings = load_settings(config)
    except ConfigError as exc:
        print(f"✗ config: {exc}")
        return 1
    print("✓ config: valid")
    checks = await check.run(settings)
    for each in checks:
        print(each.line())
    failed = [c for c in checks if c.required and not c.ok]
    print(f"{len(failed)} required check(s) failed" if failed else "ready")
    return 1 if failed else 0


async def _chat(user: str, config: str | None) -> int:
    from bot.chat import chat  # the terminal's rich, not loaded by the serve and worker processes

    app = await assemble(load_settings(config))
    try:
        return await chat(app, user=user)
    finally:
        await app.close_tools()
        await app.store.close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "tools":
            return asyncio.run(_tools(args.config))
        if args.command == "check":
            return asyncio.run(_check(args.config))
        if args.command == "chat":
            return asyncio.run(_chat(args.user, args.config))
        if args.command == "eval":
            from pathlib import Path

            from bot.eval import evaluate

            return asyncio.run(evaluate(
                load_settings(args.config), directory=Path(args.dir), model_name=args.model, repeat=args.repeat,
                only=[s for s in args.only.split(",") if s], min_pass=args.min_pass,
                json_out=Path(args.json) if args.json else None, record=Path(args.record) if args.record else None,
                replay=Path(args.replay) if args.replay else None))
        if args.command == "demo":
            from bot.demo.server import run_demo

            settings = load_settings(args.config)
            return asyncio.run(run_demo(settings, args.port or settings.slack.port))
        if args.command == "serve":
            from bot.slack.serve import serve

            return asyncio.run(serve(load_settings(args.config), workers=args.workers, config=args.config))
        if args.command == "worker":
            from bot.slack.serve import work

            return asyncio.run(work(load_settings(args.config), port=args.port))
        return asyncio.run(_stats(args.window, args.config))
    except ConfigError as exc:
        print(f"opspilot: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"opspilot: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
