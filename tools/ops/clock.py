"""What "now" is for the data a toolbox reads: the real clock, or — for a replayed dataset such as the bundled
demo — the moment the data was recorded up to, so metrics, logs and change history line up on one timeline."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Clock:
    fixed: float | None = None

    def now(self) -> float:
        return self.fixed if self.fixed is not None else time.time()

    @property
    def replayed(self) -> bool:
        return self.fixed is not None

    @classmethod
    def for_data(cls, override: datetime | None, data_dir: Path | None) -> Clock:
        """``toolbox.now`` when set, else ``now:`` in the data directory's ``dataset.yml``, else the real clock."""
        if override is not None:
            return cls(override.timestamp())
        meta = data_dir / "dataset.yml" if data_dir is not None else None
        if meta is None or not meta.is_file():
            return cls()
        try:
            loaded = yaml.safe_load(meta.read_text(encoding="utf-8")) or {}
            value = loaded.get("now") if isinstance(loaded, dict) else None
            if value is None:
                return cls()
            stamp = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        except (OSError, yaml.YAMLError, ValueError) as exc:
            raise ValueError(f"cannot read the dataset clock in {meta}: {exc}") from exc
        if stamp.tzinfo is None:
            raise ValueError(f"{meta}: now: {value} needs a time zone (e.g. 2026-12-02T10:00:00Z)")
        return cls(stamp.timestamp())
