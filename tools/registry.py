"""Tool declarations and the registry the runtime reads them from.

A tool is an async function ``(args, ctx) -> data`` decorated with :func:`tool`.
The decorator turns it into a :class:`ToolSpec`: its name, description, pydantic
argument model (whose JSON schema the model sees), whether it changes things,
when a person must confirm it, and its timeout.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel

from core.envs import environment_name

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the call it serves."""

    run_id: str
    thread_id: str
    user_id: str | None
    call_id: str
    confirmed_by: str | None = None
    unattended: bool = False
    """No person asked for this run (an alert started it): every mutating call waits for a confirmation."""
    plan: dict[str, Any] | None = None
    """What the card showed a person before they confirmed (``ToolSpec.plan``), when the tool has one."""

    @property
    def idempotency_key(self) -> str:
        """The same for every try of this call, on any worker, and for no other call: a call id is unique only in
        its thread (the model's own ids repeat across threads), a run id everywhere."""
        return f"{self.run_id}:{self.call_id}"


ToolFunc = Callable[[Any, ToolContext], Awaitable[Any]]
Provenance = Literal["server_destructive", "unannotated", "server_read_only", "config_read_only"]
"""Who says what an MCP tool does: its server (``destructiveHint``/``readOnlyHint``), nobody (no hint, so
treated as a change), or the operator's config (``read_only: true`` on a tool the server left unannotated)."""
ConfirmPolicy = Callable[[Any], bool]


def never(_args: Any) -> bool:
    return False


def always(_args: Any) -> bool:
    return True


@dataclass(frozen=True)
class InEnvironments:
    """Confirmation needed when ``args.<field>`` is one of ``environments``."""

    environments: frozenset[str]
    field: str = "environment"
    known: frozenset[str] | None = None
    """Every environment there is (the catalog's): a value outside it is asked about too — fail closed, so
    ``Production`` does not slip past a rule written for ``prod``."""
    required: bool = False
    """The call must name it (refused before the gate otherwise: ``tools.runtime``): an MCP server may default a
    missing environment to prod, unseen by us, and who may confirm depends on it. Our own tools ask for a missing
    one with a form before the gate reads it again."""

    def __call__(self, args: Any) -> bool:
        raw = str(getattr(args, self.field, "") or "")
        if not raw:
            return self.required  # (refused before the gate when required: asked about if it ever gets here)
        value = environment_name(raw)
        if value is None:
            return True  # a look-alike or hidden character: asked about, never waved through
        if self.known is not None and not self.environments & self.known:
            return True  # a rule none of whose environments exists ("prod" in a catalog saying "production"): every one
        return value in self.environments or (self.known is not None and bool(value) and value not in self.known)


def confirm_in(*environments: str, field: str = "environment", required: bool = False) -> InEnvironments:
    return InEnvironments(frozenset(n for e in environments if (n := environment_name(e))), field,
                          required=required)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    args_model: type[BaseModel]
    func: ToolFunc
    mutating: bool = False
    needs_confirmation: ConfirmPolicy = never
    timeout_s: float = 20.0
    max_result_chars: int = 6000
    schema: dict[str, Any] | None = None
    """The argument schema shown to the model, when not the pydantic model's own (an MCP server's)."""
    source: str = "builtin"
    """Where the tool comes from: builtin, a plugin module, ``mcp:<server>``."""
    provenance: Provenance | None = None
    """For an MCP tool: whose word its gating rests on, shown on its card and by ``opspilot tools``. None for
    our own tools, and for an MCP tool the server calls a non-destructive change or the config made stricter."""
    check: Callable[[Any], None] | None = None
    """Run on the validated arguments before the gate: raises a ToolError for an argument naming something that
    does not exist (a service the catalog lacks), so no card asks a person to confirm it."""
    plan: Callable[[Any, ToolContext], Awaitable[dict[str, Any]]] | None = None
    """For a change: what it will do, read (never changed) before anyone is asked — ``{"lines": [{"label":
    "Revision", "from": "7", "to": "5"}, …], …}``, shown on the card as from → to, and given back to the
    tool in ``ToolContext.plan`` when it runs. Raises a ToolError to refuse before any card (a rollback
    target that no longer exists, a paused rollout, a change that would change nothing)."""
    attended_only: bool = False
    """Never run in a run no person started (an alert's): refused outright, not even offered on a card."""

    def environment_of(self, args: dict[str, Any]) -> str | None:
        """The environment a call runs in, from the argument its confirmation rule reads (``environment`` unless
        an MCP tool's rule names another)."""
        policy = self.needs_confirmation
        value = args.get(policy.field if isinstance(policy, InEnvironments) else "environment")
        return str(value) if value not in (None, "") else None

    def environment_fields(self) -> tuple[str, ...]:
        """The arguments holding an environment name: ``environment`` and the field a confirm rule reads."""
        policy = self.needs_confirmation
        extra = (policy.field,) if isinstance(policy, InEnvironments) and policy.field != "environment" else ()
        return ("environment", *extra)

    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, self.description, self.schema or self.args_model.model_json_schema())

    def confirmation_rule(self) -> str:
        """The confirmation rule in words (``opspilot tools``)."""
        if not self.mutating:
            return "-"
        policy = self.needs_confirmation
        if isinstance(policy, InEnvironments):
            return f"in {', '.join(sorted(policy.environments))} ({policy.field})"
        return "never" if policy is never else "always" if policy is always else "by the tool's rule"


@dataclass(frozen=True)
class ToolDefinition:
    """What the model is shown: provider adapters turn this into their wire format."""

    name: str
    description: str
    input_schema: dict[str, Any]


def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    mutating: bool = False,
    confirm: ConfirmPolicy | None = None,
    timeout_s: float = 20.0,
    max_result_chars: int = 6000,
    args: type[BaseModel] | None = None,
    check: Callable[[Any], None] | None = None,
    plan: Callable[[Any, ToolContext], Awaitable[dict[str, Any]]] | None = None,
    attended_only: bool = False,
) -> Callable[[ToolFunc], ToolSpec]:
    """Declare a tool. Its pydantic argument model is ``args`` or the first parameter's annotation.

    ``confirm`` only applies to mutating tools: the runtime asks a person before the
    body runs whenever it returns True for the validated arguments.
    """

    def decorate(func: ToolFunc) -> ToolSpec:
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"tool {func.__name__!r} must be an async function")
        params = list(inspect.signature(func).parameters)
        if len(params) != 2:
            raise TypeError(f"tool {func.__name__!r} must take (args, ctx)")
        args_model = args or _annotation(func, params[0])
        if not (isinstance(args_model, type) and issubclass(args_model, BaseModel)):
            raise TypeError(f"tool {func.__name__!r}: annotate its first parameter with a pydantic model")
        tool_name = name or func.__name__
        if not _NAME.match(tool_name):
            raise ValueError(f"tool name {tool_name!r} must match {_NAME.pattern}")
        if (confirm is not None or plan is not None or attended_only) and not mutating:
            raise ValueError(f"tool {tool_name!r}: only mutating tools take a confirmation policy or a plan")
        doc = description or inspect.getdoc(func) or ""
        if not doc:
            raise ValueError(f"tool {tool_name!r} needs a description (argument or docstring)")
        return ToolSpec(
            name=tool_name,
            description=doc,
            args_model=args_model,
            func=func,
            mutating=mutating,
            needs_confirmation=confirm or never,
            timeout_s=timeout_s,
            max_result_chars=max_result_chars,
            check=check,
            plan=plan,
            attended_only=attended_only,
        )

    return decorate


def _annotation(func: ToolFunc, param: str) -> Any:
    try:
        return get_type_hints(func).get(param)
    except NameError as exc:
        raise TypeError(f"tool {func.__name__!r}: cannot resolve the type of {param!r} ({exc}); define the "
                        "argument model at module level, or pass it as @tool(args=Model)") from exc


@dataclass
class Registry:
    """The tools one engine offers, by name."""

    _tools: dict[str, ToolSpec] = field(default_factory=dict)
    _definitions: dict[str, ToolDefinition] = field(default_factory=dict)  # schemas are built once

    @classmethod
    def of(cls, specs: Iterable[ToolSpec]) -> Registry:
        registry = cls()
        for spec in specs:
            registry.add(spec)
        return registry

    def add(self, spec: ToolSpec) -> None:
        if spec.name in self._tools:
            raise ValueError(f"tool {spec.name!r} is registered twice")
        self._tools[spec.name] = spec
        self._definitions[spec.name] = spec.definition()

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def require_confirmation_in(self, name: str, environments: Iterable[str]) -> None:
        """Config override: which environments need a person's confirmation for tool ``name``."""
        spec = self._tools.get(name)
        if spec is None:
            raise KeyError(name)
        if not spec.mutating:
            raise ValueError(f"tool {name!r} is read-only; confirmation applies to mutating tools")
        # The argument the rule reads stays the tool's own (an MCP rule's `field`), and an MCP tool must name it:
        # its server may default a missing one to prod (a plain override made such a call run unconfirmed).
        current = spec.needs_confirmation
        field = current.field if isinstance(current, InEnvironments) else "environment"
        arguments = spec.definition().input_schema.get("properties") or {}
        if field not in arguments:  # a rule on an argument the tool does not have would never ask (or always refuse)
            known = ", ".join(arguments) or "none"
            raise ValueError(f"tool {name!r} has no {field!r} argument (its arguments: {known}): confirmation by "
                             "environment cannot apply to it; for an MCP tool, name the argument in "
                             "mcp_servers.<server>.tools.<tool>.confirm: {in: [...], field: ...}")
        required = (isinstance(current, InEnvironments) and current.required) or spec.source.startswith("mcp:")
        self._tools[name] = replace(spec, needs_confirmation=confirm_in(*environments, field=field, required=required))

    def know_environments(self, environments: Iterable[str]) -> None:
        """Tell every per-environment confirmation rule which environments exist (see :class:`InEnvironments`)."""
        known = frozenset(n for e in environments if (n := environment_name(e)))
        for name, spec in self._tools.items():
            # Only a rule on the environment itself: another field (a cluster, a region) has its own names.
            if isinstance(spec.needs_confirmation, InEnvironments) and spec.needs_confirmation.field == "environment":
                self._tools[name] = replace(spec, needs_confirmation=replace(spec.needs_confirmation, known=known))

    def definitions(self, only: Iterable[str] | None = None) -> list[ToolDefinition]:
        if only is None:
            return list(self._definitions.values())
        names = set(only)
        return [d for name, d in self._definitions.items() if name in names]

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        return list(self._tools)

    def __len__(self) -> int:
        return len(self._tools)
