"""The prompt a real vLLM receives is the model's own template as this tool renders it.

The tiny model the vLLM tests build carries a Qwen3-shaped template (a thinking switch, earlier
reasoning dropped). Three things are checked against real programs: the rendering equals
transformers' ``apply_chat_template`` (run in the engine's venv); vLLM's own rendering of the
same conversation (``/tokenize`` with messages and ``chat_template_kwargs``) gives the same
token ids as the text this tool sends (``/tokenize`` with ``add_special_tokens: false``); and
cells run through ``/v1/completions`` (rendered here) and ``/v1/chat/completions`` (rendered
by vLLM with the same kwargs) see the same prompt sizes and produce the same greedy tokens,
turn by turn in a multi-turn session, with thinking on and off.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest

from specbench_tui.bench.prompting import Prompting
from specbench_tui.bench.workloads import run_cell
from specbench_tui.hosts.host import Host
from specbench_tui.plan.chat_template import MODEL_FILES, ChatTemplate, template_from_files
from specbench_tui.plan.prompt_sets import PromptLibrary
from specbench_tui.results.cells import Cell, ServiceGroup
from tests.conftest import free_port
from tests.test_engines_vllm import build_tiny_model, need_vllm

pytestmark = [pytest.mark.slow, pytest.mark.system]

SERVED = "tiny"
CONVERSATIONS = {
    "one turn": [{"role": "user", "content": "Explain a hash table in two sentences."}],
    "three turns": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "I think of small ones.</think>\n\nSeven."},
        {"role": "user", "content": "And a larger one?"},
    ],
}
KWARGS = {"thinking on": {}, "thinking off": {"enable_thinking": False}}


@dataclass
class Server:
    url: str
    model: Path
    python: str
    template: ChatTemplate


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    python = need_vllm()
    tmp = tmp_path_factory.mktemp("vllm-prompts")
    model = build_tiny_model(python, tmp / "tiny-qwen3")
    port = free_port()
    log = (tmp / "server.log").open("w")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    proc = subprocess.Popen(
        [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
         "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
         "--dtype", "bfloat16", "--served-model-name", SERVED],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900
        while True:
            assert proc.poll() is None, (tmp / "server.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "vLLM was not ready in 15 minutes"
            time.sleep(1)
        # The model's files, read the way a local host reads them for a campaign.
        got = asyncio.run(Host("cpu", 1).read_files([str(model / name) for name in MODEL_FILES]))
        template = template_from_files(
            {name: got[str(model / name)] for name in MODEL_FILES}, str(model)
        )
        assert template is not None and template.source.endswith("chat_template.jinja")
        yield Server(url, model, python, template)
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(10)
        log.close()


def test_rendering_equals_transformers(server: Server) -> None:
    script = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
cases = json.loads(sys.stdin.read())
print(json.dumps([
    tok.apply_chat_template(c["messages"], tokenize=False, add_generation_prompt=True,
                            **c["kwargs"])
    for c in cases
]))
"""
    cases = [
        {"messages": conv, "kwargs": kw}
        for conv in CONVERSATIONS.values()
        for kw in KWARGS.values()
    ]
    out = subprocess.run(
        [server.python, "-c", script, str(server.model)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    theirs = json.loads(out.stdout)
    ours = [server.template.render(c["messages"], c["kwargs"]) for c in cases]
    assert ours == theirs
    assert ours[0].endswith("<think>\n") and ours[1].endswith("<think>\n\n</think>\n\n")
    assert "small ones" not in ours[2]  # the earlier turn's reasoning is dropped


@pytest.mark.parametrize("kw", list(KWARGS))
@pytest.mark.parametrize("conv", list(CONVERSATIONS))
def test_vllm_tokenizes_our_text_as_its_own_rendering(server: Server, conv: str, kw: str) -> None:
    messages, kwargs = CONVERSATIONS[conv], KWARGS[kw]
    text = Prompting(server.template).with_kwargs(kwargs).text(messages, bos_added=False)
    theirs = httpx.post(
        server.url + "/tokenize",
        json={
            "model": SERVED,
            "messages": messages,
            "add_generation_prompt": True,
            "chat_template_kwargs": kwargs,
        },
        timeout=60,
    )
    ours = httpx.post(
        server.url + "/tokenize",
        json={"model": SERVED, "prompt": text, "add_special_tokens": False},
        timeout=60,
    )
    assert theirs.status_code == ours.status_code == 200, (theirs.text, ours.text)
    assert ours.json()["tokens"] == theirs.json()["tokens"]


GROUP = ServiceGroup(
    id="cpu.ar.tp1",
    host="cpu",
    host_kind="local",
    config="ar",
    label="AR",
    tp=1,
    gpu_ids=(0,),
    port=0,
    command=("vllm",),
    env=(),
    api="openai",
    ready_timeout_s=60,
    speculative=False,
    engine="vllm",
)


def _cell(kind: str, kwargs: dict[str, object]) -> Cell:
    common = dict(
        id=f"{kind}-{len(kwargs)}",
        name=kind,
        group=GROUP.id,
        host="cpu",
        config="ar",
        tp=1,
        workload=kind,
        kind=kind,
        max_tokens=24,
        concurrency=None,
        chat_template_kwargs=tuple(sorted(kwargs.items())),
        timeout_s=300,
    )
    if kind == "single":
        return Cell(**common, prompt_set="chat", prompts=("chat",), samples=2)  # type: ignore[arg-type]
    return Cell(
        **common,  # type: ignore[arg-type]
        prompt_set="code",
        prompts=("code",),
        sessions=1,
        turns=3,
        tool_output_tokens=40,
    )


@pytest.mark.parametrize("kw", list(KWARGS))
@pytest.mark.parametrize("kind", ["single", "agentic"])
async def test_client_and_server_rendering_measure_the_same_prompts(
    server: Server, kind: str, kw: str, tmp_path: Path
) -> None:
    """Each request row of a cell rendered here matches the row of the same cell rendered by
    vLLM: the same prompt tokens and, greedy, the same output, turn after turn (a later turn
    carries the earlier answers, so a difference anywhere would show in every turn after)."""
    cell = _cell(kind, KWARGS[kw])
    base = Prompting(server.template)
    rows = {}
    for on in ("client", "server"):
        result = await run_cell(
            cell,
            GROUP,
            server.url,
            campaign="prompts",
            attempt=1,
            seed=0,
            prompts=PromptLibrary(tmp_path),
            model=SERVED,
            prompting=replace(base, on=on),
        )
        assert result.complete and result.errors == 0, [r.error for r in result.records]
        rows[on] = result.records
    client, served = rows["client"], rows["server"]
    assert len(client) == len(served) == (2 if kind == "single" else 3)
    for a, b in zip(client, served, strict=True):
        assert (a.prompt_id, a.turn) == (b.prompt_id, b.turn)
        assert a.prompt_tokens == b.prompt_tokens and a.prompt_tokens
        assert a.output_sha256 == b.output_sha256
        assert a.chat_template_sha256 == b.chat_template_sha256 == server.template.sha256
        assert (
            a.chat_template_kwargs
            == b.chat_template_kwargs
            == json.dumps(KWARGS[kw], separators=(",", ":"))
        )
    if kind == "agentic":  # each turn's prompt holds the whole conversation so far
        sizes = [r.prompt_tokens or 0 for r in client]
        assert sizes == sorted(sizes) and len(set(sizes)) == 3
