from specbench_tui.cli import main

raise SystemExit(main())
