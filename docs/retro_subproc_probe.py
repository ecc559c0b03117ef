"""Airstriker: agent steps/s of one in-process env vs 8 envs stepped in subprocesses (gymnasium AsyncVectorEnv)."""
import sys
import time

import gymnasium as gym
import numpy as np

sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.dirname(__import__("os").path.abspath(__file__))))
from envs.environment import EnvSettings, make_env


def make():
    return make_env(EnvSettings("Airstriker-Genesis-v0", frame_size=84, frame_stack=4), train=True)

def inproc(seconds):
    env = make(); env.reset(seed=0); rng = np.random.default_rng(0); n = 0; t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        _, _, te, tr, _ = env.step(int(rng.integers(6))); n += 1
        if te or tr: env.reset()
    env.close(); return n / (time.perf_counter() - t)

def vec(k, seconds):
    venv = gym.vector.AsyncVectorEnv([make] * k, shared_memory=True, context="spawn",
                                     autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    venv.reset(seed=0); rng = np.random.default_rng(0)
    for _ in range(20): venv.step(rng.integers(6, size=k))
    n = 0; t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        venv.step(rng.integers(6, size=k)); n += k
    r = n / (time.perf_counter() - t); venv.close(); return r

if __name__ == "__main__":
    print(f"in-process, 1 env: {inproc(8):.0f} agent steps/s")
    for k in (2, 8):
        print(f"subprocesses, {k} envs: {vec(k, 8):.0f} agent steps/s")
