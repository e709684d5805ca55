"""Console themes as data files: ``themes/*.toml`` validated and turned into Textual ``Theme``s.

Where they are looked for, in order (a later file with the same name wins):

1. the built-in ones: the repository's ``themes/`` (a checkout or an editable install), which a
   wheel carries as ``specbench_tui/themes/`` (pyproject's force-include);
2. ``themes/`` in the working directory: a user's own or edited themes, no reinstall needed.

A file that does not validate is reported (one line: file, key, what is wrong) and skipped;
the console then falls back to the default theme instead of refusing to start.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from textual.color import Color, ColorParseError
from textual.theme import Theme

DEFAULT_THEME = "specbench-dark"
_PACKAGE = Path(__file__).resolve().parent.parent
PACKAGE_THEMES = next(
    (d for d in (_PACKAGE / "themes", _PACKAGE.parent / "themes") if d.is_dir()),
    _PACKAGE.parent / "themes",
)


class ThemeFile(BaseModel):
    """What a theme file may say; unknown keys are errors because they are usually typos."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    dark: bool = True
    ansi: bool = False
    primary: str
    secondary: str | None = None
    accent: str | None = None
    warning: str | None = None
    error: str | None = None
    success: str | None = None
    foreground: str | None = None
    background: str | None = None
    surface: str | None = None
    panel: str | None = None
    boost: str | None = None
    luminosity_spread: float = Field(default=0.15, ge=0.0, le=1.0)
    text_alpha: float = Field(default=0.95, ge=0.0, le=1.0)
    variables: dict[str, str] = Field(default_factory=dict)

    @field_validator(
        "primary",
        "secondary",
        "accent",
        "warning",
        "error",
        "success",
        "foreground",
        "background",
        "surface",
        "panel",
        "boost",
    )
    @classmethod
    def _colour(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                Color.parse(value)
            except ColorParseError as exc:
                raise ValueError(
                    f"not a colour: {value!r} (use #rrggbb, a CSS name or ansi_<name>)"
                ) from exc
        return value

    def to_theme(self) -> Theme:
        data: dict[str, Any] = self.model_dump()
        return Theme(**data)


def load_theme_file(path: Path) -> Theme:
    """Parse and validate one file. Raises ValueError with a one-line, located message."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML: {exc}") from exc
    try:
        return ThemeFile.model_validate(raw).to_theme()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(file)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ValueError(f"{path}: {where}: {first['msg']}{more}") from exc


def load_themes(directory: Path | str) -> tuple[dict[str, Theme], list[str]]:
    """Every ``*.toml`` theme in ``directory``: the good ones by name, and one error line per
    bad file. A missing directory is not an error (a user need not have any themes)."""
    themes: dict[str, Theme] = {}
    errors: list[str] = []
    directory = Path(directory)
    if not directory.is_dir():
        return themes, errors
    for path in sorted(directory.glob("*.toml")):
        try:
            theme = load_theme_file(path)
        except ValueError as exc:
            errors.append(str(exc))
            continue
        themes[theme.name] = theme
    return themes, errors


def theme_dirs() -> list[Path]:
    """Where themes come from, lowest precedence first (see the module docstring)."""
    dirs = [PACKAGE_THEMES]
    local = Path.cwd() / "themes"
    if local.resolve() != PACKAGE_THEMES.resolve():
        dirs.append(local)
    return dirs


def load_all_themes(dirs: list[Path] | None = None) -> tuple[dict[str, Theme], list[str]]:
    themes: dict[str, Theme] = {}
    errors: list[str] = []
    for d in dirs if dirs is not None else theme_dirs():
        found, errs = load_themes(d)
        themes.update(found)
        errors.extend(errs)
    return themes, errors


def resolve_theme_name(
    name: str | None, themes: dict[str, Theme], builtin: set[str] | frozenset[str] = frozenset()
) -> str | None:
    """``--theme`` accepts a theme's full name, its short name (``dark`` for
    ``specbench-dark``) or a Textual built-in theme. None when nothing matches."""
    if name is None:
        return None
    for candidate in (name, f"specbench-{name}"):
        if candidate in themes or candidate in builtin:
            return candidate
    return None
