"""One error tree: every error class the product raises on purpose derives from a root in
``specbench_tui.errors``, so a caller catches a kind of failure (host, results, input, data)
without naming each package's class, and a last-resort boundary can tell a worded failure
from a bug.

It imports every product module (except the simulator's and the GPU agent's, which run as
programs of their own) and looks at the exception classes each defines.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import specbench_tui
from specbench_tui import errors

#: Classes that stand outside the tree on purpose, and why.
OUTSIDE = {
    # The GPU agent is shipped to a host as one standard-library script: it imports nothing.
    "specbench_tui.hosts.gpu_agent.SourceError",
    # The results package is a contract that stands on its own (tests/test_results_contract.py):
    # it imports nothing of the tool. What the tool raises when the results fail for good is
    # engine.run_control.StorageFailed, a ResultsError that carries the StorageError.
    "specbench_tui.results.files.StorageError",
    "specbench_tui.results.jsontypes.FieldTypeError",
    # What the tool raises for it is an InputError (store.open, report/inputs.py).
    "specbench_tui.results.files.NotAFile",
}
ROOTS = (
    errors.InputError,
    errors.HostError,
    errors.ResultsError,
    errors.DataError,
    errors.Interrupted,
)


def _product_errors() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(specbench_tui.__path__, "specbench_tui."):
        if info.name.startswith("specbench_tui.sim") or info.name.endswith("__main__"):
            continue  # the simulator mimics the engines' own errors; __main__ runs on import
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == info.name
            ):
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_product_error_has_a_root_of_the_tree() -> None:
    found = _product_errors()
    assert "specbench_tui.hosts.service.ServiceError" in found  # the walk saw the packages
    loose = sorted(
        name
        for name, cls in found.items()
        if name not in OUTSIDE
        and cls not in (errors.SpecbenchError, *ROOTS)
        and not issubclass(cls, ROOTS)
    )
    assert loose == []


def test_the_roots_keep_what_callers_catch_them_as() -> None:
    from specbench_tui.engine.run_control import AbortRequested, StorageFailed
    from specbench_tui.hosts.ssh import SshConnectError, SshError
    from specbench_tui.results.files import StorageError

    full = StorageError(__import__("pathlib").Path("/r/events.jsonl"), OSError(28, "No space"))
    failed = StorageFailed(full)
    assert isinstance(failed, errors.ResultsError) and failed.exit_code == errors.EXIT_STORAGE
    assert failed.error is full and isinstance(full, OSError)
    assert issubclass(AbortRequested, errors.Interrupted)
    assert issubclass(SshError, errors.HostError)
    assert issubclass(SshConnectError, errors.InputError)  # the user must fix it: exit 2
    assert SshConnectError("x").exit_code == errors.EXIT_INPUT
