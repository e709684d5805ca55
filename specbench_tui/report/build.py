"""Assemble the report of one results directory: every section, in reading order, and only
the sections the data has (a plan with no agentic workload gets no agentic section)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specbench_tui.report.blocks import Chart, Section, Table
from specbench_tui.report.estimate_check import check_estimate
from specbench_tui.report.inputs import Inputs, load_inputs
from specbench_tui.report.sections import (
    accept,
    accounting,
    agentic,
    capacity,
    checks,
    comparability,
    concurrency,
    datasets,
    energy,
    environment,
    faults,
    forced,
    methodology,
    packing,
    server_view,
    single,
    summary,
    telemetry,
)


@dataclass
class Report:
    title: str
    subtitle: str
    simulated: bool
    sections: list[Section] = field(default_factory=list)

    def tables(self) -> list[Table]:
        return [t for s in self.sections for t in s.tables()]

    def charts(self) -> list[Chart]:
        return [c for s in self.sections for c in s.charts()]


def title_of(inp: Inputs) -> str:
    camp = inp.plan.get("campaign") or {}
    return str(
        camp.get("title")
        or inp.state.title
        or camp.get("name")
        or inp.state.campaign
        or inp.root.name
    )


def build_from(inp: Inputs) -> Report:
    est = check_estimate(inp)
    body: list[Section | None] = [
        methodology.build(inp),
        single.build(inp),
        datasets.build(inp),
        packing.build(inp),
        comparability.build(inp),
        accept.build(inp),
        forced.build(inp),
        agentic.build(inp),
        concurrency.build(inp),
        capacity.build(inp),
        server_view.build(inp),
        checks.build(inp),
        telemetry.build(inp),
        energy.build(inp),
        accounting.build(inp),
        faults.build(inp),
        environment.build(inp),
    ]
    # The summary last, so that it lists every note the other sections left; it prints first.
    first = summary.build(inp, est)
    sections = [first, *(s for s in body if s is not None)]
    # The contents follow the first page on a page of their own; the accounting starts one.
    for s in sections[1:]:
        s.newpage = s.title == "Every planned cell"
    return Report(
        title=title_of(inp),
        subtitle=f"Campaign {inp.state.campaign or inp.root.name}",
        simulated=inp.state.simulated,
        sections=sections,
    )


def build_report(root: Path) -> Report:
    """Read a results directory and build every section of its report."""
    return build_from(load_inputs(root))
