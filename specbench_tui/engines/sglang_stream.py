"""SGLang's streams: the native ``/generate`` stream, and its OpenAI chat stream where a build
attaches ``meta_info``.

Formats follow SGLang's source (sgl-project/sglang): ``meta_info`` of ``/generate``
(``srt/managers/tokenizer_manager.py``); the fixtures are in ``tests/fixtures/sglang/``.

``/generate`` streams in one of two modes, a server flag: by default (``cumulative``) every
chunk resends the whole text and all output ids so far; with ``--incremental-streaming-output``
each chunk carries only the new text and ids. In cumulative mode only ``meta_info`` (the last
key of the payload) is decoded, found by searching from the end, and the text is taken once,
from the last chunk; in incremental mode the pieces are joined. ``auto`` tells the modes apart
from the output ids (all of them, or only the new ones, against ``meta_info.completion_tokens``)
instead of guessing from the text, which a delta that happens to repeat the text so far
(``"\\n"`` then ``"\\n"``) would fool.
"""

from __future__ import annotations

import json
import math
from typing import Any

from specbench_tui.engines.streams import (
    CACHED_KEYS,
    COMPLETION_KEYS,
    MAX_COUNT,
    PROMPT_KEYS,
    VERIFY_KEYS,
    BadServerData,
    OpenAIStream,
    StreamError,
    StreamMode,
    StreamParser,
    error_text,
    first_int,
    int_list,
    loads,
)

# meta_info field names across builds; the first one present wins.
ACCEPTED_DRAFT_KEYS = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
PROPOSED_DRAFT_KEYS = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")

_DECODER = json.JSONDecoder()

# --- the acceptance definition (here, beside the meta_info it reads; the adapter's too) ----

ACCEPT_LENGTH_DEFINITION = "completion tokens / verify steps"


def accept_length(
    tokens: float | None, steps: float | None, accepted: float | None = None
) -> float | None:
    """SGLang's accept length: completion tokens per verify step (``meta_info``
    ``completion_tokens / spec_verify_ct``; its counters ``generation_tokens_total /
    spec_verify_calls_total``), the bonus token of each step included. Over several requests
    (or a counter window) the counts are summed first. Accepted drafts are not needed."""
    if not steps or tokens is None:
        return None
    return tokens / steps


_META_KEY = '"meta_info":'
_META_KEY_B = b'"meta_info":'


def sglang_spec_counts(meta: dict[str, Any], completion: int | None) -> dict[str, Any]:
    """Speculative counts from SGLang's ``meta_info``: accept length is completion tokens per
    verify step, SGLang's own definition (the one its counters give too)."""
    out: dict[str, Any] = {}
    verify = first_int(meta, VERIFY_KEYS)
    out["verify"] = verify
    out["accepted"] = first_int(meta, ACCEPTED_DRAFT_KEYS)
    out["drafted"] = first_int(meta, PROPOSED_DRAFT_KEYS)
    for k in HISTOGRAM_KEYS:
        hist = int_list(meta.get(k))
        if hist is not None:
            out["histogram"] = hist
            break
    if verify and completion is not None:
        out["accept_length"] = accept_length(completion, verify)
    else:
        direct = meta.get("spec_accept_length")
        if isinstance(direct, int | float) and not isinstance(direct, bool):
            if not math.isfinite(direct) or not 0 < direct <= MAX_COUNT:
                raise BadServerData(f"spec_accept_length = {direct!r} is out of range")
            out["accept_length"] = float(direct)
    return out


class SglangStream(StreamParser):
    """SGLang's native ``/generate`` stream (``text``, ``output_ids``, ``meta_info`` per chunk)."""

    def __init__(self, mode: StreamMode = "auto") -> None:
        super().__init__()
        self.mode: StreamMode = mode
        self.tokens = -1  # completion_tokens of the last chunk, to spot token-bearing chunks
        self.meta: dict[str, Any] = {}
        self._pieces: list[str] = []  # incremental (and undecided) mode: the new text pieces
        self._last: bytes | str | dict[str, Any] | None = None  # cumulative: last payload
        self._last_text = ""  # cumulative text of the last fully decoded chunk

    def _payload(self, payload: bytes | str, t: float) -> None:
        if self.mode == "cumulative":
            meta = _tail_meta(payload)
            if meta is not None and first_int(meta, COMPLETION_KEYS) is not None:
                self._meta(meta, t, grew_text=False)
                self._last = payload
                return
        super()._payload(payload, t)

    def _data(self, data: dict[str, Any], t: float) -> None:
        if "error" in data and "text" not in data and "meta_info" not in data:
            raise StreamError(f"server error: {error_text(data)}"[:240])
        meta = data.get("meta_info")
        text = data.get("text")
        prev = self.tokens
        if self.mode == "auto":
            self._decide(data, meta)
        ids = data.get("output_ids")
        if isinstance(ids, list) and self.mode != "cumulative":
            self._ids.extend(i for i in ids if isinstance(i, int))
        grew_text = False
        if isinstance(text, str):
            if self.mode == "cumulative":
                grew_text = len(text) > len(self._last_text)
                self._last_text = text
                self._last = data
            else:
                grew_text = bool(text)
                self._pieces.append(text)
                if self.mode == "auto":
                    self._last_text = text
        if isinstance(meta, dict):
            self._meta(meta, t, grew_text, prev)
        elif grew_text:
            self._content(t)

    def _decide(self, data: dict[str, Any], meta: Any) -> None:
        """Cumulative or incremental, from the ids: all of them so far, or only the new."""
        if "output_ids" not in data:
            self.mode = "cumulative"  # builds without ids have no incremental mode
        else:
            ids = data.get("output_ids")
            ct = first_int(meta, COMPLETION_KEYS) if isinstance(meta, dict) else None
            if isinstance(ids, list) and ct is not None and self.tokens > 0:
                if len(ids) == ct:
                    self.mode = "cumulative"
                elif len(ids) == ct - self.tokens:
                    self.mode = "incremental"
        if self.mode == "cumulative" and self._pieces:
            self._pieces = []  # the cumulative text carries them already
        if self.mode == "cumulative":
            self._ids = []  # and the last chunk all the ids

    def _meta(
        self, meta: dict[str, Any], t: float, grew_text: bool, prev: int | None = None
    ) -> None:
        self.meta = meta
        prev = self.tokens if prev is None else prev
        grew = grew_text
        ct = first_int(meta, COMPLETION_KEYS)
        if ct is not None:
            if ct > prev:
                grew = prev >= 0 or ct > 0
            self.tokens = max(ct, self.tokens)
        fr = meta.get("finish_reason")
        if fr is not None:
            self.finish_raw = fr
        rid = meta.get("id")
        if rid is not None:
            self.request_id = str(rid)
        if grew:
            self._content(t)

    def _running(self) -> int:
        return self.tokens

    def _counts(self) -> dict[str, Any]:
        meta = self.meta
        out = {
            "output_tokens": first_int(meta, COMPLETION_KEYS),
            "prompt_tokens": first_int(meta, PROMPT_KEYS),
            "cached_tokens": first_int(meta, CACHED_KEYS),
        }
        out.update(sglang_spec_counts(meta, out["output_tokens"]))
        return out

    def _final_text(self) -> tuple[str, str]:
        if self.mode == "cumulative":
            last = self._last
            if isinstance(last, bytes | str):
                decoded = loads(last)
                last = decoded if isinstance(decoded, dict) else None
            if isinstance(last, dict):
                self.ids = _int_ids(last.get("output_ids"))
                text = last.get("text")
                return (text if isinstance(text, str) else self._last_text), ""
            return self._last_text, ""
        self.ids = list(self._ids) if self._ids else None
        if self.mode == "auto" and len(self._pieces) <= 1:
            return self._last_text, ""
        return "".join(self._pieces), ""


def _int_ids(raw: Any) -> list[int] | None:
    if isinstance(raw, list) and raw and all(type(i) is int for i in raw):
        return raw
    return None


def _tail_meta(payload: bytes | str) -> dict[str, Any] | None:
    """The ``meta_info`` object of a ``/generate`` payload, decoded without the text and ids
    before it. In JSON every quote inside a string is escaped, so ``"meta_info":`` can only be
    the key itself; searching from the end finds it after the (long) text and ids."""
    if isinstance(payload, bytes):
        k = payload.rfind(_META_KEY_B)
        if k < 0:
            return None
        tail = payload[k + len(_META_KEY_B) :].decode("utf-8", "replace")
    else:
        k = payload.rfind(_META_KEY)
        if k < 0:
            return None
        tail = payload[k + len(_META_KEY) :]
    try:
        meta, _ = _DECODER.raw_decode(tail.lstrip())
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


class SglangChatStream(OpenAIStream):
    """SGLang's OpenAI chat stream: ``meta_info`` (with ``spec_verify_ct``) where a build
    attaches it to a chunk or its choice, which carries the counts then."""

    def __init__(self) -> None:
        super().__init__()
        self.meta: dict[str, Any] = {}

    def _chunk(self, data: dict[str, Any], choice: dict[str, Any] | None) -> None:
        meta = (choice or {}).get("meta_info") or data.get("meta_info")
        if isinstance(meta, dict):
            self.meta = meta

    def _count_fields(self) -> dict[str, Any]:
        return {**self.meta, **self.usage}

    def _spec_counts(self, output_tokens: int | None) -> dict[str, Any]:
        return sglang_spec_counts(self.meta, output_tokens) if self.meta else {}
