"""Which optional extras a configuration needs (core/extras.py), checked when the settings are loaded: a
Kubernetes backend, an MCP server, OpenAI's model or an OTLP endpoint without its package is one line naming
the extra to install, from ``check``, ``serve``, ``worker``, ``demo`` and ``tools`` alike."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from core.extras import MissingExtra, installed

if TYPE_CHECKING:
    from bot.config import Settings


def needed(settings: Settings) -> list[tuple[str, str]]:
    """(extra, the setting that needs it) for every optional feature ``settings`` turns on."""
    toolbox = settings.toolbox
    wants: list[tuple[str, str]] = []
    kube = [("toolbox.restart", toolbox.restart), ("toolbox.rollback", toolbox.rollback),
            ("toolbox.scale", toolbox.scale), *((f"toolbox.changes[{i}]", c) for i, c in enumerate(toolbox.changes))]
    wants += [("kubernetes", f"{where}: backend kubernetes") for where, section in kube
              if getattr(section, "backend", None) == "kubernetes"]
    if settings.mcp_servers:
        wants.append(("mcp", f"mcp_servers ({', '.join(s.name for s in settings.mcp_servers)})"))
    if settings.llm.provider == "openai":
        wants.append(("openai", "llm.provider 'openai'"))
    elif settings.llm.provider == "auto" and os.environ.get("OPENAI_API_KEY") and not os.environ.get(
            "ANTHROPIC_API_KEY"):
        wants.append(("openai", "OPENAI_API_KEY (OpenAI's model)"))
    if settings.telemetry.otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        wants.append(("otel", "traces to an OTLP endpoint"))
    return wants


def missing(settings: Settings) -> MissingExtra | None:
    """The first extra ``settings`` needs that is not installed, as its one-line error; None: all there."""
    for extra, feature in needed(settings):
        if not installed(extra):
            return MissingExtra(extra, feature)
    return None
