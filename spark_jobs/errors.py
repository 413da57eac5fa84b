"""One error hierarchy: every exception the project raises derives from ``DbspError``, which says
how the CLI ends and whether an Airflow task may retry.

Why on the class: the CLI (``cli/commands._user_errors``) and the DAG's task wrapper
(``orchestration/tasks.run_step``) used to keep their own lists of class names (the CLI by module
path string, so that naming a class did not import its module), and a renamed or new error fell
out of both silently, becoming a traceback or a pointless retry. Now the error says it itself,
and a test checks that every exception class of ``spark_jobs`` derives from this base.

Each class keeps its built-in base as well (``class ValueRefused(DbspError, ValueError)``), so an
``except ValueError`` that caught it before still does.

This module imports nothing of the project, so every layer may raise its errors.
"""
from __future__ import annotations


# The `dbsp` CLI's exit codes (nothing is committed unless the code is 0).
EXIT_OK = 0
EXIT_FAILED = 1        # a message says why: a circuit or profile error, a full disk, a changed circuit, ...
EXIT_REFUSED = 2       # the step's data was refused: an input file, a delete below zero, a value out of range
EXIT_QUALITY = 3       # a `fail` check of the quality gate did not hold
EXIT_LEASE_HELD = 4    # another live writer holds the circuit's lease
EXIT_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C
EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away (`dbsp explain X | head`)


class DbspError(Exception):
    """The base of every error of the project.

    ``exit_code``: how the CLI ends when this error reaches it, after printing ``user_message``
    as one message without a traceback; None: not the user's to act on (a signal between modules
    that should have been caught, or a bug), the traceback is shown. ``retryable``: False when a
    retry of the same Airflow task cannot succeed before the data, the circuit or its
    configuration changes; the task then fails at once and gives up its run.
    """

    exit_code: int | None = None
    retryable: bool = True

    def user_message(self, reset_command: str | None = None) -> str:
        """The message the CLI prints. ``reset_command``: the `dbsp reset` command line that
        rebuilds the circuit's state, as the user can paste it (for errors that advise it)."""
        return str(self)
