"""Loading a team's own tools from the modules listed under ``plugins:`` in the config.

A plugin module registers tools the same way the built-in ones do: every
:class:`~tools.registry.ToolSpec` it defines at module level (made with ``@tool``), plus
whatever its optional ``opspilot_tools(config: dict) -> Iterable[ToolSpec]`` returns.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from tools.registry import ToolSpec

log = logging.getLogger(__name__)


class PluginError(Exception):
    pass


def load_plugin(module_name: str, config: dict[str, Any] | None = None) -> list[ToolSpec]:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginError(f"plugin {module_name!r} could not be imported: {type(exc).__name__}: {exc}") from exc
    specs = [value for value in vars(module).values() if isinstance(value, ToolSpec)]
    factory = getattr(module, "opspilot_tools", None)
    if callable(factory):
        try:
            extra: Iterable[Any] = factory(config or {})
            made = list(extra)
        except Exception as exc:
            raise PluginError(f"plugin {module_name!r}: opspilot_tools() failed: {exc}") from exc
        bad = [v for v in made if not isinstance(v, ToolSpec)]
        if bad:
            raise PluginError(f"plugin {module_name!r}: opspilot_tools() returned non-tools: {bad[:3]!r}")
        specs.extend(s for s in made if s not in specs)
    if not specs:
        raise PluginError(f"plugin {module_name!r} defines no tools (decorate async functions with @tool)")
    log.info("plugin %s: %s", module_name, ", ".join(s.name for s in specs))
    # Named as the team's code, never as OpsPilot's own (`opspilot tools`, an operator reviewing what can change
    # systems): a plugin's tools were listed as "builtin".
    return [replace(s, source=f"plugin:{module_name}") if s.source == "builtin" else s for s in specs]


def load_plugins(module_names: Iterable[str], config: dict[str, Any] | None = None) -> list[ToolSpec]:
    return [spec for name in module_names for spec in load_plugin(name, config)]
