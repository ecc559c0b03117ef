"""What a Pong unroll costs in memory and on the wire (docs/results/throughput.md, "Frames as bytes"): the
bytes a replay of 1,000 unrolls allocates, and the bytes per agent step an IMPALA actor's unroll (any after its
first) takes through Ray (pickle protocol 5, as Ray serialises numpy arrays), for frames as uint8 stored once
(``--frame-norm frame``, the default, or ``scale``) and as the float32 stacks every frame travelled as before
(``--frame-norm running``'s frames).

    python docs/frame_bytes.py [--unroll-length 20] [--envs 8]

The unroll is real: 8 Pong environments stepped at random for T steps, in ``impala.acting.Acting``'s layout.
"""

import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from core.cli import OneLineParser  # noqa: E402
from envs.environment import ATARI_CONFIG, EnvSettings, env_conf_for, load_env_config  # noqa: E402
from envs.rollout_envs import RolloutEnvs  # noqa: E402
from impala.replay import ReplayBuffer  # noqa: E402
from impala.unrolls import pack_frames, policy_layout  # noqa: E402
from model import model_meta  # noqa: E402

ENV = "PongNoFrameskip-v4"


def unroll(frame_norm: str, T: int, envs: int) -> dict[str, torch.Tensor]:
    """An actor's unroll of ``envs`` Pong games, random actions, in ``Acting.unroll``'s layout (Nature network)."""
    crop = env_conf_for(ENV, load_env_config(ATARI_CONFIG))
    games = RolloutEnvs(EnvSettings(ENV, crop=crop, frame_size=84, frame_stack=4, frame_norm=frame_norm), envs,
                        seed=1, clip_rewards=True)
    obs = np.zeros((T + 1, *games.first_obs.shape), games.first_obs.dtype)
    obs[0] = games.first_obs
    rng = np.random.default_rng(1)
    dones = np.zeros((T, envs), np.float32)
    for t in range(T):
        dones[t] = games.step(rng.integers(6, size=envs), obs[t + 1])[1]
    return {"obs": torch.from_numpy(obs), "actions": torch.zeros(T, envs, dtype=torch.int64),
            "rewards": torch.zeros(T, envs), "dones": torch.from_numpy(dones), "truncated": torch.zeros(T, envs),
            "final_obs": torch.zeros(1, *obs.shape[1:], dtype=torch.from_numpy(obs).dtype),
            "logits": torch.zeros(T, envs, 6), "values": torch.zeros(T, envs), "features": torch.zeros(T, envs, 0),
            "hx": torch.zeros(envs, 0), "cx": torch.zeros(envs, 0)}


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unroll-length", type=int, default=20)
    parser.add_argument("--envs", type=int, default=8)
    args = parser.parse_args()
    from impala.ray_backend import to_wire  # Ray: requirements-ray.txt

    T, envs = args.unroll_length, args.envs
    print(f"Pong, Nature network, T = {T}, {envs} environments per actor")
    print("| frames | replay of 1,000 unrolls | Ray, bytes per agent step |")
    print("|---|---|---|")
    for frame_norm, uint8 in (("running", False), ("frame", True)):
        meta = model_meta("nature", [4, 84, 84], 6, 0, uint8=uint8)
        layout = policy_layout(meta)
        replay = ReplayBuffer({"type": "standard", "capacity": 1000, "count": 1}, T, meta["obs_shape"], hidden_size=0,
                              feature_size=0, **layout)
        allocated = sum(t.numel() * t.element_size() for t in vars(replay).values() if torch.is_tensor(t))
        arrays = unroll(frame_norm, T, envs)
        if layout["frame_stack"] > 1:
            assert torch.equal(pack_frames(arrays["obs"], 4)[4:], arrays["obs"][1:, :, -1])
        if uint8:  # what an actor sends now after its first unroll (no episode of this one was cut: no cut rows)
            sent = to_wire(arrays, layout["frame_stack"], cuts=0, continues=True)
        else:  # what every actor sent before frames stayed bytes: all the arrays as they are
            sent = {key: tensor.numpy() for key, tensor in arrays.items()}
        wire = len(pickle.dumps(sent, protocol=5))
        name = "uint8, each frame once" if uint8 else "float32 stacks, as before (--frame-norm running)"
        print(f"| {name} | {allocated / 1e9:.3f} GB | {wire / (T * envs) / 1024:.1f} KiB |")


if __name__ == "__main__":
    main()
