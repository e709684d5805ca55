"""Entry point: ``python -m specbench_tui.sim --model-path X --tp-size N --port P ...``."""

from specbench_tui.sim.server import main

raise SystemExit(main())
