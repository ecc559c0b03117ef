"""docs/seaquest_oxygen.py: the shipped Seaquest model's lives end with its tank empty (docs/log/atari.md,
"Seaquest: one tank of oxygen a life"), read from the game's RAM."""

import os
import subprocess
import sys

from conftest import ROOT


def test_the_shipped_seaquest_models_greedy_lives_run_out_of_air():
    result = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "seaquest_oxygen.py"), "--games", "1"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    game, summary = result.stdout.strip().splitlines()
    assert game.startswith("game 1: ") and game.count("(oxygen ") == 4, game  # four lives, each read
    assert summary.startswith("4 of 4 lives ran out of air") and "; 0 came back up to the surface" in summary, summary
