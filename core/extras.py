"""Optional extras: what a feature needs beyond the core install (``pip install 'opspilot[EXTRA]'``).

The core install carries what a default Slack deployment (Anthropic's model, Redis, Slack) and the demo need.
A configured feature whose extra is missing is refused in one line that names the extra — at config time
(:func:`bot.needed_extras.check`), and again where the package is first imported (:func:`require`), never as a
traceback from deep inside a call.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

# Extra → the module that tells whether it is installed (pyproject.toml's [project.optional-dependencies]).
EXTRAS = {
    "kubernetes": "kubernetes_asyncio",
    "mcp": "mcp",
    "openai": "openai",
    "otel": "opentelemetry.exporter.otlp.proto.http",
}


class MissingExtra(ImportError):
    """A configured feature needs an optional extra that is not installed."""

    def __init__(self, extra: str, feature: str) -> None:
        self.extra, self.feature = extra, feature
        super().__init__(f"{feature} needs the '{extra}' extra, which is not installed: "
                         f"pip install 'opspilot[{extra}]'", name=EXTRAS[extra])


def installed(extra: str) -> bool:
    """Whether ``extra``'s package can be imported (without importing it, unless a test stubbed it out)."""
    module = EXTRAS[extra]
    top = module.partition(".")[0]
    if sys.modules.get(top, ...) is None or sys.modules.get(module, ...) is None:  # import would raise
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module with no spec
        return False


def require(extra: str, feature: str) -> ModuleType:
    """Import ``extra``'s package, or raise :class:`MissingExtra` naming the extra and the ``feature``."""
    try:
        return importlib.import_module(EXTRAS[extra])
    except ImportError as exc:
        raise MissingExtra(extra, feature) from exc
