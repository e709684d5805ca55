"""``specbench-tui prompts get spec-bench|mt-bench``: a standard prompt set into the cache.

The file comes from a pinned commit's raw URL and must match its pinned sha256, so every
machine that runs a campaign on "Spec-Bench" runs the same 480 questions; nothing is saved
unless it matches. Without internet the command says, in one line, how to bring the file over
by hand. ``prompts list`` shows each standard set: where it comes from, its licence, and
whether this machine has it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from specbench_tui.errors import EXIT_FAILED, EXIT_INPUT, EXIT_OK, DataError
from specbench_tui.plan.prompt_formats import SOURCES, Source, cache_dir, default_path

MAX_BYTES = 64 * 1024 * 1024  # far above any question file: a wrong URL ends here
TIMEOUT_S = 60.0


class FetchError(DataError):
    """The download did not give the pinned file; the message is the whole story."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch(source: Source, dest: Path) -> Path:
    """Download ``source`` to ``dest`` (atomically, only when its sha256 matches)."""
    assert source.url is not None and source.sha256 is not None
    try:
        with urllib.request.urlopen(source.url, timeout=TIMEOUT_S) as resp:
            data = resp.read(MAX_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise FetchError(
            f"cannot download {source.url} ({reason}); without internet: download it on a "
            f"machine that has it (curl -fLo {source.file} '{source.url}'), check its sha256 "
            f"is {source.sha256}, and copy it to {dest}"
        ) from exc
    if len(data) > MAX_BYTES:
        raise FetchError(f"{source.url} is larger than {MAX_BYTES} bytes; not saved")
    got = _sha256(data)
    if got != source.sha256:
        raise FetchError(
            f"{source.url} has sha256 {got}, not the pinned {source.sha256}; not saved"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def _have(source: Source, path: Path | None) -> str:
    if path is None or not path.is_file():
        return "not here"
    if source.sha256 is None:
        return f"at {path}"
    ok = _sha256(path.read_bytes()) == source.sha256
    return f"at {path}" + ("" if ok else " (its sha256 is not the pinned one)")


def _get(name: str, force: bool) -> int:
    source = SOURCES[name]
    if source.url is None:
        print(
            f"specbench-tui: {name} is not downloaded by this tool: {source.how}", file=sys.stderr
        )
        return EXIT_INPUT
    assert source.file is not None
    dest = cache_dir() / source.file
    if not force and dest.is_file() and _sha256(dest.read_bytes()) == source.sha256:
        print(f"{name}: already at {dest} (sha256 {source.sha256[:12]})")  # type: ignore[index]
        return EXIT_OK
    try:
        fetch(source, dest)
    except FetchError as exc:
        print(f"specbench-tui: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"{name}: {source.count} questions, sha256 {source.sha256[:12]} checked "  # type: ignore[index]
        f"-> {dest} ({source.licence}); a plan names it with "
        f'[prompt_sets.NAME] format = "{name}"'
    )
    return EXIT_OK


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="specbench-tui prompts", description="Standard prompt sets: fetch and list."
    )
    sub = p.add_subparsers(dest="what", required=True)
    get = sub.add_parser("get", help="download a standard set into the cache")
    get.add_argument("name", choices=[n for n, s in SOURCES.items() if s.url is not None])
    get.add_argument("--force", action="store_true", help="download again even if cached")
    sub.add_parser("list", help="the standard sets: source, licence, whether they are here")
    args = p.parse_args(argv)
    if args.what == "get":
        return _get(args.name, args.force)
    for name, source in SOURCES.items():
        if name == "jsonl":
            continue
        print(f"{name}: {source.title}; licence {source.licence}")
        print(f"  {_have(source, default_path(name))}")  # type: ignore[arg-type]
        print(f"  get it: {'specbench-tui prompts get ' + name if source.url else source.how}")
    return EXIT_OK
