"""Theme files: they validate, the shipped copy matches the repository's, bad ones are
reported with their place, and every theme renders the whole console."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.themes import (
    PACKAGE_THEMES,
    load_all_themes,
    load_themes,
    resolve_theme_name,
)
from tests.support.scripted import ScriptedControl, sample_campaign

REPO_THEMES = Path(__file__).resolve().parents[1] / "themes"


def test_repository_themes_load_and_are_the_built_in_ones() -> None:
    themes, errors = load_themes(REPO_THEMES)
    assert errors == []
    assert {"specbench-dark", "specbench-light", "specbench-ansi16"} <= set(themes)
    assert themes["specbench-ansi16"].ansi and not themes["specbench-light"].dark
    assert PACKAGE_THEMES.resolve() == REPO_THEMES.resolve()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('name = "a"\nprimary = "nope"\n', "primary: Value error, not a colour"),
        ('name = "a"\nprimary = "#fff"\nprimry = "#000"\n', "primry: Extra inputs"),
        ('name = "Bad Name"\nprimary = "#fff"\n', "name: String should match"),
        ('name = "a"\nprimary = \n', "invalid TOML"),
        ('primary = "#fff"\n', "name: Field required"),
    ],
)
def test_invalid_theme_files_are_reported(tmp_path: Path, body: str, expected: str) -> None:
    (tmp_path / "bad.toml").write_text(body)
    (tmp_path / "good.toml").write_text('name = "good"\nprimary = "#123456"\n')
    themes, errors = load_themes(tmp_path)
    assert list(themes) == ["good"]
    assert len(errors) == 1 and "bad.toml" in errors[0] and expected in errors[0], errors


def test_missing_directory_is_not_an_error(tmp_path: Path) -> None:
    assert load_themes(tmp_path / "none") == ({}, [])


def test_later_directory_overrides_and_names_resolve(tmp_path: Path) -> None:
    (tmp_path / "dark.toml").write_text('name = "specbench-dark"\nprimary = "#ff0000"\n')
    themes, errors = load_all_themes([PACKAGE_THEMES, tmp_path])
    assert errors == [] and themes["specbench-dark"].primary == "#ff0000"
    assert resolve_theme_name("dark", themes) == "specbench-dark"
    assert resolve_theme_name("specbench-light", themes) == "specbench-light"
    assert resolve_theme_name("nord", themes, {"nord"}) == "nord"
    assert resolve_theme_name("nope", themes) is None
    assert resolve_theme_name(None, themes) is None


@pytest.mark.console
@pytest.mark.parametrize("theme", ["dark", "light", "ansi16"])
async def test_every_theme_renders_the_console(theme: str) -> None:
    events = sample_campaign()
    app = ConsoleApp(ScriptedControl(events), theme=theme, clock=lambda: events[-1].ts)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(20):
            await pilot.pause(0.03)
            if app.frames and not len(app.inbox):
                break
        await pilot.pause(0.3)  # plots drawn with the theme's colours
        assert app.theme == f"specbench-{theme}"
        assert app.plot_draws > 0
        assert "specbench" in app.export_screenshot()


@pytest.mark.console
@pytest.mark.parametrize("theme", ["dark", "light"])
async def test_plots_draw_their_series_in_the_themes_colours(theme: str) -> None:
    """Each running group's series in one of the theme's colours (primary, accent, ...),
    the same group in the same colour in every plot; nothing in plotext's own palette."""
    from textual.color import Color

    from specbench_tui.tui.look import series_colours
    from specbench_tui.tui.plots import LivePlot
    from tests.support.scripted import packed_campaign

    events = packed_campaign()
    frozen = events[-1].ts + 1.0
    app = ConsoleApp(
        ScriptedControl(events), theme=theme, clock=lambda: frozen, results_source=None
    )
    async with app.run_test(size=(200, 60)) as pilot:
        for _ in range(50):
            await pilot.pause(0.05)
            if app.frames and not len(app.inbox) and app.plot_draws:
                break
        await pilot.pause(0.5)
        wanted = [c for c in series_colours(app) if isinstance(c, tuple)]
        text_colour = Color.parse(app.theme_variables["foreground"]).rgb
        plot = next(p for p in app.main.query(LivePlot) if p.key == "gen")
        drawn = plot.render()
        used = set()
        for span in drawn.spans:
            c = span.style.color if not isinstance(span.style, str) else None
            if c is not None and c.triplet is not None:
                used.add(tuple(c.triplet))

    def near(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
        return all(abs(x - y) <= 3 for x, y in zip(a, b, strict=True))

    series = {u for u in used if not near(u, text_colour)}
    assert len(series) >= 2, used  # several groups, several colours
    for u in series:
        assert any(near(u, w) for w in wanted), (u, wanted)
