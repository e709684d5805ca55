"""A ``CampaignControl`` that plays a scripted campaign, for the console's tests and bench: a
fixed, realistic event stream (``sample_campaign``, ``packed_campaign``) instead of a running
engine, with the engine's own answers to the operator's commands."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from specbench_tui.engine.commands import CampaignControl, Command, Reply
from specbench_tui.engine.operator import OperatorCommands
from specbench_tui.engine.run_control import GroupHandle, RunControl
from specbench_tui.engine.verdict import judge
from specbench_tui.errors import EXIT_INTERRUPTED
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    CampaignFinished,
    CampaignStarted,
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    CellStarted,
    Event,
    GpuSample,
    GroupFinished,
    GroupStarted,
    LogLine,
    Notice,
    RequestDone,
    ServiceFailed,
    ServiceReady,
)
from specbench_tui.results.progress import CampaignProgress

#: A fixed start so that everything derived from timestamps (plots, elapsed) is reproducible.
T0 = 1_760_000_000.0


class ScriptedControl(CampaignControl):
    """Replays ``events`` to every subscriber, then whatever ``publish`` adds, until ``close``.

    Commands are answered by the engine's own operator commands (``engine/operator.py``) over
    the same state, with a run control whose group handles follow the events, so a test of a
    key sees what the engine would answer. A running cell asked to stop (a skip, a pause, a
    group restart, an abort) then ends as the engine's verdict says (``engine/verdict.py``);
    an abort ends the campaign. ``engine``: what ``start_engine`` runs, for a control that
    stands for a campaign the console owns (it gets the control, returns the exit status).
    """

    def __init__(
        self,
        events: list[Event] | None = None,
        *,
        close_after_replay: bool = False,
        clock_step: float = 0.5,
        engine: Callable[[ScriptedControl], Awaitable[int]] | None = None,
    ) -> None:
        self.history: list[Event] = []
        self.commands: list[Command] = []
        self.replies: list[Reply] = []
        self.progress = CampaignProgress()
        self.run_control = RunControl()
        self.operator = OperatorCommands(
            self,  # type: ignore[arg-type]  # the hub's face: state, emit, notice
            self.run_control,
            lambda: self.progress.finished,
        )
        self._queues: list[asyncio.Queue[Event | None]] = []
        self._closed = False
        self._clock_step = clock_step
        self._engine = engine
        for ev in events or []:
            self.publish(ev)
        if close_after_replay:
            self.close()

    @property
    def owns_engine(self) -> bool:  # type: ignore[override]
        return self._engine is not None

    async def start_engine(self) -> int | None:
        return await self._engine(self) if self._engine is not None else None

    # --- producer side ---------------------------------------------------------------------

    def publish(self, ev: Event) -> None:
        self.history.append(ev)
        self.progress.apply(ev)
        self._follow(ev)
        for q in self._queues:
            q.put_nowait(ev)

    def close(self) -> None:
        """End the stream, as the engine does after ``campaign_finished``."""
        self._closed = True
        for q in self._queues:
            q.put_nowait(None)

    def _now(self) -> float:
        """Scripted time: just after the last event, so replies stay deterministic."""
        last = self.history[-1].ts if self.history else T0
        return last + self._clock_step

    # --- what the operator commands read and write: the hub's face ---------------------------

    @property
    def state(self) -> CampaignProgress:
        return self.progress

    def emit(self, ev: Event) -> None:
        ev.ts = self._now()
        self.publish(ev)

    def notice(self, text: str, level: str = "info") -> None:
        self.emit(Notice(level=level, text=text))

    def refused(self, text: str) -> None:
        """A refused command, said as a warning (the hub's rate limit is the hub's own
        business: a test sends a few commands, never a flood)."""
        self.notice(text, "warning")

    def _follow(self, ev: Event) -> None:
        """Keep the run control's group handles where the events say the groups are."""
        groups = self.run_control.groups
        if isinstance(ev, GroupStarted):
            g = self.progress.groups.get(ev.group)
            if g is not None and g.group is not None:
                groups[ev.group] = GroupHandle(group=g.group)
        elif isinstance(ev, GroupFinished | ServiceFailed):
            groups.pop(ev.group, None)
        elif isinstance(ev, CellStarted):
            c = self.progress.cells.get(ev.cell_id)
            h = groups.get(ev.group)
            if h is not None and c is not None:
                h.cell, h.stop = c.cell, None
        elif isinstance(ev, CellFinished | CellFailed | CellSkipped | CellQueued):
            for h in groups.values():
                if h.cell is not None and h.cell.id == ev.cell_id:
                    h.cell = None

    # --- CampaignControl -------------------------------------------------------------------

    async def subscribe(self) -> AsyncIterator[Event]:
        q: asyncio.Queue[Event | None] = asyncio.Queue()
        replay = list(self.history)
        self._queues.append(q)
        try:
            for ev in replay:
                yield ev
            if self._closed and q.empty():
                return
            while True:
                item = await q.get()
                if item is None:
                    return
                yield item
        finally:
            self._queues.remove(q)

    async def send(self, command: Command) -> Reply:
        self.commands.append(command)
        reply = await self.operator.send(command)
        self.replies.append(reply)
        self._stop_asked_cells()
        return reply

    def _stop_asked_cells(self) -> None:
        """What the engine does next with a cell asked to stop: its verdict (the requests
        it had in flight finished, the server alive), and after an abort the end."""
        for h, cell in self.run_control.running_cells():
            if h.stop is None:
                continue
            c = self.progress.cells[cell.id]
            v = judge(
                requests=0,
                errors=[],
                complete=False,
                stop=h.stop,
                server_alive=True,
                max_error_share=0.5,
            )
            if v.outcome == "skipped":
                self.emit(
                    CellSkipped(
                        cell_id=c.id,
                        group=c.group,
                        cell=c.name,
                        attempt=c.attempt,
                        reason=v.reason,
                        by="operator",
                    )
                )
            else:
                self.emit(
                    CellQueued(
                        cell_id=c.id, group=c.group, cell=c.name, attempt=c.attempt + 1, by=v.reason
                    )
                )
        if self.run_control.aborted and not self.progress.finished:
            n = self.progress.counts
            self.emit(
                CampaignFinished(
                    campaign=self.progress.campaign,
                    finished=n.done,
                    failed=n.failed,
                    skipped=n.skipped,
                    exit_code=EXIT_INTERRUPTED,
                )
            )
            self.close()


# --- a realistic scripted campaign -------------------------------------------------------

_GPU_TOTAL = 97_887.0


def _groups() -> list[ServiceGroup]:
    def group(
        config: str, label: str, tp: int, gpus: tuple[int, ...], spec: bool, extra: tuple[str, ...]
    ) -> ServiceGroup:
        cmd = (
            "python",
            "-m",
            "specbench_tui.sim.server",
            "--model-path",
            "/dev/shm/Qwen3.6-27B",
            "--tp-size",
            str(tp),
            "--host",
            "127.0.0.1",
            "--port",
            str(30000 + gpus[0]),
            *extra,
        )
        return ServiceGroup(
            id=f"sim.{config}.tp{tp}",
            host="sim",
            host_kind="sim",
            config=config,
            label=label,
            tp=tp,
            gpu_ids=gpus,
            port=30000 + gpus[0],
            command=cmd,
            env=(),
            api="sglang",
            ready_timeout_s=900.0,
            speculative=spec,
        )

    dflash = ("--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "16")
    ddtree = ("--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "16")
    return [
        group("ar", "Autoregressive", 1, (0,), False, ()),
        group("dflash", "DFlash (linear, block 16)", 1, (0,), True, dflash),
        group("ddtree-16", "DDTree (budget 16)", 1, (0,), True, ddtree),
        group("ddtree-16", "DDTree (budget 16)", 4, (0, 1, 2, 3), True, ddtree),
    ]


def _cells(groups: list[ServiceGroup]) -> list[Cell]:
    cells: list[Cell] = []
    for g in groups:
        base = dict(
            group=g.id,
            host=g.host,
            config=g.config,
            tp=g.tp,
            params=(("budget", 16),) if "ddtree" in g.config else (),
        )
        for ps in ("code", "math"):
            cells.append(
                Cell(
                    id=f"{g.config[:3]}{g.tp}{ps[:2]}64",
                    name=f"{g.id}/single/{ps}/64",
                    workload="single",
                    kind="single",
                    prompt_set=ps,
                    max_tokens=64,
                    concurrency=None,
                    prompts=(ps,),
                    samples=4,
                    repeats=2,
                    warmup=1,
                    **base,
                )
            )
        cells.append(
            Cell(
                id=f"{g.config[:3]}{g.tp}agent",
                name=f"{g.id}/agentic",
                workload="agentic",
                kind="agentic",
                prompt_set=None,
                max_tokens=128,
                concurrency=None,
                prompts=("code",),
                sessions=2,
                turns=3,
                tool_output_tokens=256,
                **base,
            )
        )
        cells.append(
            Cell(
                id=f"{g.config[:3]}{g.tp}conc4",
                name=f"{g.id}/concurrency/c4",
                workload="concurrency",
                kind="concurrency",
                prompt_set=None,
                max_tokens=128,
                concurrency=4,
                prompts=("chat",),
                requests=16,
                **base,
            )
        )
    return cells


def _stats_line(
    ts: float, tp: int, accept: float | None, gen: float, running: int, queue: int
) -> LogLine:
    acc = f"accept len: {accept:.2f}, accept rate: {accept / 16:.2f}, " if accept else ""
    line = (
        f"[2025-10-09 08:{int(ts) // 60 % 60:02d}:{int(ts) % 60:02d} TP0] Decode batch, "
        f"#running-req: {running}, #token: {running * 900}, token usage: 0.{running + 10}, "
        f"{acc}cuda graph: True, gen throughput (token/s): {gen:.2f}, #queue-req: {queue},"
    )
    stats = {
        "decode": 1.0,  # as the log parser marks a Decode batch line
        "running_req": float(running),
        "queue_req": float(queue),
        "gen_throughput": gen,
    }
    if accept:
        stats["accept_len"] = accept
    return LogLine(group="", line=line, stats=stats, ts=ts)


def sample_campaign(*, finish: bool = False) -> list[Event]:
    """A campaign on one simulated host: four service groups, sixteen cells; the first group
    finished, a cell of the second failed (with its log tail), the third running, the fourth
    pending; log lines with stats, per-request results and GPU samples along the way.
    ``finish=True`` carries it to ``campaign_finished``."""
    groups = _groups()
    cells = _cells(groups)
    by_group: dict[str, list[Cell]] = {}
    for c in cells:
        by_group.setdefault(c.group, []).append(c)
    evs: list[Event] = [
        CampaignStarted(
            campaign="demo",
            title="DDTree vs DFlash vs AR (simulated)",
            plan_hash="3f9a1c",
            results_dir="results/demo",
            hosts=["sim"],
            groups=groups,
            cells=cells,
            selected=[c.id for c in cells],
            simulated=True,
            pid=4242,
            ts=T0,
        )
    ]
    t = T0
    speeds = {"ar": (38.0, None), "dflash": (95.0, 5.8), "ddtree-16": (131.0, 7.9)}

    def gpu_samples(ts: float, busy: tuple[int, ...]) -> list[Event]:
        out: list[Event] = []
        for gpu in range(8):
            on = gpu in busy
            out.append(
                GpuSample(
                    host="sim",
                    gpu=gpu,
                    util_pct=87.0 - gpu if on else 0.0,
                    mem_used_mib=83_200.0 + 100 * gpu if on else 512.0,
                    mem_total_mib=_GPU_TOTAL,
                    power_w=412.0 - gpu if on else 61.0,
                    temp_c=66.0 + gpu if on else 34.0,
                    processes=[f"sglang::scheduler_TP{busy.index(gpu)}"] if on else [],
                    ts=ts,
                )
            )
        return out

    def run_group(g: ServiceGroup, stop: int | None = None, fail: int | None = None) -> None:
        nonlocal t
        evs.append(
            GroupStarted(
                group=g.id,
                host=g.host,
                config=g.config,
                tp=g.tp,
                gpu_ids=list(g.gpu_ids),
                command=list(g.command),
                ts=t,
            )
        )
        t += 12.0
        evs.append(LogLine(group=g.id, line="The server is fired up and ready to roll!", ts=t))
        evs.append(ServiceReady(group=g.id, startup_s=12.0, ts=t))
        speed, accept = speeds[g.config]
        speed *= g.tp**0.5
        for i, c in enumerate(by_group[g.id]):
            if stop is not None and i == stop:
                evs.append(CellStarted(cell_id=c.id, group=g.id, cell=c.name, requests=8, ts=t))
                for r in range(3):
                    t += 1.5
                    evs.append(
                        RequestDone(
                            cell_id=c.id,
                            group=g.id,
                            ttft_s=0.041 + 0.002 * r,
                            e2e_s=1.4,
                            output_tokens=64,
                            output_tok_s=speed + 3 * r,
                            accept_length=accept,
                            done=r + 1,
                            total=8,
                            ts=t,
                        )
                    )
                    ev = _stats_line(t, g.tp, accept, speed * 1.02, 1, 0)
                    ev.group = g.id
                    evs.append(ev)
                evs.extend(gpu_samples(t, g.gpu_ids))
                return
            evs.append(CellStarted(cell_id=c.id, group=g.id, cell=c.name, requests=8, ts=t))
            for r in range(4):
                t += 2.0
                evs.append(
                    RequestDone(
                        cell_id=c.id,
                        group=g.id,
                        ttft_s=0.040 + 0.003 * r,
                        e2e_s=1.5,
                        output_tokens=64,
                        output_tok_s=speed - 2 * r + i,
                        accept_length=accept,
                        done=2 * r + 2,
                        total=8,
                        ts=t,
                    )
                )
                ev = _stats_line(t, g.tp, accept, speed * 0.98 + r, 1 + r % 2, 0)
                ev.group = g.id
                evs.append(ev)
            evs.extend(gpu_samples(t, g.gpu_ids))
            if fail is not None and i == fail:
                tail = [
                    "[2025-10-09 08:21:40 TP0] Decode batch, #running-req: 4, #token: 3600, "
                    "token usage: 0.14, cuda graph: True, gen throughput (token/s): 88.10, "
                    "#queue-req: 0,",
                    "[2025-10-09 08:21:41 TP0] Scheduler hit an exception: Traceback (most "
                    "recent call last):",
                    '  File "sglang/srt/managers/scheduler.py", line 2140, in run_scheduler',
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                ]
                for line in tail:
                    evs.append(LogLine(group=g.id, line=line, ts=t))
                evs.append(
                    CellFailed(
                        cell_id=c.id,
                        group=g.id,
                        cell=c.name,
                        reason="12 of 16 requests failed: server returned 500 (CUDA out of memory)",
                        log_tail=tail,
                        ts=t,
                    )
                )
                continue
            evs.append(
                CellFinished(
                    cell_id=c.id,
                    group=g.id,
                    cell=c.name,
                    requests=8,
                    wall_s=8.0,
                    figures={
                        "throughput_tok_s": speed * 0.97,
                        "ttft_s_p50": 0.044,
                        "decode_tok_s_p50": speed * 1.04,
                        "output_tok_s_p50": speed,
                        "accept_length_mean": accept,
                    },
                    ts=t,
                )
            )
        evs.append(GroupFinished(group=g.id, status="done", ts=t))

    run_group(groups[0])
    run_group(groups[1], fail=3)
    if finish:
        run_group(groups[2])
        run_group(groups[3])
        evs.append(
            CampaignFinished(
                campaign="demo", finished=15, failed=1, skipped=0, wall_s=t - T0, exit_code=1, ts=t
            )
        )
    else:
        run_group(groups[2], stop=2)
    return evs


def _placed_group(
    host: str, kind: str, config: str, tp: int, gpus: tuple[int, ...], spec: bool
) -> ServiceGroup:
    label = {"ar": "Autoregressive", "dflash": "DFlash (linear, block 16)"}.get(
        config, "DDTree (budget 16)"
    )
    return ServiceGroup(
        id=f"{host}.{config}.tp{tp}",
        host=host,
        host_kind=kind,
        config=config,
        label=label,
        tp=tp,
        gpu_ids=gpus,
        port=31000,
        command=("python", "-m", "specbench_tui.sim.server", "--tp-size", str(tp)),
        env=(),
        api="sglang",
        ready_timeout_s=900.0,
        speculative=spec,
    )


def packed_campaign() -> list[Event]:
    """Groups running at the same time: on the simulated host ``sim`` (``pack = true``, 8
    GPUs) the autoregressive TP1 group has finished, DFlash and DDTree TP1 run side by side
    on GPUs 6 and 5 (ports 31001, 31002) and DDTree TP4 is starting on GPUs 0-3; on the SSH
    host ``h100`` an autoregressive TP8 group runs too. Placements and ports come with
    ``group_started``, as the engine sends them for packed groups."""
    groups = [
        _placed_group("sim", "sim", "ar", 1, (7,), False),
        _placed_group("sim", "sim", "dflash", 1, (7,), True),
        _placed_group("sim", "sim", "ddtree-16", 1, (7,), True),
        _placed_group("sim", "sim", "ddtree-16", 4, (4, 5, 6, 7), True),
        _placed_group("h100", "ssh", "ar", 8, tuple(range(8)), False),
    ]
    cells = _cells(groups)
    by_group: dict[str, list[Cell]] = {}
    for c in cells:
        by_group.setdefault(c.group, []).append(c)
    t = T0
    evs: list[Event] = [
        CampaignStarted(
            campaign="packed",
            title="Packed groups (simulated)",
            plan_hash="5be0c2",
            results_dir="results/packed",
            hosts=["sim", "h100"],
            groups=groups,
            cells=cells,
            selected=[c.id for c in cells],
            simulated=True,
            pid=4243,
            ts=t,
        )
    ]
    placed = {
        "sim.ar.tp1": ((7,), 31000),
        "sim.dflash.tp1": ((6,), 31001),
        "sim.ddtree-16.tp1": ((5,), 31002),
        "sim.ddtree-16.tp4": ((0, 1, 2, 3), 31003),
        "h100.ar.tp8": (tuple(range(8)), 31000),
    }

    def start(g: ServiceGroup, ready: bool) -> None:
        nonlocal t
        gpus, port = placed[g.id]
        evs.append(
            GroupStarted(
                group=g.id,
                host=g.host,
                config=g.config,
                tp=g.tp,
                gpu_ids=list(gpus),
                command=list(g.command),
                port=port,
                ts=t,
            )
        )
        if ready:
            t += 6.0
            evs.append(ServiceReady(group=g.id, startup_s=6.0, ts=t))

    def finish_cells(g: ServiceGroup, n: int, speed: float, accept: float | None) -> None:
        nonlocal t
        for c in by_group[g.id][:n]:
            evs.append(CellStarted(cell_id=c.id, group=g.id, cell=c.name, requests=8, ts=t))
            t += 4.0
            stats = _stats_line(t, g.tp, accept, speed, 1, 0)
            stats.group = g.id
            evs.append(stats)
            evs.append(
                CellFinished(
                    cell_id=c.id,
                    group=g.id,
                    cell=c.name,
                    requests=8,
                    wall_s=4.0,
                    figures={"throughput_tok_s": speed, "decode_tok_s_p50": speed * 1.04},
                    ts=t,
                )
            )

    sim_ar, dflash, ddtree1, ddtree4, h100 = groups
    start(h100, ready=True)
    start(sim_ar, ready=True)
    finish_cells(sim_ar, 4, 40.0, None)
    evs.append(GroupFinished(group=sim_ar.id, status="done", ts=t))
    start(dflash, ready=True)
    start(ddtree1, ready=True)
    finish_cells(dflash, 2, 95.0, 5.8)
    finish_cells(ddtree1, 1, 131.0, 7.9)
    finish_cells(h100, 1, 160.0, None)
    for g in (dflash, ddtree1, h100):  # one cell running in each
        c = by_group[g.id][len([e for e in evs if isinstance(e, CellFinished) and e.group == g.id])]
        evs.append(CellStarted(cell_id=c.id, group=g.id, cell=c.name, requests=8, ts=t))
    start(ddtree4, ready=False)
    t += 2.0
    for host, busy in (("sim", (0, 1, 2, 3, 5, 6)), ("h100", tuple(range(8)))):
        for gpu in range(8):
            on = gpu in busy
            evs.append(
                GpuSample(
                    host=host,
                    gpu=gpu,
                    util_pct=80.0 if on and gpu > 3 else 0.0,
                    mem_used_mib=83_200.0 if on else 512.0,
                    mem_total_mib=_GPU_TOTAL,
                    power_w=380.0 if on else 61.0,
                    temp_c=60.0 if on else 34.0,
                    processes=["sglang::scheduler_TP0"] if on else [],
                    ts=t,
                )
            )
    return evs
