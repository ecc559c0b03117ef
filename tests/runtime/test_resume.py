"""--resume means what it says: flags given now win over the saved ones (optimizer settings included), another
optimizer starts fresh instead of crashing, and the file a run resumed from is never destroyed."""

import shutil

import torch

from conftest import out_dirs, read_json, run_main, start_run, stop_run, wait_for
from core.errors import BadInput
from model import model_meta
from runtime.checkpoints import check_compatible


def copy_run(cartpole_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(cartpole_run / "run", run)
    return run


def past_its_frames(run, more=3000):
    """A --max-frames that leaves a resume frames to train: a run ends a few rollouts past its own budget (on a
    loaded machine, more), and a resume already at its budget is refused."""
    return str(int(torch.load(run / "checkpoint.pt", weights_only=True)["frames"]) + more)


def optimizer_groups(path):
    return torch.load(path, weights_only=True)["optimizer"]["param_groups"]


def test_lr_eps_and_amsgrad_given_at_resume_reach_the_optimizer(cartpole_run, tmp_path):
    run = copy_run(cartpole_run, tmp_path)
    saved = optimizer_groups(run / "checkpoint.pt")[0]
    assert saved["lr"] != 0.005 and saved["amsgrad"] is False
    result = run_main("--resume", run, "--lr", "0.005", "--eps", "1e-4", "--amsgrad",
                      "--max-frames", past_its_frames(run), *out_dirs(tmp_path)[2:], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    groups = optimizer_groups(run / "checkpoint.pt")
    assert all(g["lr"] == 0.005 and g["eps"] == 1e-4 and g["amsgrad"] is True for g in groups)
    state = torch.load(run / "checkpoint.pt", weights_only=True)["optimizer"]["state"]
    assert all("max_exp_avg_sq" in s for s in state.values())
    args = read_json(run / "args.json")
    assert args["lr"] == 0.005 and args["amsgrad"] is True


def test_resume_with_another_optimizer_starts_fresh_statistics(cartpole_run, tmp_path):
    run = copy_run(cartpole_run, tmp_path)
    result = run_main("--resume", run, "--optimizer", "RMSprop", "--max-frames", past_its_frames(run),
                      *out_dirs(tmp_path)[2:], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "fresh" in result.stderr and "Adam" in result.stderr
    summary = read_json(run / "summary.json")
    assert summary["restarts"] == 0 and summary["stop_reason"] == "max_frames"
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
    assert all("square_avg" in s for s in checkpoint["optimizer"]["state"].values())
    assert checkpoint["optimizer"]["param_groups"][0]["eps"] == 0.1  # RMSprop's own default, not Adam's 1e-3


def test_resuming_from_an_archive_never_destroys_it(cartpole_run, tmp_path):
    """An archive is older than the run's checkpoint.pt: the resume is a branch in a folder of its own, and the
    run it came from, the archive included, stays byte for byte as it was."""
    run = copy_run(cartpole_run, tmp_path)
    latest = torch.load(run / "checkpoint.pt", weights_only=True)
    older = dict(latest, frames=1000.0)
    torch.save(older, run / "checkpoint-1000.pt")  # as --keep-checkpoints leaves them
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    branch = tmp_path / "run-from-1000"
    proc = start_run(None, "--resume", run / "checkpoint-1000.pt", "--keep-checkpoints", "2",
                     "--checkpoint-interval", "0.5", "--max-frames", "10000000", *out_dirs(tmp_path)[2:])
    # a second save has rotated the first into an archive; then Ctrl-C, whose save rotates once more
    wait_for(lambda: list(branch.glob("checkpoint-*.pt")) or proc.poll() is not None, timeout=240)
    out, err = stop_run(proc)
    assert proc.returncode == 130, err[-2000:]
    assert "resumed at 1000 frames" in out
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    # rotation kept checkpoint.pt plus one archive (--keep-checkpoints 2), the exit's save included
    assert len(list(branch.glob("checkpoint-*.pt"))) == 1 and (branch / "checkpoint.pt").is_file()
    assert read_json(branch / "summary.json")["frames"] > 1000


def test_feed_forward_networks_ignore_hidden_size_when_matching_checkpoints():
    nature_old = {"model": "nature", "obs_shape": [4, 84, 84], "num_actions": 6, "hidden_size": 512}
    data = {"env": {"env_id": "PongNoFrameskip-v4"}, "model_meta": nature_old}
    assert model_meta("nature", [4, 84, 84], 6, 256)["hidden_size"] == 0
    check_compatible(data, "old.pt", "PongNoFrameskip-v4", model_meta("nature", [4, 84, 84], 6, 256))
    lstm = {"env": {"env_id": "CartPole-v1"}, "model_meta": model_meta("mlplstm", [4], 2, 64)}
    try:
        check_compatible(lstm, "lstm.pt", "CartPole-v1", model_meta("mlplstm", [4], 2, 32))
    except BadInput as exc:
        assert "different network" in str(exc)
    else:
        raise AssertionError("a recurrent network of another hidden size must not match")


def test_a_best_game_saved_after_the_last_checkpoint_is_not_replaced_by_a_worse_one(cartpole_run, tmp_path):
    """Killed outright after a best game and before the next checkpoint: best_model.pt holds a score the checkpoint
    never saw. The resumed run keeps it until a game beats it (here none can: CartPole scores at most 500)."""
    run = copy_run(cartpole_run, tmp_path)
    best = torch.load(run / "best_model.pt", weights_only=True)
    torch.save({**best, "return": 1000.0}, run / "best_model.pt")
    kept, games = (run / "best_model.pt").read_bytes(), len((run / "progress.csv").read_text().splitlines())
    result = run_main("--resume", run, "--max-frames", past_its_frames(run), *out_dirs(tmp_path)[2:], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len((run / "progress.csv").read_text().splitlines()) > games  # games were played, and none replaced it
    assert (run / "best_model.pt").read_bytes() == kept and read_json(run / "summary.json")["best_return"] == 1000.0
