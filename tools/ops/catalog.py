"""The service catalog (a YAML file): forgiving lookup by id, name or alias, in any language."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.ops.terms import terms


class Kubernetes(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace: str
    deployment: str


class Service(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    name: str
    aliases: list[str] = Field(default_factory=list)
    team: str = ""
    environments: list[str] = Field(default_factory=lambda: ["prod"])
    kubernetes: Kubernetes | None = None
    log_selector: str = Field("", description='LogQL stream selector, e.g. {app="payments"}')
    metric_labels: dict[str, str] = Field(default_factory=dict, description="substituted into PromQL templates")
    runbooks: list[str] = Field(default_factory=list)
    recent_alerts: list[dict[str, Any]] = Field(default_factory=list)

    def names(self) -> list[str]:
        """Its id, name and aliases, normalised for matching."""
        return [_normal(n) for n in (self.id, self.name, *self.aliases) if n.strip()]

    def card(self) -> dict[str, Any]:
        """What the model sees about a service."""
        return self.model_dump(exclude_none=True, exclude_defaults=False)


class CatalogError(Exception):
    pass


class Catalog:
    def __init__(self, services: list[Service]) -> None:
        ids = [s.id for s in services]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise CatalogError(f"duplicate service ids in the catalog: {', '.join(duplicates)}")
        self.services = services

    @classmethod
    def load(cls, path: Path) -> Catalog:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise CatalogError(f"cannot read the service catalog {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise CatalogError(f"the service catalog {path} is not valid YAML: {exc}") from exc
        entries = raw.get("services") if isinstance(raw, dict) else None
        if not isinstance(entries, list):
            raise CatalogError(f"the service catalog {path} needs a top-level 'services:' list")
        services = []
        for i, entry in enumerate(entries):
            try:
                services.append(Service.model_validate(entry))
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                where = ".".join(str(p) for p in err["loc"])
                raise CatalogError(f"the service catalog {path} is invalid at services[{i}].{where}: "
                                   f"{err['msg']}") from exc
        return cls(services)

    def get(self, service_id: str) -> Service | None:
        return next((s for s in self.services if s.id == service_id), None)

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.services]

    @property
    def environments(self) -> list[str]:
        return sorted({e for s in self.services for e in s.environments})

    def search(self, query: str) -> list[Match]:
        """Services the query names, best first: the whole query is a name (1.0), or a name stands in it as a
        whole word or known phrase (0.9), or the query is a whole word of a name (0.8). Never a substring
        inside an unrelated word: "ledger" does not name the service whose alias is "edge"."""
        q = _normal(query)
        found: dict[str, Match] = {}
        for service in self.services:
            for name in service.names():
                score = 1.0 if q == name else 0.9 if _stands_in(name, q) else \
                    0.8 if q not in _GENERIC and _stands_in(q, name) else 0
                if score and score > (found[service.id].score if service.id in found else 0):
                    found[service.id] = Match(score, service, name)
        return sorted(found.values(), key=lambda m: (-m.score, -len(m.matched)))

    def suggest(self, query: str, limit: int = 3) -> list[Service]:
        """Near misses, for "did you mean": names close in spelling to a word of the query, or sharing a part
        of a hyphenated name, or a CJK name sharing two characters."""
        query = _without_generic(_normal(query))
        words = set(terms(query)) | set(_WORD.findall(query))
        parts = {p for w in words for p in re.split(r"[-_.]", w) if len(p) > 2}
        words = (words | parts) - _GENERIC
        scored: list[tuple[float, Service]] = []
        for service in self.services:
            best = 0.0
            for name in service.names():
                name = _without_generic(name)
                name_words = set(terms(name)) | {p for w in _WORD.findall(name) for p in re.split(r"[-_.]", w)}
                for word in words:
                    for candidate in name_words - _GENERIC:
                        best = max(best, difflib.SequenceMatcher(None, word, candidate).ratio())
            if best >= 0.85:  # gatway → gateway, paymnets → payments; not ledger → edge
                scored.append((best, service))
        return [s for _, s in sorted(scored, key=lambda pair: -pair[0])[:limit]]


@dataclass(frozen=True)
class Match:
    score: float
    service: Service
    matched: str  # the id, name or alias that matched


_WORD = re.compile(r"[a-z0-9][a-z0-9_.-]*[a-z0-9]|[a-z0-9]")
_CJK = re.compile(r"[\u3400-\u9fff]")


# Words that name no service on their own ("the api", "服务").
_GENERIC = frozenset({"service", "services", "svc", "api", "app", "server", "system", "服务", "系统", "应用"})
# Characters that commonly follow a service's name in a question (服务, 的, 最近, 报错, 超时, 挂了, 怎么…), an
# environment word (支付生产环境, 网关预发, 订单线上, 测试环境, 灰度) or a change word (发版, 上线, 部署, 变更, 回滚).
_CJK_NEXT = ("服系的最近报有是出挂怎为在集接模应日告错超延慢一突又了吗呢和跟与"
             "及还也都现今昨这那崩宕异问重查状情数指相故掉响不没正能会"
             "生预线测灰发上部变回版")


def _without_generic(text: str) -> str:
    """服务 and friends cut out, so 账单服务 and 订单服务 do not look alike for sharing 单服."""
    for word in ("服务", "系统", "应用"):
        text = text.replace(word, " ")
    return text


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def _stands_in(name: str, text: str) -> bool:
    """Whether ``name`` occurs in ``text`` as a whole word or phrase (for CJK, which has no spaces, as a
    phrase of at least two characters)."""
    if not name or len(name) > len(text):
        return False
    if _CJK.search(name):
        # No spaces to tell words apart: a name followed by another CJK character counts only when that
        # character commonly follows a service's name (支付服务, 支付最近报错), not when it makes a new word
        # (支付宝 is not 支付).
        return len(name) >= 2 and re.search(rf"{re.escape(name)}(?![\u3400-\u9fff])|{re.escape(name)}"
                                            rf"(?=[{_CJK_NEXT}])", text) is not None
    return re.search(rf"(?<![a-z0-9_-]){re.escape(name)}(?![a-z0-9_-])", text) is not None
