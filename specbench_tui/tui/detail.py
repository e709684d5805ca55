"""What the detail pane says about the node selected in the plan tree.

A cell: its parameters, the server command line of its group, then its key figures when it
finished or its failure reason with the log tail when it failed: what the operator needs to
decide between rerun, skip and retrying the group without opening a file.
"""

from __future__ import annotations

import shlex

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from specbench_tui.bench.conditions import conditions_said
from specbench_tui.bench.figures import FIGURE_NAMES, STALL_FLAG, decode_left_out, stall_said
from specbench_tui.results.progress import CampaignProgress, CellState, GroupState, format_clock
from specbench_tui.tui.look import MARKS, SERVER_MARKS, Palette, palette_for, shown_status
from specbench_tui.tui.plan_tree import NodeRef

_PARAM_KEYS = (
    "kind",
    "prompt_set",
    "prompts",
    "max_tokens",
    "concurrency",
    "requests",
    "samples",
    "repeats",
    "warmup",
    "sessions",
    "turns",
    "tool_output_tokens",
    "temperature",
    "timeout_s",
    "params",
)


def _fmt(value: object) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


#: The flag on a cell whose client lagged while measuring it (as the headless line says it).
LAGGED = "CLIENT LAGGED"


def _figures(c: CellState) -> list[tuple[str, str]]:
    f = c.figures
    out: list[tuple[str, str]] = []

    def num(key: str, label: str, fmt: str, scale: float = 1.0) -> None:
        v = f.get(key)
        if v is not None:
            out.append((label, fmt.format(float(v) * scale)))

    name = FIGURE_NAMES
    num("throughput_tok_s", name["throughput_tok_s"], "{:.1f} tok/s")
    # The cell's decode rate is token-weighted; the per-request rates are a distribution.
    num("decode_tok_s_total", name["decode_tok_s_total"], "{:.1f}")
    num("decode_tok_s_p50", f"{name['decode_tok_s']} per request p50", "{:.1f}")
    # end-to-end tok/s under the contract's older column name too (earlier results)
    e2e = "e2e_tok_s_p50" if f.get("e2e_tok_s_p50") is not None else "output_tok_s_p50"
    num(e2e, f"{name['e2e_tok_s']} p50", "{:.1f}")
    num("ttft_s_p50", f"{name['ttft_s']} p50", "{:.0f} ms", 1000.0)
    num("itl_token_s_p50", f"{name['itl_token_s']} p50", "{:.1f} ms", 1000.0)
    # The engine's own accept length (what its counters give), then the plain request mean.
    num("accept_length_weighted", name["accept_length"], "{:.2f}")
    num("accept_length_mean", f"{name['accept_length']} request mean", "{:.2f}")
    left = decode_left_out(f)
    if left:
        out.append((f"{name['decode_tok_s']} leaves out", left))
    if f.get("requests") is not None:
        out.append(("requests", f"{f['requests']} ({f.get('errors') or 0} errors)"))
    num("wall_s", "wall", "{:.1f} s")
    stall = stall_said(f)
    if stall:
        out.append((STALL_FLAG, stall.removeprefix(STALL_FLAG).strip()))
    if f.get("client_lagged"):
        lag = f.get("client_lag_p99_s")
        shown = f"{float(lag) * 1e3:.1f} ms" if lag is not None else "?"
        out.append((LAGGED, f"loop lag p99 {shown}: timings suspect"))
    said = conditions_said(f)
    if said:
        out.append(("conditions", said))
    return out


def _command(g: GroupState, pal: Palette, t: Text) -> None:
    url = g.group.url if g.group is not None else None
    if url:  # not started by this tool: measured where it runs
        t.append("running server ", style=pal.muted)
        t.append(url + "\n", style=pal.primary)
    elif g.command:
        t.append("$ ", style=pal.muted)
        t.append(shlex.join(g.command) + "\n", style=pal.primary)


def _tail(lines: list[str], pal: Palette, t: Text, title: str) -> None:
    if lines:
        t.append(f"{title}\n", style=pal.bold)
        for line in lines:
            low = line.lower()
            bad = any(w in low for w in ("error", "exception", "traceback", "out of memory"))
            t.append("  " + line + "\n", style=pal.error if bad else pal.muted)


def cell_text(p: CampaignProgress, c: CellState, pal: Palette, now: float) -> Text:
    t = Text()
    status = shown_status(c.status, c.failed_check)
    word = "DONE · FAILED CHECK" if status == "failed_check" else c.status.upper()
    t.append(f"{MARKS[status]} {word}", style=pal.status(status) + pal.bold)
    t.append(f"  {c.name}\n")
    meta = [f"id {c.id}"]
    if c.attempt:
        meta.append(f"attempt {c.attempt}")
    if c.resumed:
        meta.append("finished in an earlier run")
    if c.status == "running":
        if c.requests_total:
            meta.append(f"requests {c.requests_done}/{c.requests_total}")
        if c.started_at is not None:
            meta.append(f"for {format_clock(now - c.started_at)}")
    t.append(" · ".join(meta) + "\n", style=pal.muted)
    # what decides the next move first: the failure and its log, or the figures
    if c.status in ("failed", "skipped") and c.reason:
        t.append("reason ", style=pal.bold)
        t.append(c.reason + "\n", style=pal.error if c.status == "failed" else pal.warning)
    if c.failed_check:
        t.append("check ", style=pal.bold)
        t.append(
            c.check_failed + " (its figures are not a speed-up)\n",
            style=pal.warning,
        )
    if c.status == "failed":
        _tail(c.log_tail, pal, t, "log tail")
    if c.status == "done" and c.figures:
        figures = _figures(c)
        lag = dict(figures).pop(LAGGED, None)
        figures = [(label, value) for label, value in figures if label != LAGGED]
        width = max((len(label) for label, _ in figures), default=0)
        for label, value in figures:
            t.append(f"{label:>{width}} ", style=pal.muted)
            t.append(value + "\n", style=pal.bold)
        if lag is not None:  # a warning, not a figure: its own line, not in the column
            t.append(f"{MARKS['failed_check']} {LAGGED}: {lag}\n", style=pal.warning)
    params = [
        f"{k}={_fmt(c.spec[k])}"
        for k in _PARAM_KEYS
        if c.spec.get(k) not in (None, 0, "", [], {}, ())
    ]
    if params:
        t.append("params ", style=pal.bold)
        t.append(" ".join(params) + "\n")
    g = p.groups.get(c.group)
    if g is not None:
        t.append("server ", style=pal.bold)
        t.append(
            f"{g.id} · {g.label or g.config} · TP{g.tp} · GPUs "
            f"{','.join(str(i) for i in g.gpu_ids) or '?'} · {g.server}\n"
        )
        _command(g, pal, t)
    return t


def group_text(p: CampaignProgress, g: GroupState, pal: Palette, now: float) -> Text:
    t = Text()
    t.append(f"{SERVER_MARKS[g.server]} server {g.server}", style=pal.status(g.server) + pal.bold)
    t.append(f"  {g.id}\n")
    c = p.group_counts(g.id)
    facts = [
        g.label or g.config,
        f"TP{g.tp}",
        f"GPUs {','.join(str(i) for i in g.gpu_ids) or '?'}",
        f"{c.done} done, {c.failed} failed, {c.skipped} skipped of {c.total}",
    ]
    if g.attempt > 1:
        facts.append(f"start attempt {g.attempt}")
    if g.startup_s:
        facts.append(f"started in {g.startup_s:.0f} s")
    up = g.uptime_s(now)
    if up is not None:
        facts.append(f"up {format_clock(up)}")
    t.append(" · ".join(facts) + "\n", style=pal.muted)
    job = p.jobs.get(g.id)
    if job is not None:  # a group on a batch host: its job as the batch system last said
        where = f" on {job.node}" if job.node else ""
        why = f" ({job.reason})" if job.reason else ""
        t.append(f"job {job.job_id} {job.state}{where}{why} · {job.dir}\n", style=pal.muted)
    checks = {p.cells[cid].check_failed for cid in g.cells if p.cells[cid].failed_check}
    for why in sorted(checks):
        t.append(f"{MARKS['failed_check']} failed check: ", style=pal.warning + pal.bold)
        t.append(why + "\n", style=pal.warning)
    _command(g, pal, t)
    if g.reason:
        t.append("\nreason ", style=pal.bold)
        t.append(g.reason + "\n", style=pal.error)
        _tail(list(g.log_tail), pal, t, "\nlog tail")
    return t


def summary_text(p: CampaignProgress, ref: NodeRef, cells: list[str], pal: Palette) -> Text:
    c = p.counts_of(cells)
    t = Text()
    t.append(f"{ref.kind} {ref.key}\n", style=pal.bold)
    t.append(
        f"{c.total} cells: {c.done} done, {c.failed} failed, {c.skipped} skipped, "
        f"{c.running} running, {c.pending} pending\n",
        style=pal.muted,
    )
    failed = [p.cells[i] for i in cells if p.cells[i].status == "failed"]
    for cell in failed[:8]:
        t.append(f"{MARKS['failed']} {cell.name}: ", style=pal.error)
        t.append(cell.reason + "\n")
    if len(failed) > 8:
        t.append(f"… and {len(failed) - 8} more (F shows failed cells only)\n", style=pal.muted)
    checks = sorted({p.cells[i].check_failed for i in cells if p.cells[i].failed_check})
    for why in checks:
        t.append(f"{MARKS['failed_check']} failed check: ", style=pal.warning)
        t.append(why + "\n")
    return t


class DetailPane(VerticalScroll):
    """Scrollable (a failure's log tail can be long) and maximizable like every pane."""

    ALLOW_MAXIMIZE = True

    _shown: Text | None = None  # what is on screen: unchanged text is not repainted

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static("Select a node in the plan tree.", id="detail-text")

    def show(self, p: CampaignProgress, ref: NodeRef | None, cells: list[str], now: float) -> None:
        pal = palette_for(self.app)
        if not p.cells:
            text = Text("Select a node in the plan tree.", style=pal.muted)
        elif ref is None or ref.kind == "root":  # nothing selected: the whole campaign
            text = summary_text(p, NodeRef("campaign", p.campaign), list(p.cells), pal)  # type: ignore[arg-type]
            text.append("\nSelect a node in the plan tree for its details.", style=pal.muted)
        elif ref.kind == "cell" and ref.key in p.cells:
            text = cell_text(p, p.cells[ref.key], pal, now)
        elif ref.kind == "group" and ref.key in p.groups:
            text = group_text(p, p.groups[ref.key], pal, now)
        else:
            text = summary_text(p, ref, cells, pal)
        if text != self._shown:
            self._shown = text
            self.query_one("#detail-text", Static).update(text)
