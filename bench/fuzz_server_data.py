"""Hostile and random server data against the stream parsers and the store.

    python bench/fuzz_server_data.py [--cases 20000] [--seed 0]

Starts from real bytes (the vLLM captures and the SGLang fixtures in tests/fixtures/), and
mutates them: numbers swapped for NaN, Infinity, negatives, huge integers, strings, lists and
objects; fields dropped; JSON cut short; garbage lines and bytes inserted. Every case is fed
to the parser of its API as the client would, then written to a part file as a request row.
The invariants, checked for every case: nothing but the parser's own StreamError leaves a
parser; every row is written; no count is negative or beyond any real count; every rate is
finite. Prints the counts of each outcome and exits 1 when an invariant broke.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specbench_tui.bench.client import Completion  # noqa: E402
from specbench_tui.bench.figures import fill_rates  # noqa: E402
from specbench_tui.engine.store import ResultsStore  # noqa: E402
from specbench_tui.engines.registry import adapter  # noqa: E402
from specbench_tui.engines.streams import MAX_COUNT, StreamError  # noqa: E402
from specbench_tui.results.layout import ResultsLayout  # noqa: E402
from specbench_tui.results.records import RequestRecord  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
HOSTILE: list[Any] = [
    float("nan"),
    float("inf"),
    -float("inf"),
    -1,
    -(2**40),
    2**63,
    2**80,
    1e300,
    2.5,
    "12",
    "",
    None,
    True,
    [],
    [1, "x"],
    {"a": 1},
    "NaN",
]


def _streams() -> list[tuple[str, str, list[bytes]]]:
    """(engine, api, SSE data payloads) of every real stream on disk."""
    out = []
    for path in sorted((FIXTURES / "sglang").glob("*.sse")):
        api = "openai" if "openai" in path.name else "sglang"
        out.append(("sglang", api, _payloads(path.read_bytes())))
    for path in sorted((FIXTURES / "vllm-0.32-cpu").glob("*.raw")):
        out.append(("vllm", "openai", _payloads(path.read_bytes())))
    for path in sorted((FIXTURES / "trtllm").glob("*.sse")):
        out.append(("trtllm", "openai", _payloads(path.read_bytes())))
    return [s for s in out if s[2]]


def _payloads(body: bytes) -> list[bytes]:
    lines = body.replace(b"\r\n", b"\n").split(b"\n")
    return [line[5:].strip() for line in lines if line.startswith(b"data:")]


def _mutate_value(rng: random.Random, obj: Any) -> Any:
    if isinstance(obj, dict) and obj:
        key = rng.choice(list(obj))
        roll = rng.random()
        if roll < 0.15:
            obj.pop(key)
        elif isinstance(obj[key], dict | list) and roll < 0.6:
            obj[key] = _mutate_value(rng, obj[key])
        else:
            obj[key] = rng.choice(HOSTILE)
    elif isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        obj[i] = (
            _mutate_value(rng, obj[i]) if isinstance(obj[i], dict | list) else rng.choice(HOSTILE)
        )
    return obj


def _mutate(rng: random.Random, payloads: list[bytes]) -> list[bytes]:
    out = list(payloads)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(out))
        roll = rng.random()
        if roll < 0.6 and out[i] != b"[DONE]":
            try:
                obj = json.loads(out[i])
            except ValueError:
                continue
            out[i] = json.dumps(_mutate_value(rng, obj), allow_nan=True).encode()
        elif roll < 0.75:
            out[i] = out[i][: rng.randrange(max(1, len(out[i])))]  # cut short
        elif roll < 0.9:
            out.insert(i, bytes(rng.randrange(256) for _ in range(rng.randint(1, 40))))
        else:
            out.pop(i)
            if not out:
                out = [b"[DONE]"]
    return out


def _check(done: Completion) -> str | None:
    for name in (
        "output_tokens",
        "prompt_tokens",
        "cached_tokens",
        "spec_verify_ct",
        "spec_accepted_tokens",
        "spec_draft_tokens",
    ):
        v = getattr(done, name)
        if v is not None and not 0 <= v <= MAX_COUNT:
            return f"{name} = {v}"
    for name in ("output_tok_s", "decode_tok_s", "e2e_tok_s", "tpot_s", "accept_length"):
        v = getattr(done, name)
        if v is not None and (not math.isfinite(v) or v < 0):
            return f"{name} = {v}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    streams = _streams()
    outcomes: Counter[str] = Counter()
    broken: list[str] = []
    rows: list[RequestRecord] = []
    t0 = time.perf_counter()
    for case in range(args.cases):
        engine, api, payloads = rng.choice(streams)
        mode = rng.choice(("auto", "cumulative", "incremental"))
        parser = adapter(engine).stream_parser(api, mode)  # type: ignore[arg-type]
        done = Completion()
        try:
            for k, p in enumerate(_mutate(rng, payloads)):
                parser.feed(p, 0.001 * (k + 1))
            parser.finish(done, 0.001 * (len(payloads) + 1))
            fill_rates(done, parser.content_tokens)
        except StreamError as exc:
            done.error = str(exc)
        except Exception as exc:  # the invariant: only StreamError may leave a parser
            broken.append(f"case {case}: {type(exc).__name__}: {exc}")
            continue
        outcomes[(done.error or "good").split(":")[0][:40]] += 1
        problem = _check(done)
        if problem:
            broken.append(f"case {case}: {problem}")
        rows.append(RequestRecord(cell_id="fuzz", attempt=1, **done.measurements()))
    parse_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        store = ResultsStore(ResultsLayout(Path(tmp) / "r"))
        store.open("", "fuzz")
        try:
            store.write_cell_requests("fuzz", 1, rows)
            written = len(rows)
        except Exception as exc:
            broken.append(f"the store refused the rows: {type(exc).__name__}: {exc}")
            written = 0
        finally:
            store.close()
    print(f"{args.cases} cases from {len(streams)} real streams in {parse_s:.1f} s")
    for what, n in outcomes.most_common():
        print(f"  {what:>40}: {n}")
    print(f"  rows written: {written} of {len(rows)}")
    print(f"  invariants broken: {len(broken)}")
    for line in broken[:20]:
        print("   ", line)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
