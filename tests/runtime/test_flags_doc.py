"""The flags' defaults are written once, in the parser, and the documentation is checked against it, so the two
cannot drift: the family defaults table of docs/reference/defaults.md is what ``resolve_defaults`` picks, and
``--help`` prints each default once. (Every flag on the generated docs/reference/flags.md: tests of the site.)"""

import itertools
import os
import re

import pytest

from conftest import ROOT
from core.hardware import usable_cores
from runtime.config import build_parser
from runtime.defaults import resolve_defaults

DEFAULTS_PAGE = open(os.path.join(ROOT, "docs", "reference", "defaults.md")).read()


def table(text, first_header):
    """The rows of the table in ``text`` whose header's first cell is ``first_header``, as lists of cells (the
    header and rule dropped)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = [[cell.strip() for cell in line.strip("|").split(" | ")]
            for line in itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2:])]
    assert rows, f"the table headed {first_header!r} has no rows"
    return rows


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


@pytest.mark.parametrize("row", table(DEFAULTS_PAGE, "family / machine"))
def test_the_defaults_table_is_what_resolve_defaults_picks(row):
    """The objective auto picks for each algorithm, and the rest as with pg (PPO's own rows: the next test)."""
    label, objective, *cells = row
    family = next(code for name, code in FAMILIES.items() if label.startswith(name))
    on_gpu = "GPU" in label
    expected = {"`ppo` (A3G, `nature`), else `pg`": {"a3g": "ppo", "impala": "pg"},
                "`pg`": {"a3g": "pg", "impala": "pg"}}[objective]
    for algo, picked in expected.items():
        resolve_defaults(args := build_parser().parse_args(["--algo", algo]), family, on_gpu, True)
        assert args.objective == picked, algo
    for native_bf16 in (True, False):
        resolve_defaults(args := build_parser().parse_args(["--max-frames", "1000", "--objective", "pg"]), family,
                         on_gpu, native_bf16)
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
        resolve_defaults(args := build_parser().parse_args(["--max-frames", "20000000", "--objective", "pg"]), family,
                         on_gpu, native_bf16)
        assert args.lr_decay == ([10_000_000, 20_000_000] if falls else None)


@pytest.mark.parametrize("row", table(DEFAULTS_PAGE, "objective / algorithm"))
def test_the_objective_table_is_what_resolve_defaults_picks_for_atari(row):
    label, num_steps, tau, lr, eps, max_grad_norm, frame_norm = (cell.strip("`") for cell in row)
    objective, algo = label.split(", ")
    args = build_parser().parse_args(["--objective", objective, "--algo", {"A3G": "a3g", "IMPALA": "impala"}[algo]])
    resolve_defaults(args, "atari", False, True)
    assert (args.num_steps, args.lr, args.eps, args.max_grad_norm, args.frame_norm) == \
        (int(num_steps), float(lr), float(eps), float(max_grad_norm), frame_norm)
    assert args.tau == (None if tau == "(unused)" else float(tau))


def test_ppo_on_atari_keeps_rmsprops_eps_and_other_families_keep_their_settings():
    args = build_parser().parse_args(["--objective", "ppo", "--optimizer", "RMSprop"])
    resolve_defaults(args, "atari", False, True)
    assert (args.eps, args.lr, args.num_steps) == (0.1, 5e-4, 128)
    for family in ("classic", "retro", "continuous"):
        resolve_defaults(args := build_parser().parse_args(["--objective", "ppo"]), family, False, True)
        plain = build_parser().parse_args([])
        resolve_defaults(plain, family, False, True)
        names = ("num_steps", "tau", "lr", "eps", "max_grad_norm", "frame_norm")
        assert [getattr(args, name) for name in names] == [getattr(plain, name) for name in names]
