"""docs/dead_units.py: the share of a Nature network's units never positive on a set of frames, against a count
written out unit by unit."""

import importlib.util
import os

import torch
import torch.nn.functional as F

from conftest import ROOT
from model import build_model, pixels

spec = importlib.util.spec_from_file_location("dead_units", os.path.join(ROOT, "docs", "dead_units.py"))
dead_units = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dead_units)

META = {"model": "nature", "obs_shape": [4, 84, 84], "num_actions": 4, "hidden_size": 0, "obs_dtype": "uint8",
        "frame_norm": "frame"}


def never_positive(activations: torch.Tensor, unit_dim: int) -> float:
    """The slow count: for each unit, whether any of its values is above 0."""
    units = activations.movedim(unit_dim, 0)
    return sum(1 for unit in units if not bool((unit > 0).any())) / units.shape[0]


def test_dead_units_counts_units_never_positive_and_a_layer_cut_off_is_all_dead():
    torch.manual_seed(0)
    model = build_model(META).eval()
    frames = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        model.conv3.bias[:20] = -1e3  # 20 of 64 channels can never be positive
        model.fc.bias[:100] = -1e3
        result = dead_units.dead_units(model, frames)
        x3 = F.relu(model.conv3(F.relu(model.conv2(F.relu(model.conv1(pixels(frames, model.frame_norm)))))))
        h = F.relu(model.fc(x3.flatten(1)))
    assert result["conv3"] == never_positive(x3, 1) and result["conv3"] >= 20 / 64
    assert result["fc"] == never_positive(h, 1) and result["fc"] >= 100 / 512
    assert result["conv1"] < 1 and abs(result["entropy"] - torch.log(torch.tensor(4.0)).item()) < 0.01
    with torch.no_grad():
        model.conv3.bias[:] = -1e3  # nothing reaches the fc layer: every frame gets the same policy
        result = dead_units.dead_units(model, frames)
    assert result["conv3"] == 1.0
