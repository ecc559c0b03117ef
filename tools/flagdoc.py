"""The flag reference of the documentation site, generated from the commands' own parsers so that it cannot drift.

    python -m tools.flagdoc            # writes docs/reference/flags.md
    python -m tools.flagdoc --check    # exit 1 if the page is not what the parsers give now (the tests run this)

One table per argument group of ``main.py`` (the groups of ``python main.py --help``), then ``gym_eval.py``'s flags:
each flag's names, its default as ``--help`` says it, and its help text. A default that depends on the machine
(``--gpu-ids``: every visible GPU) is written as the help text words it, never as this machine's value.
"""

import argparse
import os
import re
import sys
from collections.abc import Sequence

from core.cli import OneLineParser
from core.errors import EXIT_BAD_INPUT, EXIT_CRASH, EXIT_OK
from core.files import atomic_write_text

PROG = "python -m tools.flagdoc"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "reference", "flags.md")
AUTO = "auto"

HEADER = """# Flags

Every flag of `python main.py` and `python gym_eval.py`, generated from their parsers by `python -m tools.flagdoc`
(a test fails when this page and the parsers differ). `python main.py --help` prints the same. Booleans are real
booleans (`--flag` / `--no-flag`); a flag is spelled out in full (a prefix such as `--max-frame` is refused). A
default of `auto` is picked at start-up for the environment family and the machine (see [Defaults](defaults.md)); the
start-up line prints what was picked, and `args.json` records it.
"""


def default_words(action: argparse.Action) -> str:
    """The default as ``--help`` says it: the help's own ``default: ...`` where it words one (a default that depends
    on the machine), else the parser's value in words."""
    phrase = re.search(r"default: ([^;)]*)", action.help or "")
    if phrase:
        return phrase.group(1)
    value = action.default
    if isinstance(value, list):
        return " ".join(map(str, value)) if value else "none"
    if value is None or value is argparse.SUPPRESS:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell; flag names and values as code."""
    text = text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"(?<![\w`-])(--[a-z0-9][a-z0-9-]*)", r"`\1`", text)


def names(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    """The flag's names, its arguments spelled as ``--help`` spells them (the parser's own formatter)."""
    if isinstance(action, argparse.BooleanOptionalAction):
        spelled = [o for o in action.option_strings if not o.startswith("--no-")]
        return " ".join(f"`{o}`" for o in spelled) + f" / `--no-{spelled[-1][2:]}`"
    shape = formatter._format_args(action, formatter._get_default_metavar_for_optional(action)) if action.nargs != 0 \
        else ""
    *short, long = action.option_strings
    return " ".join([*(f"`{o}`" for o in short), f"`{long} {shape}`" if shape else f"`{long}`"])


def group_table(group: argparse._ArgumentGroup, formatter: argparse.HelpFormatter) -> str:
    rows = [a for a in group._group_actions if a.option_strings and a.dest != "help"]
    if not rows:
        return ""
    lines = ["| flag | default | what it does |", "|---|---|---|"]
    for action in rows:
        help_text = re.sub(r"\s*\(default: [^;)]*\)", "", action.help or "")  # the default has its own column
        help_text = re.sub(r"[;,]\s*default: [^;)]*", "", re.sub(r"\(default: [^;)]*;\s*", "(", help_text))
        lines.append(f"| {names(action, formatter)} | {cell(default_words(action))} | {cell(help_text)} |")
    return "\n".join(lines) + "\n"


def parser_section(parser: argparse.ArgumentParser, command: str, level: str) -> str:
    parts = [f"{level} `{command}`\n\n{parser.description.splitlines()[0]}\n"]
    for group in parser._action_groups:
        table = group_table(group, parser._get_formatter())
        if not table:
            continue
        title = {"options": "general", "optional arguments": "general"}.get(group.title, group.title)
        about = f"{group.description[0].upper()}{group.description[1:]}.\n\n" if group.description else ""
        parts.append(f"{level}# {title[0].upper()}{title[1:]}\n\n{about}{table}")
    return "\n".join(parts)


def page() -> str:
    from gym_eval import build_parser as eval_parser  # noqa: PLC0415 (imports torch: only when the page is made)
    from runtime.config import build_parser as train_parser  # noqa: PLC0415
    return "\n".join([HEADER, parser_section(train_parser(), "python main.py", "##"),
                      parser_section(eval_parser(), "python gym_eval.py", "##")])


def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only compare: exit 1 if the page differs from the parsers")
    args = p.parse_args(argv)
    text = page()
    if args.check:
        current = open(PAGE).read() if os.path.exists(PAGE) else ""
        if current != text:
            print(f"{PROG}: {os.path.relpath(PAGE, ROOT)} is out of date: run {PROG}", file=sys.stderr)
            return EXIT_CRASH
        return EXIT_OK
    try:
        atomic_write_text(PAGE, text)
    except OSError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{PROG}: wrote {os.path.relpath(PAGE, ROOT)}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
