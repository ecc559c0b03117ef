"""Watching and recording games (gym_eval.py): a pygame window, MP4/GIF videos of the full-size RGB frames at the
game's real-time rate, and gym's old Monitor record (--new-gym-eval) for gymnasium."""

import glob
import json
import os
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np

from core.errors import BadInput
from core.files import atomic_write_text
from envs.environment import EnvSettings, frames_per_step, is_atari, is_retro

ATARI_FPS = 60.0  # the Atari 2600's frame rate: a recording plays in real time at 60 / frames-per-agent-step


def video_fps(settings: EnvSettings, env: gym.Env) -> float:
    """Real-time playback rate of one rendered frame per agent step."""
    if is_atari(settings.env_id):
        return ATARI_FPS / frames_per_step(settings.env_id, settings.skip_rate)
    if is_retro(settings.env_id):  # the console's refresh rate (60 Hz for NTSC consoles) over the frame-skip
        return float(env.unwrapped.metadata.get("video.frames_per_second", 60.0)) / settings.skip_rate
    return float(env.metadata.get("render_fps") or 30)


def check_display() -> None:
    """--render needs a real window: a display and pygame. Raises BadInput with one line otherwise."""
    hint = "; use --record DIR to write the games as videos instead"
    if sys.platform.startswith("linux") or "bsd" in sys.platform:
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            raise BadInput(f"--render needs a display and there is none (DISPLAY is not set){hint}")
    try:
        import pygame
    except ImportError:
        raise BadInput(f"--render needs pygame, which is not installed (pip install pygame){hint}") from None
    try:
        pygame.display.init()
        driver = pygame.display.get_driver()
    except pygame.error as exc:
        raise BadInput(f"--render cannot open a display ({exc}){hint}") from None
    if driver in ("offscreen", "dummy"):
        raise BadInput(f"--render needs a display and there is none (SDL video driver {driver!r}){hint}")


class WindowClosed(Exception):
    """The user closed the --render window: gym_eval.py stops playing and summarises the games so far."""


class Viewer:
    """A pygame window showing the rendered RGB frames at the game's real-time rate."""

    def __init__(self, title: str):
        import pygame

        self.pg = pygame
        self.title = title
        self.screen = None
        self.clock = pygame.time.Clock()

    def show(self, frame: np.ndarray, fps: float) -> None:
        pg = self.pg
        h, w = frame.shape[:2]
        if self.screen is None:
            self.scale = max(1, round(600 / h)) if h < 300 else 1  # Atari's 210x160 is tiny on a modern screen
            self.screen = pg.display.set_mode((w * self.scale, h * self.scale))
            pg.display.set_caption(self.title)
        for event in pg.event.get():
            if event.type == pg.QUIT:
                raise WindowClosed()
        surface = pg.surfarray.make_surface(np.ascontiguousarray(frame.swapaxes(0, 1)))
        if self.scale != 1:
            surface = pg.transform.scale(surface, (w * self.scale, h * self.scale))
        self.screen.blit(surface, (0, 0))
        pg.display.flip()
        self.clock.tick(fps)

    def close(self) -> None:
        if self.screen is not None:
            self.pg.display.quit()


_MP4_WORKS = {}


def mp4_works(folder: str, size: tuple[int, int], fps: float) -> bool:
    """Can this OpenCV write an MP4 of this size that it can also read back? (Codecs vary between builds.)"""
    import cv2

    if size in _MP4_WORKS:
        return _MP4_WORKS[size]
    w, h = size
    fd, probe = tempfile.mkstemp(suffix=".mp4", dir=folder)
    os.close(fd)
    ok = False
    try:
        writer = cv2.VideoWriter(probe, cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
        if writer.isOpened():
            for i in range(3):
                writer.write(np.full((h, w, 3), 80 * i, np.uint8))
            writer.release()
            capture = cv2.VideoCapture(probe)
            got, frame = capture.read()
            ok = bool(got) and frame is not None and frame.shape[:2] == (h, w)
            capture.release()
    finally:
        os.remove(probe)
    _MP4_WORKS[size] = ok
    return ok


class VideoRecorder:
    """One game as a video: MP4 (OpenCV, mp4v) where it works, else GIF (Pillow). Frames are RGB uint8."""

    def __init__(self, path_stem: str, fps: float, video_format: str, notes: dict[str, bool]):
        self.path_stem, self.fps, self.format, self.notes = path_stem, fps, video_format, notes
        self.writer = None
        self.gif_frames = None
        self.path = None
        self.frames = 0

    def add(self, frame: np.ndarray) -> None:
        import cv2

        if self.writer is None and self.gif_frames is None:
            h, w = frame.shape[:2]
            if self.format == "mp4" and mp4_works(os.path.dirname(self.path_stem) or ".", (w, h), self.fps):
                self.path = self.path_stem + ".mp4"
                self.writer = cv2.VideoWriter(self.path, cv2.VideoWriter_fourcc(*"mp4v"), self.fps, (w, h))
            else:
                if self.format == "mp4" and "gif" not in self.notes:
                    self.notes["gif"] = True
                    print("gym_eval.py: note: this OpenCV cannot write a readable MP4; writing GIF instead",
                          file=sys.stderr, flush=True)
                self.path = self.path_stem + ".gif"
                self.gif_frames = []
        if self.writer is not None:
            self.writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
        else:
            from PIL import Image

            self.gif_frames.append(Image.fromarray(frame).convert("P", palette=Image.Palette.ADAPTIVE))
        self.frames += 1

    def close(self) -> str | None:
        """Finish the file; returns its path (None if no frame came)."""
        if self.writer is not None:
            self.writer.release()
            self.writer = None
            import cv2

            capture = cv2.VideoCapture(self.path)
            readable = capture.isOpened() and capture.read()[0]
            capture.release()
            if not readable:
                print(f"gym_eval.py: warning: {self.path} was written but OpenCV cannot read it back",
                      file=sys.stderr, flush=True)
        elif self.gif_frames:
            # identical consecutive frames may be merged (with their delays summed)
            self.gif_frames[0].save(self.path, save_all=True, append_images=self.gif_frames[1:],
                                    duration=gif_delays(len(self.gif_frames), self.fps), loop=0)
            self.gif_frames = None
        return self.path


def gif_delays(frames: int, fps: float) -> list[int]:
    """Each frame's delay in ms for a GIF that plays in real time: GIF delays are whole hundredths of a second, so
    frame k ends at ``k / fps`` rounded to one (15 fps: 70, 60, 70, 70, 60, ... ms, not 60 ms each, 11% fast).
    At most 50 fps (20 ms a frame), the fastest that players keep to."""
    ends = [round(100 * (k + 1) / min(fps, 50.0)) * 10 for k in range(frames)]
    return [end - start for start, end in zip([0, *ends], ends)]


def is_render_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from rendering (a missing renderer, a pygame error), which gym_eval.py reports in one
    line."""
    import gymnasium

    pygame = sys.modules.get("pygame")
    return isinstance(exc, gymnasium.error.DependencyNotInstalled) or (pygame is not None and
                                                                       isinstance(exc, pygame.error))


def capped_cubic(episode_id: int) -> bool:
    """gym Monitor's and gymnasium RecordVideo's default schedule: episodes 0, 1, 8, 27, ..., 729, 1000, 2000, ..."""
    if episode_id < 1000:
        return int(round(episode_id ** (1.0 / 3))) ** 3 == episode_id
    return episode_id % 1000 == 0


class Monitor:
    """--new-gym-eval: what gym.wrappers.Monitor recorded, for gymnasium: stats in gym's stats.json layout and
    videos on RecordVideo's schedule, in <log-dir>/<env>_monitor/. An earlier record there is kept (Monitor's
    force=True deleted it): the evaluation is refused before any game."""

    def __init__(self, folder: str):
        self.folder = folder
        here = glob.escape(folder)  # a folder named like "run[1]" is that folder, not a pattern
        earlier = glob.glob(os.path.join(here, "rl-video-episode-*")) + glob.glob(os.path.join(here, "stats.json"))
        if earlier:
            raise BadInput(f"{folder} holds an earlier record ({os.path.basename(sorted(earlier)[-1])}, ...): it is "
                           f"kept; move it away or give another --log-dir")
        os.makedirs(folder, exist_ok=True)
        self.stats = {"initial_reset_timestamp": time.time(), "timestamps": [], "episode_lengths": [],
                      "episode_rewards": [], "episode_types": []}

    def wants_video(self, index: int) -> bool:
        return capped_cubic(index)

    def video_stem(self, index: int) -> str:
        return os.path.join(self.folder, f"rl-video-episode-{index}")

    def add(self, episode_return: float, length: int) -> None:
        self.stats["timestamps"].append(time.time())
        self.stats["episode_lengths"].append(int(length))
        self.stats["episode_rewards"].append(float(episode_return))
        self.stats["episode_types"].append("t")
        atomic_write_text(os.path.join(self.folder, "stats.json"), json.dumps(self.stats, indent=2))
