"""What a broken configuration says: one line per problem, the key as the operator writes it, and for a key that
does not exist the nearest one at that place ("did you mean"), however deep — inside a list item, a map's entry or
one backend's section."""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError


class ConfigError(Exception):
    """A configuration serve refuses: one readable line (or a few), never a traceback."""


def _members(annotation: Any) -> list[Any]:
    """The types a value of ``annotation`` may be: Optional, unions and Annotated unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]


def _tags(model: type[BaseModel]) -> set[str]:
    """The literal values a model's fields are fixed to (a backend's ``backend: loki``): pydantic names the member
    of a tagged union by its tag in an error's location."""
    found: set[str] = set()
    for field in model.model_fields.values():
        if get_origin(field.annotation) is Literal and len(get_args(field.annotation)) == 1:
            found.add(str(get_args(field.annotation)[0]))
    return found


def _step(candidates: Iterable[Any], part: int | str) -> tuple[list[Any], bool]:
    """Where ``part`` of a location leads from ``candidates``, and whether it was a union's tag (not a key)."""
    nxt: list[Any] = []
    for kind in candidates:
        origin = get_origin(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            if isinstance(part, str) and part in kind.model_fields:
                nxt += _members(kind.model_fields[part].annotation)
        elif origin in (list, tuple, set, frozenset) and isinstance(part, int):
            nxt += [m for arg in get_args(kind)[:1] for m in _members(arg)]
        elif origin is dict and isinstance(part, str):
            nxt += [m for arg in get_args(kind)[1:2] for m in _members(arg)]
    if nxt:
        return nxt, False
    tagged = [k for k in candidates if isinstance(k, type) and issubclass(k, BaseModel) and str(part) in _tags(k)]
    return tagged, bool(tagged)


def _walk(root: type[BaseModel], loc: Sequence[int | str]) -> tuple[str, list[str]]:
    """The key as written (a union's tag left out) and the keys the mapping holding the last part may have."""
    candidates: list[Any] = [root]
    shown: list[str] = []
    for i, part in enumerate(loc):
        if i == len(loc) - 1:
            shown.append(str(part))
            break
        candidates, tag = _step(candidates, part)
        if not tag:
            shown.append(str(part))
    names = sorted({n for k in candidates if isinstance(k, type) and issubclass(k, BaseModel)
                    for n in k.model_fields})
    return ".".join(shown), names


def suggest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest of ``known``, else the known names, else nothing."""
    names = sorted(set(known))
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(names)})" if names else ""


def describe(exc: ValidationError, source: str, root: type[BaseModel]) -> str:
    lines = [f"invalid configuration ({source}):"]
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        key, names = _walk(root, loc) if loc else ("(top level)", [])
        if loc[:1] == ("REDIS_URL",):  # pydantic names the first alias, whichever the value came from
            key = "redis_url (REDIS_URL)"
        hint = suggest(str(loc[-1]), names) if err["type"] == "extra_forbidden" and loc else ""
        lines.append(f"  {key}: {err['msg']}{hint}")
    lines.append("See docs/configuration.md for every key and its default.")
    return "\n".join(lines)


def describe_unparsed(exc: Exception, source: str, environ: Mapping[str, str]) -> str:
    """A variable pydantic-settings could not even parse (``OPSPILOT_SLACK__ALLOWED_CHANNELS=C1``: a list or a map
    from the environment is written as JSON), said as the variables that may be it and what to write instead."""
    text = str(exc)
    field = text.split('"')[1] if text.count('"') >= 2 else ""
    named = sorted(k for k in environ if field and k.upper().startswith(f"OPSPILOT_{field.upper()}"))
    which = ", ".join(named) or f"an OPSPILOT_ variable for {field or 'a setting'!r}"
    return (f"invalid configuration ({source}):\n  {which}: not readable as the setting's type — a list or a map "
            "given in the environment is written as JSON, e.g. OPSPILOT_SLACK__ALLOWED_CHANNELS='[\"C012AB3CD\"]'"
            "\nSee docs/configuration.md for every key and its default.")


OWN_VARIABLES = frozenset({"CONFIG", "MODEL", "FRONT", "FRONT_SAID_FD", "LISTEN_FD", "VENV", "TEST_WORKERS"})
"""``OPSPILOT_…`` variables that are not settings: the config file's path, the model's name, what a front hands
its workers, the scripts' own."""
_SERVICE_LINK = re.compile(r"_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$")
"""What Kubernetes sets in every pod for each Service of its namespace (``opspilot-front`` →
``OPSPILOT_FRONT_SERVICE_HOST``, ``OPSPILOT_FRONT_PORT_80_TCP``…): never ours to refuse."""


def unknown_variables(environ: Mapping[str, str], settings: Iterable[str], scalars: Iterable[str] = ()) -> str | None:
    """An ``OPSPILOT_`` variable shaped like a setting that sets nothing — a section's key after one underscore
    (``OPSPILOT_SLACK_ALLOWED_USERS``), or after a misspelt section (``OPSPILOT_SLAK__ALLOWED_USERS``) — said with
    the name meant: pydantic-settings passes it by, and a typo in ``allowed_users`` let anyone in. Other
    ``OPSPILOT_`` names (a Service's links, a deployment's own) are not ours to judge."""
    sections = {name.upper() for name in settings}
    singles = {name.upper() for name in scalars}  # one value, no keys: OPSPILOT_REDIS_URL__X sets nothing
    for name in sorted(environ):
        upper = name.upper()  # variables are read whatever their case
        rest = upper.removeprefix("OPSPILOT_")
        if rest != upper and (single := rest.partition("__")[0]) in singles and "__" in rest:
            return f"{name} is not a setting: {single} is one value, set as OPSPILOT_{single} (it has no keys)"
        if rest == upper or rest in OWN_VARIABLES or rest.partition("__")[0] in sections or _SERVICE_LINK.search(rest):
            continue
        head = next((s for s in sorted(sections, key=len, reverse=True) if rest.startswith(f"{s}_")), None)
        section, two, key = rest.partition("__")
        near = difflib.get_close_matches(section, sorted(sections), n=1) if two else []
        meant = f"OPSPILOT_{head}__{rest[len(head) + 1:]}" if head else f"OPSPILOT_{near[0]}__{key}" if near else \
            f"OPSPILOT_{key}" if two and key in singles else None  # (OPSPILOT_REDIS__KEY_PREFIX: a value of its own)
        if meant is not None:
            return f"{name} is not a setting (did you mean {meant!r}?): a section's key is written " \
                   "OPSPILOT_<SECTION>__<KEY>, two underscores"
    return None
