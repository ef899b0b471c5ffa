"""An alert as alerting tools post it in Slack, read back to its name, status, service, environment and severity.

Formats read (fixtures of each in tests/fixtures/alerts/):

- Alertmanager's default Slack template: only a title, ``[FIRING:n] <group label values> (<common label
  values>)`` — values without their names, so a value is taken for an environment or a severity only when it is
  one's usual word (``prod``, ``critical``), and for a service only when it names one the toolbox knows;
- templates that list labels, one per line: ``name: value``, ``• *name:* `value```` (the Prometheus
  notification-template example), `` - name = value`` (Grafana's default message, whose title may also say
  ``[FIRING:2, RESOLVED:1]``);
- anything else as far as a generic reader can (PagerDuty and others say "Triggered"/"Resolved" and list fields).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.slack.inbound.thread_reader import message_text

TITLE_LINES = 2  # Alertmanager's "[FIRING:n] …" heads its message (after a pretext line, at most)
_TITLE = re.compile(r"\[(FIRING|RESOLVED)(?::(\d+))?(?:,\s*RESOLVED:(\d+))?\]\s*(.+)", re.I)
_GENERIC_STATUS = re.compile(r"\b(resolved|recovered|firing|triggered|alerting|critical|warning)\b"
                             r"|(已恢复|恢复|已解除|解除|已解决|告警|报警|触发)", re.I)  # a Chinese template's too
_RESOLUTION = {"resolved", "recovered", "已恢复", "恢复", "已解除", "解除", "已解决"}
"""A status word that says it is over: it wins over a severity word beside it ("【恢复】… 告警级别: critical")."""
_NEGATED = re.compile(r"(?:\b(?:not|never)\s+(?:yet\s+)?|\bun|未|尚未|没有|沒有|无法|無法|不)\s*$", re.I)
"""What turns a resolution word into its opposite just before it ("not recovered", "未恢复"): still firing."""


def _statuses(line: str) -> list[re.Match[str]]:
    """The status words of ``line`` that say what they say (a negated resolution word is none)."""
    return [m for m in _GENERIC_STATUS.finditer(line)
            if m.group(0).lower() not in _RESOLUTION or not _NEGATED.search(line[:m.start()])]
# "name: value", "• *name:* `value`", " - name = value": bullets, bold and code marks around either part.
# The value is the rest of the line, trimmed in code: a lazy value before trailing spaces was cubic in a run of them
# (2,500 spaces held the event loop 13 s).
_PAIR = re.compile(r"^\s*(?:[-•*>]\s*)*\*?`?(?P<name>[A-Za-z_][\w.-]{0,40})`?\*?\s*[:=]\*?\s*"
                   r"(?:`(?P<code>[^`\n]*)`\s*(?:\*\s*)?$|(?P<value>.*))")
_BRACES = re.compile(r"(?<!\w)(\w+)\s*=\s*\"([^\"]*)\"")  # a name's start only: tried inside a 40,000-character word
# at every position it took seconds, quadratic, with the event loop held
_ANNOTATIONS = {"summary", "description", "runbook_url", "runbook", "message", "dashboard", "value", "impact",
                "alert", "graph", "source", "silence", "panel"}
_SECTIONS = {"labels": "labels", "label": "labels", "details": "labels", "annotations": "annotations",
             "annotation": "annotations"}
_NAME_LABELS = ("alertname", "alert_name")
_SERVICE_LABELS = ("service", "app", "application", "app_kubernetes_io_name", "job", "deployment", "container")
_ENV_LABELS = ("environment", "env", "stage", "deployment_environment")
_SEVERITY_LABELS = ("severity", "priority", "level")
# What a bare value in a title is taken for (its label's name is not there to say).
SEVERITIES = frozenset({"critical", "warning", "info", "page", "error", "high", "medium", "low", "major", "minor"})
ENVIRONMENTS = frozenset({"prod", "production", "staging", "stage", "stg", "dev", "development", "test", "qa",
                          "uat", "preprod", "sandbox"})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_ALERT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_:]{0,127}")


@dataclass(frozen=True)
class Alert:
    status: Literal["firing", "resolved"]
    title: str
    group: str
    """What stays the same while the alert group fires, fires again and resolves (its dedupe key)."""
    count: int = 1
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    service: str | None = None
    environment: str | None = None
    severity: str | None = None
    resolved: int = 0
    """How many of the group resolved, where the title says (Grafana's ``[FIRING:1, RESOLVED:1]``)."""

    @property
    def key(self) -> str:
        return hashlib.sha1(self.group.encode()).hexdigest()[:16]

    def label(self) -> str:
        """A short name for the alert made of its names (``PaymentsHighErrorRate · payments · prod``), in no
        language; its title when its name is not known."""
        names = [v for v in (self.name, self.service, self.environment) if v and _NAME.fullmatch(v)]
        return " · ".join(names) if self.name and names else " ".join(self.title.split())

    def question(self, lang: str = "en") -> str:
        """What an automatic investigation asks, in the thread's language (people read it too: App Home, feedback).
        The alert's own words stay in the quote above it: the question is ours, so only label values shaped like
        names (``payments``, ``prod``) are repeated in it."""
        zh = lang == "zh"
        known = [f"{what} `{value}`" for what, value in (("服务" if zh else "service", self.service),
                                                          ("环境" if zh else "environment", self.environment))
                 if value and _NAME.fullmatch(value)]
        if zh:
            about = f"涉及{'、'.join(known)}。" if known else ""
            return (f"告警已触发（见上方引用）。{about}请排查：找到受影响的服务，查看它最近的错误、指标和运行手册，"
                    "说明问题所在以及手册的建议。不要做任何改动。")
        about = f" It is about {' and '.join(known)}." if known else ""
        return (f"An alert fired (quoted above).{about} Investigate it: find the affected service, read its recent "
                "errors, metrics and runbook, and say what is wrong and what the runbook advises. Change nothing.")


def parse(message: dict[str, Any], *, services: Collection[str] = (),
          environments: Collection[str] = ()) -> Alert | None:
    """The alert a bot message carries, or None when it does not look like one. ``services`` and
    ``environments``: names the toolbox knows, which a title's bare values may be read as."""
    text = message_text(message)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    labels, annotations = _pairs(lines)
    # a title heads its line ("*[FIRING:2] …*"), near the top: not "[RESOLVED]" quoted in a firing alert's words
    titled = next((m for m in map(_TITLE.search, lines[:TITLE_LINES])
                   if m and not re.search(r"\w", m.string[:m.start()])), None)
    status: Literal["firing", "resolved"]
    values: list[str] = []
    if titled is not None:
        status = "resolved" if titled.group(1).upper() == "RESOLVED" else "firing"
        title = titled.group(0).strip()
        count = int(titled.group(2) or 1)
        head = re.sub(r"[*`|]", " ", titled.group(4))
        resolved = int(titled.group(3) or 0)
        common = re.search(r"\(([^()]*)\)\s*$", head)
        values = head[:common.start()].split() + common.group(1).split() if common else head.split()
        # The default subject: group label values (alertname first), then the other common values in brackets.
        first = values[0] if values else ""
        named = bool(_ALERT_NAME.fullmatch(first)) and (common is not None or bool(re.search(r"[a-z][A-Z]|_", first)))
        # Common labels change with the count: they are not part of the group (unless they are all there is).
        group = _no_trailing_parens(re.sub(r"[*_`:|]", " ", titled.group(4))).strip() or \
            (common.group(1) if common else "")
    else:
        # the head's own status words; the next lines' only where it has none (a summary quoting "resolved" in a
        # firing alert's words is not its status)
        said = {m.group(0).lower() for m in _statuses(lines[0])} or \
            {m.group(0).lower() for line in lines[1:3] for m in _statuses(line)}
        if not said:
            return None
        status = "resolved" if said & _RESOLUTION else "firing"
        title, count, named, resolved = lines[0].strip(), 1, False, 0
        kept, at = [], 0  # the group: the first line without its status words (a negated one is the subject's)
        for m in _statuses(lines[0]):
            kept.append(lines[0][at:m.start()])
            at = m.end()
        group = _no_trailing_parens(re.sub(r"[*_`:|【】\[\]]", " ", "".join([*kept, lines[0][at:]])))
    words = [v.strip(",") for v in values]
    return Alert(
        status, title[:300], " ".join(group.lower().split())[:200] or title, count, labels, annotations,
        name=_label(labels, _NAME_LABELS) or (words[0] if named else None),
        service=_label(labels, _SERVICE_LABELS) or _word(words, set(services)),
        environment=_label(labels, _ENV_LABELS) or _word(words, ENVIRONMENTS | set(environments)),
        severity=_label(labels, _SEVERITY_LABELS) or _word(words, SEVERITIES), resolved=resolved)


def _label(labels: dict[str, str], names: tuple[str, ...]) -> str | None:
    return next((labels[k] for k in names if labels.get(k)), None)


def _word(words: list[str], vocabulary: Collection[str]) -> str | None:
    """The one title value that is a word of ``vocabulary`` (none when two are: which one it is cannot be told)."""
    found = {w.lower(): w for w in words if w.lower() in vocabulary}
    return next(iter(found.values())) if len(found) == 1 else None


def _pairs(lines: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    differing: set[str] = set()
    section: dict[str, str] | None = None
    for line in lines:
        heading = _SECTIONS.get(line.strip(" *_:").lower())
        if heading is not None:
            section = labels if heading == "labels" else annotations
            continue
        for name, value in _BRACES.findall(line):
            labels.setdefault(name, value)
        match = _PAIR.match(line)
        value = (match.group("code") if match and match.group("code") is not None else
                 match.group("value").strip().removesuffix("*") if match else "") or ""
        if match and value.strip():
            name = match.group("name")
            target = section if section is not None else annotations if name.lower() in _ANNOTATIONS else labels
            key, value = (name.lower() if target is labels else name), value.strip()[:300]
            if target is labels and labels.get(key, value) != value:
                differing.add(key)
            target.setdefault(key, value)
    # A grouped notification's labels that differ between its alerts (two services) describe none of them alone:
    # "it" is not the first one listed.
    return {k: v for k, v in labels.items() if k not in differing}, annotations


def _no_trailing_parens(text: str) -> str:
    """``text`` without what closes its last line in "(…)", from that line's first "(" (as ``\\(.*\\)\\s*$`` reads it,
    in one pass: that regex tried every "(" of a line of them again, seconds for Slack's 40,000 characters)."""
    stripped = text.rstrip()
    at = stripped.find("(", stripped.rfind("\n") + 1)
    return text[:at] if at >= 0 and stripped.endswith(")") else text
