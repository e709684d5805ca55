"""Render report.md and report.tex from a results directory (placeholder until aggregation lands)."""

from __future__ import annotations

from pathlib import Path


def render_report(results_dir: Path) -> list[Path]:
    return []
