"""A small ranked index over Markdown runbooks (TF-IDF over sections; CJK via bigrams)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tools.demo.text import terms


@dataclass(frozen=True)
class Section:
    path: str
    title: str
    heading: str
    text: str
    counts: Counter[str]


class DocIndex:
    def __init__(self, sections: list[Section]) -> None:
        self.sections = sections
        df: Counter[str] = Counter()
        for s in sections:
            df.update(set(s.counts))
        n = max(len(sections), 1)
        self._idf = {t: math.log(1 + n / c) for t, c in df.items()}

    @classmethod
    def load(cls, root: Path) -> DocIndex:
        sections: list[Section] = []
        for path in sorted(root.glob("*.md")):
            for title, heading, body in _split(path.read_text(encoding="utf-8"), path.stem):
                counts = Counter(terms(f"{title} {heading} {body}"))
                sections.append(Section(f"docs/{path.name}", title, heading, body, counts))
        return cls(sections)

    def search(self, query: str, limit: int = 3) -> list[tuple[float, Section]]:
        q = Counter(terms(query))
        scored = []
        for s in self.sections:
            score = sum(self._idf.get(t, 0.0) * (1 + math.log(s.counts[t])) for t in q if s.counts[t])
            if score > 0:
                scored.append((round(score, 3), s))
        return sorted(scored, key=lambda pair: -pair[0])[:limit]


def _split(markdown: str, default_title: str) -> list[tuple[str, str, str]]:
    """(document title, section heading, section body) for each non-empty ``##`` section."""
    title, heading, lines = default_title, "", list[str]()
    out: list[tuple[str, str, str]] = []
    for line in [*markdown.splitlines(), "## "]:
        if line.startswith("# "):
            title = line[2:].strip()
        elif line.startswith("## "):
            body = "\n".join(lines).strip()
            if body:
                out.append((title, heading or title, body))
            heading, lines = line[3:].strip(), []
        else:
            lines.append(line)
    return out
