"""An alert as alerting tools post it in Slack, read back: Alertmanager's notification first (title
``[FIRING:n] Alertname label values``, labels and annotations as ``name: value`` lines in the text), and, as
far as a generic reader can, anything else (Grafana uses the same title; PagerDuty and others say
"Triggered"/"Resolved" and list fields).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.slack.history import message_text

_TITLE = re.compile(r"\[(FIRING|RESOLVED)(?::(\d+))?\]\s*(.+)", re.I)
_GENERIC_STATUS = re.compile(r"\b(resolved|recovered|firing|triggered|alerting|critical|warning)\b", re.I)
_PAIR = re.compile(r"^\s*(?:[-•*>]\s*)*\*?`?(?P<name>[A-Za-z_][\w.-]{0,40})`?\*?\s*[:=]\s*\*?`?(?P<value>[^`\n]*?)`?"
                   r"\*?\s*$")
_BRACES = re.compile(r"(\w+)\s*=\s*\"([^\"]*)\"")
_ANNOTATIONS = {"summary", "description", "runbook_url", "runbook", "message", "dashboard", "value", "impact"}
_SERVICE_LABELS = ("service", "app", "application", "app_kubernetes_io_name", "job", "deployment", "container")
_ENV_LABELS = ("environment", "env", "stage", "deployment_environment")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


@dataclass(frozen=True)
class Alert:
    status: Literal["firing", "resolved"]
    title: str
    group: str
    """What stays the same while the alert group fires, fires again and resolves (its dedupe key)."""
    count: int = 1
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return hashlib.sha1(self.group.encode()).hexdigest()[:16]

    @property
    def service(self) -> str | None:
        return next((self.labels[k] for k in _SERVICE_LABELS if self.labels.get(k)), None)

    @property
    def environment(self) -> str | None:
        return next((self.labels[k] for k in _ENV_LABELS if self.labels.get(k)), None)

    def question(self) -> str:
        """What an automatic investigation asks. The alert's own words stay in the quote above it: the question is
        ours, so only label values shaped like names (``payments``, ``prod``) are repeated in it."""
        known = [f"{what} `{value}`" for what, value in (("service", self.service), ("environment", self.environment))
                 if value and _NAME.fullmatch(value)]
        about = f" It is about {' and '.join(known)}." if known else ""
        return (f"An alert fired (quoted above).{about} Investigate it: find the affected service, read its recent "
                "errors, metrics and runbook, and say what is wrong and what the runbook advises. Change nothing.")


def parse(message: dict[str, Any]) -> Alert | None:
    """The alert a bot message carries, or None when it does not look like one."""
    text = message_text(message)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    labels, annotations = _pairs(lines)
    titled = next((m for m in map(_TITLE.search, lines) if m), None)
    status: Literal["firing", "resolved"]
    if titled is not None:
        status = "resolved" if titled.group(1).upper() == "RESOLVED" else "firing"
        title = titled.group(0).strip()
        count = int(titled.group(2) or 1)
        group = titled.group(3)
    else:
        generic = next((m for m in map(_GENERIC_STATUS.search, lines[:3]) if m), None)
        if generic is None:
            return None
        status = "resolved" if generic.group(1).lower() in ("resolved", "recovered") else "firing"
        title, count = lines[0].strip(), 1
        group = _GENERIC_STATUS.sub("", lines[0])
    group = re.sub(r"\(.*\)\s*$", "", re.sub(r"[*_`:|]", " ", group))  # common labels change with the count
    return Alert(status, title[:300], " ".join(group.lower().split())[:200] or title, count, labels, annotations)


def _pairs(lines: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    section: dict[str, str] | None = None
    for line in lines:
        lowered = line.strip(" *_:").lower()
        if lowered in ("labels", "label"):
            section = labels
            continue
        if lowered in ("annotations", "annotation", "details"):
            section = annotations
            continue
        for name, value in _BRACES.findall(line):
            labels.setdefault(name, value)
        match = _PAIR.match(line)
        if match and match.group("value").strip():
            name, value = match.group("name"), match.group("value").strip()
            target = section if section is not None else annotations if name.lower() in _ANNOTATIONS else labels
            target.setdefault(name.lower() if target is labels else name, value[:300])
    return labels, annotations
