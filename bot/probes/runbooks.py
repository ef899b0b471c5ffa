"""Runbooks: the folder search_docs reads exists and holds Markdown, and the runbooks the catalog names are in it.
A missing folder is no error at serve — every search just finds nothing — so it is found here, not mid-incident."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.probes import Check
from tools import ops

_FIX = "point toolbox.docs_dir (or toolbox.data_dir, whose docs/ it defaults to) at the runbooks' folder"


def _found(root: Path) -> list[Path] | None:
    """Each Markdown file under ``root``, relative to it (as search_docs reads them); None: no folder."""
    if not root.is_dir():
        return None
    return [p.relative_to(root) for p in root.rglob("*.md")]


async def runbooks_checks(toolbox: ops.Toolbox) -> list[Check]:
    root = toolbox.docs.root
    files = await asyncio.to_thread(_found, root)  # a large folder is not walked on the event loop
    if files is None:
        return [Check("Runbooks", False, f"{root} is not a folder: every runbook search would find nothing", _FIX)]
    if not files:
        return [Check("Runbooks", False, f"no Markdown files (*.md) in {root}: every runbook search would find "
                      "nothing", _FIX + ", or add them", required=False)]
    found = {p.as_posix() for p in files} | {p.name for p in files}  # a catalog may name a runbook either way
    named = sorted({r for s in toolbox.catalog.services for r in s.runbooks})
    missing = [r for r in named if r.removeprefix("./") not in found]
    says = f"{len(files)} Markdown file(s) in {root}"
    if missing:
        return [Check("Runbooks", False, f"{says}; the catalog names {len(missing)} not found there: "
                      f"{', '.join(missing)}", "add them, or fix their names under the services' runbooks in the "
                      "catalog", required=False)]
    return [Check("Runbooks", True, says + (f", the {len(named)} the catalog names among them" if named else ""))]
