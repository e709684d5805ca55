"""What a server sends is checked at the door: a count that cannot be one (NaN, Infinity,
negative, beyond any real count, a string, missing) fails that request with what was wrong,
the rest of the cell stands, and the store writes every row it gets."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from support.replay import Replay, serve

from specbench_tui.bench.client import BenchClient
from specbench_tui.engine.store import ResultsStore
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.records import RequestRecord


def _sglang(meta: str) -> bytes:
    head = '{"text":"a","output_ids":[1],"meta_info":{"completion_tokens":1,"prompt_tokens":3}}'
    last = '{"text":"a b","output_ids":[1,2],"meta_info":' + meta + "}"
    return f"data: {head}\n\ndata: {last}\n\ndata: [DONE]\n\n".encode()


def _openai(usage: str) -> bytes:
    chunk = '{"id":"x","choices":[{"index":0,"delta":{"content":"a b"},"finish_reason":"length"}]}'
    tail = '{"id":"x","choices":[],"usage":' + usage + "}"
    return f"data: {chunk}\n\ndata: {tail}\n\ndata: [DONE]\n\n".encode()


GOOD_META = '{"completion_tokens":2,"prompt_tokens":3,"finish_reason":{"type":"length"}}'
HOSTILE_META = {
    "nan": '{"completion_tokens":NaN,"prompt_tokens":3,"finish_reason":{"type":"length"}}',
    "infinity": '{"completion_tokens":Infinity,"finish_reason":{"type":"length"}}',
    "negative": '{"completion_tokens":-72,"finish_reason":{"type":"length"}}',
    "beyond int64": f'{{"completion_tokens":{10**23},"finish_reason":{{"type":"length"}}}}',
    "string": '{"completion_tokens":"2","finish_reason":{"type":"length"}}',
    "fraction": '{"completion_tokens":2.5,"finish_reason":{"type":"length"}}',
    "missing": '{"prompt_tokens":3,"finish_reason":{"type":"length"}}',
    "bad verify": '{"completion_tokens":2,"spec_verify_ct":-1,"finish_reason":{"type":"length"}}',
    "bad histogram": (
        '{"completion_tokens":2,"spec_accept_histogram":[1,"x"],"finish_reason":{"type":"length"}}'
    ),
}
HOSTILE_USAGE = {
    "nan": '{"completion_tokens":NaN,"prompt_tokens":3}',
    "negative": '{"completion_tokens":-1,"prompt_tokens":3}',
    "huge": '{"completion_tokens":1e300,"prompt_tokens":3}',
    "missing": '{"prompt_tokens":3}',
}


@pytest.fixture
async def replay():
    rp = Replay()
    rp.stream("/good", _sglang(GOOD_META))
    for name, meta in HOSTILE_META.items():
        rp.stream(f"/{name.replace(' ', '-')}", _sglang(meta))
    rp.stream("/oa-good", _openai('{"completion_tokens":2,"prompt_tokens":3}'))
    for name, usage in HOSTILE_USAGE.items():
        rp.stream(f"/oa-{name}", _openai(usage))
    runner, url = await serve(rp)
    yield url
    await runner.cleanup()


async def test_hostile_counts_fail_their_request_only(replay: str, tmp_path: Path) -> None:
    rows = []
    routes = [("sglang", "/good", True)]
    routes += [("sglang", f"/{n.replace(' ', '-')}", False) for n in HOSTILE_META]
    routes += [("openai", "/oa-good", True)]
    routes += [("openai", f"/oa-{n}", False) for n in HOSTILE_USAGE]
    for api, prefix, good in routes:
        async with BenchClient(replay + prefix, api) as client:  # type: ignore[arg-type]
            done = await client.generate("x", max_tokens=8, timeout_s=10)
        if good:
            assert done.error is None and done.output_tokens == 2, (prefix, done.error)
        else:
            assert done.error is not None and done.error.startswith("bad server data"), prefix
            assert done.output_tok_s is None and done.decode_tok_s is None
        rows.append(RequestRecord(cell_id="c", attempt=1, **done.measurements()))
    # Every row, good and bad, is written: nothing in them can break the parquet file.
    store = ResultsStore(ResultsLayout(tmp_path / "r"))
    store.open("", "h")
    try:
        store.write_cell_requests("c", 1, rows)
    finally:
        store.close()
    df = pl.read_parquet(ResultsLayout(tmp_path / "r").part_path("c", 1))
    assert df.height == len(routes)
    assert df.filter(pl.col("error").is_null()).height == 2
    assert (df["output_tokens"].drop_nulls() >= 0).all()
    errors = json.dumps(df["error"].drop_nulls().to_list())
    assert "completion_tokens = nan" in errors and "out of range" in errors
    assert "no output token count" in errors
