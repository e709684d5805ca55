"""Servers a plan names by address (``url``), asked what they are before anything runs.

A running server says which engine it is in its models' ``owned_by`` (``GET /v1/models``,
each engine's own default: ``engines/registry.engine_owning``), and that engine's adapter
reads the rest as for any server of it: version, whether and how it speculates, TP size,
counters. A config that names no engine takes the one its server says, so its counters, log
lines and acceptance definition are that engine's, and its group is speculative as the
server says (plan/expand.py); one that names another engine is refused when its group starts
(``engines/inspect.py``). ``--dry-run --check`` prints what each address answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass, field

import httpx

from specbench_tui.engines.adapter import MODELS_PATH, get_json
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.engines.registry import adapter, engine_owning
from specbench_tui.errors import describe
from specbench_tui.hosts.host import HostReport
from specbench_tui.plan.document import Plan, ServerSays

#: How long one address may take to answer (it runs already: it answers at once or not).
PROBE_TIMEOUT_S = 10.0


@dataclass
class UrlProbe:
    """What one address answered."""

    url: str
    models: list[str] = field(default_factory=list)
    facts: ServerFacts | None = None  # by its engine's adapter, once the engine is known
    problem: str | None = None  # why it could not be asked (nothing answered, not JSON)

    @property
    def engine(self) -> str | None:
        return self.facts.engine if self.facts is not None else None

    def says(self) -> ServerSays:
        f = self.facts
        if f is None:
            return ServerSays()
        return ServerSays(engine=f.engine, speculative=f.speculative, algorithm=f.algorithm)

    def report(self) -> HostReport:
        """As the preflight's report of a host, for ``--dry-run --check``."""
        out = HostReport(self.url, "running server")
        if self.problem is not None:
            out.problems.append(self.problem)
            return out
        out.facts.append(f"serves {', '.join(self.models) or 'no model listed'} (GET /v1/models)")
        f = self.facts
        if f is None:
            out.warnings.append(
                "its engine is not one this tool knows by /v1/models (owned_by): the config's "
                "engine (or the default) is assumed"
            )
            return out
        eng = adapter(f.engine)
        out.facts.append(f"engine {eng.label}" + (f" {f.version}" if f.version else ""))
        if f.speculative is None:
            out.warnings.append(f"{eng.label} did not say whether it speculates")
        else:
            on = f"speculative decoding: {f.algorithm or 'on'}"
            out.facts.append(on if f.speculative else "no speculation")
        if f.tp is not None:
            out.facts.append(f"TP {f.tp}")
        out.facts.append(
            "acceptance counters at /metrics" if f.metrics else "no acceptance counters read"
        )
        return out


async def probe(url: str, client: httpx.AsyncClient) -> UrlProbe:
    """Ask one address for its models and, by their owner, its engine; then what that
    engine's adapter reads of any server of it (version, speculation, TP, counters)."""
    base = url.rstrip("/")
    out = UrlProbe(url)
    try:
        models = await get_json(client, base + MODELS_PATH)
    except httpx.HTTPError as exc:
        out.problem = f"GET {base}{MODELS_PATH}: {describe(exc)}"
        return out
    if models is None:
        out.problem = (
            f"GET {base}{MODELS_PATH} did not answer 200 with JSON: is it an "
            "OpenAI-compatible LLM server?"
        )
        return out
    data = models.get("data") if isinstance(models, dict) else None
    out.models = [str(m.get("id")) for m in data or () if isinstance(m, dict)]
    engine = engine_owning(models)
    if engine is not None:
        out.facts = ServerFacts(engine=engine, models=out.models)
        with contextlib.suppress(httpx.HTTPError):
            await adapter(engine).inspect(out.facts, client, base, ())
    return out


def running_urls(plan: Plan) -> list[str]:
    """Every address the plan's configs name, in plan order."""
    spec = plan.spec
    urls = [c.url or spec.server.url for c in spec.configs.values()]
    return list(dict.fromkeys(u for u in urls if u))


async def probe_all(urls: list[str]) -> dict[str, UrlProbe]:
    async with httpx.AsyncClient(
        trust_env=False, timeout=httpx.Timeout(PROBE_TIMEOUT_S, connect=5.0)
    ) as client:
        found = await asyncio.gather(*(probe(u, client) for u in urls))
    return {p.url: p for p in found}


async def read_running(plan: Plan) -> Plan:
    """Before a run: the plan with what each running server says of itself (an address that
    does not answer says nothing; its group fails with the reason when it starts)."""
    urls = running_urls(plan)
    if not urls:
        return plan
    probes = await probe_all(urls)
    return dataclasses.replace(plan, running={u: p.says() for u, p in probes.items()})
