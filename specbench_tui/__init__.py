"""specbench-tui: speculative-decoding benchmark campaigns on GPU hosts, from a terminal."""

__version__ = "0.1.0"
