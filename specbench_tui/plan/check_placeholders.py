"""Placeholders in the command templates of ``[server]`` and ``[configs.NAME]``.

A template is a Python format string over the placeholders the tool fills in (``{python}``,
``{model}``, ``{tp}``, ``{port}``, ``{host}``, ``{config}``) and the config's params; literal
braces (JSON such as a speculative config given as one argument) are written doubled. A
mistake gets the template rewritten as it should be as its hint.
"""

from __future__ import annotations

import string

from specbench_tui.table_types import PlanError


def check_placeholders(
    where: tuple[str, ...], templates: list[tuple[str, str]], allowed: set[str]
) -> list[PlanError]:
    """Each template in ``templates`` (key, text) at ``where``: it parses as a format string,
    names only ``allowed`` placeholders, and has no format spec or conversion on them (plan
    values are substituted as they are). A value gets one message, whose hint rewrites it."""
    errs: list[PlanError] = []
    for key, text in templates:
        try:
            fields = list(string.Formatter().parse(text))
        except ValueError as exc:
            errs.append(
                PlanError(
                    (*where, key),
                    f"{text!r}: {exc}; write {{{{ and }}}} for literal braces, "
                    f"e.g. {_literal_braces(text, allowed)!r}",
                )
            )
            continue
        names = [name for _, name, _, _ in fields if name is not None]
        for _, name, spec, conv in fields:
            if name in allowed and (spec or conv):
                errs.append(
                    PlanError(
                        (*where, key),
                        f"{text!r}: format specs and conversions are not supported in plan "
                        f"templates; write {{{name}}}",
                    )
                )
        for n in names:
            if n not in allowed:
                hint = (
                    f"; for literal braces (JSON such as a speculative config) write "
                    f"{{{{ and }}}}: {_literal_braces(text, allowed)!r}"
                    if not n.isidentifier()
                    else "; write {{ and }} for literal braces"
                )
                errs.append(
                    PlanError(
                        (*where, key),
                        f"unknown placeholder {{{n}}} in {text!r}; "
                        f"known: {', '.join('{' + a + '}' for a in sorted(allowed))}{hint}",
                    )
                )
                break  # one message per value: the hint rewrites the whole of it
    return errs


def _literal_braces(text: str, allowed: set[str]) -> str:
    """``text`` with every brace doubled except around the known placeholders."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "{":
            end = text.find("}", i)
            if end > i and text[i + 1 : end] in allowed:
                out.append(text[i : end + 1])
                i = end + 1
                continue
            out.append("{{")
        elif text[i] == "}":
            out.append("}}")
        else:
            out.append(text[i])
        i += 1
    return "".join(out)
