"""``python -m specbench_tui.report DIR``: write the report of one results directory and print
the paths written, one a line. A campaign runs this as a child process when it ends
(engine/report_child.py), so that a signal can stop the report's layout and TeX run with
the process group; users run ``specbench-tui --report DIR``, which also brings the views up
to date."""

from __future__ import annotations

import sys
from pathlib import Path

from specbench_tui.errors import EXIT_INPUT, EXIT_OK, InputError
from specbench_tui.report.render import render_report


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m specbench_tui.report RESULTS_DIR", file=sys.stderr)
        return EXIT_INPUT
    try:
        written = render_report(Path(argv[0]))
    except InputError as exc:
        print(f"specbench-tui: {exc}", file=sys.stderr)
        return EXIT_INPUT
    for path in written:
        print(path, flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
