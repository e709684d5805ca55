"""What the client benchmarks share: AIPerf, AIPerf's mock server, CPU accounting of process
trees, and loopback packet capture.

None of this is the project's own server or client: the server is AIPerf's mock server (an
OpenAI-compatible FastAPI/uvicorn server with a configurable TTFT and inter-token latency; it
is not on PyPI, install it from AIPerf's repository, ``integration-tests`` at commit
``db4f6397``), the reference client is AIPerf itself, and ground truth for timings comes from
the kernel: ``tcpdump`` on the loopback interface stamps each packet when the sender hands it
to the interface, independent of both client and server code. The README's "Client
benchmarks" section says how to install each piece; point the scripts at them with
``--aiperf``, ``--mock-python`` and ``--tokenizer`` (or ``SPECBENCH_AIPERF``,
``SPECBENCH_MOCK_PYTHON``, ``SPECBENCH_TOKENIZER``).

The mock server answers a chat request by streaming the prompt's own tokens back, one token per
SSE event, up to ``max_completion_tokens``; it looks the tokenizer up by the request's model
name, so it runs in a directory holding the tokenizer under the name ``default`` (the model
name this project's client sends when the plan names none).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

MODEL = "default"
# An SSE event that carries output: non-empty delta content (vLLM's first chunk has only the
# role and "content":"", which no client counts as a token).
_CONTENT = re.compile(rb'"content": ?"(?!")')
CLK_TCK = os.sysconf("SC_CLK_TCK")


def add_tool_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--aiperf", default=os.environ.get("SPECBENCH_AIPERF", "aiperf"))
    ap.add_argument(
        "--mock-python",
        default=os.environ.get("SPECBENCH_MOCK_PYTHON"),
        help="python of a venv where AIPerf's mock_server package is installed",
    )
    ap.add_argument(
        "--tokenizer",
        default=os.environ.get("SPECBENCH_TOKENIZER"),
        help="a Hugging Face tokenizer directory (bench/make_tokenizer.py makes one)",
    )


def check_tools(args: argparse.Namespace) -> None:
    missing = []
    if not args.mock_python or not Path(args.mock_python).exists():
        missing.append("--mock-python (AIPerf's mock server)")
    if not args.tokenizer or not Path(args.tokenizer, "tokenizer.json").exists():
        missing.append("--tokenizer")
    if shutil.which(args.aiperf) is None:
        missing.append("--aiperf")
    if missing:
        raise SystemExit("missing: " + ", ".join(missing) + "; see the README, Client benchmarks")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


# --- the mock server ---------------------------------------------------------------------


def mock_command(python: str, port: int | str, ttft_ms: float, itl_ms: float) -> list[str]:
    return [
        python,
        "-m",
        "mock_server.main",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ttft",
        str(ttft_ms),
        "--itl",
        str(itl_ms),
        "--tokenizer-models",
        MODEL,
        "--log-level",
        "WARNING",
    ]


def server_dir(tokenizer: str, into: Path) -> Path:
    """A working directory where the mock server finds the tokenizer as model ``default``."""
    into.mkdir(parents=True, exist_ok=True)
    target = into / MODEL
    if not target.exists():
        shutil.copytree(tokenizer, target)
    return into


@contextlib.contextmanager
def mock_server(
    python: str, tokenizer: str, ttft_ms: float, itl_ms: float, workdir: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    cwd = server_dir(tokenizer, workdir)
    log = (workdir / f"mock-{port}.log").open("wb")
    proc = subprocess.Popen(
        mock_command(python, port, ttft_ms, itl_ms), cwd=cwd, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", proc)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the mock server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer in {timeout_s:g} s")


def token_prompts(tokenizer: str, n_tokens: int, count: int, mock_python: str) -> list[str]:
    """``count`` distinct prompts of exactly ``n_tokens`` tokens under the tokenizer (so the
    mock server streams exactly that many tokens back), each starting with its number."""
    script = r"""
import json, sys
from transformers import PreTrainedTokenizerFast
tok = PreTrainedTokenizerFast.from_pretrained(sys.argv[1])
n, count = int(sys.argv[2]), int(sys.argv[3])
words = ("the server streams every token of this prompt back to the client that sent it "
         "while the benchmark keeps time on both ends of the loopback wire ").split()
out = []
for i in range(count):
    text = f"req{i} " + " ".join(words[(i + j) % len(words)] for j in range(n * 2))
    ids = tok.encode(text, add_special_tokens=False)[:n]
    s = tok.decode(ids)
    while len(tok.encode(s, add_special_tokens=False)) > n:
        ids = ids[:-1]
        s = tok.decode(ids)
    out.append(s)
print(json.dumps(out))
"""
    res = subprocess.run(
        [mock_python, "-c", script, tokenizer, str(n_tokens), str(count)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


# --- CPU of process trees ----------------------------------------------------------------


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of all its threads) from /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2 :].split()
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / CLK_TCK


def tree(root: int) -> list[int]:
    """``root`` and all its descendants."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                parents[int(entry)] = st[0]
    out, frontier = [root], [root]
    while frontier:
        kids = [p for p, pp in parents.items() if pp in frontier]
        out += kids
        frontier = kids
    return out


@dataclass
class CpuSampler:
    """Samples the CPU seconds of a set of processes (chosen by ``pids()``) every
    ``interval_s``; :meth:`between` gives the CPU spent in a wall-clock window. A process that
    exits takes its last sample with it, so windows should end before the process does."""

    pids: Callable[[], list[int]]
    interval_s: float = 0.05
    samples: list[tuple[float, float]] = field(default_factory=list)
    _seen: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _take(self) -> None:
        for pid in self.pids():
            st = _stat(pid)
            if st is not None:
                self._seen[pid] = st[1]
        self.samples.append((time.time(), sum(self._seen.values())))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def __enter__(self) -> CpuSampler:
        self._take()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def at(self, t: float) -> float:
        s = self.samples
        if t <= s[0][0]:
            return s[0][1]
        for (t0, c0), (t1, c1) in itertools.pairwise(s):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return s[-1][1]

    def between(self, start: float, end: float) -> float:
        return self.at(end) - self.at(start)


# --- AIPerf ------------------------------------------------------------------------------


@dataclass
class AiperfRun:
    records: list[dict]  # profile_export.jsonl, profiling phase only
    inputs: dict[str, str]  # conversation id -> prompt text
    window: tuple[float, float]  # first request start to last request end, epoch s
    cpu_s: float  # CPU of AIPerf's process tree inside the window
    tokens: int  # content chunks received (one token each from the mock server)
    reported_tok_s: float | None  # AIPerf's own "Output Token Throughput"

    @property
    def tok_s(self) -> float:
        return self.tokens / (self.window[1] - self.window[0])


def run_aiperf(
    aiperf: str,
    url: str,
    tokenizer: str,
    *,
    concurrency: int,
    requests: int,
    isl: int,
    osl: int,
    artifacts: Path,
    warmup: int = 0,
) -> AiperfRun:
    cmd = [
        aiperf,
        "profile",
        "--model",
        MODEL,
        "--tokenizer",
        tokenizer,
        "--url",
        url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        str(concurrency),
        "--request-count",
        str(requests),
        "--isl",
        str(isl),
        "--isl-stddev",
        "0",
        "--osl",
        str(osl),
        "--osl-stddev",
        "0",
        "--ui-type",
        "none",
        "--artifact-dir",
        str(artifacts),
    ]
    if warmup:
        cmd += ["--warmup-request-count", str(warmup)]
    with (artifacts.parent / f"{artifacts.name}.log").open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        with CpuSampler(lambda: tree(proc.pid)) as cpu:
            code = proc.wait()
    if code != 0:
        raise SystemExit(f"aiperf exited with {code}; see {artifacts}.log")
    records = []
    for line in (artifacts / "profile_export.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["metadata"].get("benchmark_phase", "profiling") == "profiling":
            records.append(rec)
    start = min(r["metadata"]["request_start_ns"] for r in records) / 1e9
    end = max(r["metadata"]["request_end_ns"] for r in records) / 1e9
    inputs = {
        d["session_id"]: d["payloads"][0]["messages"][0]["content"]
        for d in json.loads((artifacts / "inputs.json").read_text())["data"]
    }
    tokens = sum(
        len(r["metrics"].get("inter_chunk_latency", {}).get("value", [])) + 1 for r in records
    )
    reported = None
    summary = artifacts / "profile_export_aiperf.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        reported = (data.get("output_token_throughput") or {}).get("avg")
    return AiperfRun(records, inputs, (start, end), cpu.between(start, end), tokens, reported)


# --- loopback packet capture -------------------------------------------------------------


@contextlib.contextmanager
def capture(port: int, path: Path) -> Iterator[None]:
    """tcpdump on lo for one TCP port, nanosecond timestamps, whole packets."""
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        raise SystemExit("tcpdump is needed (apt-get install tcpdump) and root, or CAP_NET_RAW")
    err = path.with_suffix(".err")
    with err.open("wb") as e:
        proc = subprocess.Popen(
            [
                *(tcpdump, "-i", "lo", "-nn", "-s", "0", "-U", "--time-stamp-precision=nano"),
                *("-w", str(path), f"tcp port {port}"),
            ],
            stderr=e,
        )
        deadline = time.monotonic() + 10
        while b"listening" not in err.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("tcpdump did not start: " + err.read_text())
            time.sleep(0.05)
        try:
            yield
        finally:
            time.sleep(0.3)
            proc.send_signal(signal.SIGINT)
            proc.wait(10)


@dataclass
class Segment:
    t: float  # epoch seconds, kernel timestamp
    src_port: int
    dst_port: int
    payload: bytes


def read_pcap(path: Path) -> list[Segment]:
    """TCP segments with payload from a pcap file (Ethernet or Linux cooked capture, IPv4)."""
    data = path.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    if magic == 0xA1B23C4D:
        scale = 1e-9
    elif magic == 0xA1B2C3D4:
        scale = 1e-6
    else:
        raise SystemExit(f"{path}: not a little-endian pcap file")
    link = struct.unpack("<I", data[20:24])[0]
    l2 = {1: 14, 113: 16}.get(link)
    if l2 is None:
        raise SystemExit(f"{path}: link type {link} not handled")
    out: list[Segment] = []
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack("<IIII", data[off : off + 16])
        pkt = data[off + 16 : off + 16 + incl]
        off += 16 + incl
        ip = pkt[l2:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:total]
        sport, dport = struct.unpack(">HH", tcp[:4])
        doff = (tcp[12] >> 4) * 4
        payload = tcp[doff:]
        if payload:
            out.append(Segment(sec + frac * scale, sport, dport, payload))
    return out


@dataclass
class WireRequest:
    """One request as the wire saw it: when its last byte went to the server, and when each
    response segment carrying SSE content came back (one time per event)."""

    request: bytes
    sent: float
    events: list[float] = field(default_factory=list)

    @property
    def ttft(self) -> float | None:
        return self.events[0] - self.sent if self.events else None

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.events)]


def wire_requests(segments: list[Segment], server_port: int) -> list[WireRequest]:
    """Per connection, requests in order: client segments up to the first response byte make
    one request; response segments are counted by the SSE content events they carry."""
    by_conn: dict[int, list[Segment]] = {}
    for s in segments:
        client = s.src_port if s.dst_port == server_port else s.dst_port
        by_conn.setdefault(client, []).append(s)
    out: list[WireRequest] = []
    for segs in by_conn.values():
        current: WireRequest | None = None
        answered = True  # a client segment after a server one starts the next request
        for s in segs:
            if s.dst_port == server_port:
                if answered:
                    current = WireRequest(b"", s.t)
                    out.append(current)
                    answered = False
                assert current is not None
                current.request += s.payload
                current.sent = s.t
            elif current is not None:
                answered = True
                current.events += [s.t] * len(_CONTENT.findall(s.payload))
    return out
