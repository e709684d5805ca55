"""Where and with what the campaign ran: hosts and their GPUs, engines and versions where the
servers reported them, the command line of every service group, this tool's version and the
plan's hash."""

from __future__ import annotations

import platform
import shlex

from specbench_tui import __version__
from specbench_tui.report.blocks import Cell, Column, Facts, Para, Section, Table, code, text
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections.telemetry import host_gpus


def _telemetry_mode(inp: Inputs, host: str) -> str:
    chosen = inp.state.telemetry.get(host)
    out = ""
    if chosen is not None:
        out = "no GPU telemetry" if chosen.source == "none" else (chosen.text or chosen.source)
    n = sum(1 for ev in inp.state.gpus_unverified if ev.host == host)
    if n:
        starts = f"{n} server start{'s' if n != 1 else ''}"
        out += ("; " if out else "") + f"GPU freedom not verified before {starts}"
    return out


def build(inp: Inputs) -> Section:
    st = inp.state
    sec = Section("Environment")
    gpus = host_gpus(inp)
    plan_hosts = inp.plan.get("hosts") or {}
    hosts = st.hosts or sorted({g.host for g in st.groups.values() if g.host})
    rows = []
    for h in hosts:
        kinds = {g.group.host_kind for g in st.groups.values() if g.host == h and g.group}
        info = gpus.get(h, {})
        chosen = st.telemetry.get(h)  # what the telemetry probe found: driver, GPU count
        planned = plan_hosts.get(h) or {}
        model = info.get("name") or info.get("gpu_name") or info.get("model") or "not recorded"
        driver = (
            (chosen.driver if chosen else "") or info.get("driver") or info.get("driver_version")
        )
        count = info.get("count") or (chosen.gpus if chosen else None) or planned.get("gpus")
        mem = info.get("mem_total_mib")
        rows.append(
            [
                Cell(h, code=True),
                Cell(", ".join(sorted(kinds)) or "—"),
                Cell(str(count or "—")),
                Cell(model),
                Cell(f"{mem / 1024:.0f} GiB" if mem else "—"),
                Cell(str(driver or "not recorded")),
                Cell(_telemetry_mode(inp, h) or ("telemetry samples" if info else "none recorded")),
            ]
        )
    sec.add(
        Table(
            "Hosts and GPUs (as the campaign's telemetry recorded them)",
            [
                Column("Host", "l"),
                Column("Kind", "l"),
                Column("GPUs"),
                Column("Model", "l"),
                Column("Memory"),
                Column("Driver", "l"),
                Column("GPU telemetry", "p", 0.3),
            ],
            rows,
            small=True,
        )
    )
    if st.simulated:
        sec.add(
            Para(
                text(
                    "Simulated: every server was the embedded simulated SGLang server, on "
                    "simulated GPUs; the command lines below are the simulator's."
                ),
                "warning",
            )
        )
    engines = sorted(
        {
            (g.group.engine if g.group is not None and hasattr(g.group, "engine") else "")
            or g.engine
            or (g.group.api if g.group is not None else "")
            for g in st.groups.values()
        }
        - {""}
    )
    versions = sorted({g.engine_version for g in st.groups.values() if g.engine_version})
    sec.add(
        Facts(
            [
                ("Tool", text(f"specbench-tui {__version__} (Python {platform.python_version()})")),
                ("Plan hash", text(code(st.plan_hash or "—"))),
                ("Engine", text(", ".join(engines) or "not recorded")),
                (
                    "Engine version",
                    text(", ".join(versions) or "not recorded (the servers did not report one)"),
                ),
                ("Results", text(code(str(inp.root)))),
            ]
        )
    )
    cmd_rows = []
    for g in st.groups.values():
        if not g.command:
            continue
        env = dict(g.group.env) if g.group is not None else {}
        env_text = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        line = shlex.join(g.command)
        cmd_rows.append(
            [
                Cell(g.id, code=True),
                Cell(",".join(str(i) for i in g.gpu_ids) or "—"),
                Cell((env_text + " " if env_text else "") + line, code=True),
            ]
        )
    if cmd_rows:
        sec.add(
            Table(
                "Server command line of every service group",
                [Column("Group", "p", 0.2), Column("GPUs", "l"), Column("Command", "p", 0.66)],
                cmd_rows,
                small=True,
            )
        )
    return sec
