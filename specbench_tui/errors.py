"""Errors that end in one clear line for the user, and the exit statuses of the CLI contract.

Every error the tool raises on purpose derives from one of the roots below, so a caller can
catch a kind of failure without naming each package's class, and a last-resort boundary can
tell "a failure we know how to word" (a :class:`SpecbenchError`) from a bug. The classes
themselves live where they are raised (``hosts.service.ServiceError``,
``engine.run_control.StorageFailed``, ``table_types.PlanError``, ...); this module is floor
1, so any package can derive from it. The results package alone stays outside: it is a
contract that imports nothing of the tool, so its ``StorageError`` (an OSError) is carried by
``StorageFailed`` and its ``FieldTypeError`` is a ValueError.

- :class:`InputError`: the user must fix something (plan, argument, host key); exit 2.
- :class:`HostError`: a host, its transport or a server on it failed (start, health, stop).
- :class:`ResultsError`: the results could not be written; exit 3.
- :class:`DataError`: data from outside (a server's stream, a file, a download) that cannot
  be what it should be.
- :class:`Interrupted`: the operator or a signal ended the wait; exit 130.
"""

EXIT_OK = 0  # every cell finished and every check passed
EXIT_FAILED = 1  # failed cells or a failed check (the gate: a figure regressed)
EXIT_INPUT = 2  # invalid input: plan, arguments, host key, unwritable results
EXIT_STORAGE = 3  # the results could not be written mid-run (disk full that did not clear)
EXIT_INTERNAL = 70  # a bug in this tool (a traceback is printed)
EXIT_INTERRUPTED = 130  # aborted by the operator or a signal
EXIT_PIPE = 141  # the reader of stdout went away (a closed pipe: `| head`), as 128 + SIGPIPE


class SpecbenchError(Exception):
    """The root of the tree: a failure this tool words itself (its message is for people).

    ``exit_code`` is the status the CLI ends with when one reaches it unhandled.
    """

    exit_code = EXIT_FAILED


class InputError(SpecbenchError):
    """Bad input from the user: a plan, an argument, a results directory, a host key.

    The message is the whole story: ``file:line: key.path: what is wrong; what would be right``.
    """

    exit_code = EXIT_INPUT


class HostError(SpecbenchError):
    """A host, the link to it, or a server on it failed: it could not be reached, a server
    could not be started, got unhealthy or could not be stopped, a command there failed."""


class ResultsError(SpecbenchError):
    """The results directory could not be written (disk full, read-only, no permission)."""

    exit_code = EXIT_STORAGE


class DataError(SpecbenchError):
    """Data read from outside the tool that cannot be what it should be: a server's stream,
    a JSON field of the wrong type, a config file, a download that is not the pinned file."""


class Interrupted(SpecbenchError):
    """The operator or a signal ended the run while something long was awaited."""

    exit_code = EXIT_INTERRUPTED


def describe(exc: BaseException) -> str:
    """The one line an error is told with: a worded error's own message; anything else with
    its class first (an OSError's or a bug's class is the first clue to what happened)."""
    if isinstance(exc, SpecbenchError) and str(exc):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
