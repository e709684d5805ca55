"""README's console sample: the demo campaign at 120x40, captured as text mid-run.

Runs ``plans/demo.toml`` as the console does (the engine in a child process, the console
following it through its socket) in a temporary results directory, waits until ``--done``
cells have finished, and prints the screen as plain text; ``--results-table`` prints the
results pane (``6``) of the finished demo instead.

    .venv/bin/python bench/console_sample.py [--done 59] [--size 120x40] [--results-table]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path

from specbench_tui.engine.child import EngineProcess, engine_argv
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.tui.app import ConsoleApp

ROOT = Path(__file__).resolve().parent.parent


def screen_text(app: ConsoleApp) -> str:
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip).rstrip() for strip in strips)


async def capture(done: int, size: tuple[int, int], table: bool) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "demo.toml"
        shutil.copy(ROOT / "plans" / "demo.toml", plan)
        results = Path(tmp) / "results"
        control = EngineProcess(
            engine_argv(plan, results), ResultsLayout(results / "demo")
        ).launch()
        app = ConsoleApp(control)
        async with app.run_test(size=size) as pilot:
            while True:
                await pilot.pause(0.05)
                p = app.progress
                if (p.finished and not app.engine_running()) if table else p.counts.done >= done:
                    break
            if table:
                await pilot.press("6")
                await pilot.pause(3.0)  # the table is computed in a worker
            await pilot.pause(0.3)
            text = screen_text(app)
            if not table:
                await pilot.press("q")
                await pilot.pause(0.2)
                await pilot.press("y")
            await pilot.pause(0.5)
        proc = control.process.proc
        if proc is not None:
            proc.wait(timeout=120)
        return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--done", type=int, default=59)
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--results-table", action="store_true")
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    print(asyncio.run(capture(args.done, (w, h), args.results_table)))


if __name__ == "__main__":
    main()
