"""One game loop, for the evaluator (runtime/evaluator.py) and gym_eval.py: a whole game with a model, scored with raw rewards."""

from typing import Callable, Sequence

import gymnasium as gym
import numpy as np
import torch


def play_game(env: gym.Env, model: torch.nn.Module, device: torch.device | str, max_steps: int,
              stochastic: bool = False, seed: int | None = None,
              frame_sinks: Sequence[Callable[[np.ndarray], object]] = (),
              between: Callable[[int], bool] | None = None) -> tuple[float, int] | None:
    """One whole game; returns ``(return, length)``, or None when ``between`` stopped it.

    Actions are the policy's greedy ones (the argmax, or a Gaussian's mean), or samples from it with
    ``stochastic``. ``frame_sinks``: callables given each
    rendered RGB frame (the first one and one per agent step). ``between(length)``, if given, is called every 20
    agent steps (the evaluator paces itself there and checks for a stop request); when it returns False the game
    is abandoned. The game ends when the environment ends or cuts it, or after ``max_steps`` agent steps.
    """
    obs, _ = env.reset(seed=seed)
    show(env, frame_sinks)
    hx, cx = model.initial_state(1, device)
    total, length = 0.0, 0
    with torch.no_grad():
        while True:
            _, logits, (hx, cx) = model(torch.from_numpy(np.asarray(obs)).unsqueeze(0).to(device), (hx, cx))
            policy = model.policy  # core/policy.py: a categorical or a Gaussian
            action = policy.sample(logits.float()) if stochastic else policy.greedy(logits.float())
            obs, reward, terminated, truncated, _ = env.step(policy.env_action(action[0].cpu()))
            total += float(reward)
            length += 1
            show(env, frame_sinks)
            if terminated or truncated or length >= max_steps:
                return total, length
            if between is not None and length % 20 == 0 and not between(length):
                return None


def show(env: gym.Env, frame_sinks: Sequence[Callable[[np.ndarray], object]]) -> None:
    """Hand the env's rendered RGB frame to each sink (nothing is rendered when there are none)."""
    if frame_sinks:
        frame = env.render()
        for sink in frame_sinks:
            sink(frame)
