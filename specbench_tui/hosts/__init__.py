"""Where servers run: service managers, GPU telemetry and the per-host facade the engine uses.

Nothing here imports textual; the engine drives these objects and turns their callbacks
into events.
"""

from specbench_tui.hosts.factory import make_host
from specbench_tui.hosts.host import Host, SimHost
from specbench_tui.hosts.process import ProcessService, port_in_use
from specbench_tui.hosts.service import READY_LINE, Service, ServiceError
from specbench_tui.hosts.telemetry import (
    AgentRunner,
    GpuProcess,
    GpuSample,
    GpusNotFreeError,
    LocalAgentRunner,
    TelemetryReader,
    wait_gpus_free,
)

__all__ = [
    "READY_LINE",
    "AgentRunner",
    "GpuProcess",
    "GpuSample",
    "GpusNotFreeError",
    "Host",
    "LocalAgentRunner",
    "ProcessService",
    "Service",
    "ServiceError",
    "SimHost",
    "TelemetryReader",
    "make_host",
    "port_in_use",
    "wait_gpus_free",
]
