"""The model's own chat template: found in a model directory's files, rendered as Hugging
Face renders it, and turned into what each engine's route receives.

The templates here are written for these tests in the shapes real ones have (Qwen3's thinking
switch, a BOS-writing Llama-style template, a named-template list); none is copied.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from specbench_tui.bench.prompting import DEFAULT_PROMPTING, Prompting
from specbench_tui.engines.registry import adapter
from specbench_tui.engines.tiny_model import CHAT_TEMPLATE as THINKING
from specbench_tui.errors import InputError
from specbench_tui.hosts.shell import parse_read_files, read_files_command
from specbench_tui.plan.chat_template import (
    ChatTemplate,
    fallback_template,
    template_from_file,
    template_from_files,
)

CONVERSATION = [
    {"role": "user", "content": "Write a haiku."},
    {"role": "assistant", "content": "Counting syllables.</think>\n\nOld pond, a frog jumps."},
    {"role": "user", "content": "Another, about snow."},
]
# A Llama-style template: a BOS first, headers per turn, a system block.
BOS_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] + eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


def thinking() -> ChatTemplate:
    return ChatTemplate(THINKING, "test")


def test_thinking_switch_changes_the_generation_prompt_only() -> None:
    on = thinking().render(CONVERSATION)
    off = thinking().render(CONVERSATION, {"enable_thinking": False})
    assert on.endswith("<|im_start|>assistant\n<think>\n")
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.removesuffix("<think>\n") == off.removesuffix("<think>\n\n</think>\n\n")
    # The earlier turn's reasoning is not part of the conversation the model sees again.
    assert "Counting syllables" not in on
    assert "<|im_start|>assistant\nOld pond, a frog jumps.<|im_end|>\n" in on


def test_generation_prompt_can_be_left_out() -> None:
    text = thinking().render(CONVERSATION[:1], add_generation_prompt=False)
    assert text == "<|im_start|>user\nWrite a haiku.<|im_end|>\n"


def test_model_files_give_template_and_special_tokens() -> None:
    config = {
        "chat_template": "from config",
        "bos_token": {"content": "<s>", "lstrip": False, "__type": "AddedToken"},
        "eos_token": "</s>",
        "add_bos_token": True,
    }
    files = {
        "chat_template.jinja": BOS_TEMPLATE,
        "tokenizer_config.json": json.dumps(config),
        "special_tokens_map.json": json.dumps({"eos_token": "<ignored>", "pad_token": "<pad>"}),
    }
    t = template_from_files(files, "/models/m")
    assert t is not None
    assert t.text == BOS_TEMPLATE  # chat_template.jinja wins over the config's
    assert t.source == "/models/m/chat_template.jinja"
    assert dict(t.special_tokens) == {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
    assert t.add_bos_token is True
    text = t.render(CONVERSATION[:1])
    assert text == (
        "<s><|start_header_id|>user<|end_header_id|>\n\nWrite a haiku.</s>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_config_template_and_named_templates() -> None:
    plain = {"tokenizer_config.json": json.dumps({"chat_template": "A{{ messages|length }}"})}
    t = template_from_files(plain, "/m/")
    assert t is not None and t.source == "/m/tokenizer_config.json chat_template"
    assert t.render(CONVERSATION) == "A3"
    named = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    t = template_from_files({"tokenizer_config.json": json.dumps({"chat_template": named})}, "/m")
    assert t is not None and t.text == "D"
    assert template_from_files({"tokenizer_config.json": "{}"}, "/m") is None
    assert template_from_files({}, "/m") is None
    with pytest.raises(InputError, match=r"/m/tokenizer_config.json: not valid JSON"):
        template_from_files({"tokenizer_config.json": "{nope"}, "/m")


def test_a_plan_template_keeps_the_models_special_tokens() -> None:
    files = {"tokenizer_config.json": json.dumps({"bos_token": "<s>", "chat_template": "X"})}
    t = template_from_file("{{ bos_token }}!", "/plan/t.jinja", files, "/m")
    assert t.source == "/plan/t.jinja" and t.render([]) == "<s>!"


def test_hugging_face_conventions() -> None:
    t = ChatTemplate(
        "{{ messages[0]['content'] | tojson }}"
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}.{% endfor %}"
        "{{ tools is none }}{{ documents is none }}",
        "conventions",
    )
    msgs = [{"role": "user", "content": "héllo <b>"}] * 3
    # tojson keeps non-ASCII and HTML characters; loopcontrols is on; tools/documents are None.
    assert t.render(msgs) == '"héllo <b>".TrueTrue'
    failing = ChatTemplate("{{ raise_exception('only user and assistant roles') }}", "strict")
    with pytest.raises(InputError, match="chat template strict: only user and assistant roles"):
        failing.render(msgs)
    # A template cannot reach out of its sandbox.
    escape = ChatTemplate("{{ messages.__class__.__mro__ }}", "escape")
    with pytest.raises(InputError, match="escape"):
        escape.render(msgs)
    marked = ChatTemplate("{% generation %}[{{ messages|length }}]{% endgeneration %}", "gen")
    assert marked.render(msgs) == "[3]"


def test_strftime_now_is_fixed_for_the_run() -> None:
    t = ChatTemplate("{{ strftime_now('%Y-%m-%d %H:%M:%S.%f') }}", "dated")
    assert t.render([]) == t.render([])


def test_text_routes_get_one_bos() -> None:
    files = {"tokenizer_config.json": json.dumps({"bos_token": "<s>", "eos_token": "</s>"})}
    t = template_from_file(BOS_TEMPLATE, "t", files, "/m")
    full = t.render(CONVERSATION[:1])
    assert full.startswith("<s>")
    p = Prompting(t)
    # SGLang's tokenizer adds the BOS itself; vLLM's request says add_special_tokens false.
    assert adapter("sglang").text_prompt == "adds_bos" and adapter("vllm").text_prompt == "verbatim"
    assert p.text(CONVERSATION[:1], bos_added=True) == full.removeprefix("<s>")
    assert p.text(CONVERSATION[:1], bos_added=False) == full
    no_bos = template_from_file(
        BOS_TEMPLATE,
        "t",
        {
            "tokenizer_config.json": json.dumps(
                {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False}
            )
        },
        "/m",
    )
    assert Prompting(no_bos).text(CONVERSATION[:1], bos_added=True).startswith("<s>")


def test_kwargs_are_recorded_in_one_spelling() -> None:
    p = Prompting(thinking()).with_kwargs({"enable_thinking": False, "a": [1, "é"]})
    assert p.kwargs_json == '{"a":[1,"é"],"enable_thinking":false}'
    assert p.template_sha256 == thinking().sha256
    # Where the server renders with a template this tool could not read, no hash is claimed.
    assert Prompting(fallback_template("none"), on="server").template_sha256 is None
    assert DEFAULT_PROMPTING.template.fallback


def test_model_files_read_in_one_shell_command(tmp_path: Path) -> None:
    """The command an SSH host runs to read a model's files, run here by a real shell."""
    (tmp_path / "chat_template.jinja").write_text("{{ 'é\\n' }}\n", encoding="utf-8")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe")
    odd = tmp_path / "it's $(here)"
    odd.mkdir()
    (odd / "tokenizer_config.json").write_text('{"a": 1}')
    paths = [
        str(tmp_path / "chat_template.jinja"),
        str(tmp_path / "missing.json"),
        str(tmp_path / "bin.json"),
        str(odd / "tokenizer_config.json"),
        str(tmp_path),  # a directory is not a file
    ]
    out = subprocess.run(
        ["sh", "-c", read_files_command(paths)], capture_output=True, text=True, check=True
    ).stdout
    got = parse_read_files(out, paths)
    assert got == {
        paths[0]: "{{ 'é\\n' }}\n",
        paths[1]: None,
        paths[2]: None,  # not UTF-8 text
        paths[3]: '{"a": 1}',
        paths[4]: None,
    }
