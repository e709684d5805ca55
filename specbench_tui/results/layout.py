"""Where a campaign's results live: the results-layout contract as paths."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ResultsLayout:
    root: Path  # <results>/<campaign>/

    @classmethod
    def for_campaign(
        cls, results_root: str | Path, campaign: str, *, sim: bool = False
    ) -> ResultsLayout:
        """A rehearsal (``--sim``) of a real plan gets its own directory, so simulated numbers can
        never be taken for measured ones or mark real cells as finished."""
        return cls(Path(results_root) / (f"{campaign}-sim" if sim else campaign))

    @property
    def plan(self) -> Path:
        return self.root / "plan.toml"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def requests(self) -> Path:
        return self.root / "requests.parquet"

    @property
    def cells(self) -> Path:
        return self.root / "cells.parquet"

    @property
    def telemetry(self) -> Path:
        return self.root / "telemetry.parquet"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def parts(self) -> Path:
        """Per-cell request files, each written whole when its cell ends (crash safety)."""
        return self.root / "parts"

    @property
    def control_socket(self) -> Path:
        return self.root / "control.sock"

    def log_of(self, group: str) -> Path:
        return self.logs / f"{group}.log"
