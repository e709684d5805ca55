"""Each engine and each backend is named in its own package alone: a grep of the product's
code for an engine outside ``engines/``, or for a backend (its name or its commands) outside
``hosts/``, finds nothing. Everything else asks the registries (``engines/registry.py``,
``hosts/backends.py``), so a new engine or backend is its module and a registry line.

It reads the product's source, docstrings and comments included (a comment that names an
engine is where the next "is this that engine?" check gets written). Shipped prompt sets are
data, not code, and are not read.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "specbench_tui"
SOURCES = ("*.py", "*.j2", "*.tcss")
ENGINE_WORDS = re.compile(r"sglang|vllm|trtllm|tensorrt", re.IGNORECASE)
BACKEND_WORDS = re.compile(
    r"slurm|systemd|systemctl|journalctl|ssh|sbatch|squeue|scancel|sacct|scontrol",
    re.IGNORECASE,
)


def _lines(words: re.Pattern[str], inside: bool, home: str) -> list[str]:
    """Lines of the product's source that match ``words``, inside ``home`` or outside it."""
    out = []
    for pattern in SOURCES:
        for path in sorted(ROOT.rglob(pattern)):
            rel = path.relative_to(ROOT)
            if (rel.parts[0] == home) != inside:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if words.search(line):
                    out.append(f"{rel}:{n}: {line.strip()}")
    return out


def test_no_engine_is_named_outside_engines() -> None:
    assert _lines(ENGINE_WORDS, False, "engines") == []


def test_no_backend_is_named_outside_hosts() -> None:
    assert _lines(BACKEND_WORDS, False, "hosts") == []


def test_the_search_finds_each_name_at_home() -> None:
    """The search itself works: each package names what it holds."""
    engines = " ".join(_lines(ENGINE_WORDS, True, "engines")).lower()
    backends = " ".join(_lines(BACKEND_WORDS, True, "hosts")).lower()
    assert all(w in engines for w in ("sglang", "vllm", "trtllm"))
    assert all(w in backends for w in ("slurm", "systemd", "ssh", "sbatch", "squeue"))
