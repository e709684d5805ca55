"""Console responsiveness under an event flood.

Feeds the console a scripted campaign, then a flood of live events (by default 5,000 request
results and 5,000 server log lines a second, plus GPU samples) through a fake control, and
measures, under ``App.run_test``:

- redraw rate: screen updates written per second (counted where the app hands a frame to the
  terminal driver), and batches applied per second;
- key latency: from the key to the first screen update written after its effect (header
  says PAUSED / RUNNING, follow flips, a pane hides or shows), for keys delivered as a
  terminal delivers them (one message to the app) and through ``pilot.press`` (which adds
  Pilot's own wait for the app to go idle, long under a flood);
- event throughput: events applied per second, and how many live events were dropped.

Targets (issue 5): at least 10 redraws a second, key effects within 100 ms.

    .venv/bin/python bench/console_bench.py [--rate 5000] [--seconds 5] [--size 120x40]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import events

from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.events import GpuSample, LogLine, RequestDone
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.header import CampaignHeader

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.scripted import ScriptedControl, sample_campaign  # noqa: E402

GROUP = "sim.ddtree-16.tp1"
CELL = "ddt1agent"


async def flood(control: ScriptedControl, rate: int, stop: asyncio.Event) -> int:
    """Publish ``rate`` request results and ``rate`` log lines a second, in 10 ms slices."""
    sent = 0
    tick = 0.01
    per_tick = max(1, int(rate * tick))
    start = time.perf_counter()
    while not stop.is_set():
        now = time.time()
        for _ in range(per_tick):
            sent += 1
            control.publish(
                RequestDone(
                    cell_id=CELL,
                    group=GROUP,
                    ttft_s=0.04 + (sent % 9) / 1e3,
                    output_tok_s=120.0 + sent % 17,
                    accept_length=7.5,
                    output_tokens=64,
                    done=sent,
                    total=10**9,
                    ts=now,
                )
            )
            control.publish(
                LogLine(
                    group=GROUP,
                    ts=now,
                    line=f"[2025-10-09 09:00:00 TP0] Decode batch, #running-req: 32, #token: 9000, "
                    f"token usage: 0.31, accept len: 7.{sent % 10}, gen throughput (token/s): "
                    f"{3900 + sent % 50}.00, #queue-req: 0,",
                    stats={
                        "accept_len": 7.0 + (sent % 10) / 10,
                        "gen_throughput": 3900.0,
                        "running_req": 32.0,
                        "queue_req": 0.0,
                    },
                )
            )
        if sent % (per_tick * 10) < per_tick:
            for gpu in range(8):
                control.publish(
                    GpuSample(
                        host="sim",
                        gpu=gpu,
                        util_pct=90.0,
                        mem_used_mib=80e3,
                        mem_total_mib=96e3,
                        power_w=400.0,
                        temp_c=70.0,
                        processes=["sglang::scheduler"],
                        ts=now,
                    )
                )
        target = start + (sent / per_tick) * tick
        await asyncio.sleep(max(0.0, target - time.perf_counter()))
    return sent


async def wait_for(cond: Callable[[], bool], timeout: float = 2.0) -> float:
    """Seconds until ``cond`` holds, polling at 1 ms (the event loop keeps running meanwhile)."""
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > timeout:
            return float("inf")
        await asyncio.sleep(0.001)
    return time.perf_counter() - t0


def demo_campaign(results: Path, speed: float) -> Campaign:
    """The demo plan on the simulator at its fastest: a real in-process engine, real servers."""
    text = (ROOT / "plans" / "demo.toml").read_text()
    text = re.sub(r"(?m)^speed = .*$", f"speed = {speed:g}", text)
    plan_path = results / "demo.toml"
    plan_path.write_text(text)
    plan = load_plan(plan_path)
    layout = ResultsLayout.for_campaign(results, plan.spec.campaign.name)
    return Campaign.prepare(plan, layout, CampaignOptions())


async def run(
    rate: int, seconds: float, size: tuple[int, int], demo: Path | None = None
) -> dict[str, Any]:
    control: Any = demo_campaign(demo, 50) if demo else ScriptedControl(sample_campaign())
    app = ConsoleApp(control)
    frames: list[float] = []
    original = app._display

    def counting_display(screen: Any, renderable: Any) -> None:
        if renderable is not None:
            frames.append(time.perf_counter())
        original(screen, renderable)

    app._display = counting_display  # type: ignore[method-assign]
    latencies: dict[str, list[float]] = {}
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        stop = asyncio.Event()
        producer = asyncio.create_task(asyncio.sleep(0, 0) if demo else flood(control, rate, stop))
        t_start = time.perf_counter()
        applied0 = app.progress.events_seen
        batches0 = app.frames
        n_frames0 = len(frames)

        def header() -> str:
            return str(app.query_one(CampaignHeader).render())

        async def measure(kind: str, key: str, effect: Callable[[], bool]) -> None:
            """Both ways: through Pilot (which also waits for the app to go idle, hard under
            a flood) and as a terminal delivers a key (one message posted to the app)."""
            t = time.perf_counter()
            if kind.startswith("pilot"):
                await pilot.press(key)
            else:
                app.post_message(events.Key(key, key))
            await wait_for(effect)
            shown_frames = len(frames)
            await wait_for(lambda: len(frames) > shown_frames)  # the frame that shows it
            latencies.setdefault(f"{kind} {key}", []).append(time.perf_counter() - t)

        while time.perf_counter() - t_start < seconds:
            for kind in ("direct", "pilot"):
                await asyncio.sleep(0.15)
                await measure(kind, "p", lambda: "PAUSED" in header())
                await asyncio.sleep(0.1)
                await measure(kind, "p", lambda: "RUNNING" in header())
                before = app.follow
                await measure(kind, "f", lambda b=before: app.follow is not b)
                shown = app.query_one("#health").display
                await measure(kind, "3", lambda s=shown: app.query_one("#health").display is not s)
        elapsed = time.perf_counter() - t_start
        stop.set()
        sent = await producer
        if demo:  # what the engine published: every event the console applied
            sent = (app.progress.events_seen - applied0) // 2
        await pilot.pause(0.3)
    return {
        "seconds": elapsed,
        "published_per_s": 2 * sent / elapsed,
        "applied_per_s": (app.progress.events_seen - applied0) / elapsed,
        "redraws_per_s": (len(frames) - n_frames0) / elapsed,
        "batches_per_s": (app.frames - batches0) / elapsed,
        "plot_draws": app.plot_draws,
        "dropped": app.inbox.dropped,
        "latency_ms": {
            k: (1000 * statistics.median(v), 1000 * max(v)) for k, v in latencies.items() if v
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=5000, help="request results (and log lines) /s")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--size", default="120x40")
    ap.add_argument(
        "--demo",
        action="store_true",
        help="a real demo campaign on the simulator at speed 50 instead of a flood",
    )
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        demo = Path(tmp) if args.demo else None
        r = asyncio.run(run(args.rate, args.seconds, (w, h), demo))
    print(
        f"{'demo campaign' if args.demo else 'flood'}: "
        f"{r['published_per_s']:,.0f} events/s published, "
        f"{r['applied_per_s']:,.0f}/s applied, {r['dropped']} live events dropped"
    )
    print(
        f"redraws: {r['redraws_per_s']:.1f}/s screen updates, {r['batches_per_s']:.1f}/s "
        f"batches applied, {r['plot_draws']} plot redraws"
    )
    ok_redraw = r["redraws_per_s"] >= 10
    worst = 0.0
    for key, (median, top) in sorted(r["latency_ms"].items()):
        if key.startswith("direct"):
            worst = max(worst, top)
        print(f"key {key:>8}: median {median:6.1f} ms, worst {top:6.1f} ms")
    print(
        f"targets: redraws >= 10/s {'OK' if ok_redraw else 'MISSED'}; "
        f"key effect < 100 ms (direct, worst {worst:.0f} ms) {'OK' if worst < 100 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
