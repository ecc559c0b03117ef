"""Exit codes and the one bad-input error, the same for every command (main.py, gym_eval.py and the tools)."""

EXIT_OK = 0  # the command did its work (a run: a limit or the stop score ended it)
EXIT_CRASH = 1  # a process crashed (a run saves its state first), or one of a sweep's runs failed
EXIT_BAD_INPUT = 2  # input the user can fix: one line on stderr, no traceback
EXIT_SIGINT = 130  # Ctrl-C (128 + SIGINT), after the state is saved
EXIT_SIGTERM = 143  # SIGTERM (128 + SIGTERM), after the state is saved


class BadInput(ValueError):
    """Input the user can fix (a flag, a file, an environment, a model that does not fit): the message is one line
    for stderr, and the command exits with ``EXIT_BAD_INPUT``."""


# What a command reports as bad input: ours, and a library's ValueError about a value it was given (gymnasium's
# for an environment's arguments, say).
BAD_INPUT_ERRORS = (ValueError,)
