"""Export the latest weights of a training run as a model file, the format gym_eval.py and ``--load`` read.

    python -m tools.export_model runs/<run> trained_models/PongNoFrameskip-v4.pt
    python -m tools.export_model runs/<run>/checkpoint-1200000.pt pong_at_1.2M.pt

The evaluator already keeps the weights of its best game in the run's ``best_model.pt``; one great game is a noisy
way to pick a model, so this takes the run's own latest weights (its ``checkpoint.pt``) instead. The model file holds
the weights and what is needed to rebuild the network and the preprocessing, without the optimizer's statistics.
"""

import argparse
import math
import os
import sys

from core.cli import OneLineParser
from core.errors import BadInput
from core.files import atomic_torch_save
from runtime.checkpoints import load_checkpoint, model_file

PROG = "python -m tools.export_model"  # how the command is run, for its messages


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog=PROG, description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a run directory or one of its checkpoint files")
    p.add_argument("output", help="the model file to write (a new file, unless --force)")
    p.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    args = p.parse_args(argv)
    if os.path.exists(args.output) and not args.force:
        print(f"{PROG}: error: {args.output} exists; it is kept (--force replaces it)", file=sys.stderr)
        return 2
    try:
        data = load_checkpoint(args.checkpoint, kind="checkpoint")
        # "return" is NaN: these are not the weights of one evaluator game
        atomic_torch_save(model_file(data["env"], data["model_meta"], data["state_dict"], math.nan,
                                     data.get("frames", 0.0)), args.output)
    except BadInput as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: error: cannot write {args.output}: {exc}", file=sys.stderr)
        return 2
    print(f"export_model.py: wrote {args.output} ({data['env']['env_id']}, {data['model_meta']['model']}, "
          f"{int(data.get('frames', 0))} frames)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
