"""The docs' console sample: the demo campaign at 120x40, captured mid-run.

Runs ``plans/demo.toml`` as the console does (the engine in a child process, the console
following it through its socket) in a temporary results directory, waits until ``--done``
cells have finished, and prints the screen as plain text; ``--results-table`` prints the
results pane (``6``) of the finished demo instead. ``--svg FILE`` writes the screen as an SVG
screenshot instead of text (the README's and the docs' ``docs/img/console.svg``).

    .venv/bin/python bench/console_sample.py [--done 59] [--size 120x40] [--results-table]
    .venv/bin/python bench/console_sample.py --done 48 --svg docs/img/console.svg
"""

from __future__ import annotations

import argparse
import asyncio
import re
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


async def capture(done: int, size: tuple[int, int], table: bool, svg: bool = False) -> str:
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
            text = app.export_screenshot(title="specbench-tui") if svg else screen_text(app)
            if not table:
                await pilot.press("q")
                await pilot.pause(0.2)
                await pilot.press("y")
            await pilot.pause(0.5)
        proc = control.process.proc
        if proc is not None:
            proc.wait(timeout=120)
        return text


def without_checkout(svg: str) -> str:
    """The screenshot with this checkout's path taken off the commands it shows (the
    interpreter's path): ``.venv/bin/python`` as a reader's own clone has it, the text padded
    so every column stays where it was."""
    prefix = f"{ROOT}/"
    return re.sub(
        r">([^<]*)<",
        lambda m: (
            ">" + m[1].replace(prefix, "") + "&#160;" * (m[1].count(prefix) * len(prefix)) + "<"
        ),
        svg,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--done", type=int, default=59)
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--results-table", action="store_true")
    ap.add_argument("--svg", type=Path, help="write an SVG screenshot to this file")
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    text = asyncio.run(capture(args.done, (w, h), args.results_table, svg=args.svg is not None))
    if args.svg is None:
        print(text)
        return
    args.svg.parent.mkdir(parents=True, exist_ok=True)
    args.svg.write_text(without_checkout(text), encoding="utf-8")
    print(f"{args.svg}: {len(text.encode())} bytes")


if __name__ == "__main__":
    main()
