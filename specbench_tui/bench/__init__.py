"""Load generation and measurement: the streaming client, workloads, prompt sets, per-cell
metrics and server-log parsing. Nothing here imports textual: the engine and the headless mode
use it without a console."""
