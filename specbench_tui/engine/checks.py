"""Correctness checks during a campaign: the greedy-equivalence verdict of each config once
its group and the baseline's are done, and the state-leak probe at the end of each group.

Verdicts are ``check_verdict`` events: the reducer marks a failing config's cells as
failed-check in every view, and the exit status becomes 1. The comparison itself (pure) is
in bench/greedy.py; this module reads the outputs the store kept and publishes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from specbench_tui.bench.client import BenchClient
from specbench_tui.bench.greedy import (
    Output,
    Sample,
    Verdict,
    compare,
    greedy_verdict,
    leak_verdict,
    samples_of,
    self_comparisons,
)
from specbench_tui.bench.workloads import tool_output
from specbench_tui.engine.context import RunContext
from specbench_tui.engine.store import ResultsStore
from specbench_tui.engines.inspect import ServerFacts
from specbench_tui.hosts.service import Service
from specbench_tui.plan.prompt_sets import load_named_set, sample_prompts
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import CheckVerdict

#: The probe's long unrelated request: about this many prompt tokens, and this many out.
LEAK_PROMPT_TOKENS = 1500
LEAK_OUTPUT_TOKENS = 512
PROBE_TOKENS = 96


def _emit_if_new(ctx: RunContext, check: str, host: str, config: str, tp: int, v: Verdict) -> None:
    old = ctx.state.checks.get((check, host, config, tp))
    if old is not None and (old.status, old.text) == (v.status, v.text):
        return
    ctx.hub.emit(
        CheckVerdict(
            check=check,
            config=config,
            host=host,
            tp=tp,
            status=v.status,
            text=v.text,
            detail=v.detail,
        )
    )
    if v.status == "fail":
        ctx.hub.notice(f"check failed: {v.text}", "error")


def _greedy_verdicts(
    store: ResultsStore, baseline: str, cells: list[tuple[Cell, int]], tp: int
) -> list[tuple[str, Verdict]]:
    """(config, verdict) for every config at ``tp`` (runs in a worker thread)."""
    samples: dict[tuple[str, int], list[Sample]] = {}
    for cell, attempt in cells:
        got = samples_of(cell, store.read_cell_texts(cell.id, attempt))
        samples.setdefault((cell.config, cell.tp), []).extend(got)
    base = samples.get((baseline, tp), [])
    floor = self_comparisons(base)
    out = []
    for (config, ctp), ours in sorted(samples.items()):
        if ctp != tp or config == baseline:
            continue
        v = greedy_verdict(config, baseline, compare(ours, base), floor)
        if v is None:
            continue
        across: dict[str, Any] = {}
        for (other, otp), theirs in samples.items():
            if other == config and otp != tp:
                found = compare(ours, theirs)
                div = [f.divergence.position for f in found if f.divergence is not None]
                across[str(otp)] = {
                    "compared": len(found),
                    "diverged": len(div),
                    "first": min(div) if div else None,
                }
        if across:
            v.detail["across_tp"] = across
        out.append((config, v))
    return out


async def evaluate_greedy(ctx: RunContext, host: str, tps: list[int] | None = None) -> None:
    """Judge every config against the baseline at the given TP sizes of ``host`` (all of
    them when None), from the outputs of the cells done so far."""
    baseline = ctx.spec.campaign.baseline
    if not (ctx.spec.checks.greedy_equivalence and baseline):
        return
    done = [
        (c.cell, c.attempt)
        for c in ctx.state.cells.values()
        if c.status == "done" and c.cell is not None and c.host == host and c.cell.temperature == 0
    ]
    wanted = sorted({cell.tp for cell, _ in done}) if tps is None else tps
    for tp in wanted:
        verdicts = await asyncio.to_thread(_greedy_verdicts, ctx.store, baseline, done, tp)
        for config, v in verdicts:
            _emit_if_new(ctx, "greedy", host, config, tp, v)


def _probe_prompt(ctx: RunContext) -> list[dict[str, str]]:
    """The first prompt of the plan's first workload: a prompt the campaign really uses."""
    w = next(iter(ctx.spec.workloads.values()))
    prompts = load_named_set(w.prompts[0], ctx.plan.dir)
    return sample_prompts(prompts, 1, ctx.spec.campaign.seed)[0].messages()


async def probe_state_leak(
    ctx: RunContext, group: ServiceGroup, svc: Service, facts: ServerFacts
) -> None:
    """The same prompt alone, again, and right after a long unrelated request on the same
    server must give the same tokens (state leaking between requests shows only so)."""
    if not ctx.spec.checks.state_leak:
        return
    if (("state_leak", group.host, group.config, group.tp)) in ctx.state.checks:
        return
    prompt = _probe_prompt(ctx)
    long = [
        {
            "role": "user",
            "content": f"```\n{tool_output(LEAK_PROMPT_TOKENS, 'state-leak')}\n```\n"
            "Summarise this log in detail, line by line.",
        }
    ]
    client = BenchClient(
        svc.base_url, group.api, model=facts.served_model, token_ids=facts.engine == "vllm"
    )
    try:
        got = []
        for messages, n in (
            (prompt, PROBE_TOKENS),
            (prompt, PROBE_TOKENS),
            (long, LEAK_OUTPUT_TOKENS),
            (prompt, PROBE_TOKENS),
        ):
            done = await client.generate(messages, max_tokens=n, temperature=0.0)
            if done.error is not None:
                ctx.hub.notice(
                    f"{group.id}: state-leak probe not run: a probe request failed ({done.error})",
                    "warning",
                )
                return
            ids = done.output_ids
            got.append(Output(done.text, tuple(ids) if ids else None))
    finally:
        await client.aclose()
    alone, again, _, after = got
    _emit_if_new(
        ctx,
        "state_leak",
        group.host,
        group.config,
        group.tp,
        leak_verdict(group.config, alone, again, after),
    )
