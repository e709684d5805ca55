"""Client CPU per output token, 256 to 8192 tokens, for the three SGLang stream layouts.

A replay server in a process of its own (``tests/support/replay.py``) sends streams in the
byte layouts of SGLang's source: ``/generate`` in its default mode, where every chunk resends
the whole text and all output ids so far; ``/generate`` with ``--incremental-streaming-output``;
and the OpenAI chat route. The benchmark client reads them through its real transport and
parsers; the figure is this process's CPU time (``time.process_time``) per output token.
``parser`` is the stream parser alone, fed the same payloads with no transport, to tell the
two apart. The figures should be flat: the work per chunk must not grow with the output.

    python bench/client_cpu_bench.py [--per-chunk K] [--tokens N]

``--per-chunk 3`` sends three tokens a chunk, as a speculative server does.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specbench_tui.bench.client import BenchClient  # noqa: E402
from specbench_tui.engines.registry import adapter  # noqa: E402
from specbench_tui.results.records import Measurement  # noqa: E402
from tests.support.replay import KINDS, SIZES, events, openai_stream, sglang_stream  # noqa: E402


def start_server(tmp: Path, per_chunk: int) -> tuple[subprocess.Popen[bytes], str]:
    port_file = tmp / "replay.port"
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "support" / "replay.py"),
            str(port_file),
            str(per_chunk),
        ]
    )
    deadline = time.monotonic() + 120
    while not (port_file.exists() and port_file.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the replay server did not start")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port_file.read_text()}"


async def client_cpu(url: str, kind: str, n: int, total_tokens: int) -> tuple[float, int]:
    api = "openai" if kind == "openai" else "sglang"
    mode = kind if kind != "openai" else "auto"
    reps = max(2, total_tokens // n)
    async with BenchClient(f"{url}/{kind}/{n}", api, stream_mode=mode) as client:  # type: ignore[arg-type]
        done = await client.generate("warm up", max_tokens=n, timeout_s=120)
        assert done.error is None and done.output_tokens == n, (kind, n, done.error)
        c0 = time.process_time()
        tokens = 0
        for _ in range(reps):
            done = await client.generate("hello", max_tokens=n, timeout_s=120)
            assert done.error is None, done.error
            tokens += done.output_tokens or 0
        return (time.process_time() - c0) / tokens, len(done.text)


def parser_cpu(kind: str, n: int, per_chunk: int, total_tokens: int) -> float:
    body = openai_stream(n, per_chunk) if kind == "openai" else sglang_stream(n, kind, per_chunk)
    payloads = [ev.decode()[len("data: ") : -2] for ev in events(body)]
    api = "openai" if kind == "openai" else "sglang"
    mode = kind if kind != "openai" else "auto"
    reps = max(2, total_tokens // n)
    c0 = time.process_time()
    for _ in range(reps):
        p = adapter("sglang").stream_parser(api, mode)  # type: ignore[arg-type]
        for i, pl in enumerate(payloads):
            p.feed(pl, i * 0.001)
        p.finish(Measurement(), 1.0)
    return (time.process_time() - c0) / (reps * n)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-chunk", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=65536, help="output tokens per figure")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        await _run(args, Path(tmp))


async def _run(args: argparse.Namespace, tmp: Path) -> None:
    proc, url = start_server(tmp, args.per_chunk)
    try:
        print(f"client CPU per output token (us), {args.per_chunk} token(s) a chunk after the 1st")
        print(f"{'stream':<12}{'what':<8}" + "".join(f"{n:>9}" for n in SIZES) + "   8192/256")
        for kind in KINDS:
            row = [await client_cpu(url, kind, n, args.tokens) for n in SIZES]
            figs = [r[0] * 1e6 for r in row]
            print(
                f"{kind:<12}{'client':<8}"
                + "".join(f"{f:>9.1f}" for f in figs)
                + f"{figs[-1] / figs[0]:>10.2f}x"
            )
            figs = [parser_cpu(kind, n, args.per_chunk, args.tokens) * 1e6 for n in SIZES]
            print(
                f"{'':<12}{'parser':<8}"
                + "".join(f"{f:>9.1f}" for f in figs)
                + f"{figs[-1] / figs[0]:>10.2f}x"
            )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    asyncio.run(main())
