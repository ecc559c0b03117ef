"""The argument parser of every command: one line for a mistake, full flag names, each default printed once."""

import argparse
from typing import Any, NoReturn

from core.errors import EXIT_BAD_INPUT


class OneLineParser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit 2 (argparse would print the usage block first). Flags are spelled
    out in full: a prefix that works today would silently take another meaning the day a flag sharing it is added."""

    def __init__(self, *args: Any, allow_abbrev: bool = False, **kwargs: Any):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")


SEED_LIMIT = 2**31  # each process adds its rank, and each environment 10007 x its index: numpy's seeds end at 2**32


def random_seed(text: str) -> int:
    """argparse type of a seed: an integer in [0, 2**31)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**31), got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type of a count: an integer above 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each flag's default, printed once: a help text that already says its default (``default:``
    or ``auto:``) is left as it is, and a flag without a default (None, or a switch that is off) shows none."""

    def _get_help_string(self, action):
        text = action.help or ""
        unset = any(action.default is v for v in (None, False, argparse.SUPPRESS))  # `is`: 0 == False, 0 is shown
        if "default:" in text or "auto:" in text or unset:
            return text
        return super()._get_help_string(action)

    def _format_args(self, action, default_metavar):
        if action.nargs == "+" and isinstance(action.metavar, str) and " " in action.metavar:
            return action.metavar  # a flag of a few shapes (``START END|none``) spells them out itself
        return super()._format_args(action, default_metavar)
