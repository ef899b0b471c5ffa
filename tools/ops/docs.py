"""Runbook search: a ranked full-text index (SQLite FTS5, BM25) over a folder of Markdown files.

FTS5's default tokenizer sees a whole Chinese sentence as one token, so text is indexed as
words (Latin scripts) plus overlapping character bigrams (CJK); queries are tokenised the same
way. The index is rebuilt when a file is added, changed or removed. SQLite is synchronous:
every call runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from tools.ops.terms import terms


@dataclass(frozen=True)
class Hit:
    score: float
    title: str
    section: str
    path: str
    text: str


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


def _tokens(text: str) -> str:
    return " ".join(terms(text))


class DocIndex:
    def __init__(self, root: Path, *, link_base: str | None = None) -> None:
        self.root = root
        self.link_base = link_base.rstrip("/") if link_base else None
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute("CREATE VIRTUAL TABLE sections USING fts5(title, heading, body, path UNINDEXED, "
                         "raw_title UNINDEXED, raw_heading UNINDEXED, raw_body UNINDEXED, tokenize='unicode61')")
        self._lock = threading.Lock()
        self._fingerprint: tuple[tuple[str, float, int], ...] | None = None

    def _scan(self) -> tuple[tuple[str, float, int], ...]:
        files = sorted(self.root.rglob("*.md")) if self.root.is_dir() else []
        return tuple((str(p), p.stat().st_mtime, p.stat().st_size) for p in files)

    def refresh(self) -> bool:
        """Rebuild the index if the folder changed since the last build. True if it rebuilt."""
        with self._lock:
            fingerprint = self._scan()
            if fingerprint == self._fingerprint:
                return False
            rows = []
            for name, _, _ in fingerprint:
                path = Path(name)
                rel = path.relative_to(self.root).as_posix()
                for title, heading, body in _split(path.read_text(encoding="utf-8"), path.stem):
                    rows.append((_tokens(title), _tokens(heading), _tokens(body), rel, title, heading, body))
            with self._db:
                self._db.execute("DELETE FROM sections")
                self._db.executemany("INSERT INTO sections VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            self._fingerprint = fingerprint
            return True

    def search_sync(self, query: str, limit: int = 3) -> list[Hit]:
        self.refresh()
        words = sorted(set(terms(query)))
        if not words:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        with self._lock:
            rows = self._db.execute(
                "SELECT bm25(sections, 5.0, 3.0, 1.0) AS rank, raw_title, raw_heading, path, raw_body "
                "FROM sections WHERE sections MATCH ? ORDER BY rank LIMIT ?", (match, limit)).fetchall()
        return [Hit(round(-rank, 3), title, heading, self._link(path), body)
                for rank, title, heading, path, body in rows]

    async def search(self, query: str, limit: int = 3) -> list[Hit]:
        return await asyncio.to_thread(self.search_sync, query, limit)

    def _link(self, rel: str) -> str:
        return f"{self.link_base}/{rel}" if self.link_base else f"docs/{rel}"
