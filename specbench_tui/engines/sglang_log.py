"""SGLang's log lines as its server words them, for a server that prints them in its stead
(the embedded simulator): written here beside the parser that reads them (``sglang.py``), so
that the two cannot drift apart.

The wording follows the scheduler's ``Prefill batch`` / ``Decode batch`` lines
(``srt/observability/scheduler_metrics_mixin.py``), their ``[YYYY-MM-DD HH:MM:SS TPn] ``
prefix and trailing commas; the ``DDTree stats`` line is that of the DDTree builds.
"""

from __future__ import annotations


class SglangLogFormat:
    """SGLang's line prefix and statistics lines (:class:`ServerLogFormat`)."""

    scheduler_frame = '  File "sglang/srt/managers/scheduler.py", line 2612, in run_scheduler'

    def prefix(self, stamp: str, rank: int | None) -> str:
        tag = f"{stamp} TP{rank}" if rank is not None else stamp
        return f"[{tag}] "

    def prefill_line(
        self, new_seq: int, new_token: int, cached: int, usage: float, running: int, queued: int
    ) -> str:
        return (
            f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, "
            f"#cached-token: {cached}, token usage: {usage:.2f}, "
            f"#running-req: {running}, #queue-req: {queued}, "
        )

    def decode_line(
        self,
        running: int,
        tokens: int,
        usage: float,
        accept_len: float | None,
        accept_rate: float | None,
        throughput: float,
        queued: int,
    ) -> str:
        spec = ""
        if accept_len is not None and accept_rate is not None:
            spec = f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
        return (
            f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
            f"{spec}cuda graph: True, gen throughput (token/s): {throughput:.2f}, "
            f"#queue-req: {queued}, "
        )

    def tree_line(
        self, budget: int, nodes: int, accept_len: float, draft_ms: float, verify_ms: float
    ) -> str:
        return (
            f"DDTree stats: budget={budget}, tree nodes={nodes}, accept_len={accept_len:.2f}, "
            f"draft_ms={draft_ms:.2f}, verify_ms={verify_ms:.2f}"
        )
