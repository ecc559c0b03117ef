"""The pixel pipeline that Atari and retro games share (``pixel_pipeline``): a screen cropped, turned gray and
resized (``process_frame``, ``ScreenFrame``), kept as bytes, and a stack of the last frames (``stack_frames``,
gymnasium's frame stack).

How frames are normalised (``--frame-norm``, ``FRAME_NORMS``): ``frame`` (the default), ``scale`` and ``darkest``
keep them uint8 from the emulator to the network, which normalises them where it computes (``model.pixels``: each
frame standardised by its own mean and std, only divided by 255, or divided by 255 less its darkest value), so
rollouts, unrolls, replays and Ray move a quarter of float32's bytes; ``running`` is rl_a3c_pytorch's running mean
and std of each frame, in the environment (``NormalizedEnv``), float32: how every model written before
``--frame-norm`` was trained."""


import cv2
import gymnasium as gym
import numpy as np

cv2.setNumThreads(1)  # one worker = one core: no OpenCV thread pool per process


def process_frame(frame: np.ndarray, rows: tuple[int, int], cols: tuple[int, int], size: int,
                  first_size: tuple[int, int] | None = None) -> np.ndarray:
    """A screen, gray ``[H, W]`` or RGB ``[H, W, 3]`` -> rows ``rows[0]:rows[1]`` and columns ``cols[0]:cols[1]``,
    gray, resized to ``size x size`` (through ``first_size``, a (width, height), first where given):
    ``[1, size, size]`` uint8."""
    frame = frame[rows[0] : rows[1], cols[0] : cols[1]]
    if frame.ndim == 3:
        frame = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
    if first_size is not None:
        frame = cv2.resize(frame, first_size, interpolation=cv2.INTER_AREA)
    if frame.shape != (size, size):
        frame = cv2.resize(frame, (size, size), interpolation=cv2.INTER_AREA)
    return frame.reshape(1, size, size)


class ScreenFrame(gym.ObservationWrapper):
    """Observations through ``process_frame``: ``[1, size, size]`` uint8."""

    def __init__(self, env: gym.Env, rows: tuple[int, int], cols: tuple[int, int], size: int,
                 first_size: tuple[int, int] | None = None):
        super().__init__(env)
        self.box = rows, cols, size, first_size
        self.observation_space = gym.spaces.Box(0, 255, (1, size, size), dtype=np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return process_frame(observation, *self.box)


def stack_frames(env: gym.Env, k: int) -> gym.Env:
    """The last ``k`` frames along the channel axis, ``[k, H, W]``, for feed-forward networks; a reset fills the
    stack with the first frame. gymnasium's ``FrameStackObservation`` (reset padding) stacks the ``[1, H, W]``
    frames as ``[k, 1, H, W]``; ``ReshapeObservation`` drops the single channel."""
    stacked = gym.wrappers.FrameStackObservation(env, k, padding_type="reset")
    return gym.wrappers.ReshapeObservation(stacked, (k, *env.observation_space.shape[1:]))


class NormalizedEnv(gym.ObservationWrapper):  # gymnasium's NormalizeObservation is per element, not per frame
    """Running (bias-corrected, exponentially weighted) mean and std of the frame, as rl_a3c_pytorch normalises,
    of the uint8 frame scaled to [0, 1]: float32 out."""

    def __init__(self, env: gym.Env, alpha: float = 0.9999):
        super().__init__(env)
        self.alpha = alpha
        self.state_mean = 0.0
        self.state_std = 0.0
        self.num_steps = 0
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, env.observation_space.shape, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        observation = observation.astype(np.float32) * np.float32(1.0 / 255.0)
        self.num_steps += 1
        self.state_mean = self.state_mean * self.alpha + float(observation.mean()) * (1 - self.alpha)
        self.state_std = self.state_std * self.alpha + float(observation.std()) * (1 - self.alpha)
        correction = 1 - self.alpha**self.num_steps
        mean, std = self.state_mean / correction, self.state_std / correction
        return ((observation - mean) / (std + 1e-8)).astype(np.float32, copy=False)


FRAME_NORMS = ("frame", "scale", "darkest", "running")
FORMER_FRAME_NORM = "running"  # what a model file, checkpoint or run written before --frame-norm used


def pixel_pipeline(env: gym.Env, box: tuple, frame_norm: str, frame_stack: int) -> gym.Env:
    """A game's screens as the network reads them: ``ScreenFrame(box)``, rl_a3c_pytorch's running normalisation
    where ``frame_norm`` is ``running`` (else the bytes as they are), the last ``frame_stack`` frames stacked."""
    if frame_norm not in FRAME_NORMS:
        raise ValueError(f"unknown frame normalisation {frame_norm!r}; known: {', '.join(FRAME_NORMS)}")
    env = ScreenFrame(env, *box)
    if frame_norm == "running":
        env = NormalizedEnv(env)
    return stack_frames(env, frame_stack) if frame_stack > 1 else env
