"""User-facing errors: the CLI prints their message as one line and exits with status 2."""
from __future__ import annotations


class SageInputError(Exception):
    """Bad input the user can fix (a file, a column, a row, a model name).

    The message must name what is wrong and say what to do about it.
    """

    exit_code = 2


class ModelNotAvailableError(SageInputError):
    """A model id that is neither a local path, a bundled alias, nor in the local Hugging Face cache."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run, after the work that finished was kept: the message says what was kept
    and how to resume (the CLI prints it as one line and exits with status 130)."""

    exit_code = 130
