"""Optional extras (core/extras.py, bot/needed_extras.py): a configured feature whose package is missing is refused
when the settings load, in one line naming the extra; the default configuration (the demo, a Slack deployment
with Anthropic's model) needs none; the image and the test command install them all, the demo script the core."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bot.config import ConfigError, load_settings
from bot.needed_extras import needed
from core.extras import EXTRAS, MissingExtra, installed, require
from tools.mcp import McpHub
from tools.ops.kube import KubeClient

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in [v for v in os.environ if v.startswith(("OPSPILOT_", "OTEL_"))] + [
            "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "REDIS_URL", "PORT"]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./opspilot.yml


def _without(monkeypatch: pytest.MonkeyPatch, extra: str) -> None:
    """As if ``extra`` were not installed: importing its module raises ImportError."""
    module = EXTRAS[extra]
    monkeypatch.setitem(sys.modules, module.partition(".")[0], None)
    monkeypatch.setitem(sys.modules, module, None)


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "elsewhere.yml"  # not ./opspilot.yml, which load_settings(None) would read
    path.write_text(text, encoding="utf-8")
    return str(path)


def _refused(config: str | None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_every_extra_is_installed_in_the_test_environment() -> None:
    assert all(installed(extra) for extra in EXTRAS)


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_require_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch, extra: str) -> None:
    _without(monkeypatch, extra)
    assert not installed(extra)
    with pytest.raises(MissingExtra) as caught:
        require(extra, "this feature")
    assert str(caught.value) == (f"this feature needs the '{extra}' extra, which is not installed: "
                                 f"pip install 'opspilot[{extra}]'")
    assert isinstance(caught.value, ImportError)


def test_a_kubernetes_backend_without_the_extra_is_refused_at_config_time(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = _config(tmp_path, "toolbox:\n  restart: {backend: kubernetes, in_cluster: true}\n")
    assert needed(load_settings(config)) == [("kubernetes", "toolbox.restart: backend kubernetes")]
    _without(monkeypatch, "kubernetes")
    message = _refused(config)
    assert message.startswith("toolbox.restart: backend kubernetes needs the 'kubernetes' extra")
    assert message.endswith("pip install 'opspilot[kubernetes]'")
    with pytest.raises(MissingExtra, match=re.escape("opspilot[kubernetes]")):
        KubeClient(in_cluster=True)  # and where the SDK would load, should a toolbox be built another way


def test_a_kubernetes_change_source_needs_the_extra_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _without(monkeypatch, "kubernetes")
    config = _config(tmp_path, "toolbox:\n  changes:\n    - {backend: files}\n"
                               "    - {backend: kubernetes, in_cluster: true}\n")
    assert _refused(config).startswith("toolbox.changes[1]: backend kubernetes needs the 'kubernetes' extra")


def test_mcp_servers_without_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _without(monkeypatch, "mcp")
    config = _config(tmp_path, "mcp_servers:\n  - {name: grafana, url: 'http://127.0.0.1:9/mcp'}\n")
    assert _refused(config) == ("mcp_servers (grafana) needs the 'mcp' extra, which is not installed: "
                                "pip install 'opspilot[mcp]'")


async def test_no_mcp_servers_never_loads_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "mcp")
    hub = McpHub([])
    assert await hub.start() == [] and hub.health() == {}
    await hub.stop()


def test_openai_without_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _without(monkeypatch, "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert _refused(_config(tmp_path, "llm: {provider: openai}\n")).endswith("pip install 'opspilot[openai]'")
    # auto with only OpenAI's key picks OpenAI's model: the same.
    assert "'openai' extra" in _refused(None)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")  # auto picks Anthropic's: nothing more needed
    assert needed(load_settings(None)) == []


def test_otlp_traces_without_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _without(monkeypatch, "otel")
    assert "'otel' extra" in _refused(_config(tmp_path, "telemetry: {otlp_endpoint: 'http://127.0.0.1:4318'}\n"))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert _refused(None).endswith("pip install 'opspilot[otel]'")


def test_the_default_configuration_needs_no_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for extra in EXTRAS:
        _without(monkeypatch, extra)
    assert needed(load_settings(None)) == []


def test_the_demo_serve_and_chat_run_on_the_core_alone() -> None:
    """In a fresh interpreter where no extra's package can be imported: the demo's, serve's and the terminal
    chat's modules load, and the default toolbox, model and (empty) MCP hub are built."""
    blocked = sorted({m.partition(".")[0] for m in EXTRAS.values()} | {"opentelemetry.sdk"})
    code = (f"import sys\nfor m in {blocked!r}: sys.modules[m] = None\n"
            "import asyncio, bot.cli, bot.chat, bot.demo.server, bot.slack.serve\n"
            "from bot.assembly import build_model\nfrom bot.config import load_settings\n"
            "from tools import ops\nfrom tools.mcp import McpHub\n"
            "s = load_settings(None)\nbuild_model(s)\nops.build(s.toolbox)\n"
            "assert asyncio.run(McpHub(s.mcp_servers).start()) == []\nprint('ok')\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPSPILOT_", "OTEL_")) and k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-2000:]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[ ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_the_core_carries_no_extra_and_dev_installs_every_one() -> None:
    extras = PROJECT["optional-dependencies"]
    runtime = set(EXTRAS)
    assert runtime <= set(extras)
    extra_packages = set().union(*(_names(extras[e]) for e in runtime))
    assert not _names(PROJECT["dependencies"]) & extra_packages
    assert extras["all"] == [f"opspilot[{','.join(sorted(runtime))}]"]
    assert "opspilot[all]" in extras["dev"]
    # The test command installs dev (so every extra); the demo script the core only.
    assert re.search(r'bootstrap\.sh"? dev\b', (ROOT / "scripts" / "test").read_text(encoding="utf-8"))
    assert re.search(r'bootstrap\.sh"? ""', (ROOT / "scripts" / "opspilot").read_text(encoding="utf-8"))


def test_the_image_installs_every_runtime_extra() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    [line] = [ln for ln in text.splitlines() if "tomllib" in ln]
    for extra in EXTRAS:
        assert f"'{extra}'" in line, extra
