"""What the plan side knows of one batch system (``BatchKind``: its jobs at once, a group's
first submission as the dry run shows it, the estimate's assumption), and that first
submission (``JobPreview``). Each batch backend's entry in ``backends.py`` carries one. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specbench_tui.hosts.host_table import HostTable
from specbench_tui.results.cells import ServiceGroup


@dataclass(frozen=True)
class JobPreview:
    """A group's first submission as the dry run shows it (the coordinator submits exactly
    this): its directory, the submission's command line, the script and its warnings."""

    dir: str
    argv: list[str]
    script: str
    warnings: list[str]
    #: How the JSON dry run names the command line (the system's own command).
    argv_key: str

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": self.dir,
            self.argv_key: self.argv,
            "script": self.script,
            "warnings": self.warnings,
        }


@dataclass(frozen=True)
class BatchKind:
    #: ``(campaign, host, group, estimated seconds)``: the group's first submission.
    preview: Callable[[str, HostTable, ServiceGroup, float], JobPreview]
    #: Jobs at once on the host.
    max_jobs: Callable[[HostTable], int]
    #: A line of the estimate's assumptions, when the plan has such hosts.
    assumption: str
