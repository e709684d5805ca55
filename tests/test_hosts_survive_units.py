"""The pure parts of surviving SSH hosts: the quoting helper, the launch mark, which found
server belongs to a campaign, how a cell cut by the link is judged, the host_state event in
the reducer and the headless line, and the plan's reconnect_timeout key."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
from test_hosts_ssh import sim_group

from specbench_tui.engine.headless import format_event
from specbench_tui.engine.verdict import judge
from specbench_tui.hosts.backends.ssh.remote_service import (
    launch_mark,
    launch_owner,
    live_owner,
    mark_owner,
    mark_what,
    parse_owner,
)
from specbench_tui.hosts.leftovers import belongs, pid_files_script
from specbench_tui.hosts.shell import quote, remote_path
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.events import CellQueued, Event, HostState
from specbench_tui.results.state import CampaignState


def sh(script: str) -> str:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout


def test_remote_words_arrive_literally_in_a_real_shell(tmp_path: Path) -> None:
    nasty = "a b;$(touch X)`touch Y`'\"\n-z"
    assert sh(f"printf '%s' {quote(nasty)}") == nasty
    assert sh(f"printf '%s' {remote_path('~/' + nasty)}").endswith("/" + nasty)
    assert sh(f"printf '%s' {remote_path('-rf')}") == "./-rf"  # never read as an option
    assert sh(f"printf '%s' {remote_path('~')}") == sh("printf '%s' \"$HOME\"")
    script = pid_files_script(str(tmp_path / nasty))  # a workdir that does not exist: no output
    assert sh(script) == ""
    assert not list(Path.cwd().glob("X")) and not list(Path.cwd().glob("Y"))


def test_launch_mark_tells_same_from_different() -> None:
    g = sim_group(30000)
    mark = launch_mark("camp", g, {})
    assert mark.startswith("specbench:camp:remote.ar.tp1:") and mark == launch_mark("camp", g, {})
    moved = dataclasses.replace(g, command=tuple("30001" if a == "30000" else a for a in g.command))
    assert launch_mark("camp", moved, {}) != mark  # another port: another server
    assert launch_mark("camp", dataclasses.replace(g, env=()), {}) != mark
    assert launch_mark("camp", g, {"X": "1"}) != mark
    assert belongs(mark, "camp", "remote.ar.tp1", set())
    assert not belongs(mark, "camp-b", "remote.ar.tp1", {"remote.ar.tp1"})  # another campaign's
    assert belongs("", "camp", "remote.ar.tp1", {"remote.ar.tp1"})  # no mark: by its name
    assert not belongs("sh", "camp", "other.ar.tp1", {"remote.ar.tp1"})


def test_a_launch_mark_names_its_owner_and_a_live_one_is_left_alone(tmp_path: Path) -> None:
    g = sim_group(30000)
    mine = str(tmp_path / "a" / "camp")
    owner = launch_owner(mine)
    mark = launch_mark("camp", g, {}, owner)
    assert mark.startswith(launch_mark("camp", g, {}) + ":")  # what runs, then whose it is
    assert mark_what(mark) == launch_mark("camp", g, {})
    assert belongs(mark, "camp", "remote.ar.tp1", set())
    parsed = mark_owner(mark)
    assert parsed is not None and parsed.here and parsed.runs() and parsed.results == mine
    # this very run (a resume of its results) may take it over; another run may not
    assert live_owner(mark, mine) is None
    assert live_owner(mark, str(tmp_path / "b" / "camp")) == parsed
    # a run that ended (its pid gone) leaves its servers to whoever comes next
    gone = subprocess.Popen(["true"])
    gone.wait()
    ended = mark.replace(f".{parsed.pid}.", f".{gone.pid}.", 1)
    assert live_owner(ended, str(tmp_path / "b" / "camp")) is None
    # one started from another machine: nothing here can tell it ended, so it is left alone
    far = mark.replace(parsed.machine, "0" * 12, 1)
    assert live_owner(far, str(tmp_path / "b" / "camp")) is not None
    assert live_owner(launch_mark("camp", g, {}), "x") is None  # no owner: an older tool's
    assert parse_owner("junk") is None


def test_a_cell_cut_by_the_link_is_set_aside_not_failed() -> None:
    common = {"requests": 2, "complete": False, "max_error_share": 0.0}
    cut = judge(
        errors=["connection reset"], stop=None, server_alive=True, link_dropped=True, **common
    )
    assert (cut.outcome, cut.reason) == ("requeue", "host unreachable")
    # the server's state is not known while the host is away: the link decides
    dead = judge(errors=[], stop=None, server_alive=False, link_dropped=True, **common)
    assert dead.outcome == "requeue"
    skip = judge(errors=[], stop="skip", server_alive=True, link_dropped=True, **common)
    assert skip.outcome == "skipped"
    plain = judge(errors=["connection reset"], stop=None, server_alive=True, **common)
    assert plain.outcome == "requeue" and plain.reason == "interrupted"


def test_host_state_in_the_reducer_and_the_headless_line() -> None:
    state = CampaignState()
    away = HostState(host="ct200", state="reconnecting", reason="the link dropped")
    for ev in (away, CellQueued(cell_id="c1", group="g", attempt=2, by="host unreachable")):
        state.apply(Event.from_json(ev.to_json()))
    assert state.host_away("ct200") == "reconnecting: the link dropped"
    assert state.host_away("other") == ""
    assert state.cells["c1"].reason == "host unreachable" and state.cells["c1"].status == "pending"
    state.apply(HostState(host="ct200", state="connected", reason="reconnected after 8.0s"))
    assert state.host_away("ct200") == ""
    line = format_event(away)
    assert line is not None and line.endswith("host ct200: reconnecting (the link dropped)")


PLAN = """\
[campaign]
name = "p"
[hosts.box]
ssh = "box"
gpus = 1
{extra}
[server]
model = "/m"
python = "/usr/bin/python3"
[configs.ar]
[matrix]
configs = ["ar"]
tp = [1]
[workloads.w]
kind = "single"
prompts = ["chat"]
max_tokens = [8]
"""


@pytest.mark.parametrize(("extra", "expected"), [("", 600.0), ('reconnect_timeout = "90s"', 90.0)])
def test_reconnect_timeout_key(tmp_path: Path, extra: str, expected: float) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(extra=extra))
    assert load_plan(path).spec.hosts["box"].reconnect_timeout == expected


def test_reconnect_timeout_bad_value_is_one_line(tmp_path: Path) -> None:
    from specbench_tui.errors import InputError

    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(extra='reconnect_timeout = "soon"'))
    with pytest.raises(InputError, match=r"hosts\.box\.reconnect_timeout"):
        load_plan(path)
