"""Checkpoint and model files: their format, atomic writes, safe loading, and ``checkpoint.pt`` rotation.

- ``checkpoint.pt`` (full training state) and ``trained_models/<env>.pt`` (weights and what rebuilds the network,
  ``model_file``) are dicts of tensors, numbers, strings and lists with a ``format_version`` and a ``kind``.
- Writes go to a temporary file beside the target, are fsynced and renamed over it: a reader sees the old file or
  the new one, never half of one.
- Loading uses ``torch.load(weights_only=True)``: a file cannot run code. Anything unreadable, foreign, too new or
  of another network is a ``BadInput``: one line for the user, exit 2.
"""

import argparse
import os
import zipfile
from typing import TYPE_CHECKING, Callable

import torch

from core.errors import BadInput
from core.files import atomic_torch_save, atomic_write_text, keep_as  # noqa: F401 (re-exported)
from core.policy import BOX_ACTIONS
from envs.frames import FORMER_FRAME_NORM
from model import same_network

if TYPE_CHECKING:
    from runtime.run_state import RunState

FORMAT_VERSION = 1  # of checkpoint.pt and trained_models/<env>.pt; bump when their layout changes


def model_file(env: dict, meta: dict, state_dict: dict[str, torch.Tensor], episode_return: float, frames: float,
               run: str | os.PathLike | None = None) -> dict:
    """The contents of a model file (a run's ``best_model.pt``, ``trained_models/<env>.pt``): weights plus what
    rebuilds the network and its preprocessing, no optimizer state. ``return`` is the score of the evaluator game
    these weights played (NaN for weights exported from a checkpoint), ``run`` the run directory that wrote the
    file. Written by the evaluator and by ``python -m tools.export_model``, read by gym_eval.py and ``--load``."""
    return {
        "format_version": FORMAT_VERSION,
        "kind": "model",
        "env": env,
        "model_meta": meta,
        "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
        "return": float(episode_return),
        "frames": float(frames),
        "run": None if run is None else os.path.abspath(run),
    }


def load_checkpoint(path: str | os.PathLike, kind: str | None = None) -> dict:
    """Load a checkpoint or model file safely (``weights_only=True``: plain tensors and numbers, no code runs).

    Raises BadInput with a one-line reason for a missing, corrupt, foreign or too-new file.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "checkpoint.pt")
    if not os.path.isfile(path):
        raise BadInput(f"{path} not found")
    try:  # torch.save writes zip archives; anything else would give a misleading error
        is_zip = zipfile.is_zipfile(path)
    except zipfile.BadZipFile:  # is_zipfile itself raises on some damaged end records (a "multi-disk" ZIP64 one)
        is_zip = False
    if not is_zip:
        raise BadInput(f"{path} is not a torch checkpoint (empty, truncated or another format)")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling errors, truncated zip files, refused globals...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"{path} is not a readable a3g checkpoint ({reason[:200]})") from None
    if not isinstance(data, dict) or "format_version" not in data or "model_meta" not in data:
        raise BadInput(f"{path} is not an a3g checkpoint (no format_version/model_meta)")
    if not isinstance(data["format_version"], int) or data["format_version"] > FORMAT_VERSION:
        raise BadInput(
            f"{path} has format version {data['format_version']}, newer than this a3g's {FORMAT_VERSION}: update a3g"
        )
    if kind is not None and data.get("kind") != kind:
        raise BadInput(f"{path} holds a {data.get('kind')!r}, not a {kind!r}")
    if not isinstance(data.get("state_dict"), dict):
        raise BadInput(f"{path} holds no model weights")
    check_entries(data, path)
    return data


COUNTERS = ("frames", "episodes", "eval_episodes", "seconds", "best_return", "best_mean_return", "return",
            "eval_window_start")


def check_entries(data: dict, path: str) -> None:
    """The entries every reader of a checkpoint or model file relies on, of the types a3g writes (a file made or
    edited by hand is refused in one line, not a crash in whichever reader meets the entry first)."""
    env = data.get("env")
    if not isinstance(env, dict) or not isinstance(env.get("env_id"), str):
        raise BadInput(f"{path} does not say which environment it was trained on (no 'env' entry)")
    meta = data["model_meta"]
    if not isinstance(meta, dict) or not isinstance(meta.get("model"), str):
        raise BadInput(f"{path} has an unreadable 'model_meta' entry (no network named)")
    if data.get("args") is not None and not isinstance(data["args"], dict):
        raise BadInput(f"{path} has an unreadable 'args' entry")
    wrong = [key for key in COUNTERS if key in data and not isinstance(data[key], (int, float))]
    if wrong:
        raise BadInput(f"{path} has an unreadable {wrong[0]!r} entry (not a number)")


def archive_frames(name: str) -> int | None:
    """The frames in an archived checkpoint's file name (``checkpoint-<frames>.pt``); None for any other name."""
    stem, ext = os.path.splitext(name)
    digits = stem[len("checkpoint-"):]
    return int(digits) if ext == ".pt" and stem.startswith("checkpoint-") and digits.isdigit() else None


def check_compatible(data: dict, path: str, env_id: str, meta: dict) -> None:
    """The checkpoint must be of the same environment and the same network (name, sizes) as this run."""
    saved_env = (data.get("env") or {}).get("env_id")
    if saved_env != env_id:
        raise BadInput(f"{path} was trained on {saved_env}, not {env_id}")
    saved_meta, frames = data["model_meta"], {"obs_dtype": None, "frame_norm": None}
    if same_network({**saved_meta, **frames}, {**meta, **frames}) and not same_network(saved_meta, meta):
        saved_norm = (data.get("env") or {}).get("frame_norm", FORMER_FRAME_NORM)  # files from before it
        raise BadInput(f"{path} was trained on frames normalised the {saved_norm!r} way: give --frame-norm {saved_norm}")
    flag = {policy: name for name, policy in BOX_ACTIONS.items()}  # model_meta's policy -> --box-actions
    saved_policy, policy = saved_meta.get("policy", "categorical"), meta.get("policy", "categorical")
    if saved_policy != policy and saved_policy in flag and policy in flag:
        raise BadInput(f"{path} was trained with --box-actions {flag[saved_policy]}: give --box-actions "
                       f"{flag[saved_policy]}")
    saved_log_std, log_std = saved_meta.get("log_std", "shared"), meta.get("log_std", "shared")
    if saved_log_std != log_std and saved_policy == policy and policy in flag:
        raise BadInput(f"{path} was trained with --log-std {saved_log_std}: give --log-std {saved_log_std}")
    saved_critic, critic = saved_meta.get("critic", "shared"), meta.get("critic", "shared")
    if saved_critic != critic and saved_meta.get("model") == meta.get("model") == "mlp":
        raise BadInput(f"{path} was trained with --critic {saved_critic}: give --critic {saved_critic}")
    if not same_network(saved_meta, meta):
        raise BadInput(f"{path} holds a different network {data['model_meta']}, this run builds {meta}")


def resumed_file(path: str) -> str:
    """The checkpoint file ``--resume PATH`` names: PATH itself, or ``PATH/checkpoint.pt`` for a run directory."""
    return os.path.join(path, "checkpoint.pt") if os.path.isdir(path) else path


def frames_on_disk(checkpoint_path: str, resume_path: str | None, resumed: dict | None) -> int | None:
    """The frame count of the ``checkpoint.pt`` this run will replace first (it is archived under that count):
    the resumed state's when the run resumed from that very file, else read from the file; None when none."""
    if not os.path.exists(checkpoint_path):
        return None
    if resumed is not None and os.path.samefile(resumed_file(resume_path), checkpoint_path):
        return int(resumed["frames"])
    try:
        return int(load_checkpoint(checkpoint_path)["frames"])
    except (KeyError, TypeError, ValueError):
        return None  # unreadable: nothing worth archiving


def checkpoint_payload(env: dict, meta: dict, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                       state: "RunState", seconds: float, eval_window_start: int, args: argparse.Namespace) -> dict:
    """What ``checkpoint.pt`` holds: the environment's settings (``EnvSettings.as_dict``) and the network's
    (``model_meta``), the shared weights and optimizer statistics (None with a private optimizer per worker), the
    run's counters from ``state``, its ``seconds`` so far, the evaluator's first game of its running mean
    (``evaluator.window_start``) and every flag, resolved (``"defaults"``: what auto picked)."""
    return {
        "format_version": FORMAT_VERSION,
        "kind": "checkpoint",
        "env": env,
        "model_meta": meta,
        "state_dict": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "frames": float(state.frames.value),
        "episodes": int(state.episodes.value),
        "eval_episodes": int(state.eval_episodes.value),
        "best_return": float(state.best_return.value),
        "best_mean_return": float(state.best_mean_return.value),
        "seconds": seconds,
        "eval_window_start": eval_window_start,
        "args": {k: v for k, v in vars(args).items() if k != "frames_per_step"},
    }


class CheckpointWriter:
    """Writes ``checkpoint.pt`` atomically and keeps the ``keep - 1`` previous ones as ``checkpoint-<frames>.pt``.

    A failed write (disk full, read-only folder) is logged and leaves the previous checkpoint intact; training
    goes on. ``save`` returns whether the write succeeded. ``protect``: the file a run resumed from (an archive,
    say), which is never replaced or rotated out: resuming must not destroy what it resumed from. Rotation removes
    the archives of fewest frames, which are the oldest because frames never go backwards within one run
    directory: a resume from an earlier state writes into a branch directory of its own (``run_dir.py``).
    """

    def __init__(self, path: str, keep: int, log: Callable[[str], object], last_frames: int | None = None,
                 protect: str | None = None) -> None:
        self.path, self.keep, self.log = path, keep, log
        self.folder = os.path.dirname(os.path.abspath(path))
        self.last_frames = last_frames  # of the checkpoint.pt on disk (a resumed run's), archived at the next save
        self.protect = os.path.abspath(protect) if protect else None

    def archived(self) -> list[str]:
        """The archived checkpoints in the folder (``checkpoint-<frames>.pt``), fewest frames first."""
        found = [(frames, os.path.join(self.folder, name)) for name in os.listdir(self.folder)
                 if (frames := archive_frames(name)) is not None]
        return [path for _, path in sorted(found)]

    def save(self, payload: dict) -> bool:
        archive = None
        # a save with no frames since the last (a resume stopped at once) holds that very state: archiving it
        # again would rotate out an older, different archive for a copy of the newest
        if (self.keep > 1 and self.last_frames is not None and int(payload["frames"]) != self.last_frames
                and os.path.exists(self.path)):
            archive = os.path.join(self.folder, f"checkpoint-{self.last_frames}.pt")
            if os.path.exists(archive):  # frames only grow in a run directory: that file holds this very state
                archive = None
        try:
            atomic_torch_save(payload, self.path, keep_previous_as=archive)
        except OSError as exc:
            self.log(f"could not write {self.path} ({exc.strerror or exc}); the previous checkpoint is intact and "
                     f"training goes on: free some space or fix the folder's permissions")
            return False
        self.last_frames = int(payload["frames"])
        archived = [p for p in self.archived() if p != self.protect]
        for old in archived[: max(0, len(archived) - (self.keep - 1))]:
            try:
                os.remove(old)
            except OSError:
                pass
        return True
