"""The results as they build up: the comparison table the report computes, one TP size at a
time, sortable, with 95% intervals where repeats allow, the best config starred where it is
distinguishable and configs that failed a correctness check marked.

The pane only shows a frame (``results_source.COLUMNS``); the app computes it in a worker
thread when a cell finishes and hands it over, so the event loop never waits on polars.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import polars as pl
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from specbench_tui.tui.look import MARKS, palette_for
from specbench_tui.tui.results_source import TOO_FEW

#: Sortable columns: (key in the frame, header, descending by default). ``point`` groups
#: the rows of one measurement point (prompt set, length), fastest first within each.
SORTS: tuple[tuple[str, str, bool], ...] = (
    ("point", "prompt/len", False),
    ("tok_s", "decode tok/s", True),
    ("speedup", "speed-up", True),
    ("accept", "accept", True),
    ("config", "config", False),
    ("prompt_set", "prompt", False),
    ("max_tokens", "len", False),
)
BEST = "★"
UNCHECKED = "◇"  # no verdict covers the config's outputs: never best


def _num(v: Any, fmt: str) -> str:
    return "—" if v is None else fmt.format(v)


def _width(headers: list[str], body: list[list[Text]]) -> int:
    """The width a table of these cells takes (a column: its widest cell, two of padding)."""
    widths = [len(h) for h in headers]
    for cells in body:
        for i, c in enumerate(cells):
            widths[i] = max(widths[i], c.cell_len)
    return sum(w + 2 for w in widths)


def _pm(v: Any, lo: Any, hi: Any, fmt: str) -> str:
    """``412.3 ±18.0``: the figure, then half its 95% interval when there is one."""
    if v is None:
        return "—"
    if lo is None or hi is None:
        return fmt.format(v)
    return f"{fmt.format(v)} ±{fmt.format((hi - lo) / 2)}"


class ResultsPane(Vertical):
    ALLOW_MAXIMIZE = True
    can_focus = False

    BINDINGS: ClassVar[list[BindingType]] = [
        # not in the footer (Help and Quit must stay there): the title says o and [ ]
        Binding("o", "next_sort", "Sort", id="results.sort", show=False),
        Binding("O", "reverse_sort", "Reverse", id="results.reverse", show=False),
        Binding("right_square_bracket", "next_tp", "Next TP", id="results.next_tp", show=False),
        Binding("left_square_bracket", "prev_tp", "Prev TP", id="results.prev_tp", show=False),
        Binding("v", "toggle_pooled", "Pooled", id="results.pooled", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.frame: pl.DataFrame | None = None
        self.note = "waiting for the first finished single-stream cell…"
        self.tps: list[int] = []
        self.tp: int | None = None
        self.sort_key = "point"
        self.descending = False
        self.pooled = False  # the report's pooled rows (v) instead of one per point
        self.updated: float | None = None
        self.shown_rows: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(
            id="results-table", cursor_type="row", zebra_stripes=True, show_cursor=True
        )
        yield table
        yield Static("", id="results-note")

    def on_mount(self) -> None:
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()  # narrow or wide columns

    @property
    def table(self) -> DataTable[Any]:
        return self.query_one("#results-table", DataTable)

    # --- data -----------------------------------------------------------------------------

    def show(self, frame: pl.DataFrame | None, note: str = "") -> None:
        self.frame = frame
        self.updated = time.time()
        self.note = note
        tps = sorted({int(t) for t in frame["tp"].to_list()}) if frame is not None else []
        self.tps = tps
        if self.tp not in tps:
            self.tp = tps[0] if tps else None
        self._redraw()

    def rows(self) -> list[dict[str, Any]]:
        """The rows of the TP on show, in the chosen order (nulls last whatever the order)."""
        if self.frame is None or self.tp is None or self.frame.height == 0:
            return []
        df = self.frame.filter(pl.col("tp") == self.tp)
        if "pooled" in df.columns:  # a frame of per-point and pooled rows: one kind on show
            df = df.filter(pl.col("pooled").fill_null(False) == self.pooled)
        if self.sort_key == "point":
            keys = ["host", "workload", "prompt_set", "max_tokens"]
            df = df.sort(
                [*keys, "tok_s"],
                descending=[self.descending] * len(keys) + [True],
                nulls_last=True,
            )
        elif self.sort_key in df.columns:
            df = df.sort(self.sort_key, descending=self.descending, nulls_last=True)
        return df.to_dicts()

    # --- drawing --------------------------------------------------------------------------

    def _retitle(self) -> None:
        parts = ["Results"]
        if self.tp is not None:
            where = (
                f" {self.tps.index(self.tp) + 1}/{len(self.tps)} [ ]" if len(self.tps) > 1 else ""
            )
            parts.append(f"TP{self.tp}{where}")
        header = next((h for k, h, _ in SORTS if k == self.sort_key), self.sort_key)
        arrow = "" if self.sort_key == "point" else " ↓" if self.descending else " ↑"
        parts.append(f"{header}{arrow} (o)")
        parts.append("pooled (v)" if self.pooled else "per prompt/len (v)")
        self.border_title = " · ".join(parts)

    def _redraw(self) -> None:
        pal = palette_for(self.app)
        table = self.table
        table.clear(columns=True)
        rows = self.rows()
        self.shown_rows = rows
        self._retitle()
        note = self.query_one("#results-note", Static)
        if not rows:
            note.update(Text(self.note or "no single-stream results yet", style=pal.muted))
            note.display = True
            return
        # with intervals if they fit; narrow (80x24) without them, prompt and length in one
        # column, short headers and speed-up, tok/s and accept right after the config, so
        # that the answer stays in view however long the names
        room = self.content_region.width - 1  # the vertical scrollbar
        wide = True
        cols, headers, body = self._layout(rows, wide=True)
        if not self.is_maximized and _width(headers, body) > room:
            wide = False
            cols, headers, body = self._layout(rows, wide=False)
            # one column of space between columns instead of two
            headers = [" " + h for h in headers]
            body = [[Text(" ") + c for c in cells] for cells in body]
        table.cell_padding = 1 if wide else 0
        for (key, _), header in zip(cols, headers, strict=True):
            table.add_column(header, key=key)
        for cells in body:
            table.add_row(*cells)
        repeats = {r.get("repeats") for r in rows}
        legend = []
        if any(r.get("failed_check") for r in rows):
            legend.append(f"{MARKS['failed_check']} failed a check: not a speed-up")
        if any(r.get("unchecked") and not r.get("failed_check") for r in rows):
            legend.append(f"{UNCHECKED} unchecked: no verdict on its outputs yet")
        if any(r.get("best") for r in rows):
            legend.append(f"{BEST} best, beyond the runner-up's interval")
        if any(r.get("partial") for r in rows):
            legend.append("n/m: cells done of planned (partial: never ★)")
        if len(repeats) == 1 and None not in repeats:
            unit = "runs" if all(r.get("runs") for r in rows) else "repeats"
            legend.append(f"{repeats.pop()} {unit} each")
        if not wide and any(r.get("baseline") for r in rows):
            legend.append("* baseline")
        if any(r.get("tok_s_lo") is not None for r in rows):
            legend.append(
                "± half a 95% interval over repeats" if wide else "z shows the 95% intervals"
            )
        if self.note:
            legend.append(self.note)
        note.update(Text(" · ".join(legend), style=pal.muted))
        note.display = bool(legend)

    def _layout(
        self, rows: list[dict[str, Any]], *, wide: bool
    ) -> tuple[list[tuple[str, str]], list[str], list[list[Text]]]:
        """Columns, their headers and the cells of every row, wide or narrow."""
        hosts = {r["host"] for r in rows}
        workloads = {r["workload"] for r in rows}
        repeats = {r.get("repeats") for r in rows}
        cols: list[tuple[str, str]] = [("config", "config")]
        if len(hosts) > 1:
            cols.insert(0, ("host", "host"))
        if not wide:  # the answer first: speed-up beside the config, never scrolled away
            cols += [("speedup", "speedup"), ("tok_s", "dec tok/s"), ("accept", "acc")]
        if len(workloads) > 1:
            cols.append(("workload", "workload"))
        if wide:
            cols += [("prompt_set", "prompt"), ("max_tokens", "len")]
        else:
            cols.append(("point", "prompt"))
        if len(repeats) > 1:
            cols.append(("repeats", "rep"))
        if wide:
            cols += [("tok_s", "decode tok/s"), ("speedup", "speed-up"), ("accept", "accept")]
        if any(r.get("accept_mean") is not None for r in rows):
            cols.append(("accept_mean", "acc/req" if not wide else "accept (req. mean)"))
        if any(r.get("j_per_token") is not None for r in rows):
            cols.append(("j_per_token", "J/token" if wide else "J/tok"))
        headers = [
            header
            + (
                (" ↓" if self.descending else " ↑")
                if key == self.sort_key and key != "point"
                else ""
            )
            for key, header in cols
        ]
        return cols, headers, [self._cells(r, cols, wide=wide) for r in rows]

    def _cells(self, r: dict[str, Any], cols: list[tuple[str, str]], *, wide: bool) -> list[Text]:
        pal = palette_for(self.app)
        failed = bool(r.get("failed_check"))
        open_check = bool(r.get("unchecked")) and not failed
        best = bool(r.get("best"))
        cells: list[Text] = []
        for key, _ in cols:
            if key == "config":
                mark = (
                    MARKS["failed_check"] + " "
                    if failed
                    else UNCHECKED + " "
                    if open_check
                    else BEST + " "
                    if best
                    else "  "
                )
                style = (
                    pal.warning if failed or open_check else pal.success + pal.bold if best else ""
                )
                label = str(r["config"])  # short, as the plan tree names it
                if r.get("baseline"):
                    label += " (base)" if wide else "*"
                cell = Text(mark + label, style=style)
                if r.get("partial"):  # covers only the sets that finished so far
                    cell.append(f" {r['partial']}", style=pal.muted)
                cells.append(cell)
            elif key == "tok_s":
                lo, hi = (r.get("tok_s_lo"), r.get("tok_s_hi")) if wide else (None, None)
                text = _pm(r["tok_s"], lo, hi, "{:.1f}" if wide else "{:.0f}")
                cells.append(Text(text, style=pal.success + pal.bold if best else ""))
            elif key == "speedup":
                lo, hi = (r.get("speedup_lo"), r.get("speedup_hi")) if wide else (None, None)
                text = _pm(r["speedup"], lo, hi, "{:.2f}")
                if r["speedup"] is not None:
                    text = text.replace(" ±", "× ±", 1) if "±" in text else text + "×"
                    if r.get("speedup_too_few"):  # no interval to show: say why
                        text += f" ({TOO_FEW})" if wide else "?"
                doubt = bool(r.get("why"))
                if failed and wide:  # narrow: the ⚠ on the config says it
                    text += " lossy"
                elif open_check and wide:
                    text += " unchecked"
                elif doubt:  # unlike its baseline, or above what the accept length allows
                    said = "implausible" if r.get("implausible") else "not comparable"
                    text += f" {said}" if wide else "!"
                style = pal.warning if failed or open_check or doubt else ""
                cells.append(Text(text, style=style))
            elif key in ("accept", "accept_mean"):
                cells.append(Text(_num(r.get(key), "{:.2f}")))
            elif key == "j_per_token":
                cells.append(Text(_num(r.get(key), "{:.3f}")))
            elif key == "point":
                length = "" if r.get("max_tokens") is None else f"/{r['max_tokens']}"
                cells.append(Text(f"{r.get('prompt_set') or '—'}{length}"))
            else:
                v = r.get(key)
                cells.append(Text("—" if v is None else str(v)))
        return cells

    # --- keys -----------------------------------------------------------------------------

    def _sort_by(self, key: str) -> None:
        if key == self.sort_key:
            self.descending = not self.descending
        else:
            self.sort_key = key
            self.descending = next((d for k, _, d in SORTS if k == key), False)
        self._redraw()

    def action_next_sort(self) -> None:
        keys = [k for k, _, _ in SORTS]
        i = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_key = keys[(i + 1) % len(keys)]
        self.descending = SORTS[(i + 1) % len(keys)][2]
        self._redraw()

    def action_reverse_sort(self) -> None:
        self.descending = not self.descending
        self._redraw()

    def action_toggle_pooled(self) -> None:
        """Fold to the report's pooled rows (every prompt set and length of a workload in
        one) or back to one row per point."""
        self.pooled = not self.pooled
        self._redraw()

    def action_next_tp(self) -> None:
        self._step_tp(1)

    def action_prev_tp(self) -> None:
        self._step_tp(-1)

    def _step_tp(self, step: int) -> None:
        if not self.tps:
            return
        i = self.tps.index(self.tp) if self.tp in self.tps else 0
        self.tp = self.tps[(i + step) % len(self.tps)]
        self._redraw()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if any(k == key for k, _, _ in SORTS):
            self._sort_by(key)
