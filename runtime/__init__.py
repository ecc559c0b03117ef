"""The run's machinery, below the algorithms and above the foundations: flags and their defaults, the
supervisor and its limits, the state processes share, the run directory, checkpoints, child processes and the
evaluator that every algorithm runs. It knows no algorithm's internals."""
