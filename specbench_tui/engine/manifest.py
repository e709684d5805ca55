"""What each service group ran on and with, recorded at run time into ``manifest.json``: this
tool (version, git commit, Python, the machine it ran on, the plan's hash) and, read on the
server's host through the server's own interpreter (the GPU agent's ``--manifest``, through
the host's transport like every host read), Python, OS and kernel, the engine's packages with
their versions and commits, torch and CUDA, the driver, each GPU's model, application clocks
and power limit, and the model directory's config files with their hashes.

A manifest is a record, never a gate: a part that cannot be read says why in its place, and a
probe that fails costs the manifest its host part, never the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from specbench_tui import __version__
from specbench_tui.engine.context import RunContext
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.engines.registry import adapter
from specbench_tui.engines.settings import differing, said
from specbench_tui.errors import HostError, describe
from specbench_tui.hosts import gpu_agent
from specbench_tui.hosts.host import Host, server_pythons
from specbench_tui.hosts.telemetry import AgentRunner
from specbench_tui.results.cells import ServiceGroup, baseline_config
from specbench_tui.results.events import iso_utc
from specbench_tui.results.files import read_json_object

#: How long the host probe may take (an interpreter start on a remote host, package metadata, NVML).
PROBE_TIMEOUT_S = 60.0


def _git(args: list[str], cwd: Path) -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        res = subprocess.run(
            [git, "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=5,
            stdin=subprocess.DEVNULL,
        )
        if res.returncode == 0:
            return res.stdout.strip()
    return None


@functools.cache
def tool_facts() -> dict[str, Any]:
    """This tool as it runs now: its version, the commit of the checkout it runs from (and
    whether that checkout has changes not committed), its Python and its machine."""
    here = Path(__file__).resolve().parent.parent  # the specbench_tui package
    out: dict[str, Any] = {
        "version": __version__,
        "python": platform.python_version(),
        "executable": sys.executable,
        "os": gpu_agent.os_info(),
    }
    top = _git(["rev-parse", "--show-toplevel"], here)
    if top and (Path(top) / "specbench_tui").resolve() == here:  # our own checkout
        out["git_sha"] = _git(["rev-parse", "HEAD"], here)
        status = _git(["status", "--porcelain", "--untracked-files=no"], here)
        out["git_dirty"] = bool(status)
    else:
        info = gpu_agent.package_info("specbench_tui")
        if info.get("commit"):
            out["git_sha"] = info["commit"]
    return out


def _python(group: ServiceGroup, host: Host) -> str:
    """The server's interpreter: the launch's first word where it is a Python, else the
    first interpreter the host's telemetry would try."""
    found = server_pythons([group])
    return found[0] if found else host.python


def probe_args(group: ServiceGroup) -> list[str]:
    """The agent's arguments for the group's manifest: its GPUs, model and engine packages."""
    return [
        "--manifest",
        "--gpus",
        ",".join(str(g) for g in group.gpu_ids),
        "--model",
        adapter(group.engine).model_path(group.command) or "",
        "--packages",
        ",".join(adapter(group.engine).packages),
    ]


async def read_probe(runner: AgentRunner, args: list[str], python: str) -> dict[str, Any]:
    """The agent's manifest line, through ``runner`` (a local process, or on a remote host)."""
    try:
        agent = await asyncio.wait_for(runner.start(args), PROBE_TIMEOUT_S)
    except (OSError, HostError, TimeoutError) as e:  # no such interpreter, a dead link
        return {"error": f"cannot run {python}: {describe(e)}"}

    async def first_line() -> dict[str, Any]:
        async for line in agent.lines():
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    return obj
        return {"error": f"{python}: the manifest probe printed nothing"}

    try:
        return await asyncio.wait_for(first_line(), PROBE_TIMEOUT_S)
    except TimeoutError:
        return {"error": f"{python}: the manifest probe did not answer in {PROBE_TIMEOUT_S:g} s"}
    finally:
        with contextlib.suppress(OSError, HostError):  # the probe ended by itself, or the link
            await agent.terminate()


async def probe_host(host: Host, group: ServiceGroup) -> dict[str, Any]:
    """The group's manifest probe through the server's interpreter on its host."""
    python = _python(group, host)
    return await read_probe(host.runner_for(python), probe_args(group), python)


def prompt_files(ctx: RunContext, group: ServiceGroup) -> dict[str, Any]:
    """The prompt-set files the group's cells read, each with its path and sha256: what was
    sent can be told apart from a later edit of the same file (a shipped set is hashed too)."""
    library = ctx.plan.prompts
    g = ctx.state.groups.get(group.id)
    cells = [ctx.state.cells[cid].cell for cid in (g.cells if g else [])]
    names = sorted({n for c in cells if c is not None for n in c.prompts})
    out: dict[str, Any] = {}
    for name in names:
        try:
            path = library.path_of(name)
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path else None
        except OSError as exc:
            out[name] = {"path": str(path), "error": exc.strerror or str(exc)}
            continue
        out[name] = {"path": str(path) if path else None, "sha256": digest}
    return out


async def record_manifest(
    ctx: RunContext, group: ServiceGroup, host: Host, facts: ServerFacts, attempt: int
) -> None:
    """Probe the group's host and record its manifest entry (see the module docstring). A
    running server (``url``) is not probed: this tool does not know its interpreter or its
    machine, only what it says of itself (engine, version, settings)."""
    if group.url is not None:
        probe: dict[str, Any] = {
            "error": f"not probed: the server at {group.url} was running before the campaign "
            "(what it says of itself is recorded beside)"
        }
    else:
        probe = await probe_host(host, group)
    tool = await asyncio.to_thread(tool_facts)
    entry = {
        "recorded_at": iso_utc(time.time()),
        "attempt": attempt,
        "campaign": ctx.spec.campaign.name,
        "plan_hash": ctx.state.plan_hash,
        "tool": tool,
        "host": group.host,
        "host_kind": group.host_kind,
        "config": group.config,
        "tp": group.tp,
        "run": group.run,
        "gpu_ids": list(group.gpu_ids),
        "command": list(group.command),
        "env": dict(group.env),
        "url": group.url,
        "engine": facts.engine or group.engine,
        "engine_version": facts.version,  # what the ready server itself reported
        "served_model": facts.served_model,
        # The server's effective settings and their source (engines/settings.py): what the
        # report's comparability audit compares key by key.
        "settings": facts.settings,
        "settings_source": facts.settings_source,
        "prompt_files": await asyncio.to_thread(prompt_files, ctx, group),
        "probe": probe,
    }
    await asyncio.to_thread(ctx.store.record_manifest, group.id, entry)
    for line in settings_said(ctx, group):
        ctx.hub.notice(line, "warning")


def settings_said(ctx: RunContext, group: ServiceGroup) -> list[str]:
    """Where the ready group's server settings differ from its baseline's on the same host
    and TP (either recorded first), one line per pair saying which keys: its speed-ups will
    be marked not comparable in the report (report/comparability.py), and the operator can
    stop and mend the plan now instead of after the campaign."""
    groups = read_json_object(ctx.layout.manifest).get("groups")
    if not isinstance(groups, dict):
        return []
    configs = [g.group.config for g in ctx.state.groups.values() if g.group is not None]
    base = baseline_config(ctx.spec.campaign.baseline, configs)
    mine = groups.get(group.id)
    if base is None or not isinstance(mine, dict) or not isinstance(mine.get("settings"), dict):
        return []
    levels = [c.cell.concurrency or 0 for c in ctx.state.cells.values() if c.cell is not None]
    out = []
    for gid, other in groups.items():
        if gid == group.id or not isinstance(other, dict):
            continue
        if (other.get("host"), other.get("tp")) != (group.host, group.tp):
            continue
        if base not in (group.config, other.get("config")) or group.config == other.get("config"):
            continue
        theirs = other.get("settings")
        if not isinstance(theirs, dict):
            continue
        keys = differing(mine["settings"], theirs, max(levels, default=0))
        if keys:
            which = said(mine["settings"], theirs, keys)
            out.append(
                f"{group.id}: server settings differ from {gid}'s ({which}): speed-ups "
                "between them will be marked not comparable"
            )
    return out
