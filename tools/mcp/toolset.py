"""An MCP server's tools as OpsPilot tools: ``<server>__<tool>``, the server's JSON schema as the argument
schema (checked before the call), gating decided here, in code.

Gating: a tool is read-only when its server says so (``readOnlyHint: true``) and the config does not say
otherwise, or when the server says nothing either way (no ``readOnlyHint``, no ``destructiveHint: true``)
and the config trusts it (``read_only: true``, logged); every other tool changes things — at most one per
step, journaled, and confirmed by a person unless its rule says ``never`` or names the environments where
it must be.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import types
from pydantic import BaseModel, ConfigDict, create_model, model_validator
from referencing import Registry

from core.urls import safe_url
from tools.mcp.servers import ConfirmIn, McpServerConfig
from tools.mcp.session import ConnectionLost, McpServer
from tools.registry import ConfirmPolicy, Provenance, ToolContext, ToolSpec, always, confirm_in, never
from tools.tool_errors import OutcomeUnknown, ToolError, ToolTimeout, UpstreamError

log = logging.getLogger(__name__)

SEPARATOR = "__"
_VALID_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # Anthropic's and OpenAI's: ASCII only


class McpToolError(ToolError):
    """The server answered ``isError``: its message is the observation."""

    code = "tool_error"


class _McpArguments(BaseModel):
    """Whatever the server's schema allows (checked against it), kept as given."""

    model_config = ConfigDict(extra="allow")
    __validator__: Draft202012Validator | None = None

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        validator = cls.__validator__
        if validator is not None:
            try:
                problems = sorted(validator.iter_errors(data), key=lambda e: list(e.path))
            except Exception as exc:  # a schema that cannot be applied: the call is refused, not the run
                raise ValueError(f"the tool's schema could not be checked ({type(exc).__name__})") from exc
            if problems:
                raise ValueError("; ".join(_problem(p) for p in problems[:5]))
        return data


def _defused(node: Any, where: str = "") -> tuple[Any, list[str]]:
    """``node`` without its regular expressions, and what was left out: Python's ``re`` runs in the event loop's
    thread and a server's pattern can backtrack for ever (``^(a|a)+$``: hours at 40 characters), which no screen of
    pattern shapes catches; the server still checks them. A ``$ref`` to a document elsewhere is refused
    (:class:`ValueError`): the schema would have us fetch it at every call."""
    dropped: list[str] = []
    if isinstance(node, list):
        items = [_defused(item, f"{where}/{i}") for i, item in enumerate(node)]
        return [item for item, _ in items], [d for _, ds in items for d in ds]
    if not isinstance(node, dict):
        return node, dropped
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and not value.startswith("#"):
            raise ValueError(f"{where or '/'}: $ref {value[:80]!r} names a document elsewhere")
        if key == "pattern" and isinstance(value, str):
            dropped.append(f"{where}/pattern")
            continue
        if key == "patternProperties":  # its keys are patterns too
            dropped.append(f"{where}/patternProperties")
            continue
        out[key], more = _defused(value, f"{where}/{key}")
        dropped += more
    if "patternProperties" in node:  # the properties they admitted are left to the server, not refused here
        out.pop("additionalProperties", None)
    return out, dropped


def _problem(error: Any) -> str:
    where = "/".join(str(p) for p in error.path)
    return f"{where}: {error.message}" if where else str(error.message)


def specs(server: McpServer) -> list[ToolSpec]:
    """The server's tools that the config admits, as tool specs (listed once, at connection)."""
    config = server.config
    out: list[ToolSpec] = []
    for tool in server.tools:
        if (config.allow and tool.name not in config.allow) or tool.name in config.deny:
            continue
        spec = _spec(server, tool)
        if spec is not None and any(s.name == spec.name for s in out):  # the server's list is not ours to trust
            log.warning("MCP tool %s listed twice by %s: the second left out", tool.name, config.name)
        elif spec is not None:
            out.append(spec)
    for name in config.allow:
        if name not in {t.name for t in server.tools}:
            log.warning("mcp_servers.%s.allow: the server has no tool %r", config.name, name)
    return out


def _spec(server: McpServer, tool: types.Tool) -> ToolSpec | None:
    config = server.config
    name = f"{config.name}{SEPARATOR}{tool.name}"
    if not _VALID_NAME.fullmatch(name):  # the providers' rule: one name outside it fails every request
        log.warning("MCP tool %r of %s left out: %r is not a valid tool name", tool.name, config.name, name)
        return None
    try:
        schema, dropped = _defused(dict(tool.input_schema or {"type": "object"}))
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        log.warning("MCP tool %s left out: its input schema is invalid (%s)", name, exc.message)
        return None
    except ValueError as exc:
        log.warning("MCP tool %s left out: its input schema %s, which OpsPilot does not fetch", name, exc)
        return None
    if dropped:  # its server still checks them
        log.info("MCP tool %s: its patterns are checked by its server, not here: %s", name, ", ".join(dropped))
    hints = tool.annotations or types.ToolAnnotations()
    rule = config.rule(tool.name)
    provenance = _server_says(hints)
    if rule.read_only is True and provenance != "server_read_only":
        if hints.read_only_hint is None and hints.destructive_hint is not True:
            log.warning("mcp_servers.%s.tools.%s.read_only: true: its server does not say whether it is "
                        "read-only; trusted as read-only per your config", config.name, tool.name)
            provenance = "config_read_only"
        else:
            log.warning("mcp_servers.%s.tools.%s.read_only: true ignored: its server marks it as a change "
                        "(readOnlyHint false or destructiveHint true), and config can never loosen that",
                        config.name, tool.name)
    if provenance == "server_read_only" and rule.read_only is False:
        provenance = None  # a change by our config, not by anything the server said
    read_only = provenance in ("server_read_only", "config_read_only")
    model = create_model(f"Mcp_{name}", __base__=_McpArguments)
    model.__validator__ = Draft202012Validator(schema, registry=Registry())  # nothing fetched
    timeout_s = rule.timeout_s or config.timeout_s
    description = (tool.description or tool.title or tool.name).strip()
    return ToolSpec(name=name, description=f"{description}\n(from the MCP server {config.name!r})",
                    args_model=model, func=_caller(server, tool.name, timeout_s, mutating=not read_only),
                    mutating=not read_only,
                    needs_confirmation=_policy(rule.confirm) if not read_only else never,
                    timeout_s=timeout_s + 1.0, schema=schema, source=f"mcp:{config.name}", provenance=provenance)


def _server_says(hints: types.ToolAnnotations) -> Provenance | None:
    """The server's own word; None when it calls the tool a change without marking it destructive. A tool it
    calls both read-only and destructive is taken at its worse word: a change."""
    if hints.destructive_hint is True:
        return "server_destructive"
    if hints.read_only_hint is True:
        return "server_read_only"
    if hints.read_only_hint is None and hints.destructive_hint is None:
        return "unannotated"
    return None


def _policy(confirm: str | ConfirmIn) -> ConfirmPolicy:
    if isinstance(confirm, ConfirmIn):
        return confirm_in(*confirm.environments, field=confirm.field, required=True)
    return never if confirm == "never" else always


def _caller(server: McpServer, tool: str, timeout_s: float, *, mutating: bool) -> Any:
    async def call(args: BaseModel, ctx: ToolContext) -> Any:
        if tool in server.changed:  # its gate and schema here are what it said at start, no longer what it says
            raise UpstreamError(f"the MCP server {server.name!r} describes {tool!r} differently since OpsPilot "
                                "started (what it changes, or its arguments): not called until OpsPilot restarts")
        try:
            result = await server.call(tool, dict(args.model_extra or {}), timeout_s)
        except TimeoutError as exc:  # its own limit (the runtime's is a second longer): said as it is
            if mutating:  # sent: the server may have done it and not answered yet
                raise OutcomeUnknown(f"the change was sent to the MCP server {server.name!r}, which did not answer "
                                     f"within {timeout_s:g}s: it may or may not have been carried out; check its "
                                     "effect before retrying") from exc
            raise ToolTimeout(f"MCP server {server.name!r} did not answer within {timeout_s:g}s") from exc
        except ConnectionLost as exc:
            if mutating:
                raise OutcomeUnknown(f"the change was sent to the MCP server {server.name!r}, whose connection was "
                                     "lost before it answered: it may or may not have been carried out; check its "
                                     "effect before retrying") from exc
            raise
        return observation(result)

    return call


def observation(result: types.CallToolResult) -> Any:
    """A tool result as the model reads it: structured content or text (JSON parsed when it is JSON), images
    and resources summarised; ``isError`` raised as the server's message."""
    texts: list[str] = []
    other: list[str] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            texts.append(item.text)
        elif isinstance(item, types.ImageContent | types.AudioContent):
            other.append(f"[{item.type} {item.mime_type}, {len(item.data) * 3 // 4} bytes, not shown]")
        elif isinstance(item, types.EmbeddedResource):
            resource = item.resource
            body = getattr(resource, "text", None)
            other.append(f"[resource {resource.uri}]" + (f"\n{body}" if isinstance(body, str) else " (binary)"))
        elif isinstance(item, types.ResourceLink):
            other.append(f"[resource link {item.uri} {item.name}]")
    text = "\n".join(texts)
    if result.is_error:
        raise McpToolError(text or "the MCP server reported an error without a message")
    if result.structured_content is not None and not other:
        return result.structured_content
    if len(texts) == 1 and not other:
        try:
            return json.loads(texts[0])
        except ValueError:
            pass
    return {"text": "\n".join([*texts, *other])}


def describe(config: McpServerConfig) -> str:
    """The server as logs and messages name it: a url without the user, password or token it may carry."""
    return f"{config.command} {' '.join(config.args)}".strip() if config.command else safe_url(str(config.url))
