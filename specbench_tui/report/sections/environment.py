"""Where and with what the campaign ran: hosts and their GPUs, engines and versions where the
servers reported them, the command line of every service group, this tool's version and the
plan's hash; and the run's manifest (manifest.json, recorded as each group's server became
ready): this tool's version and commit as it ran, and per group the server's Python, OS and
kernel, the engine's packages with versions and commits, torch and CUDA, the driver, each
GPU's model, application clocks and power limit, and the model's config files' hash. Groups
with the same facts share a row."""

from __future__ import annotations

import platform
import shlex
from typing import Any

from specbench_tui import __version__
from specbench_tui.engines.registry import SIMULATED_ENGINE, adapter
from specbench_tui.report.blocks import Cell, Column, Facts, Para, Section, Table, code, text
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections.telemetry import host_gpus


def _telemetry_mode(inp: Inputs, host: str) -> str:
    chosen = inp.state.telemetry.get(host)
    out = ""
    if chosen is not None:
        out = (
            "no GPU telemetry: GPU board energy not measured"
            if chosen.source == "none"
            else (chosen.text or chosen.source)
        )
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
                    "Simulated: every server was the embedded simulated "
                    f"{adapter(SIMULATED_ENGINE).label} server, on simulated GPUs; the "
                    "command lines below are the simulator's."
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
                ("Tool", text(_tool_text(inp))),
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
    _manifest_tables(inp, sec)
    cmd_rows = []
    for g in st.groups.values():
        if not g.command:
            continue
        env = dict(g.group.env) if g.group is not None else {}
        env_text = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        line = shlex.join(g.command)
        row = [
            Cell(g.id, code=True),
            Cell(",".join(str(i) for i in g.gpu_ids) or "—"),
            Cell((env_text + " " if env_text else "") + line, code=True),
        ]
        if st.job_nodes:
            jobs = st.job_nodes.get(g.id, {})
            row.insert(
                2,
                Cell(", ".join(f"{j} on {n or '?'}" for j, n in jobs.items()) or "—"),
            )
        cmd_rows.append(row)
    if cmd_rows:
        cols = [Column("Group", "p", 0.2), Column("GPUs", "l"), Column("Command", "p", 0.66)]
        if st.job_nodes:  # groups run as batch jobs: which job ran each group, and where
            system = next((j.system for j in st.jobs.values() if j.system), "Batch")
            cols = [
                Column("Group", "p", 0.18),
                Column("GPUs", "l"),
                Column(f"{system} job on node", "p", 0.14),
                Column("Command", "p", 0.52),
            ]
        sec.add(Table("Server command line of every service group", cols, cmd_rows, small=True))
    return sec


# -- the run's manifest -------------------------------------------------------------------------


def _tool_text(inp: Inputs) -> str:
    """The tool as the campaign's groups ran it (the manifest), else the renderer's, said so."""
    seen: dict[str, None] = {}
    for entry in inp.manifest.values():
        t = entry.get("tool") or {}
        sha = t.get("git_sha")
        said = f"specbench-tui {t.get('version', '?')}"
        if sha:
            said += f", commit {str(sha)[:12]}" + (
                " with uncommitted changes" if t.get("git_dirty") else ""
            )
        said += f" (Python {t.get('python', '?')}; {_os_said(t.get('os') or {})})"
        seen[said] = None
    if seen:
        return "; ".join(seen) + " (as recorded when the groups ran)"
    return (
        f"specbench-tui {__version__} (Python {platform.python_version()}): the renderer's; "
        "the campaign recorded no manifest"
    )


def _groups_said(ids: list[str]) -> str:
    return ", ".join(ids) if len(ids) <= 3 else f"{', '.join(ids[:2])} and {len(ids) - 2} more"


def _pkg(p: dict[str, Any] | None) -> str:
    if not p or p.get("error") or not p.get("version"):
        return "—"
    out = str(p["version"])
    if p.get("commit"):
        out += f" @{str(p['commit'])[:10]}"
    return out


def _engine_versions(said: Any, installed: str) -> str:
    """The engine's version as the running server reported it (what it imported), then the
    installed package's, marked as such; the second only where the two differ or the server
    said none (a package upgraded under a running server, another venv on the path)."""
    if said and installed in ("—", str(said)):
        return f"{said} (server)"
    if said:
        return f"{said} (server); {installed} installed"
    return "—" if installed == "—" else f"{installed} installed"


def _software(entry: dict[str, Any]) -> tuple[str, ...]:
    probe = entry.get("probe") or {}
    if probe.get("error"):
        return ("not read: " + str(probe["error"]), "", "", "", "")
    pkgs = probe.get("packages") or {}
    engine = str(entry.get("engine") or "")
    torch = pkgs.get("torch") or {}
    cuda = torch.get("cuda") or torch.get("hip")
    torch_text = _pkg(torch) + (
        f", CUDA {cuda}" if cuda else (", no CUDA" if torch.get("version") else "")
    )
    others = [
        f"{name} {_pkg(p)}"
        for name, p in pkgs.items()
        if name not in (engine, "torch") and p and not p.get("error")
    ]
    osf = probe.get("os") or {}
    py = probe.get("python") or {}
    return (
        f"{py.get('version', '?')} ({py.get('executable', '?')})",
        _engine_versions(entry.get("engine_version"), _pkg(pkgs.get(engine))),
        torch_text,
        ", ".join(others) or "—",
        _os_said(osf),
    )


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, int | float) else "?"


def _clocks(d: dict[str, Any]) -> str:
    app = d.get("application_clocks_mhz") or {}
    if app.get("graphics") is None and app.get("memory") is None:
        return "not reported"
    return f"{_num(app.get('graphics'))} / {_num(app.get('memory'))}"


def _os_said(osf: dict[str, Any]) -> str:
    name = osf.get("distribution") or osf.get("system") or "?"
    return f"{name}, kernel {osf.get('kernel', '?')} ({osf.get('hostname', '?')})"


def _hardware(entry: dict[str, Any]) -> tuple[str, ...]:
    probe = entry.get("probe") or {}
    gpus = probe.get("gpus") or {}
    if probe.get("error") or not gpus:
        return ("not read", "", "", "", "")
    if gpus.get("source") == "none" or gpus.get("error"):
        return ("no GPU readable: " + str(gpus.get("error") or "none"), "", "", "", "")
    devs = gpus.get("devices") or []
    names = sorted({str(d.get("name")) for d in devs if d.get("name")})
    clocks = sorted({_clocks(d) for d in devs})
    limits = sorted(
        {
            f"{d['power_limit_w']:g} W"
            for d in devs
            if isinstance(d.get("power_limit_w"), int | float)
        }
    )
    return (
        f"{gpus.get('driver') or '?'} (CUDA {gpus.get('cuda_driver') or '?'}; "
        f"{gpus.get('source')})",
        f"{len(devs)} x " + ", ".join(names) if names else "—",
        ", ".join(clocks) or "—",
        ", ".join(limits) or "not reported",
        ",".join(str(d.get("index")) for d in devs) or "—",
    )


def _model(entry: dict[str, Any]) -> tuple[str, ...]:
    m = (entry.get("probe") or {}).get("model") or {}
    path = str(m.get("path") or "—")
    if m.get("error"):
        return (path, "not read: " + str(m["error"]), "")
    files = m.get("files") or {}
    digest = m.get("hash")
    return (
        path,
        f"{str(digest)[:16]} over {', '.join(sorted(files))}"
        if digest
        else "no config files found",
        str(m.get("revision") or "—"),
    )


def _collapsed(inp: Inputs, facts: Any) -> list[tuple[list[str], tuple[str, ...]]]:
    """Groups with the same facts share a row, in plan order."""
    rows: dict[tuple[str, ...], list[str]] = {}
    for gid, entry in inp.manifest.items():
        rows.setdefault(facts(entry), []).append(gid)
    return [(ids, key) for key, ids in rows.items()]


#: The manifest's tables: caption, columns after "Groups" (title, align, width), the facts
#: of an entry, and the columns set as code.
_TABLES: tuple[tuple[str, tuple[tuple[str, str, float], ...], Any, frozenset[int]], ...] = (
    (
        "Software of each group's server, as recorded when it became ready",
        (
            ("Python", "p", 0.17),
            ("Engine", "p", 0.14),
            ("torch", "p", 0.12),
            ("Other packages", "p", 0.17),
            ("OS and kernel", "p", 0.16),
        ),
        _software,
        frozenset({0}),  # the interpreter's path breaks at its slashes
    ),
    (
        "GPUs of each group (application clocks graphics / memory in MHz; power limit)",
        (
            ("Driver", "p", 0.2),
            ("GPUs", "p", 0.22),
            ("App clocks", "l", 0.0),
            ("Power limit", "l", 0.0),
            ("Ids", "l", 0.0),
        ),
        _hardware,
        frozenset(),
    ),
    (
        "Model of each group: its directory and a hash over its config files",
        (("Model path", "p", 0.28), ("Config hash", "p", 0.3), ("Revision", "l", 0.0)),
        _model,
        frozenset({0}),
    ),
)


def _manifest_tables(inp: Inputs, sec: Section) -> None:
    if not inp.manifest:
        sec.add(
            Para(
                text(
                    "No manifest was recorded (manifest.json: a campaign run by an earlier "
                    "version, or no group's server became ready)."
                )
            )
        )
        return
    for caption, columns, facts, as_code in _TABLES:
        sec.add(
            Table(
                caption,
                [Column("Groups", "p", 0.18)] + [Column(t, a, w) for t, a, w in columns],
                [
                    [Cell(_groups_said(ids), code=True)]
                    + [Cell(v, code=i in as_code) for i, v in enumerate(key)]
                    for ids, key in _collapsed(inp, facts)
                ],
                small=True,
            )
        )
