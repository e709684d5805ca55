"""Greedy verdicts of a campaign from its reduced event log and the outputs it stored: the one
judgement the engine (as each group ends), the report and the console (whatever the
campaign's end: finished, aborted, crashed, still running) all make, so a lossy config is
flagged wherever its outputs are, not only where the engine reached a group's end.

A config with finished temperature-0 cells that no verdict covers is *unchecked*: its
speed-up is not known to be a speed-up of the same answers, so it is never ranked best. The
comparison itself is bench/greedy.py; this module only gathers what it compares.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from specbench_tui.bench.greedy import Sample, Verdict, config_verdicts, samples_of
from specbench_tui.results.cells import Cell
from specbench_tui.results.events import CheckVerdict
from specbench_tui.results.state import CampaignState, CellState

#: (cell id, attempt) -> the outputs file of that attempt (empty when there is none).
ReadTexts = Callable[[str, int], Mapping[str, Any]]

#: The status of a config no verdict covers (beside greedy.py's pass, fail and noise).
UNCHECKED = "unchecked"


def _greedy_cells(state: CampaignState, host: str) -> list[CellState]:
    """Finished temperature-0 cells on ``host``: the ones whose outputs are compared. A
    forced-acceptance cell is not: its engine accepts drafts whatever the target says, so its
    outputs are not meant to be the baseline's (the report says so)."""
    return [
        c
        for c in state.cells.values()
        if c.host == host
        and c.status == "done"
        and c.cell is not None
        and c.cell.temperature == 0
        and c.cell.forced_accept is None
    ]


def waiting_tps(state: CampaignState, host: str, baseline: str) -> set[int]:
    """TP sizes at which the baseline has cells this run will still run (running, or pending
    and selected; a held one never will)."""
    return {
        c.tp
        for c in state.cells.values()
        if c.host == host
        and c.config == baseline
        and (c.status == "running" or (c.status == "pending" and c.selected))
    }


@dataclass(frozen=True)
class HostJudgement:
    """What the verdicts of one host are judged from, taken from the state at one moment (so
    the comparing can run in a worker thread while the engine's loop moves the state on)."""

    baseline: str
    cells: tuple[tuple[Cell, int], ...]  # finished temperature-0 cells and counted attempts
    wanted: tuple[int, ...]  # TP sizes to judge at
    settled: frozenset[int]  # TP sizes whose baseline has nothing left to run
    probes: Mapping[int, Mapping[str, Any]]  # the noise-floor probe's detail per TP size

    @classmethod
    def of(
        cls,
        state: CampaignState,
        baseline: str,
        host: str,
        *,
        tps: Iterable[int] = (),
        waiting: Collection[int] = (),
    ) -> HostJudgement:
        """``tps``: TP sizes to judge at beside those with finished cells; ``waiting``: TP
        sizes whose baseline is still to run (``waiting_tps``), where no early verdict may
        blame what the baseline would clear."""
        done = _greedy_cells(state, host)
        return cls(
            baseline=baseline,
            cells=tuple((c.cell, c.attempt) for c in done if c.cell is not None),
            wanted=tuple(sorted({c.tp for c in done} | set(tps))),
            settled=frozenset({c.tp for c in state.cells.values() if c.host == host})
            - frozenset(waiting),
            probes={
                tp: dict(v.detail)
                for (check, h, config, tp), v in state.checks.items()
                if check == "noise_floor" and h == host and config == baseline
            },
        )

    def samples(self, read_texts: ReadTexts) -> dict[tuple[str, int], list[Sample]]:
        """The stored outputs of the cells, by (config, TP size)."""
        out: dict[tuple[str, int], list[Sample]] = {}
        for cell, attempt in self.cells:
            got = samples_of(cell, read_texts(cell.id, attempt))
            out.setdefault((cell.config, cell.tp), []).extend(got)
        return out

    def verdicts(
        self,
        read_texts: ReadTexts,
        samples: Mapping[tuple[str, int], list[Sample]] | None = None,
    ) -> list[tuple[int, str, Verdict]]:
        """(tp, config, verdict) for every config at each wanted TP size."""
        if samples is None:
            samples = self.samples(read_texts)
        return [
            (tp, config, v)
            for tp in self.wanted
            for config, v in config_verdicts(self.baseline, samples, tp, self.probes, self.settled)
        ]


def _unchecked_text(
    state: CampaignState,
    baseline: str,
    host: str,
    config: str,
    tp: int,
    live: bool,
    stored: Collection[tuple[str, int]],
) -> str:
    """Why no verdict covers ``config`` at ``tp``; ``stored``: (config, TP) with outputs."""
    base_done = {c.tp for c in _greedy_cells(state, host) if c.config == baseline}
    if live and tp in waiting_tps(state, host, baseline):
        why = f"waiting for {baseline}'s outputs at TP {tp}"
    elif not base_done:
        why = f"{baseline} has no finished temperature-0 outputs on {host} to compare with"
    elif tp not in base_done:
        why = f"{baseline} has no finished temperature-0 outputs at TP {tp} on {host}"
    elif (config, tp) not in stored:
        why = "no outputs of its cells were stored"
    elif not any(c == baseline for c, _ in stored):
        why = f"no outputs of {baseline}'s cells on {host} were stored"
    else:
        why = f"no output comparable with {baseline}'s at TP {tp}"
    return f"{config}: unchecked: {why}; not ranked"


def judge(
    state: CampaignState,
    baseline: str | None,
    read_texts: ReadTexts,
    *,
    live: bool,
) -> list[CheckVerdict]:
    """The greedy verdict of every config with finished temperature-0 cells, on every host,
    judged from the stored outputs, as ``check_verdict`` events to fold into ``state``.

    A verdict judged here replaces the one the log recorded, except that a recorded ``fail``
    is never cleared (outputs lost since cannot acquit a config). Where neither exists, the
    config is ``unchecked`` at that TP size. ``live``: a campaign process still runs, so the
    baseline's pending cells may yet come (a finished or dead campaign waits for nothing).
    """
    if not baseline:
        return []
    out: list[CheckVerdict] = []
    for host in sorted({c.host for c in state.cells.values() if c.host}):
        waiting = waiting_tps(state, host, baseline) if live else set()
        judgement = HostJudgement.of(state, baseline, host, waiting=waiting)
        samples = judgement.samples(read_texts)
        stored = {k for k, got in samples.items() if got}
        judged = {(c, tp): v for tp, c, v in judgement.verdicts(read_texts, samples)}
        ran = sorted({(c.config, c.tp) for c in _greedy_cells(state, host)})
        for config, tp in ran:
            if config == baseline:
                continue
            recorded = state.checks.get(("greedy", host, config, tp))
            v = judged.get((config, tp))
            if recorded is not None and (
                v is None
                or recorded.status == "fail"
                or (recorded.status, recorded.text) == (v.status, v.text)
            ):
                continue  # the log's verdict stands
            if v is None:
                why = _unchecked_text(state, baseline, host, config, tp, live, stored)
                v = Verdict(UNCHECKED, why)
            out.append(
                CheckVerdict(
                    check="greedy",
                    config=config,
                    host=host,
                    tp=tp,
                    status=v.status,
                    text=v.text,
                    detail={**v.detail, "judged": "from the stored outputs"},
                )
            )
    return out
