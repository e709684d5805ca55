"""After a server is ready: what actually runs, against what the config asked for.

A config that asks for speculative decoding and silently runs without it (a flag the build
ignores, a draft model that did not load) would produce a "speed-up" of nothing; a server that
runs at another TP size measures another setup. So once a server answers, this asks the engine
what it runs and returns the differences as problems that fail the group, plus what the rest
of the campaign needs: the served model name requests must carry, SGLang's stream mode, whether
the counters are there, and the engine version for the report.

Where each fact comes from is the engine adapter's (``EngineAdapter.inspect``: SGLang's
``/server_info``; vLLM's ``/version``, ``/metrics`` and start-up config line; TensorRT-LLM's
``/version`` and Prometheus page). For every engine ``GET /v1/models`` gives the served model
name (the plan's ``served_model_name`` overrides it, and must be among the listed names).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import httpx

from specbench_tui.engines.adapter import MODELS_PATH, OPENAI_API, get_json
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.engines.registry import adapter, engine_owning
from specbench_tui.engines.settings import NOT_REPORTED, PLAN_COMMAND, from_command
from specbench_tui.results.cells import ServiceGroup


async def inspect_server(
    group: ServiceGroup,
    base_url: str,
    log_lines: Sequence[str] = (),
    *,
    client: httpx.AsyncClient | None = None,
    rehearsal: bool = False,
) -> ServerFacts:
    """Ask a ready server what it runs; never raises for what the server says or lacks.
    ``rehearsal``: the server is the simulator standing in for the plan's engine (its host's
    backend says so), which runs no real engine to hold to the plan."""
    own = client is None
    if client is None:
        client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(20.0, connect=5.0))
    base = base_url.rstrip("/")
    facts = ServerFacts(engine=group.engine)
    owner: str | None = None
    try:
        with contextlib.suppress(httpx.HTTPError):
            models = await get_json(client, base + MODELS_PATH)
            if isinstance(models, dict) and isinstance(models.get("data"), list):
                facts.models = [str(m["id"]) for m in models["data"] if isinstance(m, dict)]
            owner = engine_owning(models)
        await adapter(group.engine).inspect(facts, client, base, log_lines)
    finally:
        if own:
            await client.aclose()
    _served_model(facts, group)
    if facts.settings is None and group.url is not None:  # no command of the plan started it
        facts.settings_source = NOT_REPORTED
    elif facts.settings is None:  # the engine reports none: what the plan started it with
        facts.settings, facts.settings_source = from_command(group.command), PLAN_COMMAND
    if not rehearsal:
        _engine(facts, group, owner)
        _compare(facts, group)
        _notes(facts, group)
    return facts


def _served_model(facts: ServerFacts, group: ServiceGroup) -> None:
    if group.served_model_name:
        facts.served_model = group.served_model_name
        if facts.models and group.served_model_name not in facts.models:
            facts.problems.append(
                f"served_model_name = {group.served_model_name!r} but the server serves "
                f"{', '.join(map(repr, facts.models))} (GET /v1/models)"
            )
    elif facts.models:
        facts.served_model = facts.models[0]
    elif group.api == OPENAI_API:
        facts.notes.append(
            "GET /v1/models listed no model; requests carry no model name "
            "(set served_model_name if the server needs one)"
        )


def _engine(facts: ServerFacts, group: ServiceGroup, owner: str | None) -> None:
    """The engine the server says it is (its models' ``owned_by``) against the config's:
    another engine's counters and log lines would record no acceptance at all."""
    mine = adapter(group.engine)
    if owner is None or owner == mine.name:
        return
    theirs = adapter(owner)
    facts.problems.append(
        f"the server is {theirs.label} (GET /v1/models: owned_by {theirs.owned_by!r}) but config "
        f"{group.config!r} is measured as {mine.label}'s: set engine = {owner!r} on it (or leave "
        "engine out: the launch command or the server then says it)"
    )


def _compare(facts: ServerFacts, group: ServiceGroup) -> None:
    eng = adapter(group.engine)
    asked = group.spec_algorithm or "speculative decoding"
    if group.speculative and facts.speculative is False:
        facts.problems.append(
            f"config {group.config!r} asks for {asked} but {eng.label} runs without "
            "speculative decoding; its speed-up would be meaningless"
        )
    elif not group.speculative and facts.speculative:
        facts.problems.append(
            f"config {group.config!r} asks for no speculative decoding but {eng.label} runs "
            f"{facts.algorithm or 'it'}"
        )
    elif group.speculative and facts.speculative is None:
        facts.notes.append(f"{eng.label} did not say whether it runs {asked}; not confirmed")
    if (
        group.speculative
        and group.spec_algorithm
        and facts.algorithm
        and not eng.same_algorithm(group.spec_algorithm, facts.algorithm)
    ):
        facts.problems.append(
            f"config {group.config!r} asks for {group.spec_algorithm} but {eng.label} "
            f"runs {facts.algorithm}"
        )
    if facts.tp is not None and facts.tp != group.tp:
        facts.problems.append(f"the group is TP {group.tp} but {eng.label} runs with TP {facts.tp}")


def _notes(facts: ServerFacts, group: ServiceGroup) -> None:
    facts.notes.extend(adapter(group.engine).notes(group, facts))
