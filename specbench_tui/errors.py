"""Errors that end in one clear line for the user, and the exit statuses of the CLI contract."""

EXIT_OK = 0  # every cell finished and every check passed
EXIT_FAILED = 1  # the campaign ended with failed cells or a failed check
EXIT_INPUT = 2  # invalid input: plan, arguments, host key, unwritable results
EXIT_STORAGE = 3  # the results could not be written mid-run (disk full that did not clear)
EXIT_INTERNAL = 70  # a bug in this tool (a traceback is printed)
EXIT_INTERRUPTED = 130  # aborted by the operator or a signal
EXIT_PIPE = 141  # the reader of stdout went away (a closed pipe: `| head`), as 128 + SIGPIPE


class InputError(Exception):
    """Bad input from the user: a plan, an argument, a results directory, a host key.

    The message is the whole story: ``file:line: key.path: what is wrong; what would be right``.
    """

    exit_code = EXIT_INPUT
