"""The configuration file: where it is (``--config``, ``OPSPILOT_CONFIG``, else ``./opspilot.yml``) and its YAML,
read strictly — a key given twice is refused (YAML keeps the last one silently: a second ``slack:`` section would
drop the approvers of the first, and anyone could confirm a change in prod)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from bot.config_errors import ConfigError


class _Strict(yaml.SafeLoader):
    """Safe YAML, with every mapping's keys unique."""


def _unique(loader: _Strict, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        # The keys written here: a merge (`<<: *defaults`) brings keys an explicit one may override, as YAML means
        # it; a key that is not a scalar is left to the loader (which refuses an unhashable one in its own words).
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"{key!r} is given twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1}): "
                "YAML would keep only the last, so merge them", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique)


def config_path(explicit: str | None = None) -> Path | None:
    chosen = explicit or os.environ.get("OPSPILOT_CONFIG")
    if chosen:
        return Path(chosen)
    default = Path("opspilot.yml")
    return default if default.exists() else None


def read_yaml(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_Strict)  # a SafeLoader's subclass
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (at byte {exc.start}): save it as UTF-8") from exc
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        raise ConfigError(f"{path} is not valid YAML{at}: {getattr(exc, 'problem', exc)}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must be a mapping of settings (key: value), not {type(raw).__name__}")
    odd = next((key for key in raw if not isinstance(key, str)), None)
    if odd is not None or None in raw:  # YAML reads on/yes/true as booleans, 1 as a number, ~ as null
        raise ConfigError(f"{path}: the key {odd!r} is not a setting name (YAML reads on, yes and true as booleans, "
                          "numbers as numbers and ~ as null): quote it, or remove it")
    return raw
