"""plot.py: PNG from synthetic and real progress.csv files; one-line errors for bad input."""

import csv
import json
import subprocess

import pytest

from conftest import ROOT, command, in_process
from tools import plot as plot_tool

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIELDS = ["wall_time_s", "frames", "episodes", "return", "length", "mean_return", "fps"]


def run_plot(*flags):
    """``python -m tools.plot FLAGS`` in this process (the command itself: test_real_run_default_output)."""
    return in_process(plot_tool.main, *flags)


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 20_000  # two subplots with lines, axes and a legend: not an empty canvas


def synthetic_run(folder, games=60, slope=1.0):
    folder.mkdir(parents=True)
    with open(folder / "progress.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        returns = []
        for i in range(games):
            ret = min(500.0, slope * i * 8 + (i % 7) * 5)
            returns.append(ret)
            mean = sum(returns[-10:]) / len(returns[-10:])
            writer.writerow([f"{i * 0.5:.2f}", i * 1000, i * 3, ret, int(ret), f"{mean:.4f}", "2000.0"])
    (folder / "args.json").write_text(json.dumps({"env": "CartPole-v1"}))
    return folder


def test_synthetic_runs_on_one_figure(tmp_path):
    a = synthetic_run(tmp_path / "run_a")
    b = synthetic_run(tmp_path / "run_b", slope=0.5)
    out = tmp_path / "figs" / "compare.png"
    result = run_plot(a, b / "progress.csv", "-o", out)
    assert result.returncode == 0, result.stderr
    assert_png(out)


def test_one_run_given_as_its_progress_csv_is_drawn_into_its_folder(tmp_path):
    run = synthetic_run(tmp_path / "run_a")
    result = run_plot(run / "progress.csv")
    assert result.returncode == 0, result.stderr
    assert_png(run / "progress.png")
    assert not (tmp_path / "progress.png").exists()


def test_real_run_default_output(cartpole_run):
    run = cartpole_run / "run"
    result = subprocess.run([*command("plot"), str(run)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert_png(run / "progress.png")


def test_bad_input_is_one_line_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "progress.csv").write_text("")
    (tmp_path / "header_only").mkdir()
    (tmp_path / "header_only" / "progress.csv").write_text(",".join(FIELDS) + "\n")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "progress.csv").write_text("a,b\n1,2\n")
    good = synthetic_run(tmp_path / "good")
    cases = [[tmp_path / "nothing_here"], [tmp_path / "empty"], [tmp_path / "header_only"], [tmp_path / "foreign"],
             [good, tmp_path / "nothing_here"], [], [good, "--dpi", "0"], [good, "--dpi", "100000"]]
    for flags in cases:
        result = run_plot(*flags, "-o", tmp_path / "out.png")
        assert result.returncode == 2, (flags, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("python -m tools.plot: error: "), result.stderr
        assert not (tmp_path / "out.png").exists()


def test_the_figure_never_goes_over_a_file_of_another_kind(tmp_path):
    run = synthetic_run(tmp_path / "run")
    kept = (run / "progress.csv").read_bytes()
    (tmp_path / "notes.png").write_text("a user's notes, under a .png name")
    for output, says in ((run / "progress.csv", "ending in .png"), (tmp_path / "fig.xyz", "ending in .png"),
                         (tmp_path / "notes.png", "is no PNG: it is kept"), (run, "ending in .png")):
        result = run_plot(run, "-o", output)
        assert result.returncode == 2 and says in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert (run / "progress.csv").read_bytes() == kept and not (tmp_path / "fig.xyz").exists()
    assert (tmp_path / "notes.png").read_text() == "a user's notes, under a .png name"
    # an earlier figure is replaced: plotting again is the point
    assert run_plot(run, "-o", tmp_path / "fig.png").returncode == 0
    first = (tmp_path / "fig.png").read_bytes()
    assert run_plot(run, "--title", "again", "-o", tmp_path / "fig.png").returncode == 0
    assert_png(tmp_path / "fig.png")
    assert (tmp_path / "fig.png").read_bytes() != first


def test_rows_that_are_not_numbers_are_said_to_be_so(tmp_path):
    (tmp_path / "bad_rows").mkdir()
    (tmp_path / "bad_rows" / "progress.csv").write_text(",".join(FIELDS) + "\nx,y,z,a,b,c,d\n")
    result = run_plot(tmp_path / "bad_rows", "-o", tmp_path / "out.png")
    assert result.returncode == 2 and "no readable evaluator game (1 row(s) that are not numbers)" in result.stderr


def test_the_training_curve_from_tensorboard_events(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "run"
    writer = SummaryWriter(str(run), filename_suffix=".training")
    for i in range(30):
        writer.add_scalar("charts/episodic_return", 10.0 + i, 1000 * (i + 1))
    writer.close()
    result = run_plot(run, "--curve", "training")
    assert result.returncode == 0, result.stderr
    assert_png(run / "training.png")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_plot(empty, "--curve", "training")
    assert result.returncode == 2 and "no training games" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_training_curve_from_games_csv(tmp_path):
    """games.csv is read first (a run with --no-tensorboard-logger has it too); its running mean is of 10 games."""
    run = tmp_path / "run"
    run.mkdir()
    rows = "".join(f"{0.5 * i},{1000 * i},{i},100\n" for i in range(1, 31))
    (run / "games.csv").write_text("wall_time_s,frames,return,length\n" + rows)
    data = plot_tool.read_training(str(run))
    assert data["frames"][:2] == [1000.0, 2000.0] and data["wall_time_s"][-1] == 15.0
    assert data["mean_return"][0] == 1.0 and data["mean_return"][-1] == sum(range(21, 31)) / 10
    result = run_plot(run, "--curve", "training")
    assert result.returncode == 0, result.stderr
    assert_png(run / "training.png")
    (run / "games.csv").write_text("wall_time_s,frames,return,length\n")  # no game yet, no events: bad input
    result = run_plot(run, "--curve", "training")
    assert result.returncode == 2 and "no training games" in result.stderr


def test_a_damaged_row_or_tail_leaves_the_other_games_drawn(tmp_path):
    """A row cut mid-write, or a tail of NUL bytes a stopped machine left: the games before and after it are read
    (one bad row dropped every training game, and such a progress.csv tail made the whole run unreadable)."""
    run = tmp_path / "run"
    run.mkdir()
    rows = "".join(f"{0.5 * i},{1000 * i},{i},100\n" for i in range(1, 11))
    (run / "games.csv").write_text("wall_time_s,frames,return,length\n" + rows + "5.5,11000,-\n6.0,12000,12,100\n")
    data = plot_tool.read_games(str(run / "games.csv"), 10)
    assert data["return"] == [*map(float, range(1, 11)), 12.0]
    (run / "games.csv").write_bytes(("wall_time_s,frames,return,length\n" + rows).encode() + b"\0" * 200_000)
    assert plot_tool.read_games(str(run / "games.csv"), 10)["return"] == list(map(float, range(1, 11)))
    (run / "progress.csv").write_bytes((",".join(FIELDS) + "\n1,100,1,5,50,5,100\n2,200,2,7,50,6,100\n").encode()
                                       + b"\0" * 200_000)
    assert plot_tool.read_progress(str(run))["frames"] == [100.0, 200.0]
    assert run_plot(run, "-o", tmp_path / "out.png").returncode == 0
    (run / "progress.csv").write_bytes((",".join(FIELDS) + "\n1,100,1,5,50,5,100\n2,200,2,7,50,6,100\n").encode()
                                       + b"\xff\xfe\x80 not text")  # bytes that are no UTF-8: the rows before
    assert plot_tool.read_progress(str(run))["frames"] == [100.0, 200.0]
