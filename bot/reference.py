"""The configuration reference, generated from the settings models (``opspilot config --reference``): every key
with its type, default, environment variable and meaning. docs/configuration.md holds a copy between markers,
and a test fails when that copy is stale, so the page never drifts from the code."""

from __future__ import annotations

import json
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from bot.config import Settings
from core.urls import hidden_options

START, END = "<!-- reference:start -->", "<!-- reference:end -->"

ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("OPSPILOT_CONFIG", "the YAML config file (default: `./opspilot.yml` when present)"),
    ("OPSPILOT_<SECTION>__<KEY>", "any key below, e.g. `OPSPILOT_LIMITS__MAX_STEPS=5`; wins over the file"),
    ("REDIS_URL", "`redis_url`"),
    ("ANTHROPIC_API_KEY", "the Anthropic model (with `llm.provider: auto`, the first key found picks the provider)"),
    ("OPENAI_API_KEY", "an OpenAI or OpenAI-compatible model; `OPENAI_BASE_URL` for another endpoint"),
    ("OPSPILOT_MODEL", "`llm.name`"),
    ("SLACK_BOT_TOKEN", "`slack.bot_token` (`xoxb-…`)"),
    ("SLACK_APP_TOKEN", "`slack.app_token` (`xapp-…`): Socket Mode when set"),
    ("SLACK_SIGNING_SECRET", "`slack.signing_secret`: HTTP mode"),
    ("SLACK_API_URL", "`slack.api_url`"),
    ("PORT", "`slack.port` (`serve --port` wins)"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "`telemetry.otlp_endpoint`"),
)
"""Variables read under their own names (Slack's and the providers' conventions), besides ``OPSPILOT_…``."""

_SECRET = re.compile(r"(token|secret|api_key|password)$", re.IGNORECASE)
_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@/\s]+@")


def _type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_type(a) for a in args if a is not type(None)) + (
            " or null" if type(None) in args else "")
    if origin in (list, tuple):
        return f"list of {_type(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_type(args[1])}" if len(args) == 2 else "map"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation)).replace("AwareDatetime", "datetime")


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models a field holds (several for a discriminated union), however it is wrapped."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _models(args[0])
    if origin in (Union, types.UnionType, list, tuple, dict):
        return [m for a in (args[1:] if origin is dict else args) for m in _models(a)]
    return [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []


def _plain(annotation: Any) -> bool:
    """Just a model (perhaps Annotated), not a model among other choices or in a container."""
    if get_origin(annotation) is Annotated:
        return _plain(get_args(annotation)[0])
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return ""
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None or value in ([], {}):
        return "—"
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        value = [v.model_dump(mode="json", exclude_none=True) for v in value]
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"`{text[:60]}…`" if len(text) > 60 else f"`{text}`"


def _backend(model: type[BaseModel]) -> str:
    """The ``backend`` value that selects this variant of a section."""
    field = model.model_fields.get("backend")
    return str(get_args(field.annotation)[0]) if field is not None and get_args(field.annotation) else "?"


def _kind(annotation: Any, inner: list[type[BaseModel]]) -> str:
    origin = get_origin(annotation)
    if inner and origin is list:
        return "list of sections"
    if inner and origin is dict:
        return "map of sections"
    if len(inner) > 1:
        return "one section, by `backend`"
    return _type(annotation)


def rows(model: type[BaseModel] = Settings, path: str = "", env: str | None = "OPSPILOT_",
         ) -> Iterator[tuple[str, str, str, str, str]]:
    """(key, type, default, environment variable, meaning) for every key, depth first."""
    for name, field in model.model_fields.items():
        if name == "backend" and len(get_args(field.annotation)) == 1:
            continue  # said in the variant's heading
        key = f"{path}{field.alias or name}"
        inner = _models(field.annotation)
        if inner and _plain(field.annotation):  # a section: its keys
            yield from rows(inner[0], f"{key}.", f"{env}{name.upper()}__" if env else None)
            continue
        var = f"`{env}{name.upper()}`" if env else ""
        yield key, _kind(field.annotation, inner), _default(field), var, field.description or ""
        origin = get_origin(field.annotation)
        below = f"{key}[]." if origin is list else f"{key}.<name>." if origin is dict else f"{key}."
        for each in inner:
            if len(inner) > 1:  # one of several, chosen by `backend`
                yield (below.rstrip("."), f"with `backend: {_backend(each)}`", "", "",
                       (each.__doc__ or "").strip().split("\n")[0])
            yield from rows(each, below, None)


def markdown() -> str:
    lines = ["| key | type | default | environment | meaning |", "|---|---|---|---|---|"]
    for key, kind, default, var, meaning in rows():
        cells = (default, meaning)  # a `|` in a cell would end it, in code spans too
        default, meaning = (c.replace("|", "\\|") for c in cells)
        lines.append(f"| `{key}` | {kind} | {default} | {var} | {meaning} |")
    lines += ["", "Read under their own names as well:", "", "| variable | sets |", "|---|---|"]
    lines += [f"| `{name}` | {what} |" for name, what in ENVIRONMENT]
    return "\n".join(lines) + "\n"


def in_effect(settings: Settings) -> dict[str, Any]:
    """The settings as a mapping, secrets hidden: tokens, secrets, keys and passwords in URLs."""
    def hide(value: Any, name: str = "") -> Any:
        if isinstance(value, dict):
            return {k: hide(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [hide(v, name) for v in value]
        if isinstance(value, str) and value and _SECRET.search(name) and not name.endswith("_env"):
            return "(set, hidden)"
        if isinstance(value, str):
            return hidden_options(_PASSWORD.sub(r"\1***@", value)) if "://" in value else value
        return value

    return dict(hide(settings.model_dump(mode="json")))


def updated(page: str) -> str:
    """``page`` with the generated part between its markers replaced by today's."""
    head, sep, rest = page.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"the page has no {START} … {END} markers")
    return f"{head}{START}\n{markdown()}{END}{tail}"
