"""Export the latest weights of a training run as a model file, the format gym_eval.py and ``--load`` read.

    python -m tools.export_model runs/<run> trained_models/PongNoFrameskip-v4.pt
    python -m tools.export_model runs/<run>/checkpoint-1200000.pt pong_at_1.2M.pt
    python -m tools.export_model runs/<run>/best_model.pt trained_models/PongNoFrameskip-v4.pt --bf16

The evaluator already keeps the weights of its best game in the run's ``best_model.pt``; one great game is a noisy
way to pick a model, so from a run directory this takes the run's own latest weights (its ``checkpoint.pt``)
instead; a model file given by name (``best_model.pt``) is exported as it is. The model file holds the weights and
what is needed to rebuild the network and the preprocessing, without the optimizer's statistics.

``--bf16`` stores the network's weights as bfloat16, half the size (for models that ship in a repository); the
observation statistics of ``--obs-norm`` stay float32. Loading widens them back to float32 exactly, so the model
plays with precisely the stored values, which are the trained ones rounded to bfloat16.
"""

import argparse
import math
import os
import sys

import torch

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
    p.add_argument("--bf16", action="store_true", help="store the weights as bfloat16 (half the size)")
    args = p.parse_args(argv)
    if os.path.isfile(args.output) and holds_training_state(args.output):
        print(f"{PROG}: error: {args.output} holds a run's training state (a checkpoint): it is kept, --force or not; "
              f"give another file name", file=sys.stderr)
        return 2
    source = os.path.join(args.checkpoint, "checkpoint.pt") if os.path.isdir(args.checkpoint) else args.checkpoint
    if os.path.isfile(args.output) and os.path.isfile(source) and os.path.samefile(args.output, source):
        print(f"{PROG}: error: {args.output} is the file being exported: it is kept, --force or not; give another "
              f"file name", file=sys.stderr)
        return 2
    if os.path.isdir(args.output):
        print(f"{PROG}: error: {args.output} is a folder; give the model file's name", file=sys.stderr)
        return 2
    if os.path.exists(args.output) and not args.force:
        print(f"{PROG}: error: {args.output} exists; it is kept (--force replaces it)", file=sys.stderr)
        return 2
    try:
        data = load_checkpoint(args.checkpoint)
        if data.get("kind") not in ("checkpoint", "model"):
            raise BadInput(f"{args.checkpoint} holds a {data.get('kind')!r}, not a checkpoint or a model")
        weights = bf16_weights(data["state_dict"]) if args.bf16 else data["state_dict"]
        # a checkpoint's "return" is NaN: these are not the weights of one evaluator game
        score = data.get("return", math.nan) if data["kind"] == "model" else math.nan
        atomic_torch_save(model_file(data["env"], data["model_meta"], weights, score, data.get("frames", 0.0),
                                     data.get("run")), args.output)
    except BadInput as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: error: cannot write {args.output}: {exc}", file=sys.stderr)
        return 2
    print(f"export_model.py: wrote {args.output} ({data['env']['env_id']}, {data['model_meta']['model']}, "
          f"{int(data.get('frames', 0))} frames{', bfloat16 weights' if args.bf16 else ''})")
    return 0


def holds_training_state(path: str) -> bool:
    """Whether ``path`` is a run's checkpoint (a model file is not: --force may replace it), of any format version:
    one that a newer a3g wrote, which this one cannot resume, is still some run's training state."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # not a file torch can read safely: no run resumes from it
        return False
    return isinstance(data, dict) and data.get("kind") == "checkpoint"


def bf16_weights(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The floating-point weights as bfloat16; the observation statistics (``obs_norm.*``) as they are."""
    return {name: value.to(torch.bfloat16) if value.is_floating_point() and not name.startswith("obs_norm.")
            else value for name, value in state_dict.items()}


if __name__ == "__main__":
    sys.exit(main())
