"""Correctness checks during a campaign: the greedy-equivalence verdict of each config once
its group and the baseline's are done (and, beside it, the forced-acceptance check of each
forced config), the state-leak probe at the end of each group, and the
noise-floor probe at the end of each baseline group (the baseline against itself, which the
greedy verdicts are judged against).

Verdicts are ``check_verdict`` events: the reducer marks a failing config's cells as
failed-check in every view, and the exit status becomes 1. The comparison itself (pure) is
in bench/greedy.py; this module reads the outputs the store kept and publishes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from specbench_tui.bench.client import BenchClient
from specbench_tui.bench.forced import CHECK as FORCED_CHECK
from specbench_tui.bench.forced import forced_verdict, measured_accept
from specbench_tui.bench.greedy import Output, Verdict, floor_probe_verdict, leak_verdict
from specbench_tui.bench.greedy_judge import HostJudgement, waiting_tps
from specbench_tui.bench.prompting import DEFAULT_PROMPTING, Prompting
from specbench_tui.bench.workloads import tool_output
from specbench_tui.engine.context import RunContext
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.errors import describe
from specbench_tui.hosts.service import Service
from specbench_tui.plan.probes import (
    LEAK_OUTPUT_TOKENS,
    LEAK_PROMPT_TOKENS,
    PROBE_TOKENS,
    floor_probe_size,
    runs_floor_probe,
    runs_leak_probe,
)
from specbench_tui.plan.prompt_sets import sample_prompts
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.events import CheckVerdict


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


async def after_group(
    ctx: RunContext, host: str, tps: list[int] | None = None, *, final: bool = False
) -> None:
    """What is judged as a group ends (``final``: as the run ends): the greedy and forced
    verdicts, then the comparisons its results made unlike."""
    await evaluate_greedy(ctx, host, tps, final=final)
    await say_unlike(ctx)


async def say_unlike(ctx: RunContext) -> None:
    """Say each speed-up that is not like with like (the comparability audit, passed in as
    ``options.audit``) once, as a warning notice: the headless line and the console's toast.
    A batch job leaves it to its campaign, which sees every group's rows. The audit reads
    the results directory, so what was emitted is made durable first."""
    audit = ctx.options.audit
    if audit is None or ctx.options.job is not None:
        return
    await ctx.hub.durable()
    try:
        found = await asyncio.to_thread(audit, ctx.layout.root)
    except Exception as exc:  # advisory: the report audits the same rows again
        ctx.hub.notice(f"comparability audit not made: {describe(exc)}", "warning")
        return
    for key, text in found:
        if key not in ctx.said_unlike:
            ctx.said_unlike.add(key)
            ctx.hub.notice(f"not like with like: {text}", "warning")


async def evaluate_greedy(
    ctx: RunContext, host: str, tps: list[int] | None = None, *, final: bool = False
) -> None:
    """Judge every config against the baseline on ``host``, from the outputs of the cells
    done so far. ``tps``: the TP size a group just finished at; the other TP sizes of the
    host are judged again too, as their comparisons across TP sizes may have changed.
    ``final``: this run will run nothing more (its end, an abort included), so no TP size
    waits for its baseline."""
    evaluate_forced(ctx, host)
    baseline = ctx.spec.campaign.baseline
    if not (ctx.spec.checks.greedy_equivalence and baseline):
        return
    waiting = set() if final else waiting_tps(ctx.state, host, baseline)
    judgement = HostJudgement.of(ctx.state, baseline, host, tps=tps or (), waiting=waiting)
    verdicts = await asyncio.to_thread(judgement.verdicts, ctx.store.read_cell_texts)
    for tp, config, v in verdicts:
        _emit_if_new(ctx, "greedy", host, config, tp, v)


def evaluate_forced(ctx: RunContext, host: str) -> None:
    """The forced-acceptance check of every forced config on ``host`` (bench/forced.py),
    from its cells finished so far: made where the greedy verdicts are, as each group ends
    and at the run's end."""
    found: dict[tuple[str, int, float], list[tuple[str, float | None]]] = {}
    for c in ctx.state.cells.values():
        cell = c.cell
        if c.host != host or c.status != "done" or cell is None or cell.forced_accept is None:
            continue
        found.setdefault((c.config, c.tp, cell.forced_accept), []).append(
            (c.name, measured_accept(c.figures))
        )
    for (config, tp, forced), cells in sorted(found.items()):
        _emit_if_new(ctx, FORCED_CHECK, host, config, tp, forced_verdict(config, tp, forced, cells))


def _probe_prompts(ctx: RunContext, n: int = 1) -> list[tuple[str, list[dict[str, str]]]]:
    """The first ``n`` prompts of the plan's first workload, as its cells draw them
    ("<set>/<id>", messages): prompts the campaign really uses."""
    w = next(iter(ctx.spec.workloads.values()))
    prompts = ctx.plan.prompts.load(w.prompts[0])
    drawn = sample_prompts(prompts, n, ctx.spec.campaign.seed)
    return [(f"{w.prompts[0]}/{p.id}", p.messages()) for p in drawn]


def _probe_prompting(
    ctx: RunContext, group: ServiceGroup, prompting: Prompting | None
) -> Prompting:
    """The group's template with the kwargs of the plan's first workload, which the probe
    prompts come from: a probe sees the prompts that workload's cells see."""
    first = next(iter(ctx.spec.workloads))
    g = ctx.state.groups.get(group.id)
    kwargs: dict[str, Any] = {}
    for cid in g.cells if g else []:
        cell = ctx.state.cells[cid].cell
        if cell is not None and cell.workload == first:
            kwargs = dict(cell.chat_template_kwargs)
            break
    return (prompting or DEFAULT_PROMPTING).with_kwargs(kwargs)


def _probe_prompt(ctx: RunContext) -> list[dict[str, str]]:
    return _probe_prompts(ctx, 1)[0][1]


async def probe_noise_floor(
    ctx: RunContext,
    group: ServiceGroup,
    svc: Service,
    facts: ServerFacts,
    prompting: Prompting | None = None,
) -> None:
    """The baseline against itself at the end of its group: its probe prompts run again and
    batched with others, the conditions that change numerics, so every verdict has a noise
    floor to be judged against even when the plan has no repeats and no concurrency."""
    spec = ctx.spec
    if not runs_floor_probe(spec, group):
        return
    if ("noise_floor", group.host, group.config, group.tp) in ctx.state.checks:
        return
    n_prompts, batch, max_tokens = floor_probe_size(spec)
    probe = _probe_prompts(ctx, n_prompts)
    client = BenchClient(
        svc.base_url,
        group.api,
        engine=group.engine,
        concurrency=batch,
        model=facts.served_model,
        prompting=_probe_prompting(ctx, group, prompting),
    )

    async def one(messages: list[dict[str, str]]) -> Output | None:
        done = await client.generate(messages, max_tokens=max_tokens)
        if done.error is not None:
            ctx.hub.notice(
                f"{group.id}: noise-floor probe not run: a probe request failed ({done.error})",
                "warning",
            )
            return None
        ids = done.output_ids
        return Output(done.text, tuple(ids) if ids else None)

    try:
        runs: list[list[Output | None]] = []
        for _ in range(2):
            runs.append([await one(m) for _, m in probe])
        runs.append(
            list(await asyncio.gather(*(one(probe[i % len(probe)][1]) for i in range(batch))))
        )
    finally:
        await client.aclose()
    alone, again, batched = runs
    if any(o is None for run in runs for o in run):
        return
    v = floor_probe_verdict(
        group.config,
        [name for name, _ in probe],
        alone,  # type: ignore[arg-type]
        again,  # type: ignore[arg-type]
        batched,  # type: ignore[arg-type]
    )
    v.detail["max_tokens"] = max_tokens
    _emit_if_new(ctx, "noise_floor", group.host, group.config, group.tp, v)


async def probe_state_leak(
    ctx: RunContext,
    group: ServiceGroup,
    svc: Service,
    facts: ServerFacts,
    prompting: Prompting | None = None,
) -> None:
    """The same prompt alone, again, and right after a long unrelated request on the same
    server must give the same tokens (state leaking between requests shows only so)."""
    if not runs_leak_probe(ctx.spec, group):
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
        svc.base_url,
        group.api,
        engine=group.engine,
        model=facts.served_model,
        prompting=_probe_prompting(ctx, group, prompting),
    )
    try:
        got = []
        for messages, n in (
            (prompt, PROBE_TOKENS),
            (prompt, PROBE_TOKENS),
            (long, LEAK_OUTPUT_TOKENS),
            (prompt, PROBE_TOKENS),
        ):
            done = await client.generate(messages, max_tokens=n)
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
