"""Soak test: a long training run under load, watched from outside.

    python -m tools.soak --seconds 600 --workers 4            # the figures in docs/results/reliability.md (2 x cores on 2 cores)
    python -m tools.soak --seconds 60 --env CartPole-v1 --json out.json

Every ``--interval`` seconds it samples each process of the run (supervisor, evaluator, workers, helpers): resident
memory, open file descriptors, and the machine's /dev/shm entries; frames/s comes from the run's progress.csv. At
the end it prints peak RSS per process, frames/s in the first and last fifth of the run, and fd/shm counts at the
start and end, and writes them as JSON. Exit 1 if the run failed or anything grew without bound (fds or shm
entries up at the end, or RSS up by more than 20% from the first sample after warm-up). The run goes into a
temporary folder, removed when the soak passes (``--keep`` keeps it) and kept, with its path printed, when it fails.
"""

import argparse
import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from core.cli import OneLineParser
from core.errors import BadInput
from core.files import atomic_write_text, check_json_output

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, where main.py is


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, from /proc."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def sample(pid: int) -> dict | None:
    """One process's resident memory (MB), open fds and command line; None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        return {"rss_mb": rss / 1024, "fds": len(os.listdir(f"/proc/{pid}/fd")), "cmd": cmd}
    except (OSError, StopIteration):
        return None


def role(cmd: str, pid: int, root: int) -> str:
    if pid == root:
        return "supervisor"
    if "resource_tracker" in cmd:
        return "resource_tracker"
    return "child"


def progress_fps(path: str, t0: float, t1: float) -> float | None:
    """Training frames/s between wall times t0 and t1 (seconds into the run) from progress.csv."""
    try:
        with open(path) as f:
            rows = [(float(r["wall_time_s"]), float(r["frames"])) for r in csv.DictReader(f)]
    except OSError:  # a run that stopped before writing it
        return None
    window = [r for r in rows if t0 <= r[0] <= t1]
    if len(window) < 2:
        return None
    return (window[-1][1] - window[0][1]) / max(window[-1][0] - window[0][0], 1e-9)


def evaluated(path: str) -> bool:
    """Whether progress.csv holds a game: the evaluator has played one, so every role has started."""
    try:
        with open(path) as f:
            return sum(1 for _ in f) > 1
    except OSError:
        return False


def interrupt(signum, frame):
    """SIGTERM as Ctrl-C: the soak stops its run before it exits, never leaving it training on alone."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m tools.soak", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--workers", type=int, default=2 * len(os.sched_getaffinity(0)))
    p.add_argument("--env", default="PongNoFrameskip-v4")
    p.add_argument("--interval", type=float, default=10)
    p.add_argument("--json", default=None,
                   help="write the figures here (an earlier soak result there is replaced, any other file kept)")
    p.add_argument("--keep", action="store_true", help="keep the run's files (kept anyway when the soak fails)")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="more flags for main.py (after --)")
    args = p.parse_args(argv)
    for flag, value in (("--seconds", args.seconds), ("--interval", args.interval), ("--workers", args.workers)):
        if not (math.isfinite(value) and value > 0):
            p.error(f"{flag} must be above 0, got {value:g}")
    if args.interval > args.seconds / 4:  # growth is judged from a sample after warm-up (a quarter) to the last
        p.error(f"--interval {args.interval:g} leaves too few samples in --seconds {args.seconds:g} to judge growth: "
                f"at most a quarter of it ({args.seconds / 4:g})")
    if args.json:
        try:
            check_json_output(args.json, "--json", {"command", "returncode", "peak_rss_mb"}, "tools.soak")
        except BadInput as exc:
            p.error(str(exc))

    out = tempfile.mkdtemp(prefix="a3g-soak-")
    cmd = [sys.executable, os.path.join(ROOT, "main.py"), "--env", args.env, "--workers", str(args.workers),
           "--max-seconds", str(args.seconds), "--run-dir", f"{out}/run", "--save-model-dir", f"{out}/models",
           "--log-dir", f"{out}/logs", "--checkpoint-interval", "60", *[a for a in args.extra if a != "--"]]
    print("soak:", " ".join(cmd), flush=True)
    # the run's stderr goes to a file: a pipe read only at the end would stop the run once a pipe's worth was written
    with open(f"{out}/stderr.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    samples = []
    start = time.monotonic()
    signal.signal(signal.SIGTERM, interrupt)
    try:
        while proc.poll() is None:
            due = time.monotonic() + args.interval
            while proc.poll() is None and time.monotonic() < due:  # a run that ends is not waited for
                time.sleep(min(0.5, max(0.0, due - time.monotonic())))
            if proc.poll() is not None:
                break
            now = {pid: sample(pid) for pid in descendants(proc.pid)}
            now = {pid: s for pid, s in now.items() if s}
            shm = len(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else 0
            samples.append({"t": time.monotonic() - start, "procs": now, "shm": shm,
                            "up": evaluated(f"{out}/run/progress.csv")})
            total_rss = sum(s["rss_mb"] for s in now.values())
            print(f"soak: t={samples[-1]['t']:.0f}s processes={len(now)} rss={total_rss:.0f} MB "
                  f"fds={sum(s['fds'] for s in now.values())} shm={shm}", flush=True)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the run stops as main.py stops, its processes with it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        proc.send_signal(signal.SIGINT)
        proc.wait()
        print(f"soak: stopped before its end (no figures); the run's files are kept in {out}", file=sys.stderr)
        return 130
    with open(f"{out}/stderr.log") as f:
        stderr = f.read()
    if proc.returncode == 2:  # main.py refused the soak's flags (those after --): bad input, one line
        shutil.rmtree(out, ignore_errors=True)
        lines = stderr.strip().splitlines()
        print(lines[-1] if lines else "main.py refused the run's flags (exit 2)", file=sys.stderr)
        return 2
    peak = {}
    for s in samples:
        for pid, info in s["procs"].items():
            key = f"{role(info['cmd'], pid, proc.pid)} {pid}"
            peak[key] = max(peak.get(key, 0.0), info["rss_mb"])
    # the baseline is taken after warm-up (a quarter of the run, and once the evaluator has logged a game): start-up
    # imports and first allocations are done, also on a loaded machine where starting takes longer
    live = [s for s in samples if len(s["procs"]) > 2]
    warm = [s for s in live if s["t"] >= args.seconds / 4 and s["up"]]
    live = live[:1] + warm if warm else live
    progress = f"{out}/run/progress.csv"
    fifth = args.seconds / 5
    result = {
        "command": " ".join(cmd), "returncode": proc.returncode,
        "peak_rss_mb": {k: round(v, 1) for k, v in sorted(peak.items())},
        "fps_first_fifth": progress_fps(progress, 0, fifth), "fps_last_fifth": progress_fps(progress, 4 * fifth,
                                                                                            args.seconds),
        "fds_start": sum(i["fds"] for i in live[1]["procs"].values()) if len(live) > 1 else None,
        "fds_end": sum(i["fds"] for i in live[-1]["procs"].values()) if live else None,
        "shm_start": live[1]["shm"] if len(live) > 1 else None, "shm_end": live[-1]["shm"] if live else None,
        "rss_total_after_warmup_mb": round(sum(i["rss_mb"] for i in live[1]["procs"].values()), 1) if len(live) > 1
        else None,
        "rss_total_end_mb": round(sum(i["rss_mb"] for i in live[-1]["procs"].values()), 1) if live else None,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=2))
    # a save in flight holds a file or two open for a moment: growth means more than that
    grew = ((result["fds_end"] or 0) > (result["fds_start"] or 0) + 2
            or (result["shm_end"] or 0) > (result["shm_start"] or 0) + 2)
    if result["rss_total_after_warmup_mb"] and result["rss_total_end_mb"] > 1.2 * result["rss_total_after_warmup_mb"]:
        grew = True
    few = len(live) < 2  # a run that stopped before a sample after warm-up: nothing to judge growth from
    if proc.returncode != 0 or grew or few:
        why = f"only {len(live)} sample(s) of the whole run, too few to judge growth" if few else f"growth {grew}"
        print(f"soak: FAILED (exit {proc.returncode}, {why}); the run's files are kept in {out}\n"
              f"{stderr[-2000:]}", file=sys.stderr)
        return 1
    if args.keep:
        print(f"soak: the run's files are in {out}")
    else:
        shutil.rmtree(out, ignore_errors=True)  # a passing soak leaves nothing behind in the temp folder
    return 0


if __name__ == "__main__":
    sys.exit(main())
