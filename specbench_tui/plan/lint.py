"""Plan lint: what in an expanded plan makes a config's acceptance other than the real,
lossless one without the plan saying so (``forced_accept`` says so), each a warning that
``--dry-run`` shows with its consequence. The engine-specific knobs (relaxed acceptance, a
simulated acceptance set by hand or in a broken mode) are each adapter's to name
(``EngineAdapter.acceptance_warnings``); ``ignore_eos`` is the same on every engine.

Warnings, not errors: a plan may mean any of these (a study of relaxed acceptance), but its
report must not then be read as lossless speculative decoding's.
"""

from __future__ import annotations

from collections.abc import Iterable

from specbench_tui.engines.registry import adapter
from specbench_tui.results.cells import ServiceGroup

IGNORE_EOS = ("ignore_eos", "ignore-eos")


def _ignores_eos(group: ServiceGroup) -> str | None:
    """The argument or environment entry of ``group`` that asks for ignore_eos, if any."""
    for text in (*group.command, *(f"{k}={v}" for k, v in group.env)):
        if any(word in text.lower() for word in IGNORE_EOS):
            return text
    return None


def acceptance_warnings(groups: Iterable[ServiceGroup]) -> list[str]:
    """One line per problem and config (a config's groups at several TP sizes share one)."""
    out: list[str] = []
    seen: set[str] = set()
    for g in groups:
        if g.config in seen:
            continue
        seen.add(g.config)
        forced = g.forced_accept is not None
        found = adapter(g.engine).acceptance_warnings(g.command, dict(g.env), forced=forced)
        eos = _ignores_eos(g) if g.speculative and not forced else None
        if eos is not None:
            found.append(
                f"{eos!r} asks for ignore_eos in acceptance cells: past the end of its answer "
                "a model writes degenerate, repetitive text that drafters predict easily, so "
                "the accept length and speed-up overstate real use; leave ignore_eos out "
                "where acceptance is measured"
            )
        out.extend(f"config {g.config}: {w}" for w in found)
    return out
