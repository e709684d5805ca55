"""Headless mode: the engine with a line printer, for nohup, tmux, cron and CI."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, TextIO

from specbench_tui.bench.figures import decode_left_out, slo_said, stall_said
from specbench_tui.durations import format_duration
from specbench_tui.engine.campaign import Campaign
from specbench_tui.engine.commands import Command
from specbench_tui.errors import EXIT_PIPE
from specbench_tui.printable import printable
from specbench_tui.results.eta import eta_words
from specbench_tui.results.events import (
    Aborted,
    BatchJobChanged,
    CampaignFinished,
    CampaignStarted,
    CellEnergy,
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    Event,
    GpusUnverified,
    GpusWaiting,
    GroupStarted,
    HostState,
    Notice,
    Paused,
    Resumed,
    ServiceFailed,
    ServiceReady,
    TelemetryChosen,
)
from specbench_tui.results.state import CampaignState
from specbench_tui.stdout import reader_gone, silence


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def energy_text(f: dict[str, Any]) -> str:
    """A cell's GPU board energy in words, from its ``cell_energy`` figures."""
    joules = f.get("gpu_energy_j")
    if joules is None:
        return f"GPU board energy: none ({f.get('energy_note') or 'no samples'})"
    above = f.get("j_per_output_token_above_idle")
    out = (
        f"GPU board energy {joules:.1f} J ({f.get('energy_method')}), "
        f"{_num(f.get('j_per_output_token'), '.4f')} J/token"
        + (f" ({above:.4f} above idle)" if above is not None else "")
        + f", {_num(f.get('avg_power_w'), '.0f')} W"
    )
    if not f.get("energy_valid"):
        return out + f"; left out of the report's energy: {f.get('energy_note')}"
    note = f.get("energy_note")
    return out + (f" ({note})" if note else "")


def format_event(ev: Event) -> str | None:
    """One line for a lifecycle event; None for live events (request, log, GPU sample)."""
    t = ev.to_json()["ts"][11:19]
    if isinstance(ev, CampaignStarted):
        return None  # said by the printer, which knows what earlier runs left (the reducer)
    if isinstance(ev, GroupStarted):
        what = (
            f"measuring the running server at {ev.url}"
            if ev.url
            else f"starting server on GPUs {','.join(map(str, ev.gpu_ids))}"
        )
        return f"{t} group {ev.group}: {what}" + (
            f" (attempt {ev.attempt})" if ev.attempt > 1 else ""
        )
    if isinstance(ev, ServiceReady):
        return f"{t} group {ev.group}: ready in {ev.startup_s:.1f}s"
    if isinstance(ev, ServiceFailed):
        tail = f" | {ev.log_tail[-1]}" if ev.log_tail else ""
        return f"{t} group {ev.group}: FAILED to start: {ev.reason}{tail}"
    if isinstance(ev, CellFinished):
        f = ev.figures
        # The engine's own accept length (what its counters give), never the request mean.
        accept = f.get("accept_length_weighted")
        acc = f" accept {accept:.2f}" if accept else ""
        err = f" errors {ev.errors}" if ev.errors else ""
        left = decode_left_out(f)
        lag = (
            f" CLIENT LAGGED (loop lag p99 {_num(f.get('client_lag_p99_s'), '.4f')}s): "
            "timings suspect"
            if f.get("client_lagged")
            else ""
        )
        slo = slo_said(f)
        stall = stall_said(f)
        return (
            f"{t} done   {ev.cell} [{ev.cell_id}] {ev.requests} req, "
            f"decode {_num(f.get('decode_tok_s_total'), '.1f')} tok/s"
            + (f" ({left} left out)" if left else "")
            + f", cell throughput {_num(f.get('throughput_tok_s'), '.1f')} tok/s, "
            f"ttft p50 {_num(f.get('ttft_s_p50'), '.3f')}s{acc}{err}, {ev.wall_s:.1f}s"
            + (f", {slo}" if slo else "")
            + (f", {stall}" if stall else "")
            + lag
        )
    if isinstance(ev, CellEnergy):
        return f"{t} energy {ev.cell} [{ev.cell_id}] {energy_text(ev.figures)}"
    if isinstance(ev, CellFailed):
        return f"{t} FAILED {ev.cell} [{ev.cell_id}] attempt {ev.attempt}: {ev.reason}"
    if isinstance(ev, CellSkipped):
        return f"{t} skip   {ev.cell} [{ev.cell_id}]: {ev.reason}"
    if isinstance(ev, CellQueued):
        return f"{t} queued {ev.cell} [{ev.cell_id}] attempt {ev.attempt} ({ev.by})"
    if isinstance(ev, Paused | Resumed):
        return f"{t} {ev.name} by {ev.by}"
    if isinstance(ev, Aborted):
        return f"{t} aborted by {ev.by}"
    if isinstance(ev, Notice):
        return f"{t} {ev.level}: {ev.text}"
    if isinstance(ev, TelemetryChosen):
        return f"{t} host {ev.host}: telemetry: {ev.text or ev.source}"
    if isinstance(ev, HostState):
        return f"{t} host {ev.host}: {ev.state} ({ev.reason})"
    if isinstance(ev, GpusWaiting):
        if not ev.held:
            return f"{t} group {ev.group}: GPUs free after {format_duration(ev.waited_s)}"
        return (
            f"{t} group {ev.group}: waiting {format_duration(ev.waited_s)} for its GPUs to be "
            f"freed on {ev.host}: {'; '.join(ev.held)}"
        )
    if isinstance(ev, GpusUnverified):
        gpus = ",".join(map(str, ev.gpu_ids))
        return f"{t} group {ev.group}: GPUs {gpus} not verified free ({ev.reason})"
    if isinstance(ev, BatchJobChanged):
        on = f" on {ev.node}" if ev.node else ""
        why = f" ({ev.reason})" if ev.reason else ""
        return f"{t} group {ev.group}: job {ev.job_id} {ev.state}{on}{why}"
    if isinstance(ev, CampaignFinished):
        return (
            f"{t} finished {ev.campaign}: {ev.finished} done, {ev.failed} failed, "
            f"{ev.skipped} skipped in {format_duration(ev.wall_s)} (exit {ev.exit_code})"
        )
    return None


def campaign_line(ev: CampaignStarted, state: CampaignState) -> str:
    """The opening line of a run: what the plan holds and what earlier runs left of it."""
    t = ev.to_json()["ts"][11:19]
    n = state.counts
    earlier = "".join(
        f", {k} {w} earlier" for k, w in ((n.failed, "failed"), (n.skipped, "skipped")) if k
    )
    hint = " (--rerun-failed runs them again)" if n.failed else ""
    held = f", {n.held} held (not selected)" if n.held else ""
    return (
        f"{t} campaign {ev.campaign}: {len(ev.groups)} groups, {len(ev.cells)} cells, "
        f"{n.done} already done{earlier}, {n.pending - n.held} to run{held}{hint} -> "
        f"{ev.results_dir}" + (" [simulated]" if ev.simulated else "")
    )


async def print_events(campaign: Campaign, out: TextIO) -> bool:
    """One line per lifecycle event of this run (the replay of earlier runs is folded in
    silently, so the opening line can say what they left); a done line ends with the time
    left and its range (results/eta.py), as the console shows them. When the reader of ``out`` goes
    away (``--headless | head``) the campaign is aborted as SIGPIPE would end any Unix tool,
    but cleanly: servers stopped, what was measured kept, a rerun resumes. True then."""
    state = CampaignState(campaign.layout.rows_exist)  # as the engine's: rows set aside count
    this_run = False
    reader_left = False
    async for ev in campaign.subscribe():
        state.apply(ev)
        if isinstance(ev, CampaignStarted) and ev.pid == os.getpid():
            this_run = True
            line: str | None = campaign_line(ev, state)
        else:
            line = format_event(ev) if this_run else None
            if line is not None and isinstance(ev, CellFinished):
                line += eta_words(state, ev.ts)  # the console's ETA, as the cell ended
        if line is None or reader_left:
            continue
        try:
            out.write(printable(line, one_line=True) + "\n")
            out.flush()
        except BrokenPipeError:
            if not reader_gone(out):
                raise
            reader_left = True
            silence()
            await campaign.send(Command("abort", by="SIGPIPE"))
    return reader_left


async def _main(campaign: Campaign, out: TextIO) -> int:
    campaign.install_signal_handlers()
    printer = asyncio.create_task(print_events(campaign, out))
    code = await campaign.run()
    return EXIT_PIPE if await printer else code


def run_headless(campaign: Campaign, out: TextIO = sys.stdout) -> int:
    return asyncio.run(_main(campaign, out))
