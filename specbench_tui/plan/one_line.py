"""The one-line form, ``specbench-tui URL [URL ...]``: the plan a campaign against running
servers would have, written out as a plan file so the run can be repeated and edited.

The first address is the baseline; each address is a config named by its host and port. The
host table is this machine (``local``), whose GPUs, if any, are read as the servers' when
they run here. The flags set the usual knobs: prompt sets, samples per set, output lengths,
repeats, temperature, the servers' TP size (a label the servers confirm where they report
it) and, with ``--levels``, a concurrency sweep beside the single-stream cells.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from specbench_tui.errors import InputError

_URL = re.compile(r"^https?://")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class OneLine:
    """The knobs of the one-line form, as its flags give them."""

    urls: tuple[str, ...]
    prompts: tuple[str, ...] = ("chat",)
    samples: int = 8
    max_tokens: tuple[int, ...] = (256,)
    repeats: int = 3
    temperature: float = 0.0
    tp: int = 1
    levels: tuple[int, ...] = ()
    results: str = "results"

    @property
    def name(self) -> str:
        """The campaign's name: the same addresses and knobs resume the same results; other
        knobs are another campaign."""
        knobs = dataclasses.replace(self, results="")
        digest = hashlib.sha256(repr(knobs).encode()).hexdigest()[:8]
        return f"servers-{digest}"


def is_url(word: str) -> bool:
    return bool(_URL.match(word))


def config_name(url: str) -> str:
    """A config's name from its address: host and port, as a plan name allows."""
    parts = urlsplit(url)
    host = (parts.hostname or "server").strip("[]")
    name = _UNSAFE.sub("-", f"{host}-{parts.port or parts.scheme}").strip("-.")
    return name[:64] or "server"


def plan_text(form: OneLine) -> str:
    """The plan file of a one-line run (TOML; every string through JSON's quoting, which TOML
    reads the same)."""
    if not form.urls:
        raise InputError("give at least one server address (http://HOST:PORT)")
    names = [config_name(u) for u in form.urls]
    if len(set(names)) != len(names):
        raise InputError(f"two addresses give one config name: {', '.join(form.urls)}")
    q = json.dumps
    lines = [
        "# Written by the one-line form: specbench-tui " + " ".join(form.urls),
        "# Edit it and run it again: specbench-tui THIS_FILE (the same results resume).",
        "",
        "[campaign]",
        f"name = {q(form.name)}",
        f"results = {q(form.results)}",
        f"baseline = {q(names[0])}",
        "",
        "[hosts.here]",
        "local = true",
        f"gpus = {form.tp}",
        "",
    ]
    for name, url in zip(names, form.urls, strict=True):
        lines += [f"[configs.{q(name)}]", f"url = {q(url)}", f"label = {q(name)}", ""]
    lines += [
        "[matrix]",
        f"configs = {q(names)}",
        f"tp = [{form.tp}]",
        "",
        "[workloads.single]",
        'kind = "single"',
        f"prompts = {q(list(form.prompts))}",
        f"samples = {form.samples}",
        f"max_tokens = {q(list(form.max_tokens))}",
        f"repeats = {form.repeats}",
        f"temperature = {form.temperature!r}",
        "",
    ]
    if form.levels:
        lines += [
            "[workloads.concurrency]",
            'kind = "concurrency"',
            f"levels = {q(list(form.levels))}",
            f"requests = {max(4 * max(form.levels), 16)}",
            f"prompts = {q(list(form.prompts))}",
            f"max_tokens = {form.max_tokens[0]}",
            f"temperature = {form.temperature!r}",
            "",
        ]
    return "\n".join(lines) + "\n"
