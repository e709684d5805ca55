"""The console as an operator's terminal sees it: time to the first frame, time to leave,
and bytes a second of terminal output on an idle campaign.

Runs ``specbench-tui PLAN --sim`` on a pseudo-terminal (the demo plan by default, a copy with
its results in a temporary directory) and measures:

- first frame: from the command's start to the first screen holding the plan pane's title
  (the whole console drawn, not only the terminal's alternate-screen switch);
- output rate: bytes a second the console writes while the campaign is paused with nothing
  running (``p``, then a wait until the running cell ends), over ``--idle`` seconds;
- detach: ``d`` leaves the console and the campaign goes on in its process;
- quit: after ``--attach DIR``, ``q`` then ``y`` (stop the campaign), to the console's exit.

Targets (issue 27): first frame within 2 s, quit within 3 s, under 10 KB/s idle.

    .venv/bin/python bench/console_terminal_bench.py [--plan plans/demo.toml] [--idle 10]
        [--refresh HZ] [--size 80x24]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXE = ROOT / ".venv" / "bin" / "specbench-tui"
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b[=>]")


class Terminal:
    """A command on a pseudo-terminal of a fixed size, its output read as it comes."""

    def __init__(self, argv: list[str], size: tuple[int, int], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        cols, rows = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, start_new_session=True
        )
        os.close(slave)
        self.out = bytearray()

    def read(self, seconds: float) -> int:
        """Read what comes within ``seconds``; the number of bytes read."""
        n = 0
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.master], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the command ended
                break
            if not chunk:
                break
            self.out += chunk
            n += len(chunk)
        return n

    def text(self) -> bytes:
        return ANSI.sub(b"", bytes(self.out))

    def wait_for(self, pattern: bytes, timeout: float) -> float:
        """Seconds from the start to ``pattern`` in the text shown, inf if it never comes."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pattern in self.text():
                return time.monotonic() - self.t0
            self.read(0.02)
        return float("inf")

    def press(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait_exit(self, timeout: float) -> float:
        """Seconds until the command exits (reading its output meanwhile), inf if not."""
        t = time.monotonic()
        while time.monotonic() - t < timeout:
            if self.proc.poll() is not None:
                return time.monotonic() - t
            self.read(0.02)
        return float("inf")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        os.close(self.master)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", type=Path, default=ROOT / "plans" / "demo.toml")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of idle output measured")
    ap.add_argument("--refresh", type=float, default=None, help="pass --refresh HZ")
    ap.add_argument("--size", default="80x24")
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    extra = ["--refresh", f"{args.refresh:g}"] if args.refresh else []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plan = work / args.plan.name
        shutil.copy(args.plan, plan)
        results = work / "results"
        term = Terminal(
            [str(EXE), str(plan), "--sim", "--results", str(results), *extra], (w, h), work
        )
        try:
            first = term.wait_for(b"Plan", 60)
            print(f"first frame: {first:.2f} s (target 2 s) {'OK' if first <= 2 else 'MISSED'}")
            term.wait_for(b"running", 60)  # a cell runs
            term.press("p")
            term.read(1.0)
            # paused: wait until nothing runs (the running cell ends), then measure
            for _ in range(300):
                term.read(0.2)
                if b"PAUSED" in term.text()[-20000:]:
                    break
            term.read(3.0)
            n = term.read(args.idle)
            rate = n / args.idle
            print(
                f"idle output: {rate / 1024:.2f} KB/s over {args.idle:g} s at {w}x{h} "
                f"(target < 10 KB/s) {'OK' if rate < 10 * 1024 else 'MISSED'}"
            )
            term.press("d")
            gone = term.wait_exit(10)
            print(f"detach: console left in {gone:.2f} s")
        finally:
            term.close()
        root = next(p for p in results.iterdir() if p.is_dir())
        alive = (root / "control.sock").exists()
        print(f"after detach the campaign's socket is {'up' if alive else 'GONE'}")
        again = Terminal([str(EXE), "--attach", str(root), *extra], (w, h), work)
        try:
            back = again.wait_for(b"Plan", 60)
            seen = again.wait_for(b"PAUSED", 30)
            print(f"--attach: first frame {back:.2f} s, the paused run shown at {seen:.2f} s")
            again.press("q")  # an attached console leaves without asking
            print(f"--attach then q: console left in {again.wait_exit(30):.2f} s")
        finally:
            again.close()
        subprocess.run([str(EXE), "--attach", str(root), "--send", "abort"], capture_output=True)
        # a second console-started run, quit mid-cell: q, y (stop the campaign)
        results2 = work / "results2"
        term = Terminal(
            [str(EXE), str(plan), "--sim", "--results", str(results2), *extra], (w, h), work
        )
        try:
            term.wait_for(b"Plan", 60)
            term.wait_for(b"running", 60)
            term.read(1.0)
            term.press("q")
            term.read(0.5)
            term.press("y")
            left = term.wait_exit(60)
            print(
                f"quit (stop the campaign): console left {left:.2f} s after y "
                f"(target 3 s) {'OK' if left <= 3 else 'MISSED'}"
            )
        finally:
            term.close()
        root2 = next(p for p in results2.iterdir() if p.is_dir())
        t = time.monotonic()
        while (root2 / "control.sock").exists() and time.monotonic() - t < 120:
            time.sleep(0.1)
        print(
            f"its engine process ended the campaign {time.monotonic() - t:.1f} s after the "
            f"console left; report: {[p.name for p in root2.glob('report.*')]}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
