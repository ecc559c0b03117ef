"""The run directory: ``args.json``, the ``progress.csv`` header, and the run's flags and results in TensorBoard."""

import csv
import datetime
import json
import math
import os

from test import PROGRESS_FIELDS
from utils import env_file_name


def prepare_run_dir(args, resumed):
    if args.run_dir is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        args.run_dir = os.path.join("runs", f"{env_file_name(args.env)}__{args.seed}__{stamp}")
    for folder in (args.run_dir, args.save_model_dir, args.log_dir):
        os.makedirs(folder, exist_ok=True)
    paths = {
        "run_dir": args.run_dir,
        "progress": os.path.join(args.run_dir, "progress.csv"),
        "checkpoint": os.path.join(args.run_dir, "checkpoint.pt"),
        "summary": os.path.join(args.run_dir, "summary.json"),
        "model": os.path.join(args.save_model_dir, f"{env_file_name(args.env)}.pt"),
        "log_file": os.path.join(args.log_dir, f"{env_file_name(args.env)}_log"),
    }
    with open(os.path.join(args.run_dir, "args.json"), "w") as f:
        json.dump(vars(args), f, indent=2, sort_keys=True)
    if not (resumed and os.path.exists(paths["progress"])):
        with open(paths["progress"], "w", newline="") as f:
            csv.writer(f).writerow(PROGRESS_FIELDS)
    return paths


def write_tensorboard_hparams(args):
    """The flags as a text table, at the start (CleanRL's way: readable even while the run goes on)."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(args.run_dir) as writer:
        table = "\n".join(f"|{key}|{value}|" for key, value in sorted(vars(args).items()))
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")


def write_tensorboard_results(args, summary):
    """The flags and the run's results for TensorBoard's HPARAMS tab, at the end: runs compared side by side."""
    from torch.utils.tensorboard import SummaryWriter

    hparams = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in vars(args).items()}
    metrics = {f"hparam/{k}": float(summary[k] if summary[k] is not None else math.nan)
               for k in ("best_mean_return", "best_return", "frames", "seconds")}
    with SummaryWriter(args.run_dir) as writer:
        writer.add_hparams(hparams, metrics, run_name=".", global_step=summary["frames"])
