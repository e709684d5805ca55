"""Each engine and each backend is named in its own package alone: a grep of the product's
code for an engine outside ``engines/``, or for a backend (its name or its commands) outside
``hosts/``, finds nothing. Everything else asks the registries (``engines/registry.py``,
``hosts/backends/__init__.py``), so a new engine or backend is its module and a registry line.

It reads the product's source, docstrings and comments included (a comment that names an
engine is where the next "is this that engine?" check gets written). Shipped prompt sets are
data, not code, and are not read.
"""

from __future__ import annotations

import re
from pathlib import Path

from specbench_tui.engines.registry import adapters
from specbench_tui.hosts.backends import BACKENDS

ROOT = Path(__file__).resolve().parents[1] / "specbench_tui"
SOURCES = ("*.py", "*.j2", "*.tcss")


def _engine_words() -> re.Pattern[str]:
    """Every registered engine's names: its registry name, its label's words, its programs'
    first words and its models' owner (a new engine's are guarded by its registry line)."""
    words: set[str] = set()
    for a in adapters():
        words |= {a.name, a.owned_by, *re.split(r"[^A-Za-z0-9]+", a.label)}
        words |= {re.split(r"[.\-_]", p)[0] for p in a.programs}
    words = {w.lower() for w in words if len(w) >= 4 and w.upper() != "LLM"}
    return re.compile("|".join(sorted(map(re.escape, words))), re.IGNORECASE)


def _backend_words() -> re.Pattern[str]:
    """Every registered backend's name and the programs it runs, but for the backends of this
    machine, whose names are everyday words ("local", "sim")."""
    words: set[str] = set()
    for b in BACKENDS.values():
        words |= set(b.programs) | ({b.name} if not b.on_this_machine else set())
    return re.compile("|".join(sorted(map(re.escape, words))), re.IGNORECASE)


ENGINE_WORDS = _engine_words()
BACKEND_WORDS = _backend_words()


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


def test_the_engine_words_come_from_the_registry() -> None:
    """The guard's words are the registry's: each engine's name and label, a planted name of
    a registered engine is caught in a file outside ``engines/``."""
    for w in ("sglang", "vllm", "trtllm", "tensorrt"):
        assert ENGINE_WORDS.search(f"a comment naming {w.upper()}"), w
    assert not ENGINE_WORDS.search("a server that an operator started")


def test_the_backend_words_come_from_the_registry() -> None:
    """The guard's words are the registry's: a planted backend or program name is caught."""
    for w in ("slurm", "ssh", "systemd", "sbatch", "journalctl"):
        assert BACKEND_WORDS.search(f"# runs under {w.upper()} there"), w
    assert not BACKEND_WORDS.search("a server on this machine")
