"""Stream parsers against SGLang's formats (from its source) and real vLLM bytes."""

from __future__ import annotations

import json

import pytest

from specbench_tui.engines.registry import adapter
from specbench_tui.engines.streams import StreamError, StreamParser
from specbench_tui.results.records import Measurement
from tests.support.replay import FIXTURES, payloads

SGLANG = FIXTURES / "sglang"
VLLM = FIXTURES / "vllm"
ISSUE_TEXT = "\n\n11. aa"  # the pieces "\n","\n","1","1."," a","a" joined


def stream_parser(api: str, mode: str = "auto", engine: str = "sglang") -> StreamParser:
    return adapter(engine).stream_parser(api, mode)  # type: ignore[arg-type]


def parse(
    path: str, api: str, mode: str = "auto", *, as_bytes: bool = False
) -> tuple[Measurement, str, object]:
    body = (FIXTURES / path).read_bytes()
    # The fixtures' directory names the engine whose bytes they are.
    parser = stream_parser(api, mode, "vllm" if path.startswith("vllm") else "sglang")
    for i, p in enumerate(payloads(body)):
        parser.feed(p.encode() if as_bytes else p, 0.01 * (i + 1))
    out = Measurement()
    parser.finish(out, 1.0)
    return out, parser.text, parser


@pytest.mark.parametrize(
    ("path", "mode"),
    [
        ("sglang/generate_cumulative.sse", "cumulative"),
        ("sglang/generate_cumulative.sse", "auto"),
        ("sglang/generate_incremental.sse", "incremental"),
        ("sglang/generate_incremental.sse", "auto"),
    ],
)
@pytest.mark.parametrize("as_bytes", [False, True])
def test_sglang_generate_gives_exact_text_and_counts(path: str, mode: str, as_bytes: bool) -> None:
    out, text, parser = parse(path, "sglang", mode, as_bytes=as_bytes)
    assert text == ISSUE_TEXT
    assert parser.done and parser.finished  # type: ignore[attr-defined]
    assert out.output_tokens == 10 and out.prompt_tokens == 27 and out.cached_tokens == 0
    assert out.chunks == 6  # one per token-bearing chunk, whatever its size
    assert out.ttft_s == pytest.approx(0.01)
    assert len(out.itl_s) == 5
    assert out.finish_reason == "length"
    # Speculative counts from meta_info at finish (tokenizer_manager's spec metrics).
    assert out.spec_verify_ct == 5
    assert out.accept_length == pytest.approx(10 / 5)
    assert out.spec_accepted_tokens == 4 and out.spec_draft_tokens == 15
    assert out.spec_accept_histogram == [2, 2, 1, 0]
    assert out.error is None and out.output_sha256 is not None


def test_the_old_heuristic_case_depends_on_the_mode_not_on_the_text() -> None:
    """Incremental pieces read as cumulative lose text; the parser is told, or tells from the
    output ids, never from whether a piece repeats the text so far."""
    _, text, _ = parse("sglang/generate_incremental.sse", "sglang", "cumulative")
    assert text == "a"  # the last chunk taken as the whole text: why the mode matters
    _, text, _ = parse("sglang/generate_incremental.sse", "sglang", "auto")
    assert text == ISSUE_TEXT


def test_cumulative_mode_decodes_only_meta_info() -> None:
    """In cumulative mode a chunk's text and ids are skipped; only the last is decoded."""
    body = (SGLANG / "generate_cumulative.sse").read_bytes()
    ps = payloads(body)
    parser = stream_parser("sglang", "cumulative")
    # Corrupt the text of every chunk but the last: a full decode would fail on them.
    for i, p in enumerate(ps[:-2]):
        broken = p.replace('"text":"', '"text":"\\x', 1)
        parser.feed(broken, float(i))
    for p in ps[-2:]:
        parser.feed(p, 9.0)
    out = Measurement()
    parser.finish(out, 10.0)
    assert parser.text == ISSUE_TEXT and out.output_tokens == 10 and out.chunks == 6


def test_sglang_without_output_ids_is_cumulative() -> None:
    """Builds from before incremental streaming sent text and meta_info only."""
    parser = stream_parser("sglang", "auto")
    for i, text in enumerate(["He", "Hello", "Hello, w", "Hello, world"]):
        meta = {"id": "r", "completion_tokens": i + 1, "finish_reason": None}
        parser.feed(json.dumps({"text": text, "meta_info": meta}), float(i))
    parser.feed("[DONE]", 5.0)
    out = Measurement()
    parser.finish(out, 5.0)
    assert parser.text == "Hello, world" and out.chunks == 4


def test_sglang_error_event_and_bad_data() -> None:
    parser = stream_parser("sglang")
    with pytest.raises(StreamError, match="server error: prompt is too long"):
        parser.feed('{"error": {"message": "prompt is too long"}}', 0.1)
    with pytest.raises(StreamError, match="bad stream data"):
        stream_parser("sglang").feed("{not json", 0.1)


def test_sglang_openai_route_has_text_and_tokens_but_no_acceptance() -> None:
    out, text, _ = parse("sglang/openai_chat.sse", "openai")
    assert text == ISSUE_TEXT
    assert out.chunks == 6  # the role chunk and the empty finish chunk carry no token
    assert out.output_tokens == 10 and out.prompt_tokens == 27
    assert out.finish_reason == "length"
    assert out.spec_verify_ct is None and out.accept_length is None


def test_vllm_spec_stream_real_bytes() -> None:
    out, text, parser = parse("vllm/chat_stream_64_spec.sse", "openai")
    assert out.output_tokens == 64 and out.prompt_tokens == 27
    assert out.chunks == 19  # tokens per chunk 1,1,2,3,4 x 14,1; the role chunk has none
    assert parser.request_id.startswith("chatcmpl-")  # type: ignore[attr-defined]
    assert out.spec_verify_ct == 18 and out.spec_accepted_tokens == 48
    assert out.spec_draft_tokens == 51 and out.spec_accept_histogram == [1, 1, 1, 15]
    assert out.accept_length == pytest.approx(1 + 48 / 18)  # vLLM's mean_acceptance_length
    assert out.finish_reason == "length"
    assert text.startswith("\n")


def test_vllm_nospec_stream_has_no_acceptance() -> None:
    out, _, _ = parse("vllm/chat_stream_64_nospec.sse", "openai")
    assert out.output_tokens == 64
    assert out.spec_verify_ct is None and out.accept_length is None
    assert out.spec_accept_histogram is None


def test_vllm_error_event_mid_stream() -> None:
    body = (VLLM / "chat_stream_sigterm.sse").read_bytes()
    parser = stream_parser("openai", engine="vllm")
    with pytest.raises(StreamError, match="EngineCore encountered an issue"):
        for p in payloads(body):
            parser.feed(p, 0.1)
    assert not parser.finished
