"""The Textual console; the only package that imports textual."""

from specbench_tui.tui.app import ConsoleApp, run_console
from specbench_tui.tui.themes import load_themes

__all__ = ["ConsoleApp", "load_themes", "run_console"]
