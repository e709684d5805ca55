"""What the rest of the program may ask of a serving engine: one :class:`EngineAdapter` per
engine (``engines/<engine>.py``), found by its plan name through ``engines/registry.py``.

Nothing outside ``engines/`` names an engine. Plan expansion asks an adapter for its launch
template and what a command asks for; a service for its ready line and health endpoints; the
client for the request body and the stream parser (the prompt is the model's own template,
rendered by the client, bench/prompting.py); the cell runner for the
counters and the acceptance definition; the post-ready check for what runs and the version;
the report for why a figure is missing. Adding an engine is one module and one registry line.

The defaults here are those of an OpenAI-compatible server (``/v1/chat/completions``,
``/v1/models``, ``/health``, ``/version``); an engine overrides what differs.
"""

from __future__ import annotations

import contextlib
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal, Protocol

import httpx

from specbench_tui.engines.counters import Counters
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.engines.log_values import LogCounts
from specbench_tui.engines.streams import OpenAIStream, StreamMode, StreamParser
from specbench_tui.errors import InputError
from specbench_tui.results.cells import ServiceGroup

Message = dict[str, str]

#: The OpenAI chat API, which every engine here serves.
OPENAI_API = "openai"
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"
METRICS_PATH = "/metrics"


#: A Python exception's last line, as a traceback ends: ``AssertionError: message``.
_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception): \S.*$")


@dataclass(frozen=True)
class Speculation:
    """What a server command asks for: speculative decoding on or off, and which algorithm."""

    on: bool
    algorithm: str | None = None  # as the engine names it: "EAGLE", "DDTREE", "ngram", ...


@dataclass(frozen=True)
class ForcedAccept:
    """How to make an engine accept a set number of tokens per step whatever the drafter
    proposes (its synthetic or simulated acceptance): the server command to run instead, and
    environment to add. Used to measure the speed a given accept length buys."""

    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LaunchSpeculation:
    """Speculation as one engine's launch flags and environment state it, in the terms of a
    server that runs it (the embedded simulator, ``sim/``): ``algorithm`` is one the caller
    can run (its ``algorithms``), ``named_algorithm`` the engine's own name where it differs
    (what the server reports back). ``num_steps`` a chain's depth, ``num_draft_tokens`` a
    step's drafted tokens (the verified root included), ``forced_accept`` the forced accept
    length. A field left None is not stated."""

    algorithm: str | None = None
    named_algorithm: str | None = None
    num_draft_tokens: int | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    ddtree_budget: int | None = None
    draft_model_path: str | None = None
    forced_accept: float | None = None


class LaunchArgsError(InputError, ValueError):
    """A launch flag or environment value that an engine would refuse, worded as its argument
    parser would (a simulated server exits 2 with it). A ValueError too, as a plan value that
    does not parse is."""


def int_arg(flag: str, value: str | None) -> int:
    """``value`` of ``flag`` as an integer, or a :class:`LaunchArgsError` naming the flag."""
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise LaunchArgsError(f"{flag} needs an integer, got {value!r}") from None


class ServerLogFormat(Protocol):
    """How an engine's server words the log lines a simulated server prints in its stead
    (the campaign reads them with the engine's own parser, so the wording matters)."""

    #: A frame of the traceback the engine's scheduler prints when it fails at start-up.
    scheduler_frame: str

    def prefix(self, stamp: str, rank: int | None) -> str:
        """The prefix of a line a scheduler rank prints (``rank`` None: no rank tag)."""
        ...

    def prefill_line(
        self, new_seq: int, new_token: int, cached: int, usage: float, running: int, queued: int
    ) -> str: ...

    def decode_line(
        self,
        running: int,
        tokens: int,
        usage: float,
        accept_len: float | None,
        accept_rate: float | None,
        throughput: float,
        queued: int,
    ) -> str: ...

    def tree_line(
        self, budget: int, nodes: int, accept_len: float, draft_ms: float, verify_ms: float
    ) -> str: ...


@dataclass(frozen=True)
class RequestSpec:
    """What one request carries besides its messages. ``prompt``: the conversation as the
    client rendered it from the model's chat template, for the routes that take text (None:
    the messages go to the chat route and the server renders them, with
    ``chat_template_kwargs``). Sampling values left None are the server's defaults.
    ``cache_salt``: a salt of its own (a cold prefix cache on engines that take one), None to
    share the cache."""

    max_tokens: int
    prompt: str | None = None
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    chat_template_kwargs: Mapping[str, Any] | None = None
    model: str | None = None
    cache_salt: str | None = None

    def sampling(self, seed_key: str = "seed") -> dict[str, Any]:
        """The sampling parameters that are set, the seed under the name the API takes."""
        out: dict[str, Any] = {"temperature": self.temperature}
        for key, value in (("top_p", self.top_p), ("top_k", self.top_k), (seed_key, self.seed)):
            if value is not None:
                out[key] = value
        return out


def check_accept_length(accept_length: float) -> None:
    """An accept length counts the bonus token: at least 1."""
    if not (math.isfinite(accept_length) and accept_length >= 1.0):
        raise ValueError(f"an accept length is at least 1 (the bonus token), not {accept_length:g}")


def stamp_time(
    match: re.Match[str] | None, year: int | None = None
) -> tuple[datetime, float] | None:
    """A log stamp's time and resolution from a match of ``(year)?, month, day, hour,
    minute, second`` groups and a last group of the fraction of a second (``.123``, or None);
    ``year`` where the stamp has none. None for no match or an impossible date."""
    if match is None:
        return None
    groups = match.groups()
    frac = groups[-1]
    parts = [int(g) for g in groups[:-1]]
    if year is not None:
        parts.insert(0, year)
    try:
        when = datetime(*parts)  # type: ignore[arg-type]
    except ValueError:
        return None
    if frac:
        return when.replace(microsecond=int(float(frac) * 1e6)), 10.0 ** -(len(frac) - 1)
    return when, 1.0


def flag_value(command: Sequence[str], *names: str) -> str | None:
    """The value of the last ``--flag VALUE`` or ``--flag=VALUE`` among ``names``; a flag given
    twice takes its last value, as argparse does."""
    value: str | None = None
    args = list(command)
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1 :]
    return value


def has_flag(command: Sequence[str], *names: str) -> bool:
    return any(a in names or any(a.startswith(n + "=") for n in names) for a in command)


async def get_json(client: httpx.AsyncClient, url: str) -> Any:
    """The JSON of a 200 answer; None for any other answer or a body that is not JSON."""
    resp = await client.get(url)
    if resp.status_code != 200:
        return None
    try:
        return resp.json()
    except ValueError:
        return None


async def get_text(client: httpx.AsyncClient, url: str) -> str | None:
    resp = await client.get(url)
    return resp.text if resp.status_code == 200 else None


class EngineAdapter(ABC):
    """One engine's launch defaults, wire formats and definitions.

    ``apis`` are the client APIs the engine serves (the plan's ``api``), the first its
    default; ``ready_line`` is the start-up log line after which health checks come at once;
    ``cold_cache`` is how a measured request gets a cold prefix cache: ``"flush"`` (POST
    ``/flush_cache`` before it) or ``"salt"`` (a cache salt of its own in the request).
    """

    name: ClassVar[str]
    label: ClassVar[str]
    default_launch: ClassVar[tuple[str, ...]]
    apis: ClassVar[tuple[str, ...]] = (OPENAI_API,)
    ready_line: ClassVar[str]
    cold_cache: ClassVar[Literal["flush", "salt"]] = "salt"
    # What the engine does with a prompt the client rendered: "adds_bos" (its text routes
    # tokenize with special tokens, so the model's BOS is added once more: the client takes a
    # leading BOS off the text) or "verbatim" (the request asks for the text as it is).
    text_prompt: ClassVar[Literal["adds_bos", "verbatim"]] = "adds_bos"
    metrics_path: ClassVar[str] = METRICS_PATH
    #: The counter whose deltas give a cell's verify steps, as a reason names it when missing.
    verify_counter: ClassVar[str] = "verify-step counter"
    #: How to run the engine bit-exact across batch sizes, where it can be (a flag or an
    #: environment setting, as the operator writes it); None where it cannot.
    deterministic_mode: ClassVar[str | None] = None
    version_path: ClassVar[str] = "/version"
    # The Python packages that make up a server of this engine (its own and what its numbers
    # depend on), whose versions and commits the run's manifest records.
    packages: ClassVar[tuple[str, ...]] = ("torch", "triton", "transformers")
    #: The launch flags (as the engine spells them) that state speculation, which
    #: :meth:`launch_speculation` reads.
    speculation_flags: ClassVar[tuple[str, ...]] = ()
    #: The log lines a simulated server of this engine prints; None where none is simulated.
    log_format: ClassVar[ServerLogFormat | None] = None
    #: What the engine's ``GET /v1/models`` says in each model's ``owned_by`` (its own
    #: ``ModelCard`` default): how a running server says which engine it is.
    owned_by: ClassVar[str]
    #: The words of a launch command that start this engine: a module (``-m NAME``) or a
    #: program's file name. How a plan that names no engine gets its launched server's.
    programs: ClassVar[tuple[str, ...]] = ()

    # --- how the report words the engine's specifics ---------------------------------------
    #: Where a chunk's token count comes from (the report's ITL definition).
    chunk_tokens_source: ClassVar[str] = "the server's continuous usage"
    #: The periodic stats lines the report pools, as named in its prose; None for none.
    stats_lines_name: ClassVar[str | None] = None
    #: How often those lines come ("every 10 s"); None where not known.
    stats_interval: ClassVar[str | None] = None
    #: The knob :meth:`forced_accept` turns, in words; None where there is none.
    forced_accept_knob: ClassVar[str | None] = None

    # --- the plan ---------------------------------------------------------------------------

    @property
    def default_api(self) -> str:
        return self.apis[0]

    def api_label(self, api: str, *, server_renders: bool = False) -> str:
        """How the dry run names the API a group's requests use (the completions route
        takes the prompt this tool renders; the chat route, where the server renders it)."""
        if api != OPENAI_API:
            return f"{self.label} {api} API"
        if server_renders:
            return "OpenAI chat API (the server renders the template)"
        return "OpenAI completions API"

    def starts(self, command: Sequence[str]) -> bool:
        """Whether ``command`` starts this engine: a word that is one of its modules, or a
        program word (not a flag, nor a flag's value) whose file name is one of its programs."""
        for i, word in enumerate(command):
            if word in self.programs and "." in word:
                return True
            prev = command[i - 1] if i else ""
            if word.startswith("-") or (prev.startswith("-") and prev != "-m"):
                continue
            if word.rsplit("/", 1)[-1] in self.programs:
                return True
        return False

    def check_command(self, command: Sequence[str]) -> str | None:
        """What is wrong with a server command before anything runs (a plan error), else
        None."""
        return None

    @abstractmethod
    def requested_speculation(self, command: Sequence[str]) -> Speculation:
        """What a server command asks for (read from the plan, before anything runs)."""

    def same_algorithm(self, asked: str, running: str) -> bool:
        return asked.lower() == running.lower()

    def model_path(self, command: Sequence[str]) -> str | None:
        """The model a server command loads (preflight checks it is on the host)."""
        return flag_value(command, "--model")

    def draft_tokens(self, command: Sequence[str]) -> int | None:
        """k, the most draft tokens one verify step can accept for the server ``command``
        starts (an accept length is then at most k + 1), where the command says; else None."""
        return None

    def acceptance_warnings(
        self, command: Sequence[str], env: Mapping[str, str], *, forced: bool
    ) -> list[str]:
        """What in a server's command or environment makes its acceptance other than the real,
        lossless one, each said with its consequence (``--dry-run`` shows them). ``forced``:
        the plan forces it (``forced_accept``), so the engine's knob is expected."""
        return []

    def forced_accept(self, command: Sequence[str], accept_length: float) -> ForcedAccept:
        """What makes the server that ``command`` starts accept ``accept_length`` tokens per
        verify step (bonus token included). Raises ValueError where the engine has no such
        knob, or the command runs no speculative decoding to force."""
        raise ValueError(f"{self.label} has no forced acceptance")

    def launch_speculation(
        self,
        flags: Mapping[str, str | None],
        env: Mapping[str, str],
        algorithms: Sequence[str],
    ) -> LaunchSpeculation | None:
        """What the engine's own speculation flags (``flags``: each of
        :attr:`speculation_flags` the command gave, with its value) and its environment state,
        for a server that runs ``algorithms``; None where they state nothing. Raises
        :class:`LaunchArgsError` for a value the engine would refuse."""
        return None

    # --- start-up ---------------------------------------------------------------------------

    def health_paths(self, api: str) -> tuple[str, ...]:
        """The endpoints tried for readiness, in order (the first 200 wins): ``/health``,
        200 once the engine runs."""
        return ("/health",)

    # --- requests ---------------------------------------------------------------------------

    def request(self, api: str, messages: list[Message], spec: RequestSpec) -> tuple[str, dict]:
        """(path, JSON body) of one streamed request: the rendered prompt to
        ``/v1/completions``, or the messages to ``/v1/chat/completions`` where the server
        renders the template."""
        body: dict[str, Any] = {"max_tokens": spec.max_tokens, **spec.sampling()}
        if spec.prompt is not None:
            path = COMPLETIONS_PATH
            body["prompt"] = spec.prompt
            if self.text_prompt == "verbatim":
                body["add_special_tokens"] = False  # the template wrote them already
        else:
            path = CHAT_PATH
            body["messages"] = messages
            if spec.chat_template_kwargs:
                body["chat_template_kwargs"] = dict(spec.chat_template_kwargs)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        if spec.model is not None:  # without it a server uses its one model
            body["model"] = spec.model
        if spec.cache_salt is not None:
            body["cache_salt"] = spec.cache_salt
        return path, body

    def stream_parser(self, api: str, mode: StreamMode = "auto") -> StreamParser:
        """A fresh parser for one request's stream (``mode`` matters for streams that may
        resend everything, SGLang's ``/generate``)."""
        return OpenAIStream()

    # --- what the server says -----------------------------------------------------------------

    def parse_stats_line(self, line: str) -> dict[str, float] | None:
        """The numbers of one of the engine's own periodic statistics lines, else None."""
        return None

    def log_stamp(self, line: str, year: int) -> tuple[datetime, float] | None:
        """The wall-clock time a log line is stamped with in the engine's own form (naive;
        ``year`` for stamps without one) and the stamp's resolution in seconds, else None."""
        return None

    @abstractmethod
    def parse_counters(self, text: str) -> Counters:
        """The acceptance counters of one metrics page."""

    async def inspect(
        self,
        facts: ServerFacts,
        client: httpx.AsyncClient,
        base: str,
        log_lines: Sequence[str],
    ) -> None:
        """Fill ``facts`` with what the ready server says it runs (version, speculation,
        TP size, counters); never raises for what the server says or lacks. Here: the
        version from ``version_path``, the rest from the metrics page and the start-up log
        (:meth:`read_facts`)."""
        with contextlib.suppress(httpx.HTTPError):
            v = await get_json(client, base + self.version_path)
            if isinstance(v, dict) and v.get("version") is not None:
                facts.version = str(v["version"])
        text = None
        with contextlib.suppress(httpx.HTTPError):
            text = await get_text(client, base + self.metrics_path)
        self.read_facts(facts, text, log_lines)

    def read_facts(self, facts: ServerFacts, metrics: str | None, log_lines: Sequence[str]) -> None:
        """What runs, from the metrics page (None: it did not answer) and the log so far."""
        facts.metrics = metrics is not None

    def notes(self, group: ServiceGroup, facts: ServerFacts) -> list[str]:
        """What the operator should know about how this server measures (after inspect)."""
        return []

    def missing_accept_length(self, api: str) -> str:
        """Why a speculative config's requests carried no accept length (the report)."""
        return "the server reported no verify steps"

    def startup_failure(self, lines: Sequence[str]) -> str | None:
        """Why a server that exited during start-up did, from its last log lines (oldest
        first): the last Python exception's line (most engines are Python), else None."""
        for line in reversed(lines):
            m = _EXCEPTION.search(line)
            if m:
                return m.group(0).strip()
        return None

    def dead_engine(self, error: str) -> str | None:
        """When a request's error text (an HTTP error answer, or an error event in its
        stream) is the engine's own word that it can no longer serve, that word for a notice;
        else None. Its server is then dead however its process looks."""
        return None

    # --- the acceptance definition ------------------------------------------------------------

    #: The definition in words, as the report's methodology names it.
    accept_length_definition: ClassVar[str] = "1 + accepted draft tokens / verify steps"

    @staticmethod
    def accept_length(
        tokens: float | None, steps: float | None, accepted: float | None = None
    ) -> float | None:
        """The engine's accept length from counts summed over what it covers (a request, a
        cell, a counter window): output tokens, verify steps, accepted draft tokens. Here
        one plus accepted drafts per verify step, the bonus token included."""
        if not steps or accepted is None:
            return None
        return 1.0 + accepted / steps

    def log_window(self, stats: dict[str, float], seconds: float) -> LogCounts | None:
        """What one of the engine's periodic stats lines says about its stretch (tokens,
        steps, seconds; ``seconds`` as the stamps give it), for pooling a cell's lines by the
        tokens behind each; None where the engine prints no such lines."""
        return None
