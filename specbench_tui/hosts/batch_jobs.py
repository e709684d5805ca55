"""What every batch job of a campaign is, whatever the batch system: the files of one
submission of a group on the shared filesystem (``JobPaths``) and what it runs
(``JobSpec``, its ``job.json``). Each submission of a group gets a directory of its own,
holding the plan as run, ``job.json``, the script, the system's output, the command mailbox
and the results the tool writes on the node (``results/<campaign>/``, the usual layout). A
requeued job keeps its directory, so the tool on the node resumes there. Pure: no I/O here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from specbench_tui.results.layout import ResultsLayout


@dataclass(frozen=True)
class JobPaths:
    """The files of one submission of a group, as paths on the cluster."""

    dir: str
    campaign: str
    group: str

    def _p(self, *names: str) -> str:
        return str(PurePosixPath(self.dir, *names))

    @property
    def plan(self) -> str:
        return self._p("plan.toml")

    @property
    def spec(self) -> str:
        return self._p("job.json")

    @property
    def script(self) -> str:
        return self._p("job.sh")

    @property
    def job_id(self) -> str:
        """Written once the submission answered (the comment finds a job whose id was never
        written)."""
        return self._p("job_id")

    @property
    def mailbox(self) -> str:
        """Commands for the tool on the node, one JSON line each (pause, skip, ...)."""
        return self._p("commands.jsonl")

    @property
    def results_root(self) -> str:
        return self._p("results")

    @property
    def layout(self) -> ResultsLayout:
        """The results the tool on the node writes, in the usual layout."""
        return ResultsLayout(PurePosixPath(self.results_root, self.campaign))  # type: ignore[arg-type]

    @property
    def events(self) -> str:
        return str(self.layout.events)

    @property
    def server_log(self) -> str:
        return str(self.layout.log_of(self.group))

    def part(self, cell_id: str, attempt: int) -> str:
        return str(self.layout.part_path(cell_id, attempt))

    def texts(self, cell_id: str, attempt: int) -> str:
        return str(self.layout.texts_path(cell_id, attempt))


@dataclass(frozen=True)
class JobSpec:
    """``job.json``: what one submission runs. The node's tool checks it against the plan it
    was given (same group, cells the plan has) before it runs anything."""

    campaign: str
    group: str
    submission: int
    cells: tuple[str, ...]
    plan_hash: str
    tool_version: str

    def to_json(self) -> dict[str, Any]:
        return {
            "campaign": self.campaign,
            "group": self.group,
            "submission": self.submission,
            "cells": list(self.cells),
            "plan_hash": self.plan_hash,
            "tool_version": self.tool_version,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1) + "\n"

    @staticmethod
    def from_json(obj: Any) -> JobSpec:
        """Raises ValueError saying what is wrong."""
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        try:
            cells = obj["cells"]
            if not isinstance(cells, list) or not all(isinstance(c, str) for c in cells):
                raise ValueError("cells must be a list of cell ids")
            return JobSpec(
                campaign=str(obj["campaign"]),
                group=str(obj["group"]),
                submission=int(obj["submission"]),
                cells=tuple(cells),
                plan_hash=str(obj.get("plan_hash", "")),
                tool_version=str(obj.get("tool_version", "")),
            )
        except KeyError as exc:
            raise ValueError(f"missing key {exc.args[0]!r}") from None
