"""Where a campaign's results live: the results-layout contract as paths.

Every reader and writer of a results directory (the store, the report, the console, the
control socket) takes its paths from here, so the layout is written down once.
"""

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
    def telemetry_parts(self) -> Path:
        """GPU samples in the order they were taken, one file per flush (the truth behind
        ``telemetry.parquet``, so a long run never rewrites what it already wrote)."""
        return self.root / "telemetry"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def parts(self) -> Path:
        """Per-cell request files, each written whole when its cell ends (crash safety)."""
        return self.root / "parts"

    @property
    def interrupted_parts(self) -> Path:
        """Rows of attempts whose end the log never recorded: kept, never counted."""
        return self.parts / "interrupted"

    @property
    def set_aside(self) -> Path:
        """Views that could not be read, moved here (with a notice) before being rebuilt."""
        return self.root / "unreadable"

    @property
    def manifest(self) -> Path:
        """What each group ran on and with (tool, host, engine, GPUs, model), as recorded
        when its server was ready."""
        return self.root / "manifest.json"

    @property
    def engine_log(self) -> Path:
        """What a campaign run for a console printed (its headless lines, in a child process)."""
        return self.root / "engine.log"

    @property
    def servers(self) -> Path:
        """One record per server started and not yet seen stopped (its process group and
        session, or its unit): what the next run, ``--report`` and ``--cleanup`` stop when a
        crash of the tool left it running."""
        return self.root / "servers"

    @property
    def control_socket(self) -> Path:
        return self.root / "control.sock"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    def log_of(self, group: str) -> Path:
        return self.logs / f"{group}.log"

    def part_path(self, cell_id: str, attempt: int) -> Path:
        return self.parts / f"{cell_id}.a{attempt}.parquet"

    def texts_path(self, cell_id: str, attempt: int) -> Path:
        """Output texts by request key, for the greedy-equivalence check (rows keep hashes)."""
        return self.parts / f"{cell_id}.a{attempt}.texts.json"

    @staticmethod
    def part_key(part: Path) -> tuple[str, int] | None:
        """``(cell_id, attempt)`` of a part file's name, None for anything else."""
        if part.suffix != ".parquet":
            return None
        cid, _, att = part.stem.rpartition(".a")
        return (cid, int(att)) if cid and att.isdigit() else None

    def rows_exist(self, cell_id: str, attempt: int) -> bool:
        return self.part_path(cell_id, attempt).exists()
