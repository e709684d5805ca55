"""The model's own chat template: where it is found and how it renders a conversation.

A drafter's acceptance depends on the exact text the target continues, so every engine gets
the prompt its model was trained to see: the model's chat template, rendered the way Hugging
Face's ``apply_chat_template`` renders it (a sandboxed jinja2 environment with ``trim_blocks``
and ``lstrip_blocks``, ``loopcontrols``, a ``tojson`` that keeps non-ASCII text,
``raise_exception`` and ``strftime_now``; the variables ``messages``, ``tools``,
``documents``, ``add_generation_prompt`` and the tokenizer's named special tokens), plus the
plan's ``chat_template_kwargs`` (``enable_thinking = false`` changes a Qwen3 generation prompt).

The template comes from the model directory (``chat_template.jinja``, else
``tokenizer_config.json``'s ``chat_template``; the special tokens from ``tokenizer_config.json``
and ``special_tokens_map.json``), read on the host where the model lives, or from the file a
plan names (``chat_template = "PATH"``). A model without one falls back to ChatML, and the
run says so once.

``strftime_now`` answers with the time this process first rendered a prompt, not the time of
each call: a template that dates its system prompt (Llama 3.x) would otherwise give the
configs of a campaign that runs past midnight different prompts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specbench_tui.errors import InputError

TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
#: The files of a model directory a template is built from, in the order they are read.
MODEL_FILES: tuple[str, ...] = (TEMPLATE_FILE, TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP)
#: The named special tokens a template sees (transformers' ``SPECIAL_TOKENS_ATTRIBUTES``).
SPECIAL_TOKEN_KEYS: tuple[str, ...] = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)

FALLBACK_NAME = "ChatML"
# The fallback, written for this tool: each message as <|im_start|>role ... <|im_end|>, then
# the assistant's header. It is what the Qwen family uses and what most chat models accept.
_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

Message = Mapping[str, Any]


@dataclass(frozen=True)
class ChatTemplate:
    """A template and the special tokens it is rendered with.

    ``source`` says where it came from (a path, or the fallback's name); ``add_bos_token`` is
    the tokenizer's own setting where its config states one (None: unstated), which decides
    whether a route that tokenizes with special tokens adds the BOS the template also wrote.
    """

    text: str
    source: str
    special_tokens: tuple[tuple[str, str], ...] = ()
    fallback: bool = False
    add_bos_token: bool | None = None

    @cached_property
    def sha256(self) -> str:
        """The template's hash as request rows record it (the text only: the special tokens
        come with the model, which the rows name already)."""
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def bos_token(self) -> str | None:
        return dict(self.special_tokens).get("bos_token")

    def render(
        self,
        messages: Sequence[Message],
        kwargs: Mapping[str, Any] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        """The text of ``messages`` as the model sees it, ending in the assistant's turn.

        ``kwargs`` are the plan's ``chat_template_kwargs``; as in transformers they may
        override a special token. A template that raises (``raise_exception``, a variable
        that is not there) is an :class:`InputError` naming it.
        """
        variables: dict[str, Any] = {
            **dict(self.special_tokens),
            **dict(kwargs or {}),
            "messages": [dict(m) for m in messages],
            "tools": None,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        try:
            return _compiled(self.text).render(**variables)
        except jinja2.TemplateError as exc:
            raise InputError(f"chat template {self.source}: {exc}") from exc

    def describe(self) -> str:
        """One line for the dry run and the report: where the template came from."""
        if self.fallback:
            return f"{FALLBACK_NAME} (the fallback: {self.source})"
        return f"{self.source} (sha256 {self.sha256[:12]})"


def fallback_template(why: str) -> ChatTemplate:
    """ChatML, for a model that has no template of its own; ``why`` says what was looked at."""
    return ChatTemplate(text=_CHATML, source=why, fallback=True)


# -- building a template from a model's files -------------------------------------------------


def _token_text(value: Any) -> str | None:
    """A special token as a config spells it: a string, or an AddedToken's ``content``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _json_object(text: str | None, where: str) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{where}: not valid JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object")
    return obj


def _named_template(raw: Any, where: str) -> str | None:
    """``chat_template`` as tokenizer_config.json holds it: a string, or a list of named
    templates (the one named ``default`` is the chat template)."""
    if raw is None or isinstance(raw, str):
        return raw or None
    if isinstance(raw, list):
        named = {
            t.get("name"): t.get("template")
            for t in raw
            if isinstance(t, dict) and isinstance(t.get("template"), str)
        }
        return named.get("default")
    raise InputError(f"{where}: chat_template must be a string or a list of named templates")


def _special_tokens(
    files: Mapping[str, str | None], model_dir: str
) -> tuple[tuple[tuple[str, str], ...], bool | None]:
    """The named special tokens (tokenizer_config.json first, special_tokens_map.json for
    what it lacks) and the config's ``add_bos_token``, whether or not a template is there."""
    config = _json_object(files.get(TOKENIZER_CONFIG), _at(model_dir, TOKENIZER_CONFIG))
    tokens_map = _json_object(files.get(SPECIAL_TOKENS_MAP), _at(model_dir, SPECIAL_TOKENS_MAP))
    special: dict[str, str] = {}
    for key in SPECIAL_TOKEN_KEYS:
        value = _token_text(config.get(key))
        if value is None:
            value = _token_text(tokens_map.get(key))
        if value is not None:
            special[key] = value
    add_bos = config.get("add_bos_token")
    return tuple(sorted(special.items())), add_bos if isinstance(add_bos, bool) else None


def _at(model_dir: str, name: str) -> str:
    return f"{model_dir.rstrip('/')}/{name}"


def template_from_files(files: Mapping[str, str | None], model_dir: str) -> ChatTemplate | None:
    """The template a model directory holds, from its files' texts (None: a file absent);
    None when it has none. Raises :class:`InputError` for a file that is not what it says."""
    config_at = _at(model_dir, TOKENIZER_CONFIG)
    special, add_bos = _special_tokens(files, model_dir)
    text = files.get(TEMPLATE_FILE)
    source = _at(model_dir, TEMPLATE_FILE)
    if not text:
        config = _json_object(files.get(TOKENIZER_CONFIG), config_at)
        text = _named_template(config.get("chat_template"), config_at)
        source = f"{config_at} chat_template"
    if not text:
        return None
    return ChatTemplate(text=text, source=source, special_tokens=special, add_bos_token=add_bos)


def template_from_file(
    text: str, path: str, model_files: Mapping[str, str | None] | None = None, model_dir: str = ""
) -> ChatTemplate:
    """A template the plan names by path; the special tokens still come from the model's
    files where they could be read (the plan's template replaces only the text)."""
    special, add_bos = _special_tokens(model_files or {}, model_dir)
    return ChatTemplate(text=text, source=path, special_tokens=special, add_bos_token=add_bos)


def template_path(name: str | None, plan_dir: Path | None) -> str | None:
    """The file a plan's ``chat_template`` names, absolute (a relative path is relative to
    the plan file)."""
    if name is None:
        return None
    path = Path(name).expanduser()
    if not path.is_absolute() and plan_dir is not None:
        path = plan_dir / path
    return str(path)


def check_template(template: ChatTemplate) -> None:
    """Compile the template now, so a broken one is said before anything runs."""
    try:
        _compiled(template.text)
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(
            f"chat template {template.source}:{exc.lineno}: not a valid jinja2 template "
            f"({exc.message})"
        ) from exc


# -- the environment transformers renders in --------------------------------------------------


class _Generation(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (templates that mark the assistant's tokens
    for training masks): rendered as its body, which is all a prompt needs."""

    tags = {"generation"}  # noqa: RUF012 - jinja2 reads it from the class

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # jinja2's own tojson escapes HTML characters, which a prompt must keep as they are.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@dataclass
class _Clock:
    started: datetime | None = field(default=None)

    def strftime_now(self, fmt: str) -> str:
        if self.started is None:
            self.started = datetime.now()
        return self.started.strftime(fmt)


_CLOCK = _Clock()


@lru_cache(maxsize=1)
def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_Generation, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _CLOCK.strftime_now
    return env


@lru_cache(maxsize=32)
def _compiled(text: str) -> jinja2.Template:
    return _environment().from_string(text)
