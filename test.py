"""A3G's evaluator process (rl_a3c_pytorch's ``test.py``): plays full greedy games with the latest shared weights,
logs them, keeps the best model and decides when the run is solved.

The evaluator is the same for every algorithm, so its work lives below them, in ``runtime/evaluator.py``; IMPALA
starts it from there. This is A3G's entry to it, the role that ``train.a3g_roles`` hands the supervisor.
"""

from runtime.context import RunContext
from runtime.evaluator import evaluate


def test(run: RunContext, parent_pid: int, start_frames: float, run_started: float) -> None:
    """Play and log evaluator games until the run stops (``runtime.evaluator.evaluate``)."""
    evaluate(run, parent_pid, start_frames, run_started)
