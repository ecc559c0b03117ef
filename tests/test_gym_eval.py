"""gym_eval.py as a user runs it: scores, JSON, recordings, and one-line errors for bad input."""

import json
import os
import re
import shutil
import subprocess
import sys

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, command, in_process
from envs.environment import ATARI_CONFIG, EnvSettings, env_conf_for, load_env_config
from model import build_model, model_meta

SUMMARY = re.compile(r"^(\S+): mean (-?[\d.]+) ± ([\d.]+) over (\d+) episodes \(best (\S+), worst (\S+)\)$")
EPISODE = re.compile(r"^Episode (\d+)/(\d+), episode reward (\S+), episode length (\d+)")
CARTPOLE_RENDER = (400, 600)  # rows, columns of CartPole-v1's rgb_array frames
ATARI_RENDER = (210, 160)


def run_eval(*flags, timeout=None):
    """``python gym_eval.py FLAGS`` in this process (a start-up of Python and torch saved per call)."""
    import gym_eval

    return in_process(gym_eval.main, *flags)


def run_eval_command(*flags, env=None, timeout=120):
    """``python gym_eval.py FLAGS`` as a user runs it: a process of its own, in ``env``."""
    return subprocess.run([sys.executable, os.path.join(ROOT, "gym_eval.py"), *map(str, flags)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def error_lines(stderr):
    """stderr without the ALE's start-up banner, which its C++ core prints for every Atari game."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith(("A.L.E", "[Powered"))]


def make_model_file(path, env_id, name, obs_shape, num_actions, hidden, crop=None):
    """A model file in the layout test.save_model writes, with fresh (untrained) weights."""
    meta = model_meta(name, obs_shape, num_actions, hidden)
    model = build_model(meta)
    torch.save({"format_version": 1, "kind": "model",
                "env": EnvSettings(env_id, 4, 10000, crop).as_dict(), "model_meta": meta,
                "state_dict": model.state_dict(), "return": 0.0, "frames": 0.0}, path)
    return path


@pytest.fixture(scope="session")
def cartpole_model(cartpole_run):
    path = cartpole_run / "trained_models" / "CartPole-v1.pt"
    assert path.is_file()
    return path


def decode_mp4(path):
    capture = cv2.VideoCapture(str(path))
    assert capture.isOpened(), path
    fps = capture.get(cv2.CAP_PROP_FPS)
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames, fps


def test_scores_summary_and_json_agree(cartpole_model, tmp_path):
    out = tmp_path / "scores.json"
    result = run_eval("--env", "CartPole-v1", "--model-path", cartpole_model, "--num-episodes", 8,
                      "--log-dir", tmp_path / "logs", "--json", out)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    episodes = [EPISODE.match(line) for line in lines if EPISODE.match(line)]
    assert [int(m.group(1)) for m in episodes] == list(range(1, 9))
    returns = np.array([float(m.group(3)) for m in episodes])
    summary = SUMMARY.match(lines[-1])
    assert summary, lines[-1]
    env, mean, std, n, best, worst = summary.groups()
    assert env == "CartPole-v1" and int(n) == 8
    assert float(mean) == pytest.approx(returns.mean(), abs=0.006)
    assert float(std) == pytest.approx(returns.std(), abs=0.006)
    assert float(best) == returns.max() and float(worst) == returns.min()

    data = json.loads(out.read_text())
    assert data["env"] == "CartPole-v1"
    assert [e["return"] for e in data["episodes"]] == returns.tolist()
    assert all(set(e) == {"return", "length"} and e["length"] >= 1 for e in data["episodes"])
    assert all(e["return"] == e["length"] for e in data["episodes"])  # CartPole pays 1 per step
    assert data["mean"] == pytest.approx(returns.mean()) and data["std"] == pytest.approx(returns.std())
    assert (data["best"], data["worst"]) == (returns.max(), returns.min())
    log = (tmp_path / "logs" / "CartPole-v1_mon_log").read_text()
    assert lines[-1] in log and "Episode 8/8" in log


def test_model_found_in_load_model_dir_and_length_override(cartpole_model, tmp_path):
    result = run_eval("--env", "CartPole-v1", "-lmd", cartpole_model.parent, "-ne", 3, "-mel", 7,
                      "--log-dir", tmp_path, "--json", tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    assert all(e["length"] <= 7 for e in json.loads((tmp_path / "s.json").read_text())["episodes"])


def test_record_mp4_every_render_freq_th_game(cartpole_model, tmp_path):
    videos = tmp_path / "videos"
    result = run_eval("--model-path", cartpole_model, "-ne", 3, "-rf", 2, "-mel", 25, "--record", videos,
                      "--log-dir", tmp_path, "--json", tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    assert "CartPole-v1: mean" in result.stdout  # --env comes from the model file with --model-path
    lengths = [e["length"] for e in json.loads((tmp_path / "s.json").read_text())["episodes"]]
    assert sorted(os.listdir(videos)) == ["CartPole-v1_episode001.mp4", "CartPole-v1_episode003.mp4"]
    kept = (videos / "CartPole-v1_episode001.mp4").read_bytes()
    again = run_eval("--model-path", cartpole_model, "-ne", 1, "--record", videos, "--log-dir", tmp_path)
    assert again.returncode == 2 and "already holds videos" in again.stderr and "kept" in again.stderr
    assert (videos / "CartPole-v1_episode001.mp4").read_bytes() == kept
    for name, length in (("CartPole-v1_episode001.mp4", lengths[0]), ("CartPole-v1_episode003.mp4", lengths[2])):
        frames, fps = decode_mp4(videos / name)
        assert len(frames) == length + 1  # the start, then one frame per agent step
        assert frames[0].shape == CARTPOLE_RENDER + (3,)
        assert fps == pytest.approx(50)  # CartPole's render_fps: real time
        assert frames[0].std() > 1  # a picture, not a blank


def test_record_gif(cartpole_model, tmp_path):
    result = run_eval("--model-path", cartpole_model, "-ne", 1, "-mel", 12, "--record", tmp_path,
                      "--video-format", "gif", "--log-dir", tmp_path, "--json", tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    length = json.loads((tmp_path / "s.json").read_text())["episodes"][0]["length"]
    with Image.open(tmp_path / "CartPole-v1_episode001.gif") as gif:
        assert gif.size == CARTPOLE_RENDER[::-1]
        total_ms = 0
        for i in range(gif.n_frames):  # Pillow merges identical consecutive frames and adds up their delays
            gif.seek(i)
            total_ms += gif.info["duration"]
        assert 1 <= gif.n_frames <= length + 1
        assert total_ms == (length + 1) * 20


def test_atari_recording_and_new_gym_eval(tmp_path):
    crop = env_conf_for("PongNoFrameskip-v4", load_env_config(ATARI_CONFIG))
    path = make_model_file(tmp_path / "pong.pt", "PongNoFrameskip-v4", "a3clstm", (1, 80, 80), 6, 16, crop)
    result = run_eval("--model-path", path, "-ne", 2, "-mel", 30, "--record", tmp_path / "videos",
                      "--new-gym-eval", "--log-dir", tmp_path / "logs", "--json", tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    assert SUMMARY.match(result.stdout.splitlines()[-1]).group(1) == "PongNoFrameskip-v4"
    for name in ("PongNoFrameskip-v4_episode001.mp4", "PongNoFrameskip-v4_episode002.mp4"):
        frames, fps = decode_mp4(tmp_path / "videos" / name)
        assert len(frames) == 31 and frames[0].shape == ATARI_RENDER + (3,)  # the full RGB screen, not 80x80
        assert fps == pytest.approx(15)  # 60 Hz / 4 frames per agent step
    monitor = tmp_path / "logs" / "PongNoFrameskip-v4_monitor"
    stats = json.loads((monitor / "stats.json").read_text())
    assert stats["episode_lengths"] == [30, 30] and stats["episode_types"] == ["t", "t"]
    assert len(stats["episode_rewards"]) == len(stats["timestamps"]) == 2
    assert sorted(os.listdir(monitor)) == ["rl-video-episode-0.mp4", "rl-video-episode-1.mp4", "stats.json"]
    # a second evaluation keeps the first one's record (gym's Monitor(force=True) deleted it)
    kept = (monitor / "stats.json").read_bytes()
    again = run_eval("--model-path", path, "-ne", 1, "-mel", 30, "--new-gym-eval", "--log-dir", tmp_path / "logs")
    assert again.returncode == 2 and "earlier record" in again.stderr and (monitor / "stats.json").read_bytes() == kept


def test_a_model_written_before_frame_norm_still_wins_on_the_frames_it_was_trained_on(tmp_path):
    """tests/fixtures/pong_running_frame_norm.pt (a Pong model trained for 30 minutes, shipped in trained_models/
    until a 20M-frame run replaced it) was written before frames stayed bytes: its file says nothing of
    --frame-norm, so gym_eval.py plays it on frames normalised the running way, as it trained, and it still wins
    (20.70 +- 0.46 over 20 games when it shipped)."""
    result = run_eval("--model-path", os.path.join(ROOT, "tests", "fixtures", "pong_running_frame_norm.pt"),
                      "-ne", 1, "--log-dir", tmp_path, "--json", tmp_path / "s.json", timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "s.json").read_text())["episodes"][0]["return"] >= 18


# (game, random policy's score, README's greedy gym_eval over 30 games, what one greedy game must reach)
SHIPPED_GREEDY = [
    ("Pong", -20.7, "20.70 +- 0.46, the worst 20", 18),
    ("Breakout", 1.7, "416.33 +- 15.87, the worst 395", 300),  # its uint8 frames standardised in the network
    ("SpaceInvaders", 148, "988.67 +- 199.32, the worst 785", 250),
    ("Seaquest", 68, "1773.33 +- 16.60, the worst 1760", 500),
    ("BeamRider", 364, "4647.67 +- 1247.19, the worst 1380", 1000),
    ("MsPacman", 307, "2369.33 +- 7.27, the worst 2360", 1500),
]


@pytest.mark.parametrize("game, random_score, readme, floor", SHIPPED_GREEDY, ids=[g[0] for g in SHIPPED_GREEDY])
def test_a_shipped_atari_model_plays_a_greedy_game_far_above_random(game, random_score, readme, floor, tmp_path):
    """trained_models/<game>NoFrameskip-v4.pt (bfloat16 weights) plays one greedy game far above a random policy's
    score (the README's mean over 30 games beside each)."""
    result = run_eval("--env", f"{game}NoFrameskip-v4", "-ne", 1, "--log-dir", tmp_path, "--json",
                      tmp_path / "s.json", timeout=300)
    assert result.returncode == 0, result.stderr
    assert floor > random_score
    assert json.loads((tmp_path / "s.json").read_text())["episodes"][0]["return"] >= floor, readme


def test_the_shipped_asteroids_model_plays_above_random_when_it_samples(tmp_path):
    """trained_models/AsteroidsNoFrameskip-v4.pt is played with --stochastic (README: 1146.33 +- 377.56 over 30
    games; its greedy games score ~217, below a random policy's 719, as its run's evaluator did: docs/results/atari.md).
    Five sampled games average above random; the greedy ones do not."""
    stochastic = run_eval("--env", "AsteroidsNoFrameskip-v4", "-ne", 5, "--stochastic", "--log-dir", tmp_path,
                          "--json", tmp_path / "s.json", timeout=300)
    assert stochastic.returncode == 0, stochastic.stderr
    assert json.loads((tmp_path / "s.json").read_text())["mean"] > 719
    greedy = run_eval("--env", "AsteroidsNoFrameskip-v4", "-ne", 1, "--log-dir", tmp_path, "--json",
                      tmp_path / "g.json", timeout=300)
    assert greedy.returncode == 0, greedy.stderr
    assert json.loads((tmp_path / "g.json").read_text())["mean"] < 719


# ---------------------------------------------------------------------------------------------------------------
# Bad input: exit 2, one line on stderr, no traceback


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    good = make_model_file(tmp / "CartPole-v1.pt", "CartPole-v1", "mlplstm", (4,), 2, 16)
    (tmp / "other").mkdir()
    shutil.copy(good, tmp / "other" / "Acrobot-v1.pt")  # a CartPole model under Acrobot's name
    data = good.read_bytes()
    (tmp / "truncated.pt").write_bytes(data[: len(data) // 2])
    (tmp / "garbage.pt").write_bytes(b"not a model at all\n")
    torch.save({"format_version": 1, "kind": "checkpoint", "env": {"env_id": "CartPole-v1"},
                "model_meta": {}, "state_dict": {}}, tmp / "checkpoint.pt")
    (tmp / "empty").mkdir()
    (tmp / "notes.json").write_text('{"kept by": "a user"}')
    return tmp


BAD = {
    "missing model": ["--env", "CartPole-v1", "-lmd", "{tmp}/empty"],
    "unknown env": ["--env", "NoSuchGame-v0", "-lmd", "{tmp}"],
    "model of another game": ["--env", "Acrobot-v1", "-lmd", "{tmp}/other"],
    "model path of another game": ["--env", "Acrobot-v1", "--model-path", "{tmp}/CartPole-v1.pt"],
    "truncated file": ["--model-path", "{tmp}/truncated.pt"],
    "garbage file": ["--model-path", "{tmp}/garbage.pt"],
    "checkpoint without a network": ["--model-path", "{tmp}/checkpoint.pt"],
    "run directory without a best model": ["--model-path", "{tmp}/empty"],
    "--latest without a run directory": ["--env", "CartPole-v1", "-lmd", "{tmp}", "--latest"],
    "num-episodes 0": ["--env", "CartPole-v1", "-lmd", "{tmp}", "-ne", "0"],
    "render-freq not a number": ["--env", "CartPole-v1", "-lmd", "{tmp}", "-rf", "x"],
    "hidden size mismatch": ["--env", "CartPole-v1", "-lmd", "{tmp}", "--hidden-size", "64"],
    "missing GPU": ["--env", "CartPole-v1", "-lmd", "{tmp}", "--gpu-id", "99"],
    "negative seed": ["--env", "CartPole-v1", "-lmd", "{tmp}", "--seed", "-1"],
    "--skip-rate for a game without frames": ["--env", "CartPole-v1", "-lmd", "{tmp}", "--skip-rate", "7"],
    "--env-config for a game that is not Atari": ["--env", "CartPole-v1", "-lmd", "{tmp}", "--env-config",
                                                  "envs/atari.json"],
    # found before any game: the results of a long evaluation are never lost to a path that cannot take them
    "--json where no file can be written": ["--env", "CartPole-v1", "-lmd", "{tmp}", "--json", "/proc/a3g.json"],
    "--json a folder": ["--env", "CartPole-v1", "-lmd", "{tmp}", "--json", "{tmp}/empty"],
    "--record a folder no file can be written in": ["--env", "CartPole-v1", "-lmd", "{tmp}", "--record", "/proc"],
    "--json over a file that is no gym_eval result": ["--env", "CartPole-v1", "-lmd", "{tmp}", "--json",
                                                      "{tmp}/notes.json"],
}


def run_in_process(flags, capsys):
    """gym_eval.main in this process (a start-up of Python and torch saved per case): (exit code, stdout, stderr)."""
    import gym_eval

    try:
        code = gym_eval.main(flags)
    except SystemExit as exc:  # argparse's errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_exit_2(case, bad_files, capsys):
    flags = [f.format(tmp=bad_files) for f in BAD[case]] + ["--log-dir", str(bad_files / "logs")]
    code, out, err = run_in_process(flags, capsys)  # an exception would fail the test with its traceback
    assert code == 2, (case, out, err)
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("gym_eval.py: error: "), err
    assert out == ""
    if case.startswith("--json"):  # the message names what to fix
        assert "--json" in lines[0] and ("cannot be written" in lines[0] or "it is kept" in lines[0]), lines[0]


def test_the_text_log_is_tried_before_the_games_and_closed_after_them(bad_files, tmp_path, capsys):
    """A --log-dir where the log cannot be written (a folder in its name's place, a folder no file can be written
    in) is one line before any game; and each main() writes its own log only (a second call in one process wrote
    into the first one's file too, which stayed open)."""
    (tmp_path / "logs" / "CartPole-v1_mon_log").mkdir(parents=True)
    for log_dir in (tmp_path / "logs", "/proc"):
        code, out, err = run_in_process(["--env", "CartPole-v1", "-lmd", str(bad_files), "--log-dir", str(log_dir)],
                                        capsys)
        assert code == 2 and out == "" and len(error_lines(err)) == 1 and "the text log" in err, err
    for n, length in ((1, 5), (2, 7)):
        code, out, err = run_in_process(["--env", "CartPole-v1", "-lmd", str(bad_files), "-ne", "1", "-mel",
                                         str(length), "--log-dir", str(tmp_path / f"log{n}")], capsys)
        assert code == 0, err
    first, second = ((tmp_path / f"log{n}" / "CartPole-v1_mon_log").read_text() for n in (1, 2))
    assert "episode length 5" in first and "episode length 7" not in first and "episode length 7" in second


def test_earlier_records_in_a_folder_named_like_a_pattern_are_kept(bad_files, tmp_path, capsys):
    """"videos[1]" is a folder name, not a glob pattern: its videos, and a monitor's stats.json under a --log-dir
    so named, are found and kept (read as a pattern, the folder looked empty and was written over)."""
    videos = tmp_path / "videos[1]"
    videos.mkdir()
    (videos / "CartPole-v1_episode001.mp4").write_bytes(b"a kept video")
    monitor = tmp_path / "logs[1]" / "CartPole-v1_monitor"
    monitor.mkdir(parents=True)
    (monitor / "stats.json").write_text("{}")
    for flags, expected in ((["--record", str(videos), "--log-dir", str(tmp_path / "logs")], "already holds videos"),
                            (["--new-gym-eval", "--log-dir", str(tmp_path / "logs[1]")], "earlier record")):
        code, out, err = run_in_process(["--env", "CartPole-v1", "-lmd", str(bad_files), *flags], capsys)
        assert code == 2 and expected in err and out == "", (flags, out, err)
    assert (videos / "CartPole-v1_episode001.mp4").read_bytes() == b"a kept video"
    assert (monitor / "stats.json").read_text() == "{}"


@pytest.mark.parametrize("case", ["unknown env", "garbage file", "num-episodes 0", "model of another game"])
def test_bad_input_as_a_user_sees_it(case, bad_files):
    result = run_eval_command(*[f.format(tmp=bad_files) for f in BAD[case]], "--log-dir", bad_files / "logs")
    assert result.returncode == 2, (case, result.stdout, result.stderr)
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("gym_eval.py: error: "), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the no-display check is for X11/Wayland")
def test_render_without_display_says_so(bad_files):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    result = run_eval_command("--env", "CartPole-v1", "-lmd", bad_files, "--render", "--log-dir",
                              bad_files / "logs", env=env)
    assert result.returncode == 2
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and ("display" in lines[0] or "pygame" in lines[0]) and "--record" in lines[0]


def test_export_model_from_a_run_then_evaluate(cartpole_run, tmp_path):
    """export_model.py turns a run's checkpoint.pt into a model file that gym_eval plays; bad input exits 2."""
    out = tmp_path / "exported.pt"
    result = subprocess.run([*command("export_model"), str(cartpole_run / "run"), str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    exported = out.read_bytes()
    model = torch.load(out, weights_only=True)
    assert model["kind"] == "model" and "optimizer" not in model and model["model_meta"]["model"] == "mlp"
    played = subprocess.run([sys.executable, "gym_eval.py", "--model-path", str(out), "--num-episodes", "2",
                             "--log-dir", str(tmp_path / "logs")], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert played.returncode == 0 and "over 2 episodes" in played.stdout, played.stderr
    again = subprocess.run([*command("export_model"), str(cartpole_run / "run"), str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "exists" in again.stderr and out.read_bytes() == exported
    bad = subprocess.run([*command("export_model"), str(tmp_path / "nope"), str(tmp_path / "new.pt")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    # --force replaces a model file, never a run's checkpoint (the run could no longer resume)
    shutil.copy(cartpole_run / "run" / "checkpoint.pt", tmp_path / "checkpoint.pt")
    state = (tmp_path / "checkpoint.pt").read_bytes()
    for force in ([], ["--force"]):  # without --force too, the message does not offer it
        over = subprocess.run([*command("export_model"), str(tmp_path / "checkpoint.pt"),
                               str(tmp_path / "checkpoint.pt"), *force], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert over.returncode == 2 and "training state" in over.stderr and "--force replaces" not in over.stderr
        assert len(over.stderr.strip().splitlines()) == 1
    assert (tmp_path / "checkpoint.pt").read_bytes() == state
    # nor the model file it exports (--bf16 would round the only copy of its weights)
    itself = subprocess.run([*command("export_model"), str(out), str(out), "--force", "--bf16"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert itself.returncode == 2 and "is the file being exported" in itself.stderr and out.read_bytes() == exported
    forced = subprocess.run([*command("export_model"), str(cartpole_run / "run"), str(out), "--force", "--bf16"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert forced.returncode == 0 and out.read_bytes() != exported, forced.stderr


def test_export_a_best_model_in_bfloat16(cartpole_run, tmp_path):
    """--bf16 halves the file; loading widens the weights to float32 exactly; the model still plays."""
    best, out = cartpole_run / "run" / "best_model.pt", tmp_path / "small.pt"
    result = subprocess.run([*command("export_model"), str(best), str(out), "--bf16"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "bfloat16 weights" in result.stdout, result.stderr
    original, small = torch.load(best, weights_only=True), torch.load(out, weights_only=True)
    assert small["return"] == original["return"]  # a model file keeps its game's score
    assert all(value.dtype == torch.bfloat16 for value in small["state_dict"].values() if value.is_floating_point())
    weights = sum(v.numel() * v.element_size() for v in original["state_dict"].values())
    assert sum(v.numel() * v.element_size() for v in small["state_dict"].values()) == weights // 2
    from model import build_model

    model = build_model(small["model_meta"])
    model.load_state_dict(small["state_dict"])
    for name, value in model.state_dict().items():
        assert value.dtype == torch.float32 and torch.equal(value, small["state_dict"][name].float()), name
        assert torch.allclose(value, original["state_dict"][name], rtol=1e-2, atol=1e-3), name
    played = run_eval("--model-path", out, "--num-episodes", "1", "--log-dir", tmp_path / "logs")
    assert played.returncode == 0 and "an evaluator game of" in header_line(played.stdout), played.stderr


def header_line(stdout):
    return next(line for line in stdout.splitlines() if line.startswith("gym_eval: "))


def test_a_run_directory_plays_its_best_model_or_with_latest_its_checkpoint(cartpole_run, tmp_path):
    """A run directory is enough: its best model by default, its checkpoint's weights with --latest; a checkpoint
    file plays its weights too. The header says which weights played and names the mlp's width."""
    run = cartpole_run / "run"
    logs = ["--num-episodes", "1", "--log-dir", tmp_path / "logs"]
    best = run_eval("--model-path", run, *logs)
    assert best.returncode == 0, best.stderr
    header = header_line(best.stdout)
    assert str(run / "best_model.pt") in header and "an evaluator game of" in header, header
    assert "mlp, width 32" in header and "hidden" not in header, header
    for flags in (["--model-path", run, "--latest"], ["--model-path", run / "checkpoint.pt"]):
        latest = run_eval(*flags, *logs)
        assert latest.returncode == 0, latest.stderr
        header = header_line(latest.stdout)
        assert str(run / "checkpoint.pt") in header and "a checkpoint's latest weights" in header, header


def test_a_run_that_was_resumed_elsewhere_says_where_its_newer_weights_are(cartpole_run, tmp_path):
    """main.py --resume from an earlier state writes RUN-from-<frames> and leaves RUN as it was: gym_eval still plays
    RUN's own weights, and says on stderr where the branch is."""
    run, branch = tmp_path / "run1", tmp_path / "run1-from-1000"
    shutil.copytree(cartpole_run / "run", run)
    logs = ["--num-episodes", "1", "--log-dir", tmp_path / "logs"]
    alone = run_eval("--model-path", run, "--latest", *logs)
    assert alone.returncode == 0 and "--resume wrote" not in alone.stderr, alone.stderr
    shutil.copytree(cartpole_run / "run", branch)
    for flags in (["--model-path", run, "--latest"], ["--model-path", run]):
        result = run_eval(*flags, *logs)
        assert result.returncode == 0, result.stderr
        notes = [line for line in error_lines(result.stderr) if line.startswith("gym_eval.py: note:")]
        assert len(notes) == 1 and f"a branch of {run} from its state at 1,000 frames, {branch}:" in notes[0], notes
        assert str(run / ("checkpoint.pt" if "--latest" in flags else "best_model.pt")) in header_line(result.stdout)
    direct = run_eval("--model-path", branch, "--latest", *logs)
    assert direct.returncode == 0 and "--resume wrote" not in direct.stderr, direct.stderr


def test_an_exported_model_says_so_in_the_header(cartpole_run, tmp_path):
    out = tmp_path / "exported.pt"
    subprocess.run([*command("export_model"), str(cartpole_run / "run"), str(out)], cwd=ROOT, check=True,
                   capture_output=True, timeout=120)
    played = run_eval("--model-path", out, "--num-episodes", "1", "--log-dir", tmp_path / "logs")
    assert played.returncode == 0, played.stderr
    header = header_line(played.stdout)
    assert "weights exported from a checkpoint at" in header and "nan" not in header, header


def test_force_never_replaces_a_checkpoint_of_a_newer_format_nor_writes_into_a_folder(tmp_path, capsys):
    """A checkpoint this version cannot load (a newer a3g's) is still some run's training state: --force kept
    replacing it. A folder given as OUTPUT: said so, not '--force replaces it' and then 'Is a directory'."""
    from tools import export_model

    newer = tmp_path / "checkpoint.pt"
    torch.save({"format_version": 99, "kind": "checkpoint", "state_dict": {}}, newer)
    state = newer.read_bytes()
    assert export_model.main([str(tmp_path / "nope"), str(newer), "--force"]) == 2
    assert "training state" in capsys.readouterr().err and newer.read_bytes() == state
    (tmp_path / "models").mkdir()
    for force in ([], ["--force"]):
        assert export_model.main([str(tmp_path / "nope"), str(tmp_path / "models"), *force]) == 2
        err = capsys.readouterr().err
        assert "is a folder" in err and "--force" not in err, err


@pytest.mark.parametrize("fps", [15.0, 24.0, 30.0, 50.0])
def test_a_gif_plays_in_real_time(fps, tmp_path):
    """GIF delays are whole hundredths of a second: 15 fps (Atari's real time) played at 16.7 fps with 60 ms a
    frame. Each frame now ends at its real time rounded to 10 ms, so the whole GIF is never off by more."""
    from envs.recording import VideoRecorder

    recorder = VideoRecorder(str(tmp_path / "game"), fps, "gif", {})
    frames = 47
    for k in range(frames):  # frames that differ, so that Pillow merges none
        recorder.add(np.full((8, 8, 3), 5 * k, np.uint8))
    with Image.open(recorder.close()) as gif:
        delays = []
        for i in range(gif.n_frames):
            gif.seek(i)
            delays.append(gif.info["duration"])
    assert len(delays) == frames and all(d % 10 == 0 and d >= 20 for d in delays)
    assert abs(sum(delays) - 1000 * frames / fps) <= 5
