"""The flags' defaults are written once, in the parser, and the README's tables are checked against it, so the two
cannot drift: every flag of main.py is in the README, each table's default is the parser's, the family defaults
table is what ``resolve_defaults`` picks, and ``--help`` prints each default once."""

import os
import re

import pytest

from conftest import ROOT
from core.hardware import usable_cores
from runtime.config import build_parser
from runtime.defaults import AUTO, resolve_defaults

README = open(os.path.join(ROOT, "README.md")).read()


def section(title):
    """The README's text from the heading ``title`` to the next heading of its level or higher."""
    start = README.index(f"\n{title}\n")
    level = title.split()[0]
    end = re.search(rf"\n#{{1,{len(level)}}} ", README[start + len(title) + 2 :])
    return README[start : start + len(title) + 2 + end.start()] if end else README[start:]


def table_rows(text):
    """The rows of the first table in ``text``, as lists of cells (the header and rule dropped)."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[2:]]


def flag_rows():
    """(README's flag names, README's default) of every flag in the Flags and IMPALA tables; a row naming several
    flags (``--alpha``, ``--momentum``) has as many defaults, comma-separated."""
    for title in ("## Flags", "## IMPALA: `--algo impala`"):
        for cells in table_rows(section(title)):
            names = [re.findall(r"--[a-z0-9-]+", part)[0] for part in cells[0].split(", ")]
            defaults = cells[1].split(", ") if len(names) > 1 else [cells[1]]
            assert len(defaults) == len(names), cells
            yield from zip(names, defaults)


def actions():
    return {option: action for action in build_parser()._actions for option in action.option_strings}


def said_default(action):
    """The default as the README says it: the parser's value in words, or what its help calls the default where
    the value depends on the machine or the run (``CPU cores``)."""
    phrase = re.search(r"default: ([^;)]*)", action.help or "")
    value = action.default
    words = {AUTO: "auto", None: "none", True: "on", False: "off"}
    if phrase:
        return phrase.group(1)
    if isinstance(value, list) and not value:
        return "none"
    if value is None or isinstance(value, bool) or value == AUTO:
        return words[value]
    return str(value)


def same(readme, parser):
    readme = re.sub(r"\s*\(.*\)", "", readme).strip("`")  # a remark in brackets: "1 (ms)"
    try:
        return float(readme) == float(parser)
    except ValueError:
        return readme == parser


@pytest.mark.parametrize("flag, default", list(flag_rows()))
def test_the_readme_says_the_parsers_default(flag, default):
    action = actions()[flag]
    assert same(default, said_default(action)), (flag, default, said_default(action))


def test_every_flag_of_main_py_is_in_the_readme():
    missing = [a.option_strings[-1] for a in build_parser()._actions
               if a.option_strings and a.dest != "help" and not any(f"`{o}" in README for o in a.option_strings)]
    assert not missing, missing


def test_help_prints_each_default_once():
    """A help text that says its default itself gets no second "(default: ...)" from the formatter."""
    blocks = re.split(r"\n(?=  -)", build_parser().format_help())
    twice = [block.split()[0] for block in blocks if block.count("default") > 1]
    assert not twice, twice


def test_help_shows_a_zero_default_and_none_for_an_unset_flag():
    """0 == False in Python: a default of 0 is a value to show, not a switch that is off."""
    blocks = {block.split()[0]: block for block in re.split(r"\n(?=  -)", build_parser().format_help())}
    assert "(default: 0.0)" in blocks["--momentum"] and "(default: 0)" in blocks["--evaluator-nice"]
    assert "(default:" not in blocks["--resume"] + blocks["--eval-stochastic"]  # None, and a switch that is off


FAMILIES = {"Atari": "atari", "classic control": "classic", "retro games": "retro",
            "continuous control": "continuous"}


@pytest.mark.parametrize("row", table_rows(section("## Defaults")))
def test_the_readme_defaults_table_is_what_resolve_defaults_picks(row):
    label, *cells = row
    family = next(code for name, code in FAMILIES.items() if label.startswith(name))
    on_gpu = "GPU" in label
    args = build_parser().parse_args([])
    for native_bf16 in (True, False):
        resolve_defaults(args := build_parser().parse_args(["--max-frames", "1000"]), family, on_gpu, native_bf16)
        workers, model, envs, lr, bf16, hidden, value_coef, max_grad_norm, lr_decay = (c.strip("`") for c in cells)
        cores = usable_cores()
        assert args.workers == {"cores": cores, "cores, at most 2 (A3G)": min(cores, 2)}[workers]
        assert (args.model, args.envs_per_worker, args.value_coef) == (model, int(envs), float(value_coef))
        assert args.max_grad_norm == float(max_grad_norm.removesuffix(" (off)"))
        assert args.lr == float(lr)
        if hidden != "(unused)":
            assert args.hidden_size == int(hidden)
        expected_bf16 = native_bf16 if bf16 == "on where the CPU has native bf16" else {"off": False, "on": True}[bf16]
        assert args.bf16 is expected_bf16
        falls = lr_decay != "none"
        assert lr_decay in ("none", "from 10M frames, within the last tenth to half of `--max-frames` (A3G)")
        assert args.lr_decay == ([900, 1000] if falls else None)  # the last tenth of a budget under 11.1M frames
        resolve_defaults(args := build_parser().parse_args(["--max-frames", "20000000"]), family, on_gpu, native_bf16)
        assert args.lr_decay == ([10_000_000, 20_000_000] if falls else None)
