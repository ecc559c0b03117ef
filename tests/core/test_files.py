"""core/files.py: what a process killed mid-write leaves behind is removed once the run has stopped."""

import csv
import errno
import os
import subprocess
import sys
import time

import pytest

from core.files import atomic_write_text, keep_as, process_alive, readable_rows, remove_stale_temporaries


def test_stale_temporaries_of_the_runs_processes_are_removed_and_nothing_else(tmp_path):
    """Only those of the writers named (a run's children, stopped): a user's ``notes.tmp.2024``, or a temporary of a
    process this run never started (another run's, alive in another container), was removed."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a child killed mid-write: gone, reaped
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # another run's writer
    try:
        atomic_write_text(tmp_path / "checkpoint.pt", "whole")
        (tmp_path / f"best_model.pt.tmp.{dead.pid}").write_text("half")
        (tmp_path / f"summary.json.tmp.{os.getpid()}").write_text("mine")  # this process's own write under way
        (tmp_path / f"Pong.pt.tmp.{alive.pid}").write_text("another run's export, being written")
        (tmp_path / "notes.tmp.txt").write_text("a user's file")
        (tmp_path / "old.pt.tmp.0").write_text("no process")
        (tmp_path / "notes.tmp.2024").write_text("a user's file, named like a temporary")
        remove_stale_temporaries(tmp_path, [dead.pid, alive.pid, os.getpid()])
    finally:
        alive.kill()
        alive.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["checkpoint.pt", f"summary.json.tmp.{os.getpid()}", f"Pong.pt.tmp.{alive.pid}", "notes.tmp.txt",
         "old.pt.tmp.0", "notes.tmp.2024"])
    assert (tmp_path / "checkpoint.pt").read_text() == "whole"
    remove_stale_temporaries(tmp_path / "missing", [dead.pid])  # a folder the run never made: nothing to do
    remove_stale_temporaries(None, [dead.pid])


def test_a_writer_that_exited_but_was_never_reaped_is_not_alive(tmp_path):
    """A child killed mid-write whose parent (the fork server, gone by then) never reaped it stays a zombie until
    init does, and a container's init may never do: its temporary is stale all the same."""
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "Z" not in open(f"/proc/{zombie.pid}/stat").read().rpartition(")")[2][:3]:
        time.sleep(0.05)  # exited, not waited for: a zombie
    try:
        (tmp_path / f"best_model.pt.tmp.{zombie.pid}").write_text("half")
        assert not process_alive(zombie.pid)
        remove_stale_temporaries(tmp_path, [zombie.pid])
        assert list(tmp_path.iterdir()) == []
    finally:
        zombie.wait()
    assert process_alive(os.getpid())


def test_try_write_finds_a_bad_output_path_and_leaves_nothing(tmp_path):
    from core.files import try_write

    try_write(tmp_path / "results.json")
    assert os.listdir(tmp_path) == []  # tried, then removed: the file is written later, whole
    (tmp_path / "kept.json").write_text("a user's file")
    try_write(tmp_path / "kept.json")
    assert (tmp_path / "kept.json").read_text() == "a user's file"
    (tmp_path / "a_folder").mkdir()
    for bad in (tmp_path / "no_such_folder" / "x.json", tmp_path / "kept.json" / "x.json", tmp_path / "a_folder"):
        try:
            try_write(bad)
        except OSError:
            pass
        else:
            raise AssertionError(f"{bad} should not be writable")


def test_a_json_output_replaces_only_an_earlier_result_of_its_own_command(tmp_path):
    from core.errors import BadInput
    from core.files import check_json_output, first_free

    keys = {"env", "results"}
    check_json_output(tmp_path / "new.json", "--json", keys, "tools.bench")  # nothing there: fine
    (tmp_path / "bench.json").write_text('{"env": "Pong", "results": [], "cores": 2}')
    check_json_output(tmp_path / "bench.json", "--json", keys, "tools.bench")  # its own earlier figures: replaced
    for name, text in (("notes.json", '{"env": "mine"}'), ("list.json", "[1, 2]"), ("notes.txt", "a user's notes")):
        (tmp_path / name).write_text(text)
        with pytest.raises(BadInput, match=f"--json .*{name} exists and holds no tools.bench results: it is kept"):
            check_json_output(tmp_path / name, "--json", keys, "tools.bench")
        assert (tmp_path / name).read_text() == text
    with pytest.raises(BadInput, match="cannot be written"):
        check_json_output(tmp_path / "no_such_folder" / "x.json", "--json", keys, "tools.bench")
    # a default name never lands on an earlier file
    assert first_free(str(tmp_path / "fresh"), os.path.exists, ".json") == str(tmp_path / "fresh.json")
    (tmp_path / "bench-2.json").write_text("{}")
    assert first_free(str(tmp_path / "bench"), os.path.exists, ".json") == str(tmp_path / "bench-3.json")


def test_keep_as_copies_where_the_file_system_has_no_hard_links(tmp_path, monkeypatch):
    (tmp_path / "checkpoint.pt").write_bytes(b"state at 1000 frames")

    def no_links(source, target):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    keep_as(tmp_path / "checkpoint.pt", tmp_path / "checkpoint-1000.pt")
    assert (tmp_path / "checkpoint-1000.pt").read_bytes() == b"state at 1000 frames"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1000.pt", "checkpoint.pt"]  # no temporary
    with pytest.raises(FileExistsError):  # an archive there is never replaced
        keep_as(tmp_path / "checkpoint.pt", tmp_path / "checkpoint-1000.pt")


def test_folders_made_for_a_run_are_synced_into_their_parents(tmp_path, monkeypatch):
    """A new run folder was made and never synced into runs/: after a power loss the folder could be gone though
    its files were synced. Each folder made is synced in its parent; one already there is left alone."""
    from core import files

    synced = []
    monkeypatch.setattr(files, "fsync_folder", lambda folder: synced.append(os.fspath(folder)))
    files.make_folders(tmp_path / "runs" / "run1")
    assert (tmp_path / "runs" / "run1").is_dir()
    assert synced == [str(tmp_path), str(tmp_path / "runs")]
    synced.clear()
    files.make_folders(tmp_path / "runs" / "run1")
    assert synced == []
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(OSError):
        files.make_folders(tmp_path / "a_file" / "run")


def test_readable_rows_keep_the_rows_before_a_tail_csv_cannot_read(tmp_path):
    """A machine that stopped mid-write can leave a run of NUL bytes longer than csv's field limit (or any field
    that long): the rows before that tail are read, the tail ends them without an error."""
    for tail in (b"\0" * (csv.field_size_limit() + 1), b'3,"' + b"x" * (csv.field_size_limit() + 1) + b'"\n'):
        path = tmp_path / "rows.csv"
        path.write_bytes(b"a,b\n1,2\n" + tail + b"\n4,5\n")
        with open(path, newline="") as f:
            with pytest.raises(csv.Error):
                list(csv.reader(f))
        with open(path, newline="") as f:
            assert list(readable_rows(csv.reader(f))) == [["a", "b"], ["1", "2"]]
        with open(path, newline="") as f:
            assert list(readable_rows(csv.DictReader(f))) == [{"a": "1", "b": "2"}]
