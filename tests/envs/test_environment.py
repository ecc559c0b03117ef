"""Environment wrappers on real ALE games: shapes, dtypes, frame-skip, life loss, configuration errors."""

import json

import gymnasium as gym
import numpy as np
import pytest

from core.errors import BadInput
from envs.environment import (
    ATARI_CONFIG,
    EnvSettings,
    atari_box,
    env_conf_for,
    frames_per_step,
    load_env_config,
    make_env,
)
from envs.frames import process_frame


def ale_frame(env):
    return env.unwrapped.ale.getEpisodeFrameNumber()


@pytest.mark.parametrize("env_id", ["PongNoFrameskip-v4", "ALE/Pong-v5"])
@pytest.mark.parametrize("train", [True, False])
def test_atari_observation_shape_and_dtype(env_id, train):
    env = make_env(EnvSettings(env_id), train=train)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (1, 80, 80) and obs.dtype == np.uint8  # bytes: the network scales them
    assert env.observation_space.shape == (1, 80, 80) and env.observation_space.dtype == np.uint8
    obs, reward, terminated, truncated, _ = env.step(0)
    assert obs.shape == (1, 80, 80) and obs.dtype == np.uint8 and obs.max() > 0
    assert env.action_space.n == 6


def test_running_frame_norm_is_rl_a3c_pytorchs_normalisation_of_the_same_frames():
    """``--frame-norm running`` gives what the pipeline gave before frames stayed bytes: each [0, 1] frame less the
    running mean of frame means, over the running mean of frame stds (bias-corrected, alpha 0.9999)."""
    frames = make_env(EnvSettings("PongNoFrameskip-v4", frame_size=84, frame_stack=4), train=False)
    running = make_env(EnvSettings("PongNoFrameskip-v4", frame_size=84, frame_stack=4, frame_norm="running"),
                       train=False)
    assert running.observation_space.dtype == np.float32 and running.observation_space.shape == (4, 84, 84)
    mean = std = 0.0
    raw, _ = frames.reset(seed=3)
    norm, _ = running.reset(seed=3)
    for step in range(1, 30):
        scaled = raw[-1].astype(np.float64) / 255.0  # the newest frame of the stack
        mean = 0.9999 * mean + 0.0001 * scaled.mean()
        std = 0.9999 * std + 0.0001 * scaled.std()
        correction = 1 - 0.9999 ** step
        np.testing.assert_allclose(norm[-1], (scaled - mean / correction) / (std / correction + 1e-8),
                                   rtol=1e-4, atol=1e-4)
        raw, *_ = frames.step(step % 6)
        norm, *_ = running.step(step % 6)
    with pytest.raises(ValueError, match="unknown frame normalisation"):
        make_env(EnvSettings("PongNoFrameskip-v4", frame_norm="minmax"), train=False)


def test_settings_of_a_file_from_before_frame_norm_normalise_the_running_way():
    saved = EnvSettings("PongNoFrameskip-v4", frame_size=84, frame_stack=4).as_dict()
    assert saved["frame_norm"] == "frame" and EnvSettings.from_dict(saved).frame_norm == "frame"
    del saved["frame_norm"]  # what every file written before it holds
    assert EnvSettings.from_dict(saved, ("ale_py",)) == EnvSettings("PongNoFrameskip-v4", frame_size=84, frame_stack=4,
                                                                     frame_norm="running", packages=("ale_py",))


def test_frame_skip_v4_is_ours_v5_is_the_emulators():
    v4 = make_env(EnvSettings("PongNoFrameskip-v4", skip_rate=4), train=False)
    v5 = make_env(EnvSettings("ALE/Pong-v5", skip_rate=4), train=False)
    for env in (v4, v5):
        env.reset(seed=0)
        before = ale_frame(env)
        for _ in range(10):
            env.step(0)
        # 10 agent steps are 40 emulator frames in both: no second skip on top of v5's own
        assert ale_frame(env) - before == 40
    assert frames_per_step("PongNoFrameskip-v4", 4) == 4
    assert frames_per_step("ALE/Pong-v5", 4) == 4
    assert frames_per_step("CartPole-v1", 4) == 1


def test_skip_rate_is_read_where_a3g_or_the_emulator_repeats_the_action_by_it():
    from envs.environment import skip_rate_unread

    for env_id in ("PongNoFrameskip-v4", "ALE/Pong-v5", "Airstriker-Genesis-v0"):
        assert skip_rate_unread(env_id) is None
    assert "random 2-4 frames" in skip_rate_unread("Pong-v4")  # frameskip (2, 5): neither sets it
    assert "is for Atari and retro games" in skip_rate_unread("CartPole-v1")


def test_skip_rate_changes_v5_emulator_skip():
    env = make_env(EnvSettings("ALE/Pong-v5", skip_rate=2), train=False)
    env.reset(seed=0)
    before = ale_frame(env)
    env.step(0)
    assert ale_frame(env) - before == 2


def play_until_life_lost(env, max_steps=5000):
    env.reset(seed=3)
    lives = env.unwrapped.ale.lives()
    for step in range(max_steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if env.unwrapped.ale.lives() < lives:
            return terminated
    raise AssertionError("no life lost")


def test_life_loss_ends_training_episode_only():
    assert play_until_life_lost(make_env(EnvSettings("BreakoutNoFrameskip-v4"), train=True)) is True
    assert play_until_life_lost(make_env(EnvSettings("BreakoutNoFrameskip-v4"), train=False)) is False


def test_training_reset_after_life_loss_continues_the_game():
    env = make_env(EnvSettings("BreakoutNoFrameskip-v4"), train=True)
    play_until_life_lost(env)
    lives = env.unwrapped.ale.lives()
    env.reset()
    assert env.unwrapped.ale.lives() == lives  # same game, one life fewer: not a new game


def test_whole_games_relaunch_the_ball_after_a_lost_life():
    """A player that never presses FIRE: training's reset relaunches the ball after each lost life, and whole games
    (the evaluator's) do the same, so the game ends once its 5 lives are gone instead of waiting for ever."""
    env = make_env(EnvSettings("BreakoutNoFrameskip-v4", max_episode_length=3000), train=False)
    env.reset(seed=0)
    lives, lengths = [env.unwrapped.ale.lives()], 0
    for lengths in range(1, 3001):
        _, _, terminated, truncated, _ = env.step(0)
        lives.append(env.unwrapped.ale.lives())
        if terminated or truncated:
            break
    assert terminated and not truncated and lives[-1] == 0
    assert sorted(set(lives), reverse=True) == [5, 4, 3, 2, 1, 0]
    assert lengths < 1500  # ~200 agent steps a life


def test_max_episode_length_cuts_episodes():
    env = make_env(EnvSettings("PongNoFrameskip-v4", max_episode_length=7), train=False)
    env.reset(seed=0)
    results = [env.step(0) for _ in range(7)]
    assert not any(r[3] for r in results[:-1]) and results[-1][3]


def test_classic_control_passes_through():
    env = make_env(EnvSettings("CartPole-v1"))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4,) and obs.dtype == np.float32
    total = 0
    while True:
        _, reward, terminated, truncated, _ = env.step(0)
        total += reward
        if terminated or truncated:
            break
    assert 5 <= total < 100  # pushing left always falls fast; rewards are not clipped or scaled


def test_process_frame_crops_and_keeps_bytes():
    frame = np.zeros((210, 160), dtype=np.uint8)
    frame[34:194] = 255  # the rows kept by the default crop
    out = process_frame(frame, *atari_box({"crop1": 34, "crop2": 34, "dimension2": 80}, 80))
    assert out.shape == (1, 80, 80) and out.dtype == np.uint8
    assert (out == 255).all()


def test_80x80_frames_resize_first_as_rl_a3c_pytorch_did():
    """rl_a3c_pytorch: ``cv2.resize(frame, (80, conf["dimension2"]))`` then to 80x80; cv2 sizes are (width,
    height), so SpaceInvaders' 188 cropped rows become 94 and its 160 columns 80 (as a3g's interpolation, INTER_AREA;
    the two sizes the other way round give other frames)."""
    import cv2

    conf = env_conf_for("SpaceInvadersNoFrameskip-v4", load_env_config(ATARI_CONFIG))
    frame = np.random.default_rng(0).integers(0, 256, (210, 160), dtype=np.uint8)
    crop = frame[conf["crop1"] : conf["crop2"] + 160, :160]

    def two_resizes(first):
        return cv2.resize(cv2.resize(crop, first, interpolation=cv2.INTER_AREA), (80, 80),
                          interpolation=cv2.INTER_AREA)

    out = process_frame(frame, *atari_box(conf, 80))[0]
    assert conf["dimension2"] == 94 and np.array_equal(out, two_resizes((80, 94)))
    assert not np.array_equal(out, two_resizes((94, 80)))


def test_env_config_lookup_and_errors(tmp_path):
    config = load_env_config(ATARI_CONFIG)
    assert env_conf_for("SpaceInvadersNoFrameskip-v4", config)["crop1"] == 8
    assert env_conf_for("ALE/Pong-v5", config) == {"crop1": 34, "crop2": 34, "dimension2": 80}
    assert env_conf_for("SeaquestNoFrameskip-v4", config) == config["Default"]
    with pytest.raises(BadInput, match="not found"):
        load_env_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BadInput, match="not valid JSON"):
        load_env_config(bad)
    bad.write_text(json.dumps({"Default": {"crop1": "34", "crop2": 34, "dimension2": 80}}))
    with pytest.raises(BadInput, match="integer"):
        load_env_config(bad)
    bad.write_text(json.dumps([1, 2]))
    with pytest.raises(BadInput, match="Default"):
        load_env_config(bad)


def test_unknown_env_id():
    with pytest.raises(BadInput, match="unknown environment"):
        make_env(EnvSettings("NoSuchGame-v0"))


def test_stacked_84x84_frames_for_feed_forward_networks():
    env = make_env(EnvSettings("PongNoFrameskip-v4", frame_size=84, frame_stack=4), train=True)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert all(np.array_equal(obs[0], obs[i]) for i in range(4))  # a reset fills the stack with its frame
    for _ in range(3):
        obs, *_ = env.step(0)
    obs2, *_ = env.step(0)  # each step shifts the stack by one frame: the newest is last
    np.testing.assert_array_equal(obs2[:3], obs[1:])


def test_the_frame_stack_is_the_last_frames_with_the_first_repeated_at_a_reset():
    """gymnasium's FrameStackObservation (reset padding) as a3g stacks: against the single frames of the same game,
    on the same seed and actions, the stack at step t is frames t-3..t, the reset frame standing in before it."""
    def settings(stack):
        conf = env_conf_for("BreakoutNoFrameskip-v4", load_env_config(ATARI_CONFIG))
        return EnvSettings("BreakoutNoFrameskip-v4", crop=conf, frame_size=84, frame_stack=stack)

    stacked, single = make_env(settings(4), train=False), make_env(settings(1), train=False)
    assert stacked.observation_space.shape == (4, 84, 84) and single.observation_space.shape == (1, 84, 84)
    frames = [single.reset(seed=5)[0][0]]
    stacks = [stacked.reset(seed=5)[0]]
    actions = np.random.default_rng(0).integers(4, size=40)
    for action in actions:
        frames.append(single.step(int(action))[0][0])
        stacks.append(stacked.step(int(action))[0])
    padded = [frames[0]] * 3 + frames
    for t, stack in enumerate(stacks):
        np.testing.assert_array_equal(stack, np.stack(padded[t : t + 4]))


def test_vector_observations_are_float32_as_they_come():
    env = make_env(EnvSettings("CartPole-v1"), train=True)
    raw = gym.make("CartPole-v1")
    obs, raw_obs = env.reset(seed=2)[0], raw.reset(seed=2)[0]
    assert obs.dtype == np.float32 and env.observation_space.dtype == np.float32
    np.testing.assert_array_equal(obs, raw_obs.astype(np.float32))
