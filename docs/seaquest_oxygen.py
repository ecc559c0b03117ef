"""Seaquest: how each life of a model's games ends. Plays whole games as the evaluator does (greedy, or sampled with
``--stochastic``) and follows two bytes of the Atari's RAM, as labelled by AtariARI (Anand et al. 2019,
"Unsupervised State Representation Learning in Atari"): 102, the oxygen meter (64 a full tank, falling by about one
every 8 agent steps under water), and 97, the sub's height (13 at the surface, about 45-108 under water). For every
lost life it reports the agent steps it lasted, the meter 30 agent steps before the loss (a life that ran out of
air ends ~20 steps after the meter reaches 0, so it reads 0-4; a life lost to an enemy reads whatever was left)
and whether the sub came back up to the surface after its dive (the only way to refill the tank).

    python docs/seaquest_oxygen.py --model-path trained_models/SeaquestNoFrameskip-v4.pt --games 3
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gym_eval  # noqa: E402
from core.cli import OneLineParser  # noqa: E402
from core.errors import BadInput  # noqa: E402
from core.play import play_game  # noqa: E402
from envs.environment import make_env  # noqa: E402

OXYGEN, HEIGHT = 102, 97  # RAM bytes: the oxygen meter, the sub's height
SURFACE, UNDER_WATER = 13, 45
BEFORE = 30  # agent steps before a lost life at which the meter is read


def main():
    p = OneLineParser(prog="python docs/seaquest_oxygen.py", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", default="trained_models/SeaquestNoFrameskip-v4.pt")
    p.add_argument("--games", type=int, default=3)
    p.add_argument("--stochastic", action="store_true", help="sample the actions (the training games' way)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    eval_args = gym_eval.build_parser().parse_args(["--env", "SeaquestNoFrameskip-v4", "--model-path",
                                                    args.model_path])
    try:
        _, _, settings, model, _ = gym_eval.load_model_file(eval_args)
    except BadInput as exc:  # a missing or foreign model file: one line, no traceback
        sys.exit(f"seaquest_oxygen.py: {exc}")
    model.eval()
    env = make_env(settings, train=False, render_mode="rgb_array")
    ale = env.unwrapped.ale
    lives = []  # (agent steps, the meter BEFORE steps before the loss, surfaced after the dive)
    for game in range(args.games):
        trace = []  # (lives, oxygen, height) at the first frame and after every agent step

        def watch(_frame, trace=trace):
            ram = ale.getRAM()
            trace.append((ale.lives(), int(ram[OXYGEN]), int(ram[HEIGHT])))

        score, length = play_game(env, model, "cpu", settings.max_episode_length, stochastic=args.stochastic,
                                  seed=args.seed + game, frame_sinks=[watch])
        ends = [i for i in range(1, len(trace)) if trace[i][0] < trace[i - 1][0]]
        start, these = 0, []
        for end in ends:
            heights = [height for _, _, height in trace[start:end]]
            dived = next((i for i, height in enumerate(heights) if height > UNDER_WATER), None)
            surfaced = dived is not None and any(height <= SURFACE for height in heights[dived:])
            these.append((end - start, trace[max(start, end - BEFORE)][1], surfaced))
            start = end
        print(f"game {game + 1}: {score:g} points in {length} agent steps; lives: " + ", ".join(
            f"{steps} steps (oxygen {oxygen}{', surfaced' if surfaced else ''})" for steps, oxygen, surfaced in these))
        lives += these
    if lives:
        steps = [life[0] for life in lives]
        print(f"{sum(1 for _, oxygen, _ in lives if oxygen <= 4)} of {len(lives)} lives ran out of air (the meter "
              f"at 0-4 {BEFORE} agent steps before the loss); {sum(1 for *_, up in lives if up)} came back up to the "
              f"surface; a life lasted {min(steps)}-{max(steps)} agent steps (median {statistics.median(steps):g})")


if __name__ == "__main__":
    main()
