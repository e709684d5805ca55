"""Losslessness: at temperature 0 a speculative config must reproduce the baseline's tokens.

A divergence is located (the first differing token, the two continuations, the prompt), and
judged against a noise floor: real engines are not bit-exact at temperature 0 (verify runs
k+1 rows where decode runs one; TP and batching change reduction order), so the baseline is
compared with itself wherever the campaign ran it twice (repeats, batched in a concurrency
cell, another TP size). A config that diverges only late and no earlier than the baseline
diverges from itself is numerics; one that diverges earlier, or from the first tokens, is
broken. Everything here is plain data in and out; the engine turns verdicts into events.

Outputs are compared by token ids where the engine returned them (SGLang ``output_ids``,
vLLM token ids), by text otherwise (the position is then a word, said as such). Outputs of
different ``max_tokens`` are compared on their common prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specbench_tui.results.cells import Cell

#: A divergence before this token is "from the first tokens": a broken config, not numerics.
FIRST_TOKENS = 16
#: Characters of each continuation kept around a divergence.
CONTEXT_CHARS = 60
DETERMINISTIC_HINT = (
    "for bit-exact comparisons run the engine in its deterministic mode where it has one "
    "(SGLang: --enable-deterministic-inference; vLLM: VLLM_BATCH_INVARIANT=1)"
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
            ids = obj.get("ids")
            ok = isinstance(ids, list) and all(isinstance(i, int) for i in ids)
            return cls(str(obj.get("text") or ""), tuple(ids) if ok else None)
        return cls("")

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "ids": list(self.ids) if self.ids is not None else None}


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
        i = next((k for k in range(n) if a[k] != b[k]), n)
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
    """The baseline against itself: a prompt run again (repeats) or batched (a concurrency
    cell) against its first single-stream run."""
    firsts = [s for s in samples if s.kind == "single" and s.repeat == 0]
    others = [
        s for s in samples if not (s.kind == "single" and s.repeat == 0) and s.kind != "agentic"
    ]
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


def noise_floor(findings: list[Finding]) -> int | None:
    """The earliest token at which the baseline diverged from itself; None when it never did."""
    positions = [f.divergence.position for f in findings if f.divergence is not None]
    return min(positions) if positions else None


def greedy_verdict(
    config: str, baseline: str, findings: list[Finding], floor_findings: list[Finding]
) -> Verdict | None:
    """Judge a config's outputs against the baseline's; None when nothing was comparable."""
    if not findings:
        return None
    diverged = [f for f in findings if f.divergence is not None]
    floor = noise_floor(floor_findings)
    detail: dict[str, Any] = {
        "compared": len(findings),
        "diverged": len(diverged),
        "noise_floor": floor,
        "floor_compared": len(floor_findings),
        "floor_diverged": sum(1 for f in floor_findings if f.divergence is not None),
    }
    if not diverged:
        return Verdict(
            "pass", f"{config}: outputs equal to {baseline}'s ({len(findings)} compared)", detail
        )
    first = min(diverged, key=lambda f: f.divergence.position)  # type: ignore[union-attr]
    assert first.divergence is not None
    pos = first.divergence.position
    unit = "token" if first.divergence.token is not None else "word"
    detail["first"] = first.to_json()
    detail["divergent"] = [f.to_json() for f in diverged[:20]]
    where = f"{unit} {pos} of {first.ours.prompt} ({first.ours.cell.name})"
    share = f"{len(diverged)} of {len(findings)} outputs"
    if floor is not None and pos >= floor and pos >= FIRST_TOKENS:
        return Verdict(
            "noise",
            f"{config}: {share} diverge late, from {where}, within {baseline}'s own noise (it "
            f"differs from itself from {unit} {floor}); {DETERMINISTIC_HINT}",
            detail,
        )
    if pos < FIRST_TOKENS:
        why = "diverged from the first tokens"
    elif floor is None:
        why = (
            f"diverged at {unit} {pos}, while {baseline} never differed from itself "
            f"({len(floor_findings)} self-comparisons)"
            if floor_findings
            else f"diverged at {unit} {pos}; no noise floor was measured (add repeats or a "
            "concurrency workload to tell numerics from a broken config)"
        )
    else:
        why = f"diverged at {unit} {pos}, earlier than {baseline} differs from itself ({floor})"
    return Verdict("fail", f"{config}: {share} {why}: {where}", detail)


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
