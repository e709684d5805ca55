"""Stream parsing: one request's SSE data payloads in, what the request measured out.

The transport (``bench/client.py``) sends the request and hands every SSE ``data:`` payload to
a parser with its arrival time; the parser owns everything about what the payloads mean. An
engine's adapter makes the parser for each request (``EngineAdapter.stream_parser``): the
OpenAI chat stream here, with the engine's own speculative fields read by its subclass in
``engines/<engine>.py``, or a stream of the engine's own API (SGLang's ``/generate``).

``parser.feed(payload, t, read)``
    one payload: the event's data as ``bytes`` or ``str`` (JSON text, or ``[DONE]``; leading
    whitespace allowed) or an already decoded ``dict``; ``t`` is seconds since the request
    was sent, ``read`` the number of the socket read that brought it (payloads of one read
    share it; None: every payload a read of its own). Raises :class:`StreamError` for an
    in-band server error or data that is not JSON; its message is the request row's
    ``error``.
``parser.done`` / ``parser.end_t``
    ``[DONE]`` was seen, and when. ``parser.finished``: a finish reason was seen (a stream
    that ends without either stopped early).
``parser.finish(out, e2e_s)``
    fills the measured fields of ``out`` (a :class:`Measurement`); then ``parser.text`` is the
    output text and ``parser.request_id`` the server's id.

Work per payload is bounded by what is new in it, so a long output costs the same per token
as a short one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from abc import ABC, abstractmethod
from typing import Any, Literal

from specbench_tui.errors import DataError
from specbench_tui.results.records import Measurement

StreamMode = Literal["auto", "cumulative", "incremental"]

# Field names seen across builds and forks; the first one present wins, and a renamed field
# degrades to "unknown", not to a crash.
COMPLETION_KEYS = ("completion_tokens", "output_tokens", "num_output_tokens")
PROMPT_KEYS = ("prompt_tokens", "input_tokens", "num_prompt_tokens")
CACHED_KEYS = ("cached_tokens", "cached_prompt_tokens", "num_cached_tokens")
VERIFY_KEYS = ("spec_verify_ct", "spec_verify_count", "verify_ct")


#: More tokens than any request can have: a count beyond this is garbage, not a measurement.
MAX_COUNT = 100_000_000


class StreamError(DataError):
    """A failure found while reading the stream; its message is the row's ``error``."""


class BadServerData(StreamError):
    """A number the server sent that cannot be a measurement (NaN, negative, beyond any real
    count, a string where a count belongs). It fails that request, with what was wrong; the
    other requests of the cell stand."""

    def __init__(self, what: str) -> None:
        super().__init__(f"bad server data: {what}")


def count(key: str, v: Any) -> int:
    """A token count as the server sent it, checked: a non-negative integer within reason."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise BadServerData(f"{key} = {v!r} is not a number")
    if isinstance(v, float):
        if not math.isfinite(v) or not v.is_integer():
            raise BadServerData(f"{key} = {v!r} is not a whole number")
        v = int(v)
    if not 0 <= v <= MAX_COUNT:
        raise BadServerData(f"{key} = {v} is out of range")
    return v


def first_int(d: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    """The first of ``keys`` present (and not null), checked as a count; None when absent:
    builds and forks rename these, and a renamed field degrades to "unknown"."""
    for k in keys:
        v = d.get(k)
        if v is not None:
            return count(k, v)
    return None


def int_list(v: Any, key: str = "histogram") -> list[int] | None:
    if v is None:
        return None
    if not isinstance(v, list) or len(v) > 10_000:
        raise BadServerData(f"{key} is not a list of counts")
    return [count(key, x) for x in v]


def error_text(body: Any) -> str:
    """Pull the message out of the usual JSON error shapes; fall back to the raw text."""
    if isinstance(body, dict):
        err = body.get("error", body.get("detail", body.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return str(err)
    return str(body)


def finish_reason_name(raw: Any) -> str | None:
    """SGLang sends ``{"type": "length", "length": 256}``; OpenAI sends ``"length"``."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        kind = raw.get("type")
        return str(kind) if kind is not None else json.dumps(raw, separators=(",", ":"))[:60]
    return str(raw)


def _abort_message(raw: Any) -> str:
    if isinstance(raw, dict) and raw.get("message"):
        return f"server aborted the request: {raw['message']}"[:240]
    return "server aborted the request"


def loads(payload: bytes | str) -> Any:
    try:
        return json.loads(payload)
    except ValueError as exc:
        head = payload[:80]
        raise StreamError(f"bad stream data: {head!r}") from exc


def _is_done(payload: bytes | str) -> bool:
    # Compare the head only: a payload may be megabytes long.
    head = payload[:16].strip()
    return head == "[DONE]" or head == b"[DONE]"


class StreamParser(ABC):
    """Shared state and the translation into a request row; subclasses read the payloads."""

    def __init__(self) -> None:
        self.content_times: list[float] = []  # arrival of every chunk that carried output
        self.content_reads: list[int] = []  # the read that brought each of those chunks
        self.read = 0  # the read of the payload being fed
        # The server's running output-token count at each of those chunks (-1: not said),
        # from which tokens per chunk and ITL per token follow (bench/figures.py).
        self.content_tokens: list[int] = []
        self.done = False
        self.end_t: float | None = None
        self.finish_raw: Any = None
        self.request_id: str | None = None
        self.text = ""
        self._reasoning = ""
        # The generated token ids, where the server sends them (SGLang output_ids, vLLM with
        # return_token_ids): the greedy check compares these, not text.
        self.ids: list[int] | None = None
        self._ids: list[int] = []

    @property
    def finished(self) -> bool:
        return self.finish_raw is not None

    def _running(self) -> int:
        """The server's output-token count so far, -1 when the stream does not carry one."""
        return -1

    def _content(self, t: float) -> None:
        self.content_times.append(t)
        self.content_reads.append(self.read)
        self.content_tokens.append(self._running())

    @property
    def one_read(self) -> bool:
        """Every content chunk came in the read of the first: no token after the first was
        timed apart from it (bench/figures.py: a zero decode window)."""
        return bool(self.content_reads) and self.content_reads[-1] == self.content_reads[0]

    def feed(
        self, payload: bytes | str | dict[str, Any], t: float, read: int | None = None
    ) -> None:
        """One SSE data payload. Raises StreamError only: a payload of the wrong shape (a
        field that is a number where an object belongs, say) is bad server data, said as
        such, never a crash of the caller."""
        if self.done:
            return
        self.read = self.read + 1 if read is None else read
        try:
            if isinstance(payload, dict):
                self._data(payload, t)
                return
            if _is_done(payload):
                self.done = True
                self.end_t = t
                return
            self._payload(payload, t)
        except StreamError:
            raise
        except (TypeError, KeyError, IndexError, AttributeError, ValueError) as exc:
            raise BadServerData(f"unexpected shape ({type(exc).__name__}: {exc})") from None

    def _payload(self, payload: bytes | str, t: float) -> None:
        data = loads(payload)
        if isinstance(data, dict):
            self._data(data, t)

    @abstractmethod
    def _data(self, data: dict[str, Any], t: float) -> None:
        """One decoded payload."""

    @abstractmethod
    def _counts(self) -> dict[str, Any]:
        """The server's own numbers for the request: token counts and speculative counts."""

    @abstractmethod
    def _final_text(self) -> tuple[str, str]:
        """(text, reasoning) as generated."""

    def finish(self, out: Measurement, e2e_s: float) -> None:
        """Turn the stream's state into the row's measured fields (raises StreamError only)."""
        try:
            self._finish(out, e2e_s)
        except StreamError:
            raise
        except (TypeError, KeyError, IndexError, AttributeError, ValueError) as exc:
            raise BadServerData(f"unexpected shape ({type(exc).__name__}: {exc})") from None

    def _finish(self, out: Measurement, e2e_s: float) -> None:
        times = self.content_times
        out.chunks = len(times)
        if times:
            out.ttft_s = times[0]
            out.itl_s = [b - a for a, b in itertools.pairwise(times)]
            reads = self.content_reads
            out.coalesced_gaps = [i for i in range(len(reads) - 1) if reads[i + 1] == reads[i]]
        out.e2e_s = e2e_s
        c = self._counts()
        out.output_tokens = c.get("output_tokens")
        out.prompt_tokens = c.get("prompt_tokens")
        out.cached_tokens = c.get("cached_tokens")
        out.spec_verify_ct = c.get("verify")
        out.spec_accepted_tokens = c.get("accepted")
        out.spec_draft_tokens = c.get("drafted")
        out.spec_accept_histogram = c.get("histogram")
        out.accept_length = c.get("accept_length")
        out.finish_reason = finish_reason_name(self.finish_raw)
        if out.finish_reason == "abort" and out.error is None:
            out.error = _abort_message(self.finish_raw)
        if out.output_tokens is None and out.error is None:
            # Every rate is tokens over time: without the server's count there is no figure,
            # and a row that says 0 tok/s would be a lie.
            out.error = "bad server data: no output token count (meta_info / usage)"
        self.text, self._reasoning = self._final_text()
        if out.error is None:
            # Reasoning is part of what the model generated, so a greedy check covers it too.
            full = self._reasoning + self.text if self._reasoning else self.text
            out.output_sha256 = hashlib.sha256(full.encode("utf-8")).hexdigest()


class OpenAIStream(StreamParser):
    """``/v1/chat/completions`` (and ``/v1/completions``) chunks, of any engine; an engine's
    subclass reads its own speculative fields (``_chunk``, ``_spec_counts``).

    A chunk counts as output when its choice carries text (``delta.content``,
    ``delta.reasoning_content`` / ``delta.reasoning``, or ``text``), even an empty string: vLLM
    sends empty deltas for tokens that decode to nothing yet. The role chunk that opens a chat
    stream carries no token and does not count.
    """

    def __init__(self) -> None:
        super().__init__()
        self._pieces: list[str] = []
        self._reasoning_pieces: list[str] = []
        self.usage: dict[str, Any] = {}
        self._ids_sent = False  # chunks carry their token ids

    def _chunk(self, data: dict[str, Any], choice: dict[str, Any] | None) -> None:
        """An engine's own fields of one chunk (``choice``: its first choice, if any)."""

    def _spec_counts(self, output_tokens: int | None) -> dict[str, Any]:
        """The request's speculative counts (see ``StreamParser._counts``), where the engine
        sends them."""
        return {}

    def _count_fields(self) -> dict[str, Any]:
        """Where the token counts are read from: the usage chunk."""
        return self.usage

    def _data(self, data: dict[str, Any], t: float) -> None:
        if "error" in data and "choices" not in data:
            raise StreamError(f"server error: {error_text(data)}"[:240])
        usage = data.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        rid = data.get("id")
        if rid is not None and self.request_id is None:
            self.request_id = str(rid)
        choices = data.get("choices")
        if not choices:
            self._chunk(data, None)
            return
        choice = choices[0]
        self._chunk(data, choice)
        ids = choice.get("token_ids")
        if isinstance(ids, list):
            self._ids.extend(i for i in ids if type(i) is int)
            self._ids_sent = True
        counted = False
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            reasoning = delta.get("reasoning_content", delta.get("reasoning"))
            if isinstance(content, str):
                self._pieces.append(content)
                counted = "role" not in delta or bool(content)
            if isinstance(reasoning, str):
                self._reasoning_pieces.append(reasoning)
                counted = counted or bool(reasoning) or "role" not in delta
        else:
            text = choice.get("text")
            if isinstance(text, str):
                self._pieces.append(text)
                counted = True
        if counted:
            self._content(t)
        fr = choice.get("finish_reason")
        if fr is not None:
            self.finish_raw = fr

    def _running(self) -> int:
        """The token ids of every chunk (vLLM's ``return_token_ids``) count its tokens; else,
        with ``continuous_usage_stats``, every chunk carries the count so far."""
        if self._ids_sent:
            return len(self._ids)
        n = first_int(self.usage, COMPLETION_KEYS) if self.usage else None
        return -1 if n is None else n

    def _counts(self) -> dict[str, Any]:
        counts = self._count_fields()
        out: dict[str, Any] = {
            "output_tokens": first_int(counts, COMPLETION_KEYS),
            "prompt_tokens": first_int(counts, PROMPT_KEYS),
            "cached_tokens": first_int(counts, CACHED_KEYS),
        }
        if out["cached_tokens"] is None:
            details = self.usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                out["cached_tokens"] = first_int(details, CACHED_KEYS)
        out.update(self._spec_counts(out["output_tokens"]))
        return out

    def _final_text(self) -> tuple[str, str]:
        self.ids = list(self._ids) if self._ids else None
        return "".join(self._pieces), "".join(self._reasoning_pieces)
