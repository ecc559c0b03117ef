"""Dead ReLU units of saved Nature networks (checkpoints or model files of an Atari run): for each layer, the
fraction of its units (conv: channels, fc: neurons) that are never positive on any of a fixed set of frames, and the
policy's entropy on those frames. A network whose third conv layer is all dead feeds its fc layer zeros: every frame
gets the same policy, and no gradient reaches the conv layers again.

    python docs/dead_units.py RUN/checkpoint-443520.pt RUN/checkpoint.pt trained_models/BreakoutNoFrameskip-v4.pt

The frames: 8 envs of the first file's game and preprocessing, 100 steps of uniformly random actions (seed 0).
"""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from core.cli import OneLineParser  # noqa: E402
from core.errors import BadInput  # noqa: E402


def random_frames(settings, envs_count: int = 8, steps: int = 100) -> torch.Tensor:
    from envs.rollout_envs import RolloutEnvs

    envs = RolloutEnvs(settings, envs_count, seed=123, clip_rewards=True)
    rng = np.random.default_rng(0)
    num_actions = envs.envs[0].action_space.n
    frames, row = [envs.first_obs.copy()], np.zeros_like(envs.first_obs)
    for _ in range(steps):
        envs.step(rng.integers(0, num_actions, envs_count), row)
        frames.append(row.copy())
    return torch.from_numpy(np.concatenate(frames))


LAYERS = {"conv1": (0, 2, 3), "conv2": (0, 2, 3), "conv3": (0, 2, 3), "fc": (0,)}  # each layer's non-unit dims


def dead_units(model: torch.nn.Module, frames: torch.Tensor) -> dict[str, float]:
    """Per layer of a Nature network, the fraction of units never positive on ``frames`` (each layer's output before
    its ReLU, caught on the network's own forward); and the policy's mean entropy."""
    outputs = {}
    hooks = [getattr(model, name).register_forward_hook(lambda _m, _i, out, name=name: outputs.__setitem__(name, out))
             for name in LAYERS]
    try:
        with torch.no_grad():
            _, logits, _ = model(frames, model.initial_state(len(frames)))
    finally:
        for hook in hooks:
            hook.remove()
    result = {name: float((outputs[name].amax(dim=dims) <= 0).float().mean()) for name, dims in LAYERS.items()}
    return {**result, "entropy": float(model.policy.entropy(logits).mean())}


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="checkpoints or model files of Nature networks, one game")
    args = parser.parse_args()
    from envs.environment import EnvSettings
    from model import build_model
    from runtime.checkpoints import load_checkpoint

    torch.set_num_threads(1)
    try:
        saved = [load_checkpoint(path) for path in args.files]
    except BadInput as exc:
        sys.exit(f"dead_units: {exc}")
    if any(d["model_meta"].get("model") != "nature" for d in saved):
        sys.exit("dead_units: only Nature networks (--model nature) are read")
    frames = random_frames(EnvSettings.from_dict(saved[0]["env"]))
    print(f"{'file':60s} {'frames':>7s}  dead units: conv1 conv2 conv3    fc   entropy")
    for path, d in zip(args.files, saved):
        model = build_model(d["model_meta"])
        model.load_state_dict(d["state_dict"])
        r = dead_units(model.eval(), frames)
        print(f"{path[-60:]:60s} {d.get('frames', 0) / 1e6:6.2f}M              {r['conv1']:5.2f} {r['conv2']:5.2f} "
              f"{r['conv3']:5.2f} {r['fc']:5.2f}   {r['entropy']:.3f}")


if __name__ == "__main__":
    main()
