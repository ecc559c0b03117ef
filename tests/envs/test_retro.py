"""Retro console games (stable-retro): Airstriker-Genesis-v0, whose ROM ships with stable-retro, runs for real here;
Super Mario Kart's integration is checked without its ROM (files load in stable-retro's own structures, its rules on
crafted RAM readings)."""

import gzip
import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

from conftest import ROOT, command, main_in_process, out_dirs, read_json, run_main
from core.errors import BadInput
from envs import mario_kart, retro_env
from envs.environment import EnvSettings, family, frames_per_step, make_env
from envs.frames import process_frame

AIRSTRIKER = "Airstriker-Genesis-v0"
SMK = "SuperMarioKart-Snes-v0"


def run_script(name, *flags, timeout=300):
    return subprocess.run([*command(name), *map(str, flags)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


# ---------------------------------------------------------------------------------------------------------------
# The environment layer


def test_family_and_frames():
    assert family(AIRSTRIKER) == "retro" and family(SMK) == "retro"
    assert family("PongNoFrameskip-v4") == "atari" and family("CartPole-v1") == "classic"
    assert frames_per_step(AIRSTRIKER, 4) == 4


def test_default_action_set_of_a_pad():
    buttons = ["B", "A", "MODE", "START", "UP", "DOWN", "LEFT", "RIGHT", "C", "Y", "X", "Z"]
    actions = retro_env.default_actions(buttons)
    assert actions[0] == []
    assert ["START"] not in actions and ["MODE"] not in actions
    assert ["LEFT", "B"] in actions and ["RIGHT", "B"] in actions and ["Z"] in actions
    assert len(actions) == len({tuple(a) for a in actions})


def test_action_sets_from_the_config_file(tmp_path):
    config = retro_env.load_retro_config()
    genesis = retro_env.pad_buttons(AIRSTRIKER)
    conf = retro_env.retro_conf_for(AIRSTRIKER, config, genesis)
    assert conf["actions"] == config["games"]["Airstriker-Genesis"]["actions"]
    # a Genesis game without its own entry gets the console's set; a console without one, the pad's default
    assert retro_env.retro_conf_for("Other-Genesis-v0", config, genesis)["actions"] == \
        config["systems"]["Genesis"]["actions"]
    nes = retro_env.pad_buttons("SuperMarioBros-Nes-v0")
    assert retro_env.retro_conf_for("SuperMarioBros-Nes-v0", config, nes)["actions"] == \
        retro_env.default_actions(nes)
    smk = retro_env.retro_conf_for(SMK, config, retro_env.pad_buttons(SMK))
    assert len(smk["actions"]) == 9 and smk["rules"] == "mario_kart" and smk["crop"]["bottom"] == 112
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"games": {"Airstriker-Genesis": {"actions": [["TURBO"]]}}}))
    with pytest.raises(BadInput, match="TURBO"):
        retro_env.retro_conf_for(AIRSTRIKER, retro_env.load_retro_config(str(bad)), genesis)


def test_retro_actions_press_the_named_buttons():
    env = make_env(EnvSettings(AIRSTRIKER), train=False)
    try:
        wrapper = env
        while not isinstance(wrapper, retro_env.RetroActions):
            wrapper = wrapper.env
        buttons = list(env.unwrapped.buttons)
        for i, combo in enumerate(wrapper.combos):
            pressed = [buttons[j] for j in np.flatnonzero(wrapper.action(i))]
            assert sorted(pressed) == sorted(combo)
        assert env.action_space.n == len(wrapper.combos) == 6
    finally:
        env.close()


@pytest.mark.parametrize("size,stack", [(80, 1), (84, 4)])
def test_preprocessing_shapes_and_frame_skip(size, stack):
    env = make_env(EnvSettings(AIRSTRIKER, skip_rate=4, frame_size=size, frame_stack=stack), train=True)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (stack, size, size) == env.observation_space.shape and obs.dtype == np.uint8
        frames_before = env.unwrapped.em.get_state()  # the emulator advances skip_rate frames per agent step
        obs, reward, terminated, truncated, info = env.step(0)
        assert obs.shape == (stack, size, size) and obs.dtype == np.uint8
        assert {"score", "lives"} <= set(info)
        assert frames_before != env.unwrapped.em.get_state()
    finally:
        env.close()


def test_gray_crop_resize():
    frame = np.zeros((224, 256, 3), dtype=np.uint8)
    frame[:112] = 255  # the top half (Mario Kart's race view) white, the bottom half (the map) black
    out = process_frame(frame, *retro_env.retro_box({"top": 0, "bottom": 112, "left": 0, "right": 0}, 224, 256, 84))
    assert out.shape == (1, 84, 84) and (out == 255).all()
    whole = process_frame(frame, *retro_env.retro_box({"top": 0, "bottom": 0, "left": 0, "right": 0}, 224, 256, 80))
    assert 0.4 * 255 < whole.mean() < 0.6 * 255


def test_reward_scale_only_in_training_and_a_game_ends():
    """Training rewards are scaled (Airstriker: 20 points a kill -> 1.0); the evaluator's are the game's points."""
    totals = {}
    for train in (True, False):
        env = make_env(EnvSettings(AIRSTRIKER, frame_size=84, frame_stack=4), train=train)
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        rewards, done, steps = [], False, 0
        while not done and steps < 3000:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            rewards.append(reward)
            done, steps = terminated or truncated, steps + 1
        env.close()
        assert done, "a random Airstriker game ends within 3000 agent steps"
        totals[train] = [r for r in rewards if r]
    assert totals[False] and set(totals[False]) <= {20.0, 40.0, 60.0}
    assert set(totals[True]) <= {1.0, 2.0, 3.0}


def test_one_emulator_per_process_is_a_clear_error():
    env = make_env(EnvSettings(AIRSTRIKER), train=False)
    try:
        with pytest.raises(BadInput, match="one|multiple"):
            make_env(EnvSettings(AIRSTRIKER), train=False)
    finally:
        env.close()
    make_env(EnvSettings(AIRSTRIKER), train=False).close()  # closed: the next one may start


def test_state_flag_names_or_files(tmp_path):
    assert retro_env.state_path(AIRSTRIKER, "Level1").endswith("Level1.state")
    assert retro_env.state_path(AIRSTRIKER, None) is None
    with pytest.raises(BadInput, match="Level1"):
        retro_env.state_path(AIRSTRIKER, "Level9")
    # a state file of one's own, here a copy of Level1: episodes start from it
    copy = tmp_path / "mine.state"
    with gzip.open(retro_env.state_path(AIRSTRIKER, "Level1"), "rb") as f:
        data = f.read()
    with gzip.open(copy, "wb") as f:
        f.write(data)
    settings = EnvSettings(AIRSTRIKER, retro=retro_env.resolve(AIRSTRIKER, str(copy)))
    assert settings.retro["states"] == [str(copy)] and settings.retro["eval_states"] is None
    env = make_env(settings, train=False)
    try:
        assert env.unwrapped.initial_state == data
    finally:
        env.close()


def test_model_files_with_one_state_still_load():
    """Model files from before several start states stored ``state`` (a path or None)."""
    assert retro_env.start_states({"state": "/x/a.state"}, train=True) == ["/x/a.state"]
    assert retro_env.start_states({"state": None}, train=False) == []
    conf = {"states": ["a", "b"], "eval_states": None}
    assert retro_env.start_states(conf, train=False) == ["a", "b"]
    assert retro_env.start_states({**conf, "eval_states": ["c"]}, train=False) == ["c"]
    assert retro_env.start_states({**conf, "eval_states": ["c"]}, train=True) == ["a", "b"]
    # gym_eval.py --state on such a file: the states given are played, not the one the file names
    assert retro_env.start_states({"state": "/x/a.state", "eval_states": ["c"]}, train=False) == ["c"]
    assert retro_env.start_states({"state": "/x/a.state", "eval_states": ["c"]}, train=True) == ["/x/a.state"]


def test_a_training_game_cut_by_the_length_cap_is_counted_with_its_points():
    """The cap cuts a game as its end does: the cut step carries the game's statistics (games.csv's row), as a
    game that ended would, so the count of finished games and the rows of games.csv agree."""
    env = make_env(EnvSettings(AIRSTRIKER, max_episode_length=40), train=True)
    try:
        env.reset(seed=0)
        for _ in range(40):
            _, _, terminated, truncated, info = env.step(0)
            assert not terminated, "Airstriker's first 40 agent steps never end its game"
        assert truncated and info["episode"]["l"] == 40
    finally:
        env.close()


@pytest.fixture(scope="module")
def airstriker_states(tmp_path_factory):
    """Four save states of one random Airstriker game (``tools/save_states.py``, run as a user runs it)."""
    out = tmp_path_factory.mktemp("states") / "airstriker"
    result = subprocess.run([*command("save_states.py"), "--env", AIRSTRIKER, "--steps", "0", "40", "80",
                             "120", "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(out)) == [f"step{n}.{ext}" for n in (0, 120, 40, 80) for ext in ("png", "state")]
    again = subprocess.run([*command("save_states.py"), "--env", AIRSTRIKER, "--steps", "40",
                            "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert again.returncode == 2 and "exists and is kept" in again.stderr  # a user's states are never overwritten
    return out


def test_save_states_refuses_a_bad_out_or_state_in_one_line(tmp_path):
    (tmp_path / "a_file").write_text("a user's notes")
    cases = ((["--out", tmp_path / "a_file" / "sub"], "cannot be created"),
             (["--out", tmp_path / "new", "--state", "Level9"], "no state of that name"))
    for flags, expected in cases:
        result = subprocess.run([*command("save_states.py"), "--env", AIRSTRIKER, "--steps", "0", *map(str, flags)],
                                capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert result.returncode == 2 and expected in result.stderr and "Traceback" not in result.stderr, result
    assert not (tmp_path / "new").exists()  # nothing made for a run that could not start


def first_screen(states, train, seed=None):
    """The screen after the first reset (the observation itself depends on the running normalisation's history)."""
    env = make_env(EnvSettings(AIRSTRIKER, retro=retro_env.resolve(AIRSTRIKER, states)), train=train)
    try:
        _, info = env.reset(seed=seed)
        return env.unwrapped.get_screen(), info, env
    except BaseException:
        env.close()
        raise


def test_episodes_start_from_several_states(airstriker_states):
    paths = [str(airstriker_states / f"step{n}.state") for n in (0, 40, 80)]
    assert retro_env.state_paths(AIRSTRIKER, [str(airstriker_states)]) == sorted(
        paths + [str(airstriker_states / "step120.state")])  # a folder: its states in name order
    alone = []
    for path in paths:
        screen, _, env = first_screen([path], train=False)
        env.close()
        alone.append(screen)
    assert not np.array_equal(alone[0], alone[1]) and not np.array_equal(alone[1], alone[2])
    # the evaluator's games: the states in turn, each game starting exactly where that state's own env starts
    screen, info, env = first_screen(paths, train=False)
    try:
        seen = [(info["start_state"], screen)]
        for _ in range(5):
            seen.append((env.reset()[1]["start_state"], env.unwrapped.get_screen()))
    finally:
        env.close()
    assert [index for index, _ in seen] == [0, 1, 2, 0, 1, 2]
    assert all(np.array_equal(screen, alone[index]) for index, screen in seen)
    # a new evaluator (a resume, a restart) takes the turns on from the games its run played: 4 played, state 1 next
    _, _, env = first_screen(paths, train=False)
    try:
        retro_env.take_turns_from(env, 4)
        assert [env.reset()[1]["start_state"] for _ in range(3)] == [1, 2, 0]
    finally:
        env.close()
    # training's episodes: at random, every state in 30 episodes, and the same sequence for the same seed
    sequences = []
    for _ in range(2):
        _, info, env = first_screen(paths, train=True, seed=7)
        try:
            sequences.append([info["start_state"]] + [env.reset()[1]["start_state"] for _ in range(29)])
        finally:
            env.close()
    assert sequences[0] == sequences[1] and set(sequences[0]) == {0, 1, 2}
    assert sequences[0] != [0, 1, 2] * 10


def test_a_score_window_must_count_each_evaluation_state_alike(airstriker_states, tmp_path):
    """The evaluator plays its start states in turn, so a --score-window that is not a multiple of their number would
    weigh some states more than others in the mean that decides "solved": refused, naming windows that fit."""
    from runtime.config import validate

    states = [str(airstriker_states / f"step{n}.state") for n in (0, 40, 80)]
    flags = ["--env", AIRSTRIKER, "--run-dir", str(tmp_path / "run"), "--workers", "1"]
    with pytest.raises(BadInput, match=r"--score-window 10 is not a multiple of the evaluator's 3 start states.*"
                                       r"give --score-window 9 or 12"):
        validate([*flags, "--state", *states])
    with pytest.raises(BadInput, match="--score-window 2 is not a multiple .* 3 start states.*give --score-window 3$"):
        validate([*flags, "--state", states[0], "--eval-state", *states, "--score-window", "2"])
    validate([*flags, "--state", *states, "--score-window", "9"])  # whole rounds
    validate([*flags, "--state", *states, "--eval-state", states[0]])  # one evaluation state: any window


def test_bad_state_files_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="a folder without .state files"):
        retro_env.state_paths(AIRSTRIKER, [str(tmp_path / "empty")])
    (tmp_path / "bad.state").write_bytes(b"not gzip")
    with pytest.raises(BadInput, match="cannot be read"):
        retro_env.state_paths(AIRSTRIKER, [str(tmp_path / "bad.state")])
    # stable-retro would look for level1.bin.state: refused, naming the flag it came from
    shutil.copy(retro_env.state_path(AIRSTRIKER, "Level1"), tmp_path / "level1.bin")
    with pytest.raises(BadInput, match=r"--eval-state .*level1.bin.*named \*.state"):
        retro_env.state_paths(AIRSTRIKER, [str(tmp_path / "level1.bin")], "--eval-state")


def damaged_states(folder):
    """Three copies of Level1.state gone wrong: compressed bytes damaged inside a whole gzip file (zlib's error), a
    file cut in half (gzip's), and a readable gzip file that holds no emulator state (the emulator refuses it)."""
    whole = open(retro_env.state_path(AIRSTRIKER, "Level1"), "rb").read()
    damaged = bytearray(whole)
    damaged[20:60] = bytes(b ^ 0xFF for b in damaged[20:60])
    (folder / "damaged.state").write_bytes(bytes(damaged))
    (folder / "cut.state").write_bytes(whole[: len(whole) // 2])
    with gzip.open(folder / "junk.state", "wb") as f:
        f.write(b"not an emulator state" * 10)
    return {name: str(folder / f"{name}.state") for name in ("damaged", "cut", "junk")}


def test_a_damaged_or_foreign_state_is_one_line_where_the_games_start(tmp_path):
    """A model file's stored state (one: stable-retro opened it itself, and its EOFError or zlib.error was a
    traceback) or one that is no state of the game (stable-retro ignored the refusal: games from the default start)."""
    paths = damaged_states(tmp_path)
    for name, words in (("damaged", "cannot be read"), ("cut", "cannot be read"), ("junk", "is not a state of")):
        settings = EnvSettings(AIRSTRIKER, retro={**retro_env.resolve(AIRSTRIKER, None), "states": [paths[name]]})
        with pytest.raises(BadInput, match=words):
            make_env(settings, train=False)
    env = make_env(EnvSettings(AIRSTRIKER, retro=retro_env.resolve(AIRSTRIKER, "Level1")), train=False)
    env.close()  # a good state still loads, and the emulator was closed after each refusal


def test_training_states_the_emulator_refuses_are_one_line_exit_2(tmp_path):
    paths = damaged_states(tmp_path)
    for flags, words in ((["--state", paths["damaged"]], "cannot be read"),
                         (["--state", paths["junk"], "--eval-state", "Level1"], "is not a state of " + AIRSTRIKER)):
        result = main_in_process("--env", AIRSTRIKER, *flags, "--max-frames", "10", *out_dirs(tmp_path))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and words in lines[0], result.stderr


# ---------------------------------------------------------------------------------------------------------------
# The command line: bad input, training, evaluation


@pytest.mark.parametrize("flags,expected", [
    (["--env", SMK], "python -m tools.retro_import DIR"),
    (["--env", "SuperMarioWorld-Snes-v0"], "python -m stable_retro.import DIR"),
    (["--env", AIRSTRIKER, "--envs-per-worker", "2"], "one emulator per process"),
    (["--env", AIRSTRIKER, "--state", "Level9"], "no state of that name"),
    (["--env", "CartPole-v1", "--state", "Level1"], "--state is for stable-retro games"),
    (["--env", "CartPole-v1", "--eval-state", "Level1"], "--eval-state is for stable-retro games"),
    (["--env", AIRSTRIKER, "--state", "Level1", "--eval-state", "Level9"], "--eval-state 'Level9': no such file"),
])
def test_bad_retro_input_is_one_line_exit_2(flags, expected, tmp_path):
    result = main_in_process(*flags, "--max-frames", "10", *out_dirs(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "run" / "summary.json")


def test_missing_rom_with_the_tools():
    for script, flags in (("retro_state.py", []), ("gym_eval.py", ["--env", SMK])):
        result = run_script(script, *flags, timeout=120)
        assert result.returncode == 2 and "python -m tools.retro_import DIR" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    result = run_script("retro_import.py", "/no/such/folder", timeout=120)
    assert result.returncode == 2 and "not a folder" in result.stderr


def test_a_folder_without_a_known_rom_imports_nothing_and_says_so(tmp_path):
    (tmp_path / "notes.txt").write_text("not a ROM")
    (tmp_path / "game.sfc").write_bytes(os.urandom(4096))  # a ROM of no game stable-retro or a3g knows
    result = run_script("retro_import.py", str(tmp_path), timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"no file in {tmp_path} is the ROM of a game" in lines[0]
    assert "Imported 0 games" in result.stdout  # stable-retro's own line still shows


def test_an_archive_it_cannot_open_is_one_line(tmp_path):
    """A zip whose entries are encrypted (zipfile opens no password-protected entry): one line, exit 2."""
    archive = tmp_path / "roms.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("game.md", b"x" * 1000)
    data = bytearray(archive.read_bytes())
    data[data.rfind(b"PK\x01\x02") + 8] |= 1  # the central directory's flag: encrypted
    archive.write_bytes(bytes(data))
    result = run_script("retro_import.py", str(tmp_path), timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be read" in lines[0] and "unpack it" in lines[0], lines


@pytest.fixture
def fake_game(tmp_path, monkeypatch):
    """A game stable-retro knows by two dumps' SHA-1s, in an integration folder of its own, with one dump already
    imported: (the game's folder, the two dumps' bytes, a folder of the user's ROM files)."""
    import hashlib

    import stable_retro.data

    first, second = os.urandom(4096), os.urandom(4096)
    game = tmp_path / "integrations" / "FakeGame-Snes-v0"
    game.mkdir(parents=True)
    (game / "rom.sfc").write_bytes(first)
    known = {hashlib.sha1(dump).hexdigest(): ("FakeGame-Snes-v0", ".sfc", str(game.parent)) for dump in (first, second)}
    monkeypatch.setattr(stable_retro.data, "get_known_hashes", lambda: known)
    (tmp_path / "roms").mkdir()
    return game, first, second, tmp_path / "roms"


def test_an_imported_rom_is_written_whole_or_left_as_it_was(fake_game, monkeypatch, capsys):
    """stable-retro's importer wrote rom.<ext> in place: a full disk or Ctrl-C mid-write left a truncated ROM where a
    good one was (and the game's check accepted it). Now a failed write is one line naming the file, exit 2, the
    ROM there untouched; the same ROM again is left as it is; another dump replaces it whole."""
    from core import files
    from tools import retro_import

    game, first, second, roms = fake_game
    (roms / "game.sfc").write_bytes(second)

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full_disk)
    assert retro_import.main([str(roms)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"python -m tools.retro_import: error: {game / 'rom.sfc'}: No space left on device"], err
    assert (game / "rom.sfc").read_bytes() == first and sorted(os.listdir(game)) == ["rom.sfc"]
    (roms / "game.sfc").write_bytes(first)  # the ROM already there: nothing is written (the disk is still full)
    assert retro_import.main([str(roms)]) == 0
    assert "Importing FakeGame-Snes-v0" in capsys.readouterr().out
    monkeypatch.undo()
    import stable_retro.data

    monkeypatch.setattr(stable_retro.data, "get_known_hashes", lambda: {
        __import__("hashlib").sha1(second).hexdigest(): ("FakeGame-Snes-v0", ".sfc", str(game.parent))})
    (roms / "game.sfc").write_bytes(second)
    with zipfile.ZipFile(roms / "more.zip", "w") as z:  # an archive's ROM too
        z.writestr("inside/game.sfc", second)
    assert retro_import.main([str(roms)]) == 0
    assert (game / "rom.sfc").read_bytes() == second and "Imported 2 games" in capsys.readouterr().out


def test_a_rom_folder_it_cannot_write_is_one_line(fake_game, monkeypatch, capsys):
    from tools import retro_import

    _, _, second, roms = fake_game
    (roms / "game.sfc").write_bytes(second)

    def read_only(path, data):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(retro_import, "atomic_write_bytes", read_only)
    assert retro_import.main([str(roms)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m tools.retro_import: error: ") and \
        err[0].endswith("FakeGame-Snes-v0/rom.sfc: Permission denied"), err


@pytest.fixture(scope="module")
def airstriker_run(tmp_path_factory, airstriker_states):
    """A short real training run on Airstriker: one worker (one emulator), the evaluator (another); training
    episodes start from three save states, the evaluator's from a fourth."""
    tmp = tmp_path_factory.mktemp("airstriker")
    states = [str(airstriker_states / f"step{n}.state") for n in (0, 40, 80, 120)]
    result = run_main("--env", AIRSTRIKER, "--workers", "1", "--max-frames", "2000", "--max-seconds", "60",
                      "--state", *states[:3], "--eval-state", states[3],
                      "--no-tensorboard-logger", *out_dirs(tmp), timeout=240)
    assert result.returncode == 0, result.stderr
    return tmp, result


def test_training_run_on_airstriker(airstriker_run):
    tmp, result = airstriker_run
    assert "defaults for retro games on a CPU-only machine" in result.stdout and "--envs-per-worker 1" in result.stdout
    summary = read_json(tmp / "run" / "summary.json")
    assert summary["frames"] >= 2000 and summary["frames"] % 4 == 0  # emulator frames, 4 per agent step
    args = read_json(tmp / "run" / "args.json")
    assert args["env"] == AIRSTRIKER and args["envs_per_worker"] == 1 and args["model"] == "nature"
    assert (tmp / "trained_models" / f"{AIRSTRIKER}.pt").is_file()
    retro = torch.load(tmp / "trained_models" / f"{AIRSTRIKER}.pt", weights_only=True)["env"]["retro"]
    assert [os.path.basename(p) for p in retro["states"]] == ["step0.state", "step40.state", "step80.state"]
    assert [os.path.basename(p) for p in retro["eval_states"]] == ["step120.state"]


def test_gym_eval_plays_records_and_scores_airstriker(airstriker_run, tmp_path):
    tmp, _ = airstriker_run
    model = tmp / "trained_models" / f"{AIRSTRIKER}.pt"
    result = run_script("gym_eval.py", "--env", AIRSTRIKER, "--model-path", model, "--num-episodes", "2",
                        "--max-episode-length", "300", "--record", tmp_path / "videos", "--render-freq", "2",
                        "--json", tmp_path / "scores.json", "--log-dir", tmp_path / "logs", timeout=240)
    assert result.returncode == 0, result.stderr
    scores = read_json(tmp_path / "scores.json")
    assert len(scores["episodes"]) == 2 and scores["env"] == AIRSTRIKER
    assert all(e["return"] % 20 == 0 for e in scores["episodes"])  # the game's own points, not scaled ones
    videos = sorted(os.listdir(tmp_path / "videos"))
    assert len(videos) == 1 and videos[0].startswith(f"{AIRSTRIKER}_episode001")
    import cv2

    path = str(tmp_path / "videos" / videos[0])
    if path.endswith(".mp4"):  # from the full-size RGB screen, at 60 / 4 = 15 fps
        capture = cv2.VideoCapture(path)
        ok, frame = capture.read()
        assert ok and frame.shape[:2] == (224, 320)
        assert abs(capture.get(cv2.CAP_PROP_FPS) - 15.0) < 0.01
        capture.release()
    assert f"{AIRSTRIKER}: mean" in result.stdout


def test_gym_eval_plays_the_states_it_is_given(airstriker_run, airstriker_states, tmp_path):
    tmp, _ = airstriker_run
    model = tmp / "trained_models" / f"{AIRSTRIKER}.pt"
    flags = ["--env", AIRSTRIKER, "--model-path", model, "--num-episodes", "2", "--max-episode-length", "30",
             "--log-dir", tmp_path / "logs"]
    bad = run_script("gym_eval.py", *flags, "--state", "Level9", timeout=120)
    assert bad.returncode == 2 and "no state of that name" in bad.stderr and len(bad.stderr.splitlines()) == 1
    result = run_script("gym_eval.py", *flags, "--state", airstriker_states / "step0.state", "Level1",
                        "--json", tmp_path / "scores.json", timeout=240)
    assert result.returncode == 0, result.stderr
    assert len(read_json(tmp_path / "scores.json")["episodes"]) == 2
    # a model file whose evaluation state is not on this machine: one line that names --state
    moved = torch.load(model, weights_only=True)
    moved["env"]["retro"]["eval_states"] = [str(tmp_path / "elsewhere" / "step120.state")]
    torch.save(moved, tmp_path / "moved.pt")
    flags[flags.index(model)] = tmp_path / "moved.pt"
    missing = run_script("gym_eval.py", *flags, timeout=120)
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1, missing.stderr
    assert "is not here: give --state" in missing.stderr
    assert run_script("gym_eval.py", *flags, "--state", airstriker_states / "step120.state",
                      timeout=240).returncode == 0


# ---------------------------------------------------------------------------------------------------------------
# Super Mario Kart: a3g's integration, without the ROM


def test_mario_kart_integration_loads_in_stable_retro():
    r = retro_env.retro()
    folder = os.path.join(retro_env.INTEGRATIONS, SMK)
    data = r.data.GameData()
    assert data.load(os.path.join(folder, "data.json"), os.path.join(folder, "scenario.json"))
    variables = data.list_variables()
    for name in ("checkpoint", "lap", "kart_status", "surface", "race_phase"):
        assert name in variables
    assert variables["checkpoint"] == {"address": 0x7E10C0, "type": "|u1"}
    assert variables["surface"]["address"] == 0x7E10AE and variables["kart_status"]["address"] == 0x7E10A0
    # stable-retro finds it by name (a3g's folder is registered) and would import the USA ROM into it
    assert r.data.get_file_path(SMK, "scenario.json", r.data.Integrations.DEFAULT) == \
        os.path.join(folder, "scenario.json")
    game, ext, path = r.data.get_known_hashes()["47e103d8398cf5b7cbb42b95df3a3c270691163b"]
    assert (game, ext, path) == (SMK, ".sfc", retro_env.INTEGRATIONS)
    metadata = read_json(os.path.join(folder, "metadata.json"))
    assert metadata["default_state"] == "MarioCircuit1"
    # the scenario's end conditions are the rules' own
    scenario = read_json(os.path.join(folder, "scenario.json"))
    done = scenario["done"]["variables"]
    assert scenario["done"]["condition"] == "any"
    assert done["lap"] == {"op": "greater-or-equal", "reference": mario_kart.FINISH_LAP}
    assert done["kart_status"]["reference"] == min(mario_kart.FELL_STATUSES)


def reading(checkpoint=3, lap=129, kart_status=0, surface=64):
    return {"checkpoint": checkpoint, "lap": lap, "kart_status": kart_status, "surface": surface}


@pytest.mark.parametrize("prev,now,reward,over", [
    (reading(), reading(checkpoint=4), 1.0, False),                     # one checkpoint forwards
    (reading(), reading(checkpoint=5), 2.0, False),                     # two within one agent step
    (reading(), reading(checkpoint=2), -1.0, False),                    # driving backwards
    (reading(checkpoint=29), reading(checkpoint=0, lap=130), 1.0, False),   # across the lap line, forwards
    (reading(checkpoint=0, lap=130), reading(checkpoint=29), -1.0, False),  # and back over it
    (reading(), reading(surface=84), mario_kart.OFF_ROAD_PENALTY, False),   # Mario Circuit's off-road
    (reading(), reading(surface=64), 0.0, False),                        # on the road, standing still
    (reading(), reading(kart_status=2), 0.0, False),                     # a hop is not a fall
    (reading(), reading(kart_status=4), mario_kart.FALL_PENALTY, True),  # fallen off the track
    (reading(), reading(kart_status=8), mario_kart.FALL_PENALTY, True),  # into deep water
    (reading(checkpoint=29, lap=132), reading(checkpoint=0, lap=133), 1.0, True),  # the fifth lap: race over
    (None, reading(surface=90), mario_kart.OFF_ROAD_PENALTY, False),    # the first step of an episode
])
def test_mario_kart_rewards_and_race_end(prev, now, reward, over):
    got_reward, got_over = mario_kart.race_step(prev, now)
    assert got_reward == pytest.approx(reward) and got_over == over


def test_mario_kart_wrapper_replaces_the_reward_and_ends_the_race():
    import gymnasium as gym

    class FakeRace(gym.Env):
        """Replays crafted RAM readings, as stable-retro's info, with the scenario's lap reward."""
        observation_space = gym.spaces.Box(0, 255, (4,), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def __init__(self, readings):
            self.readings, self.t = readings, 0

        def reset(self, seed=None, options=None):
            self.t = 0
            return np.zeros(4, np.uint8), {}

        def step(self, action):
            info = self.readings[self.t]
            self.t += 1
            return np.zeros(4, np.uint8), 100.0, False, False, dict(info)

    readings = [reading(checkpoint=0), reading(checkpoint=1, surface=84), reading(checkpoint=0),
                reading(checkpoint=1, kart_status=6)]
    env = mario_kart.MarioKartRules(FakeRace(readings))
    env.reset()
    steps = [env.step(0) for _ in readings]
    assert [s[1] for s in steps] == pytest.approx([0.0, 1.0 + mario_kart.OFF_ROAD_PENALTY, -1.0,
                                                   1.0 + mario_kart.FALL_PENALTY])
    assert [s[2] for s in steps] == [False, False, False, True]
    env.reset()
    assert env.step(0)[1] == 0.0  # a new episode starts without a previous reading


def test_mario_kart_without_its_start_state_says_how_to_make_it(tmp_path, monkeypatch):
    """With a (fake) imported ROM but no state yet, the message names retro_state.py (no emulator is started)."""
    r = retro_env.retro()
    real = r.data.get_romfile_path
    monkeypatch.setattr(r.data, "get_romfile_path", lambda game, inttype=None: str(tmp_path / "rom.sfc"))
    try:
        with pytest.raises(BadInput, match="tools.retro_state"):
            retro_env.resolve(SMK)
    finally:
        monkeypatch.setattr(r.data, "get_romfile_path", real)


def test_gym_eval_of_a_mario_kart_model_without_its_start_state_says_how_to_make_it(tmp_path, monkeypatch, capsys):
    """A model trained from the game's own start state, played where tools.retro_state never ran: one line, exit 2
    (stable-retro opened a state file of None: a TypeError's traceback)."""
    import gym_eval
    from model import build_model, model_meta

    r = retro_env.retro()
    monkeypatch.setattr(r.data, "get_romfile_path", lambda game, inttype=None: str(tmp_path / "rom.sfc"))
    meta = model_meta("nature", (4, 84, 84), 3, 512)
    conf = {"actions": [["B"], ["B", "LEFT"], ["B", "RIGHT"]], "crop": {"top": 0, "bottom": 112, "left": 0, "right": 0},
            "reward_scale": 1.0, "rules": "mario_kart", "states": [], "eval_states": None}
    torch.save({"format_version": 1, "kind": "model", "env": EnvSettings(SMK, retro=conf, frame_size=84,
                                                                          frame_stack=4).as_dict(),
                "model_meta": meta, "state_dict": build_model(meta).state_dict(), "return": 0.0, "frames": 0.0},
               tmp_path / "smk.pt")
    code = gym_eval.main(["--model-path", str(tmp_path / "smk.pt"), "--log-dir", str(tmp_path / "logs")])
    err = capsys.readouterr().err
    assert code == 2 and "tools.retro_state" in err and "Traceback" not in err, err


def test_state_maker_checks_the_race_start():
    from tools import retro_state

    good = {"race_phase": 4, "kart_status": 0, "lap": 128, "checkpoint": 0}
    assert retro_state.race_start_problems(good) == []
    assert retro_state.race_start_problems({**good, "race_phase": 0})
    assert retro_state.race_start_problems({**good, "lap": 3})


def fake_retro(info):
    """stable-retro for tools.retro_state without a ROM: a console whose every step's RAM variables are ``info``
    (and which counts its closes), under the module's ``make``."""

    class Console:
        buttons = ["B", "START"]
        unwrapped = property(lambda self: self)
        em = property(lambda self: self)
        closed = 0

        def reset(self):
            return np.zeros((224, 256, 3), np.uint8), {}

        def step(self, action):
            return None, 0.0, False, False, dict(info)

        def render(self):
            return np.full((224, 256, 3), 80, np.uint8)

        def get_state(self):
            return b"an emulator state"

        def close(self):
            Console.closed += 1

    class Retro:
        class State:
            NONE = None

        class Actions:
            ALL = None

        make = staticmethod(lambda *a, **k: Console())

    return Retro, Console


def test_a_failed_state_attempt_keeps_its_screen_and_does_not_block_the_rerun(tmp_path, monkeypatch, capsys):
    """The menus end somewhere other than a race start: nothing saved, exit 1, the screen kept under a name of its
    own; the rerun the docstring asks for runs again (it was refused: "<out>.png exists") and keeps both screens."""
    from tools import retro_state

    retro, console = fake_retro({"race_phase": 0, "kart_status": 0, "lap": 0})  # the race never starts
    monkeypatch.setattr(retro_env, "check_rom", lambda game: None)
    monkeypatch.setattr(retro_env, "retro", lambda: retro)
    out = tmp_path / "circuit.state"
    for attempt in (1, 2):
        assert retro_state.main(["--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert "nothing saved" in err and "exists" not in err, err
    assert not out.exists() and not (tmp_path / "circuit.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["circuit.failed-2.png", "circuit.failed.png"]
    assert console.closed == 2


def test_a_state_the_disk_cannot_take_is_one_line_and_the_rerun_saves_it(tmp_path, monkeypatch, capsys):
    """The race starts but the state cannot be written (a full disk): one line, exit 1 (it was a traceback after
    the screen's PNG was written under the state's name, which then blocked the rerun); the rerun saves both."""
    import errno

    from tools import retro_state

    retro, _ = fake_retro({"race_phase": retro_state.COUNTDOWN_PHASE, "kart_status": 0, "lap": 128})

    def full_disk(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(retro_env, "check_rom", lambda game: None)
    monkeypatch.setattr(retro_env, "retro", lambda: retro)
    monkeypatch.setattr(retro_state, "atomic_write_bytes", full_disk)
    out = tmp_path / "circuit.state"
    assert retro_state.main(["--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and "nothing saved" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["circuit.failed.png"]
    monkeypatch.undo()
    monkeypatch.setattr(retro_env, "check_rom", lambda game: None)
    monkeypatch.setattr(retro_env, "retro", lambda: retro)
    assert retro_state.main(["--out", str(out)]) == 0
    assert gzip.decompress(out.read_bytes()) == b"an emulator state"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["circuit.failed.png", "circuit.png", "circuit.state"]


def test_a_screen_picture_that_cannot_be_written_is_an_error_not_silence(tmp_path):
    """cv2.imwrite returned False for a PNG it could not write, which nobody read; the picture is now written whole
    (one that can be written reads back as the screen)."""
    import cv2

    from tools.save_states import write_png

    screen = np.random.default_rng(0).integers(0, 256, (224, 320, 3), dtype=np.uint8)
    write_png(str(tmp_path / "screen.png"), screen)
    assert (cv2.imread(str(tmp_path / "screen.png"))[..., ::-1] == screen).all()
    assert os.listdir(tmp_path) == ["screen.png"]  # no temporary left beside it
    with pytest.raises(OSError):
        write_png(str(tmp_path / "no_such_folder" / "screen.png"), screen)
