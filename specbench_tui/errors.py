"""Errors that end in one clear line for the user (exit status 2), never a traceback."""


class InputError(Exception):
    """Bad input from the user: a plan, an argument, a results directory, a host key.

    The message is the whole story: ``file:line: key.path: what is wrong; what would be right``.
    """

    exit_code = 2
