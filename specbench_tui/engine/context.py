"""What every part of a running campaign shares: the plan, the options, the store, the hub,
the run control. One object passed down instead of a scheduler that everything calls back
into."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbench_tui.engine.energy_watch import EnergyWatch
from specbench_tui.engine.host_quiet import HostQuiet
from specbench_tui.engine.hub import EventHub
from specbench_tui.engine.log_lines import LogLineWorker
from specbench_tui.engine.run_control import RunControl
from specbench_tui.engine.store import ResultsStore
from specbench_tui.engine.templates import GroupTemplates
from specbench_tui.hosts.options import HostOptions
from specbench_tui.plan.document import Plan
from specbench_tui.plan.measured import Measured
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState

if TYPE_CHECKING:
    from specbench_tui.engine.job_share import JobShare


@dataclass(frozen=True)
class CampaignOptions:
    sim: bool = False
    fresh: bool = False
    only: str | None = None
    rerun_failed: bool = False
    # Cell ids to run again even though they ended (done, failed, skipped): a console's
    # r / R / g after the end starts a new run on the same results with these.
    rerun: tuple[str, ...] = ()
    control_socket: bool = True  # every campaign serves control.sock, console or headless
    gpu_free_timeout_s: float = 300.0
    stop_grace_s: float = 30.0
    server_restarts: int = 1  # restarts of a group's server after it dies mid-cell
    telemetry_interval_s: float = 1.0
    live_history: int = 2000  # live events kept for a console that attaches late
    # How hosts are reached beyond the plan (the backends' command-line options).
    hosts: HostOptions = field(default_factory=HostOptions)
    abort_grace_s: float = 1.0  # how long an abort lets requests in flight finish
    # Inside a batch job: run only the job's group and cells, on its allocation.
    job: JobShare | None = None
    # Views at the end (a batch job leaves them to its campaign), and what writes the report
    # of the results directory then: the command line passes engine/report_child.py's
    # ``write_report`` (a child process a signal can stop); None writes none (``--report
    # DIR`` renders it later).
    write_views: bool = True
    report: Callable[[Path], Awaitable[list[Path]]] | None = None
    # Which speed-ups of the results directory are not like with like, as each group ends:
    # the command line passes report/comparisons.py's ``unlike`` (the engine cannot import
    # the report); None says nothing until the report.
    audit: Callable[[Path], list[tuple[tuple[Any, ...], str]]] | None = None
    # An earlier run's times: the constants of the estimate this run records (the command
    # line finds them, plan/measured.py); None: the plan's [estimate] and defaults.
    measured: Measured | None = None


@dataclass
class RunContext:
    plan: Plan
    layout: ResultsLayout
    options: CampaignOptions
    store: ResultsStore
    hub: EventHub
    control: RunControl
    log_lines: LogLineWorker
    simulated: bool
    templates: GroupTemplates = field(init=False)  # the chat template of each group's model
    energy: EnergyWatch = field(init=False)  # each finished cell's GPU board energy
    # The unlike comparisons said so far (checks.say_unlike), by their audit key.
    said_unlike: set[tuple[Any, ...]] = field(init=False, default_factory=set)
    # Each packed host's measuring, by host name (engine/host_quiet.py).
    quiet: dict[str, HostQuiet] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.templates = GroupTemplates(self.hub)
        # No rewrite of the views of its own: a cell's energy joins cells.parquet at the
        # next rewrite (the next cell's end, and the run's end, which waits for it).
        self.energy = EnergyWatch(self.hub.emit)
        self.hub.taps.append(self.energy.on_event)

    @property
    def state(self) -> CampaignState:
        return self.hub.state

    @property
    def spec(self):
        return self.plan.spec

    def quiet_of(self, host: str) -> HostQuiet:
        return self.quiet.setdefault(host, HostQuiet())

    def rider(self, group: ServiceGroup) -> ServiceGroup | None:
        """The group that runs its cells on ``group``'s server (``rides``), if any."""
        for g in self.state.groups.values():
            if g.group is not None and g.group.rides == group.id:
                return g.group
        return None

    def pending(self, group: ServiceGroup) -> list[Cell]:
        """The group's cells this run still has to run, in plan order."""
        g = self.state.groups.get(group.id)
        out = []
        for cid in g.cells if g else []:
            c = self.state.cells[cid]
            if c.status == "pending" and c.selected and c.cell is not None:
                out.append(c.cell)
        return out
