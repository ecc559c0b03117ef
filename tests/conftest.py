import contextlib
import functools
import inspect
import io
import json
import multiprocessing.process
import os
import re
import signal
import subprocess
import sys
import time
import types
import warnings

import pytest

# The suite runs on the CPU, also on a machine with GPUs: the default --gpu-ids is every visible GPU, and the tests'
# expectations (gpu_ids [-1], --gpu-ids 7 refused) are the CPU's. Hidden here, before anything imports torch; the
# children of run_main inherit it. A GPU test opts in by putting the variable back in its own subprocess's env.
VISIBLE_GPUS = os.environ.get("CUDA_VISIBLE_DEVICES")
os.environ["CUDA_VISIBLE_DEVICES"] = ""

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The tools run as ``python -m tools.<name>`` from the repository; a test that runs one from another folder finds
# the package through this.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
TOOLS = ("bench", "sweep", "soak", "plot", "versus", "export_model", "retro_import", "retro_state", "save_states")


def command(name):
    """How a user runs ``name``: ``main.py`` and ``gym_eval.py`` as scripts, a tool (``sweep.py``) as a module of
    ``tools``."""
    stem = name.removesuffix(".py")
    if stem in TOOLS:
        return [sys.executable, "-m", f"tools.{stem}"]
    return [sys.executable, os.path.join(ROOT, name)]


def run_main(*flags, timeout=300, cwd=None, **popen):
    """Run ``python main.py FLAGS`` as a user would; returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *map(str, flags)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or ROOT, **popen)


def main_in_process(*flags, cwd=None):
    """``python main.py FLAGS`` in this process, for input it refuses before it starts anything (a start-up of Python,
    torch and the emulators saved per case): ``in_process`` of main.py's ``main``. Flags main.py accepts would start
    a run: the in-process tier's guard stops it."""
    import main

    return in_process(main.main, *flags, cwd=cwd)


def in_process(entry, *flags, cwd=None):
    """A command's ``main(argv)`` (main.py's, gym_eval.py's, a tool's) called in this process as the command line
    would call it, from ``cwd`` (the repository by default): its ``returncode``, ``stdout`` and ``stderr`` as a
    CompletedProcess has them (the warnings a user would see there included)."""
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    os.chdir(cwd or ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("default")  # Python's own filters: what a user's terminal shows
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.filterwarnings("ignore", category=category)
            try:
                code = entry([str(flag) for flag in flags])
            except SystemExit as exc:  # argparse's errors
                code = exc.code
    finally:
        os.chdir(here)
        for signum, handler in handlers.items():  # a refusal after a run's start-up set its own
            signal.signal(signum, handler)
    stderr = err.getvalue() + "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
                                      for w in shown)
    return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=stderr)


def gpu_env():
    """The environment a GPU test's subprocess runs in: this machine's GPUs visible again."""
    env = dict(os.environ)
    if VISIBLE_GPUS is None:
        env.pop("CUDA_VISIBLE_DEVICES")
    else:
        env["CUDA_VISIBLE_DEVICES"] = VISIBLE_GPUS
    return env


@functools.lru_cache(maxsize=None)
def cuda_devices():
    """How many CUDA devices a subprocess sees (this process hides them): 0 on CI and CPU machines, where no NVIDIA
    device file exists (no probe then: every collection of the suite asks)."""
    if not any(name.startswith("nvidia") for name in os.listdir("/dev")):
        return 0
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, env=gpu_env(), timeout=300)
    return int(probe.stdout.strip() or 0) if probe.returncode == 0 else 0


def out_dirs(tmp_path, name="run"):
    """Flags that keep every output of a run inside tmp_path."""
    return ["--run-dir", tmp_path / name, "--save-model-dir", tmp_path / "trained_models",
            "--log-dir", tmp_path / "logs"]


def read_json(path):
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------------------------------
# Tiers: a test that starts a process (main.py, a tool, a Ray cluster, a child of multiprocessing) is marked e2e at
# collection, found by what its code and its fixtures' code use; `pytest -m "not e2e"` is the in-process quick tier.
# A test the collection did not mark that starts a process all the same (through library code, say) fails, naming
# the mark it needs: the tiers cannot drift from what the tests do.

TESTS = os.path.dirname(os.path.abspath(__file__))
# names whose use in a test's code starts a process: subprocess's Popen and functions (``run`` and ``call`` where the
# code names the subprocess module too), multiprocessing's Process and Pool (a context's ``ctx.Process``)
SPAWNING_NAMES = frozenset({"Popen", "Process", "Pool", "check_output", "check_call", "getoutput", "getstatusoutput"})


def code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


def starts_processes(func, seen=None):
    """Whether ``func`` (a test, a fixture, a helper of the tests) or a helper of the tests that it calls uses one
    of ``SPAWNING_NAMES``."""
    seen = set() if seen is None else seen
    func = inspect.unwrap(getattr(func, "__func__", func))
    if not isinstance(func, types.FunctionType) or func in seen:
        return False
    seen.add(func)
    for code in code_objects(func.__code__):
        if "subprocess" in code.co_names and {"run", "call"} & set(code.co_names):
            return True
        for name in code.co_names:
            if name in SPAWNING_NAMES:
                return True
            target = func.__globals__.get(name)
            if isinstance(target, types.FunctionType) and is_test_code(target) and starts_processes(target, seen):
                return True
    return False


def is_test_code(func):
    try:
        return os.path.abspath(inspect.getsourcefile(func)).startswith(TESTS + os.sep)
    except TypeError:
        return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("e2e"):
            continue
        fixtures = [defs[-1].func for defs in item._fixtureinfo.name2fixturedefs.values() if defs]
        if any(starts_processes(f) for f in [item.function, *fixtures] if is_test_code(f)):
            item.add_marker(pytest.mark.e2e)


class UnmarkedProcess(BaseException):
    """Raised where a test the collection did not mark e2e starts a process (a BaseException: no test's own
    ``except Exception`` swallows it)."""


def _refuse(what):
    def refuse(*args, **kwargs):
        raise UnmarkedProcess(f"this test starts a process ({what}) but is not marked e2e: mark it "
                              "@pytest.mark.e2e (the in-process tier runs without processes)")
    return refuse


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    with in_process_only(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with in_process_only(item):
        yield


class in_process_only:
    """Within a test not marked e2e, starting a subprocess or a multiprocessing child raises ``UnmarkedProcess``."""

    def __init__(self, item):
        self.active = item.get_closest_marker("e2e") is None

    def __enter__(self):
        if self.active:
            self.saved = subprocess.Popen._execute_child, multiprocessing.process.BaseProcess.start
            subprocess.Popen._execute_child = _refuse("a subprocess")
            multiprocessing.process.BaseProcess.start = _refuse("a multiprocessing child")

    def __exit__(self, *exc):
        if self.active:
            subprocess.Popen._execute_child, multiprocessing.process.BaseProcess.start = self.saved


@pytest.fixture(scope="session")
def cartpole_run(tmp_path_factory):
    """A short real CartPole run (a few seconds), for tests that need a checkpoint of the current format."""
    tmp = tmp_path_factory.mktemp("cartpole")
    result = run_main("--env", "CartPole-v1", "--workers", "1", "--hidden-size", "32", "--max-frames", "3000",
                      "--no-tensorboard-logger", *out_dirs(tmp))
    assert result.returncode == 0, result.stderr
    return tmp


# ---------------------------------------------------------------------------------------------------------------
# Helpers that several folders' tests use


def assert_bad_input(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for word in words:
        assert word in lines[0], lines[0]


def session_processes(sid):
    """(pid, state) of every process in session ``sid``, from /proc: zombies (state ``Z``) included."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, session = fields[0], int(fields[3])
        if session == sid:
            pids.append((int(name), state))
    return pids


def live_processes(sid):
    """PIDs of the processes of session ``sid`` that have not exited. A zombie has: it holds no memory, file or GPU,
    and one whose parent exited first is the init process's to reap, which some containers' init does late."""
    return [pid for pid, state in session_processes(sid) if state != "Z"]


def as_a_terminal_job():
    """``preexec_fn`` for a run a test stops with Ctrl-C: SIGINT back to its default, as a terminal's foreground job
    has it. A suite started in the background of a non-interactive shell inherits SIGINT ignored, and so would the
    run (Python then installs no KeyboardInterrupt for it, as a background job should not stop at Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


STARTED = []  # the runs start_run started in the test under way: none outlives it (no_run_outlives_its_test)


def start_run(tmp_path, *flags, env=None):
    """``python main.py FLAGS`` in the background, in a session of its own (its pid is the session's id), with
    tmp_path's output folders (None: the flags say where, or main.py's defaults); the test waits for what it checks
    and stops it (``stop_run``)."""
    outputs = out_dirs(tmp_path) if tmp_path is not None else []
    cmd = [sys.executable, os.path.join(ROOT, "main.py"), *map(str, flags), *map(str, outputs)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=as_a_terminal_job, env={**os.environ, **(env or {})})
    STARTED.append(proc)
    return proc


@pytest.fixture(autouse=True)
def no_run_outlives_its_test():
    """A test that failed before it stopped its run (a wait that timed out, say) leaves no process behind: every
    process of the run's session is killed when the test ends."""
    yield
    while STARTED:
        proc = STARTED.pop()
        for pid in live_processes(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=30)


def stop_run(proc, sig=signal.SIGINT, timeout=120):
    """End a run a test started with ``start_run`` once it has seen what it waited for, rather than at a time limit:
    Ctrl-C as a terminal sends it (SIGINT to the whole group; exit 130, state saved), or ``sig`` to main.py alone.
    Returns (stdout, stderr)."""
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    return proc.communicate(timeout=timeout)


def wait_for(predicate, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def child_pids(tmp_path):
    """name -> latest pid, from the supervisor's 'started <name> (pid N)' lines in the run's log."""
    log = tmp_path / "logs" / "CartPole-v1_log"
    found = {}
    if log.exists():
        for name, pid in re.findall(r"started (\w+(?: \d+)?) \(pid (\d+)\)", log.read_text()):
            found[name] = int(pid)
    return found


def training_games(tmp_path):
    """The rows in the run's games.csv so far: training games, counted as the actors' unrolls (and the workers'
    rollouts) that hold them arrive."""
    games = tmp_path / "run" / "games.csv"
    return len(games.read_text().splitlines()) - 1 if games.exists() else 0


def evaluator_games(tmp_path):
    progress = tmp_path / "run" / "progress.csv"
    return len(progress.read_text().splitlines()) - 1 if progress.exists() else 0
