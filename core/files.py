"""Files that are never half-written, and names that are safe as file names.

A write goes to a temporary file beside the target, is fsynced and renamed over it: a reader sees the old file or
the new one, never half of one. Checkpoints, model files, ``args.json``, ``summary.json``, the start of
``progress.csv`` and ``games.csv`` (a branch's copies the parent's rows) and recordings' metadata use it.
"""

import csv
import errno
import json
import os
import shutil
from typing import BinaryIO, Callable, Iterable, Iterator

import torch

from core.errors import BadInput
from core.faults import injected_fault


def env_file_name(env_id: str) -> str:
    """``ALE/Pong-v5`` -> ``ALE-Pong-v5``, ``mypkg:MyEnv-v0`` -> ``mypkg-MyEnv-v0``: env ids as file names."""
    return env_id.replace("/", "-").replace(":", "-")


def readable_rows(reader: Iterable) -> Iterator:
    """The rows of the csv ``reader`` up to a tail it cannot read (NUL bytes, or a field past csv's size limit, as a
    machine that stopped mid-write can leave): the rows before it are kept, the tail ends them."""
    try:
        yield from reader
    except csv.Error:
        return


TEMPORARY = ".tmp."  # a file being written: "<name>.tmp.<pid of the writer>", renamed to <name> when whole


def temporary_name(path: str | os.PathLike) -> str:
    """Where this process writes ``path``'s next version before renaming it into place."""
    return f"{os.fspath(path)}{TEMPORARY}{os.getpid()}"


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs (another user's included). A zombie (exited, not yet reaped: an
    orphan whose new parent, a container's init, may never reap it) does not: it writes nothing more."""
    if pid <= 0:  # to os.kill, these name process groups
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process, or an id no process can have
        return False
    except PermissionError:  # another user's
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:  # "pid (name) state ...": the name may hold spaces and parentheses
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):  # no /proc (not Linux: os.kill's answer stands), or the process went meanwhile
        return not os.path.isdir("/proc")


def remove_stale_temporaries(folder: str | os.PathLike, writers: Iterable[int]) -> None:
    """Remove the temporary files (``<name>.tmp.<pid>``) that the processes ``writers`` (a run's children, stopped
    by now) left in ``folder`` when one was killed mid-write (a SIGTERM to the process group, a SIGKILL): the files
    they were writing are untouched, the rename never happened. Only theirs: a user's ``notes.tmp.2024`` is no
    temporary of a3g's, and another run's writer in a folder the runs share (``--save-model-dir``) may be alive
    where this process cannot see it (another container)."""
    writers = {str(pid) for pid in writers if not process_alive(pid)}
    for name in os.listdir(folder) if folder and os.path.isdir(folder) else []:
        stem, _, pid = name.rpartition(TEMPORARY)
        if stem and pid in writers:
            try:
                os.remove(os.path.join(folder, name))
            except OSError:
                pass


def fsync_folder(folder: str | os.PathLike) -> None:
    """Make the entries of ``folder`` durable (a file renamed into it, a folder made in it); where a file system
    cannot (some network mounts), nothing."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def make_folders(folder: str | os.PathLike) -> None:
    """``os.makedirs(folder, exist_ok=True)``, each folder it makes durable in its parent: after a power loss a run's
    folder is not gone while the files it held were synced."""
    folder = os.path.abspath(folder)
    if os.path.isdir(folder):
        return
    if not os.path.lexists(os.path.dirname(folder)):  # a file there: mkdir says "Not a directory", as makedirs does
        make_folders(os.path.dirname(folder))
    try:
        os.mkdir(folder)
    except FileExistsError:
        if not os.path.isdir(folder):
            raise
        return
    fsync_folder(os.path.dirname(folder))


def _atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], object],
                  keep_previous_as: str | None = None, fault: str = "save_enospc") -> None:
    """Write through ``write(file)`` to a temporary file beside ``path``, fsync it, then rename it over ``path``: a
    reader sees the old file or the new one, never half of one. On any error the temporary file is removed and the
    old file is left as it was. ``keep_previous_as`` keeps the old file under that name first (``keep_as``).
    ``fault``: the name under which tests make this write find the disk full (``core.faults``)."""
    path = os.fspath(path)
    tmp = temporary_name(path)
    try:
        with open(tmp, "wb") as f:
            write(f)
            if injected_fault(fault):
                f.flush()
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)
            f.flush()
            os.fsync(f.fileno())
        if keep_previous_as and os.path.exists(path):
            keep_as(path, keep_previous_as)
        os.replace(tmp, path)
        fsync_folder(os.path.dirname(os.path.abspath(path)))  # make the rename itself durable
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def keep_as(path: str | os.PathLike, archive: str | os.PathLike) -> None:
    """Give ``path``'s file a second name, ``archive``: a hard link (no copy), or where the file system has none
    (vfat, some network mounts) a copy written to a temporary file and renamed into place. An existing
    ``archive`` is never replaced: it may hold another state than ``path``."""
    if os.path.exists(archive):
        raise FileExistsError(errno.EEXIST, f"{archive} already exists; it is kept", archive)
    try:
        os.link(path, archive)
    except FileExistsError:
        raise
    except OSError:  # the copy is written as any other file: fsynced, whole or not at all
        with open(path, "rb") as source:
            _atomic_write(archive, lambda f: shutil.copyfileobj(source, f))


def atomic_torch_save(obj: object, path: str | os.PathLike, keep_previous_as: str | None = None) -> None:
    """``torch.save`` that a crash never leaves half-written (``_atomic_write``)."""
    _atomic_write(path, lambda f: torch.save(obj, f), keep_previous_as)


def try_write(path: str | os.PathLike) -> None:
    """Whether a file can be written at ``path``, tried where ``_atomic_write`` would write it first (its temporary
    name): raises OSError if not (a folder at ``path`` too), so that a command finds a bad output path before its
    work, not after."""
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "is a folder; give a file name", os.fspath(path))
    probe = temporary_name(path)
    with open(probe, "wb"):
        pass
    os.remove(probe)


def load_json(path: str | os.PathLike) -> dict:
    """A JSON object from ``path``; {} when it is missing, unreadable or not an object (a crashed run's)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def check_json_output(path: str | os.PathLike, flag: str, keys: set[str], command: str) -> None:
    """A command's ``flag PATH`` (a JSON file of its results) may replace an earlier one of its own results (a JSON
    object with every one of ``keys``: the same command, newer figures) but nothing else: any other file there is the
    user's and is kept. Also tries the write, so that a bad path fails before the work. Raises BadInput, one line."""
    if os.path.isfile(path) and not keys <= load_json(path).keys():
        raise BadInput(f"{flag} {os.fspath(path)} exists and holds no {command} results: it is kept; give another "
                       f"file")
    try:
        try_write(path)
    except OSError as exc:
        raise BadInput(f"{flag} {os.fspath(path)} cannot be written ({exc.strerror or exc})") from None


def first_free(stem: str, taken: Callable[[str], bool], ext: str = "") -> str:
    """``<stem><ext>``, or ``<stem>-2<ext>``, ``<stem>-3<ext>``, ...: the first name that ``taken`` says is free (a
    folder that holds no run, a file name no file has)."""
    name, n = stem + ext, 1
    while taken(name):
        n += 1
        name = f"{stem}-{n}{ext}"
    return name


def atomic_write_text(path: str | os.PathLike, text: str, fault: str = "save_enospc") -> None:
    """A text file (JSON, CSV) that a crash never leaves half-written."""
    _atomic_write(path, lambda f: f.write(text.encode()), fault=fault)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """A binary file (a save state) that a crash never leaves half-written."""
    _atomic_write(path, lambda f: f.write(data))
