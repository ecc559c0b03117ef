"""The run context: what every role of a run is built from, made once by main.py (and tools.bench)."""

import argparse
from dataclasses import dataclass

import torch

from envs.environment import EnvSettings
from runtime.run_state import RunState


@dataclass
class RunContext:
    """One run's shared pieces, handed to the algorithms' ``*_roles`` and from them to each role's process.

    ``args``: the checked flags (``runtime.config.validate``); ``settings``: what rebuilds the environment;
    ``meta``: what rebuilds the network (``model.model_meta``); ``shared_model``: the CPU model in shared memory;
    ``optimizer``: the shared optimizer, or None with ``--no-shared-optimizer`` (each A3G worker makes its own);
    ``state``: counters, flags and figures in shared memory; ``paths``: the run's files (``runtime.run_dir``);
    ``start_seconds``: the run's time before this invocation (a resumed run's); ``window_start``: the first game in
    progress.csv that the evaluator played as it plays now (``evaluator.window_start``)."""

    args: argparse.Namespace
    settings: EnvSettings
    meta: dict
    shared_model: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    state: RunState
    paths: dict[str, str | None]
    start_seconds: float = 0.0
    window_start: int = 0
