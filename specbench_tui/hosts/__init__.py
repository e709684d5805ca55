"""Where servers run: the plan's host tables and the registry of backends (``backends.py``),
service managers, GPU telemetry and the per-host facade the engine uses.

Nothing here imports textual or the plan; the plan asks the registry about its hosts, and the
engine drives these objects and turns their callbacks into events. Modules are imported by
name (this package loads none of them), so loading a plan loads no transport.
"""

import warnings

# asyncssh still names cryptography's DSA classes, which newer cryptography releases deprecate
# with a warning at import: a note for asyncssh's developers, not for the operator, whose
# stderr carries one line per failure. Set here, before any module of the package imports it.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
