"""Losslessness: at temperature 0 a speculative config must reproduce the baseline's tokens.

A divergence is located (the first differing token, the two continuations, the prompt), and
judged against a noise floor: real engines are not bit-exact at temperature 0 (verify runs
k+1 rows where decode runs one; TP and batching change reduction order), so the baseline is
compared with itself wherever the campaign ran it twice (repeats, batched in a concurrency
cell, another TP size) and in the floor probe (its probe prompts again and batched, so there
is a floor even in a plan with neither). A config that diverges only late and no earlier than
the baseline diverges from itself is numerics; one that diverges earlier, or from the first
tokens, is broken. A config is also compared with itself across TP sizes, judged against the
same floor. Everything here is plain data in and out; the engine turns verdicts into events.

Outputs are compared by token ids where the engine's stream carried them (its stream parser
collects them), by text otherwise (the position is then a word, said as such). Outputs of
different ``max_tokens`` are compared on their common prefix.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specbench_tui.engines.registry import adapters
from specbench_tui.results.cells import Cell

#: A divergence before this token is "from the first tokens": a broken config, not numerics.
FIRST_TOKENS = 16
#: Characters of each continuation kept around a divergence.
CONTEXT_CHARS = 60
DETERMINISTIC_HINT = (
    "for bit-exact comparisons run the engine in its deterministic mode where it has one ("
    + "; ".join(f"{a.label}: {a.deterministic_mode}" for a in adapters() if a.deterministic_mode)
    + ")"
)


@dataclass(frozen=True)
class Output:
    """What one request generated: its text and, where the engine gave them, its token ids."""

    text: str
    ids: tuple[int, ...] | None = None

    @classmethod
    def from_json(cls, obj: Any) -> Output:
        if isinstance(obj, str):
            return cls(obj)
        if isinstance(obj, Mapping):
            return cls(str(obj.get("text") or ""), _token_ids(obj.get("ids")))
        return cls("")

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "ids": list(self.ids) if self.ids is not None else None}


def _token_ids(ids: Any) -> tuple[int, ...] | None:
    """A list of integers as a tuple, None for anything else; checked in C (a signed 64-bit
    array refuses floats, strings and None), as a campaign's outputs hold millions of ids."""
    if not isinstance(ids, list):
        return None
    try:
        return tuple(array("q", ids))
    except (TypeError, OverflowError):
        return None


@dataclass(frozen=True)
class Divergence:
    char: int  # offset of the first differing character
    word: int  # index of the whitespace-separated word it falls in
    ours: str  # each continuation from a little before that point
    theirs: str
    token: int | None = None  # index of the first differing token, where ids were compared

    @property
    def position(self) -> int:
        """Where it diverged in tokens (words stand in for tokens without ids)."""
        return self.token if self.token is not None else self.word

    def describe(self) -> str:
        at = f"token {self.token}" if self.token is not None else f"word {self.word}"
        return f"{at} (char {self.char}): {self.ours!r} vs {self.theirs!r}"


def first_difference(ours: str, theirs: str, context: int = 24) -> Divergence | None:
    """Where two texts stop agreeing; None when they are identical."""
    if ours == theirs:
        return None
    n = min(len(ours), len(theirs))
    i = next((k for k in range(n) if ours[k] != theirs[k]), n)
    start = max(0, i - context // 3)
    return Divergence(
        char=i,
        word=len(ours[:i].split()) - (0 if i == 0 or ours[i - 1].isspace() else 1),
        ours=ours[start : i + context],
        theirs=theirs[start : i + context],
    )


def first_divergence(ours: Output, theirs: Output, *, prefix: bool = False) -> Divergence | None:
    """Where two outputs stop agreeing, by token ids when both have them.

    ``prefix``: the two ran with different ``max_tokens``, so only their common length is
    compared (a greedy answer cut at 256 tokens is the start of the one cut at 1024).
    """
    if ours.ids is not None and theirs.ids is not None:
        a, b = ours.ids, theirs.ids
        n = min(len(a), len(b))
        # Equal outputs are the common case: compared whole in C, searched only when not.
        i = n if a[:n] == b[:n] else next(k for k in range(n) if a[k] != b[k])
        if i == n and (prefix or len(a) == len(b)):
            return None
        text = first_difference(ours.text, theirs.text, CONTEXT_CHARS)
        base = text or Divergence(char=0, word=0, ours="", theirs="")
        return Divergence(base.char, base.word, base.ours, base.theirs, token=i)
    a_text, b_text = ours.text, theirs.text
    if prefix:
        n = min(len(a_text), len(b_text))
        a_text, b_text = a_text[:n], b_text[:n]
    return first_difference(a_text, b_text, CONTEXT_CHARS)


# --- what a cell produced, keyed for comparison ------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One output of a finished cell, with what makes it comparable to another."""

    cell: Cell
    key: str  # the request key in the cell's outputs file
    prompt: str  # "<set>/<id>": the same prompt text wherever it ran
    repeat: int  # which run of the prompt within its cell
    output: Output
    context: str = ""  # agentic: "s<session>/t<turn>" (turns build on earlier answers)

    @property
    def kind(self) -> str:
        return self.cell.kind


def samples_of(cell: Cell, outputs: Mapping[str, Any]) -> list[Sample]:
    """Read a cell's outputs file (keys as ``CellResult.outputs`` writes them)."""
    out = []
    for key, raw in outputs.items():
        body, _, rep = key.rpartition("#")
        if not body:
            body, rep = key, "0"
        repeat = int(rep) if rep.isdigit() else 0
        context = ""
        if cell.kind == "agentic":  # "<set>/<id>/s<session>/t<turn>"
            prompt, _, context = body.rpartition("/")
            prompt, _, session = prompt.rpartition("/")
            context = f"{session}/{context}"
        elif cell.kind == "concurrency":  # "<set>/<id>"
            prompt = body
        else:  # "<id>"
            prompt = f"{cell.prompt_set}/{body}"
        out.append(Sample(cell, key, prompt, repeat, Output.from_json(raw), context))
    return out


# --- comparisons ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One compared pair and where (if anywhere) it diverged."""

    ours: Sample
    theirs: Sample
    divergence: Divergence | None

    def to_json(self) -> dict[str, Any]:
        d = self.divergence
        return {
            "cell_id": self.ours.cell.id,
            "cell": self.ours.cell.name,
            "against": self.theirs.cell.name,
            "prompt": self.ours.prompt,
            "kind": self.ours.kind,
            "context": self.ours.context,
            "token": d.token if d else None,
            "word": d.word if d else None,
            "char": d.char if d else None,
            "position": d.position if d else None,
            "ours": d.ours if d else "",
            "theirs": d.theirs if d else "",
        }


def _pairs(ours: list[Sample], theirs: list[Sample]) -> Iterable[tuple[Sample, Sample, bool]]:
    """Comparable pairs: the same prompt, and for agentic turns the same session and turn.
    Each of ``ours`` is paired once, preferring the same kind, max_tokens and repeat."""
    by_prompt: dict[tuple[str, str], list[Sample]] = {}
    for s in theirs:
        by_prompt.setdefault((s.prompt, s.context), []).append(s)
    for s in ours:
        cands = [t for t in by_prompt.get((s.prompt, s.context), []) if t is not s]
        if s.kind == "agentic":
            cands = [t for t in cands if t.kind == "agentic" and t.cell.workload == s.cell.workload]
        else:
            cands = [t for t in cands if t.kind != "agentic"]
        if not cands:
            continue
        best = min(
            cands,
            key=lambda t: (
                t.kind != s.kind,
                t.cell.max_tokens != s.cell.max_tokens,
                t.repeat != s.repeat,
                t.repeat,
            ),
        )
        yield s, best, best.cell.max_tokens != s.cell.max_tokens


def compare(ours: list[Sample], theirs: list[Sample]) -> list[Finding]:
    """Every comparable pair; an agentic session stops at its first divergent turn (later
    turns then had other contexts and say nothing more)."""
    out = []
    broken_sessions: set[tuple[str, str, str]] = set()
    ordered = sorted(ours, key=lambda s: (s.context.split("/")[0], _turn(s.context)))
    for s, t, prefix in _pairs(ordered, theirs):
        session = (s.cell.id, s.prompt, s.context.split("/")[0])
        if s.kind == "agentic" and session in broken_sessions:
            continue
        d = first_divergence(s.output, t.output, prefix=prefix)
        if d is not None and s.kind == "agentic":
            broken_sessions.add(session)
        out.append(Finding(s, t, d))
    return out


def _turn(context: str) -> int:
    _, _, t = context.partition("/t")
    return int(t) if t.isdigit() else 0


def self_comparisons(samples: list[Sample]) -> list[Finding]:
    """The baseline against itself: a prompt run again (repeats, and the plan's later
    ``runs`` on a restarted server) or batched (a concurrency cell) against its first
    single-stream run."""

    def first(s: Sample) -> bool:
        return s.kind == "single" and s.repeat == 0 and s.cell.run == 1

    firsts = [s for s in samples if first(s)]
    others = [s for s in samples if not first(s) and s.kind != "agentic"]
    out = []
    for s, t, prefix in _pairs(others, firsts):
        out.append(Finding(s, t, first_divergence(s.output, t.output, prefix=prefix)))
    return out


# --- verdicts ---------------------------------------------------------------------------------


@dataclass
class Verdict:
    status: str  # pass | fail | noise
    text: str
    detail: dict[str, Any] = field(default_factory=dict)


# --- the noise floor -------------------------------------------------------------------------


@dataclass(frozen=True)
class Floor:
    """The baseline against itself, from every source the campaign had: its repeats and
    batched runs in the cells, its outputs at another TP size, the floor probe. ``first`` is
    the earliest position at which it differed from itself (None: it never did)."""

    compared: int = 0
    diverged: int = 0
    first: int | None = None
    sources: tuple[tuple[str, int], ...] = ()  # (where, comparisons), for the report

    @classmethod
    def of(cls, findings: Iterable[Finding], source: str) -> Floor:
        found = list(findings)
        positions = [f.divergence.position for f in found if f.divergence is not None]
        return cls(
            len(found),
            len(positions),
            min(positions) if positions else None,
            ((source, len(found)),) if found else (),
        )

    @classmethod
    def from_probe(cls, detail: Mapping[str, Any] | None) -> Floor:
        """What the floor probe recorded (its ``check_verdict`` detail)."""
        if not detail or not detail.get("compared"):
            return cls()
        n = int(detail["compared"])
        first = detail.get("first")
        return cls(
            n,
            int(detail.get("diverged") or 0),
            int(first) if isinstance(first, int) else None,
            (("probe", n),),
        )

    def __add__(self, other: Floor) -> Floor:
        firsts = [p for p in (self.first, other.first) if p is not None]
        sources = dict(self.sources)
        for where, n in other.sources:
            sources[where] = sources.get(where, 0) + n
        return Floor(
            self.compared + other.compared,
            self.diverged + other.diverged,
            min(firsts) if firsts else None,
            tuple(sources.items()),
        )

    def within(self, position: int) -> bool:
        """A divergence this late is the baseline's own numerics, not a broken config."""
        return self.first is not None and position >= self.first and position >= FIRST_TOKENS


def noise_floor(findings: list[Finding]) -> int | None:
    """The earliest token at which the baseline diverged from itself; None when it never did."""
    return Floor.of(findings, "").first


def floor_probe_verdict(
    config: str, prompts: list[str], alone: list[Output], again: list[Output], batched: list[Output]
) -> Verdict:
    """The floor probe's outcome: each probe prompt run again alone, and in a batch (cycling
    through the prompts), against its first run. Never a failure: the baseline defines the
    floor; ``noise`` says it differs from itself, and from where."""
    rows: list[dict[str, Any]] = []
    for how, outs in (("again", again), ("batched", batched)):
        for i, out in enumerate(outs):
            k = i % len(prompts)
            d = first_divergence(out, alone[k])
            rows.append(
                {
                    "prompt": prompts[k],
                    "how": how,
                    "position": d.position if d else None,
                    "token": d.token if d else None,
                    "ours": d.ours if d else "",
                    "theirs": d.theirs if d else "",
                }
            )
    positions = [r["position"] for r in rows if r["position"] is not None]
    detail: dict[str, Any] = {
        "compared": len(rows),
        "diverged": len(positions),
        "first": min(positions) if positions else None,
        "requests": len(alone) + len(again) + len(batched),
        "batch": len(batched),
        "findings": [r for r in rows if r["position"] is not None][:20],
    }
    if not positions:
        return Verdict(
            "pass",
            f"{config}: noise floor: its outputs never differ from themselves ({len(rows)} "
            f"comparisons: run again, and batched {len(batched)} at a time)",
            detail,
        )
    return Verdict(
        "noise",
        f"{config}: noise floor: {len(positions)} of {len(rows)} of its own outputs differ "
        f"when run again or batched, from position {detail['first']}",
        detail,
    )


def earliest_per_output(diverged: Iterable[Finding]) -> list[Finding]:
    """One finding per (kind, prompt, turn), its earliest: a prompt run at three max_tokens
    and two repeats diverges once, not six times."""
    best: dict[tuple[str, str, str], Finding] = {}
    for f in diverged:
        assert f.divergence is not None
        key = (f.ours.kind, f.ours.prompt, f.ours.context)
        old = best.get(key)
        if old is None or f.divergence.position < old.divergence.position:  # type: ignore[union-attr]
            best[key] = f
    return sorted(best.values(), key=lambda f: f.divergence.position)  # type: ignore[union-attr]


def _why(pos: int, unit: str, baseline: str, floor: Floor) -> str:
    """Why a divergence at ``pos`` is beyond the baseline's noise (it is: see Floor.within)."""
    if pos < FIRST_TOKENS:
        return "diverged from the first tokens"
    if floor.first is None:
        if floor.compared:
            return (
                f"diverged at {unit} {pos}, beyond {baseline}'s own noise: it never differed "
                f"from itself ({floor.compared} self-comparisons)"
            )
        return (
            f"diverged at {unit} {pos}; no noise floor was measured (turn [checks] noise_floor "
            "on, or add repeats or a concurrency workload, to tell numerics from a broken config)"
        )
    return (
        f"diverged at {unit} {pos}, beyond {baseline}'s own noise (it differs from itself "
        f"from {unit} {floor.first})"
    )


def _across_detail(
    across: Mapping[int, list[Finding]], blamed: Collection[int], floor: Floor
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for otp, found in sorted(across.items()):
        diverged = earliest_per_output(f for f in found if f.divergence is not None)
        first = diverged[0] if diverged else None
        pos = first.divergence.position if first and first.divergence else None
        status = "pass" if pos is None else ("noise" if floor.within(pos) else "fail")
        out[str(otp)] = {
            "compared": len(found),
            "diverged": len(diverged),
            "first": pos,
            "status": status,
            "counted": otp in blamed,
            "finding": first.to_json() if first else None,
        }
    return out


def greedy_verdict(
    config: str,
    baseline: str,
    findings: list[Finding],
    floor: Floor | list[Finding],
    across: Mapping[int, list[Finding]] | None = None,
    blamed: Collection[int] | None = None,
) -> Verdict | None:
    """Judge a config's outputs against the baseline's and, in ``across``, against its own
    outputs at other TP sizes (TP size -> findings); None when nothing was comparable.

    An across-TP divergence beyond the noise floor fails the config only at the TP sizes
    ``blamed`` (default: all): the caller leaves out a TP size whose own baseline
    comparison already explains it.
    """
    if not isinstance(floor, Floor):
        floor = Floor.of(floor, "repeats and batches")
    across = dict(across or {})
    blamed = set(across) if blamed is None else set(blamed)
    if not findings and not any(across.values()):
        return None
    diverged = earliest_per_output(f for f in findings if f.divergence is not None)
    detail: dict[str, Any] = {
        "compared": len(findings),
        "diverged": sum(1 for f in findings if f.divergence is not None),
        "diverged_outputs": len(diverged),
        "noise_floor": floor.first,
        "floor_compared": floor.compared,
        "floor_diverged": floor.diverged,
        "floor_sources": dict(floor.sources),
    }
    if across:
        detail["across_tp"] = _across_detail(across, blamed, floor)
    status = "pass"
    text = f"{config}: outputs equal to {baseline}'s ({len(findings)} compared)"
    if not findings:
        text = f"{config}: no {baseline} outputs at this TP size to compare with"
    if diverged:
        first = diverged[0]
        assert first.divergence is not None
        pos = first.divergence.position
        unit = "token" if first.divergence.token is not None else "word"
        detail["first"] = first.to_json()
        detail["divergent"] = [f.to_json() for f in diverged[:20]]
        where = f"{unit} {pos} of {first.ours.prompt} ({first.ours.cell.name})"
        share = f"{detail['diverged']} of {len(findings)} outputs ({len(diverged)} distinct)"
        if floor.within(pos):
            status = "noise"
            text = (
                f"{config}: {share} diverge late, from {where}, within {baseline}'s own noise "
                f"(it differs from itself from {unit} {floor.first}); {DETERMINISTIC_HINT}"
            )
        else:
            return Verdict(
                "fail", f"{config}: {share} {_why(pos, unit, baseline, floor)}: {where}", detail
            )
    for otp, a in (detail.get("across_tp") or {}).items():
        if a["counted"] and a["status"] == "fail":
            f = a["finding"]
            unit = "token" if f.get("token") is not None else "word"
            detail["first"] = f
            return Verdict(
                "fail",
                f"{config}: {a['diverged']} of {a['compared']} outputs differ from its own at "
                f"TP {otp}: {_why(a['first'], unit, baseline, floor)}: {unit} {a['first']} of "
                f"{f['prompt']} ({f['cell']})",
                detail,
            )
    if status == "pass" and any(
        a["counted"] and a["status"] == "noise" for a in (detail.get("across_tp") or {}).values()
    ):
        status = "noise"
        text += f"; across TP sizes it differs late, within {baseline}'s own noise"
    return Verdict(status, text, detail)


def baseline_floor(
    base: Mapping[int, list[Sample]], tp: int, probes: Mapping[int, Mapping[str, Any]] | None = None
) -> Floor:
    """The baseline's noise floor at ``tp``: its repeats and batched runs there, its outputs
    at every other TP size against those at ``tp`` (TP changes reduction order), and what
    the floor probe saw. Where the baseline never ran at ``tp`` (a config's TP size judged
    only against itself at others), the floor of every TP size it ran at."""
    probes = probes or {}
    tps = [tp] if tp in base or tp in probes else sorted(set(base) | set(probes))
    floor = Floor()
    for t in tps:
        ours = base.get(t, [])
        floor = floor + Floor.of(self_comparisons(ours), "repeats and batches")
        floor = floor + Floor.from_probe(probes.get(t))
        for otp, theirs in sorted(base.items()):
            if otp != t and (len(tps) == 1 or otp > t):  # each pair once
                floor = floor + Floor.of(compare(ours, theirs), f"TP {t} vs TP {otp}")
    return floor


def config_verdicts(
    baseline: str,
    samples: Mapping[tuple[str, int], list[Sample]],
    tp: int,
    probes: Mapping[int, Mapping[str, Any]] | None = None,
    settled: Collection[int] | None = None,
) -> list[tuple[str, Verdict]]:
    """(config, verdict) for every config at ``tp`` on one host: against the baseline at
    ``tp``, and against the config's own outputs at its other TP sizes.

    An across-TP divergence is blamed on ``tp`` unless ``tp`` matched the baseline there (then
    the other size is the odd one out) or the other size failed against its own baseline (which
    already explains it). ``settled``: TP sizes whose baseline has no cells still to run (all
    when None); a TP size still waiting for its baseline blames nothing, so no early verdict
    fails a config that its baseline would clear.
    """
    probes = probes or {}
    base = {t: s for (c, t), s in samples.items() if c == baseline}
    floors: dict[int, Floor] = {}

    def floor_at(t: int) -> Floor:
        if t not in floors:
            floors[t] = baseline_floor(base, t, probes)
        return floors[t]

    def own(config: str, t: int) -> Verdict | None:
        return greedy_verdict(
            config, baseline, compare(samples[(config, t)], base.get(t, [])), floor_at(t)
        )

    out = []
    for (config, ctp), ours in sorted(samples.items()):
        if ctp != tp or config == baseline:
            continue
        mine = own(config, tp)
        if mine is None and settled is not None and tp not in settled:
            continue  # its baseline is still to come: no verdict yet
        anchored = mine is not None and mine.status != "fail"
        across: dict[int, list[Finding]] = {}
        blamed: set[int] = set()
        for (other, otp), theirs in sorted(samples.items()):
            if other != config or otp == tp:
                continue
            across[otp] = compare(ours, theirs)
            if anchored or (settled is not None and not {tp, otp} <= set(settled)):
                continue
            theirs_v = own(config, otp)
            if theirs_v is None or theirs_v.status != "fail":
                blamed.add(otp)
        v = greedy_verdict(
            config,
            baseline,
            compare(ours, base.get(tp, [])),
            floor_at(tp),
            across,
            blamed,
        )
        if v is not None:
            out.append((config, v))
    return out


def leak_verdict(config: str, alone: Output, again: Output, after: Output) -> Verdict:
    """The state-leak probe: a prompt alone, again, and right after a long unrelated request
    must give the same tokens."""
    d_again = first_divergence(again, alone)
    d_after = first_divergence(after, again)
    detail: dict[str, Any] = {
        "alone": alone.text[:400],
        "after_long": after.text[:400],
        "again": again.text[:400],
    }
    if d_after is None and d_again is None:
        return Verdict(
            "pass", f"{config}: no state leak (same tokens before and after a long request)", detail
        )
    d = d_after or d_again
    assert d is not None
    detail["divergence"] = {"token": d.token, "word": d.word, "ours": d.ours, "theirs": d.theirs}
    what = "right after a long unrelated request" if d_after is not None else "when repeated"
    unit = f"token {d.token}" if d.token is not None else f"word {d.word}"
    return Verdict(
        "fail",
        f"{config}: state leak: the probe prompt's output changes {what}, at {unit}: "
        f"{d.ours!r} vs {d.theirs!r}",
        detail,
    )


def greedy_warnings(
    cell: Cell,
    finished: Iterable[Cell],
    baseline: str,
    outputs_of: Callable[[str], Mapping[str, Any]],
) -> list[str]:
    """When a temperature-0 cell finishes, compare it with its counterparts at once (the
    baseline's if it is another config, every other config's if it is the baseline), so a
    lossy config shows during the campaign; the verdict comes when its group is done."""
    if cell.temperature != 0:
        return []
    key = (cell.host, cell.tp, cell.workload, cell.prompt_set, cell.max_tokens, cell.concurrency)
    twins = [
        c
        for c in finished
        if c.id != cell.id
        and (c.host, c.tp, c.workload, c.prompt_set, c.max_tokens, c.concurrency) == key
    ]
    if cell.config == baseline:
        pairs = [(c, cell) for c in twins if c.config != baseline]
    else:
        pairs = [(cell, c) for c in twins if c.config == baseline]
    out = []
    for other, base in pairs:
        ours = samples_of(other, outputs_of(other.id))
        theirs = samples_of(base, outputs_of(base.id))
        diverged = [f for f in compare(ours, theirs) if f.divergence is not None]
        if diverged:
            f = min(diverged, key=lambda f: f.divergence.position)  # type: ignore[union-attr]
            more = f" (and {len(diverged) - 1} more)" if len(diverged) > 1 else ""
            assert f.divergence is not None
            out.append(
                f"greedy outputs differ: {other.config} vs {base.config} at {other.name}, "
                f"prompt {f.ours.prompt}, {f.divergence.describe()}{more}"
            )
    return out
