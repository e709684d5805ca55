"""What the console prints when it closes: the counts, where the results are and the report,
so the terminal keeps a record after the screen is gone. No textual import."""

from __future__ import annotations

from pathlib import Path

from specbench_tui.results.progress import CampaignProgress

REPORT_FILES = ("report.pdf", "report.md", "report.tex")


def exit_summary(
    p: CampaignProgress,
    results_root: Path | None,
    code: int,
    *,
    detached: bool = False,
    writing_pid: int | None = None,
) -> list[str]:
    """``writing_pid``: the campaign's own process, still running as the console leaves
    (detached, or ending its run: it writes the views and the report itself)."""
    if not p.campaign:
        return ["specbench-tui: no campaign was seen"]
    c = p.counts
    checks = sum(1 for cell in p.cells.values() if cell.failed_check)
    if p.finished:
        how = "aborted" if p.aborted else "finished"
    elif detached:
        how = "still running (in its own process)"
    else:
        how = "interrupted"
    counts = f"{c.done} done, {c.failed} failed, {c.skipped} skipped"
    if c.running:  # every planned cell is in one count: they add up to the total
        counts += f", {c.running} running" if detached else f", {c.running} cut off"
    if c.pending:
        counts += f", {c.pending} not run" if p.finished else f", {c.pending} to run"
    out = [f"specbench-tui: {p.campaign} {how}: {counts} of {c.total} (exit {code})"]
    if checks:
        bad = sorted({(cell.config, cell.tp) for cell in p.cells.values() if cell.failed_check})
        names = ", ".join(f"{cfg} TP{tp}" for cfg, tp in bad)
        out.append(f"  failed a correctness check: {names} ({checks} cells)")
    if results_root is not None:
        out.append(f"  results  {results_root}")
        written = [results_root / f for f in REPORT_FILES if (results_root / f).exists()]
        if writing_pid is not None and not detached:
            out.append(
                f"  report   {results_root / REPORT_FILES[0]} (being written by the "
                f"campaign's process, pid {writing_pid})"
            )
        elif written and p.finished:
            out.append(
                f"  report   {written[0]}"
                + (f" (also {', '.join(w.name for w in written[1:])})" if written[1:] else "")
            )
        else:
            out.append(f"  report   specbench-tui --report {results_root}")
        if detached and not p.finished:
            out.append(f"  attach   specbench-tui --attach {results_root}")
        elif not p.finished and c.pending:
            out.append("  resume   run the plan again: finished cells are kept")
    return out
