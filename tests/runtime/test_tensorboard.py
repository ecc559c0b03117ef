"""TensorBoard means what its names say: training games under CleanRL's ``charts/episodic_*`` names, the evaluator's
under ``eval/*``, losses at a steady interval, the network's graph and weight histograms; read back from a run."""

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import out_dirs, read_json, run_main


def test_a_cartpole_run_writes_training_games_eval_scores_graph_and_histograms(tmp_path):
    result = run_main("--env", "CartPole-v1", "--workers", "2", "--max-seconds", "12", "--log-interval", "1",
                      "--histogram-interval", "3", *out_dirs(tmp_path), timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    events = EventAccumulator(str(tmp_path / "run"), size_guidance={"scalars": 0, "histograms": 0}).Reload()
    tags = events.Tags()
    for tag in ("charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/agent_steps",
                "losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/grad_norm",
                "eval/episodic_return", "eval/episodic_length", "eval/mean_return"):
        assert tag in tags["scalars"], (tag, tags["scalars"])
    training = events.Scalars("charts/episodic_return")
    lengths = events.Scalars("charts/episodic_length")
    summary = read_json(tmp_path / "run" / "summary.json")
    # every finished training game, each with its own points: CartPole scores 1 a step, so return == length
    assert 20 <= len(training) <= summary["episodes"], (len(training), summary["episodes"])
    assert all(r.value == l.value and 1 <= r.value <= 500 for r, l in zip(training, lengths))
    assert [e.step for e in training] == sorted(e.step for e in training)
    # the losses come with each of the log's writes, one per --log-interval second, from the first update on (how
    # late that is depends on the machine's load), not once per evaluator game
    writes, losses = events.Scalars("charts/agent_steps"), events.Scalars("losses/entropy")
    assert len(losses) >= 2 and [e.step for e in losses] == [w.step for w in writes if w.step >= losses[0].step]
    # one write per --log-interval second, not one per game, and a last one at the end (counted, not timed: an event's
    # wall time is taken when it is added, which a loaded machine can delay past the next write's)
    assert len(writes) <= summary["seconds"] / 1 + 2, (len(writes), summary["seconds"])
    assert any(tag.startswith("weights/") for tag in tags["histograms"]) and tags["graph"]
    assert any(tag.startswith("gradients/") for tag in tags["histograms"])  # worker 0's, from its own event file
    # where the workers' time went: stepping CartPole, acting, learning, and the optimizer's step
    assert {"perf/env", "perf/act", "perf/learn", "perf/optimize", "perf/sync"} <= set(tags["scalars"])
    shares = [events.Scalars(f"perf/{name}")[-1].value for name in ("sync", "env", "act", "wait", "batch", "learn",
                                                                      "optimize")]
    assert abs(sum(shares) - 1.0) < 1e-6 and shares[3] == shares[4] == 0.0  # A3G has no waiting and no batches
    spent = summary["phase_seconds"]
    assert spent["env"] > 0 and spent["act"] > 0 and spent["learn"] > 0 and spent["optimize"] > 0
    steps = events.Scalars("charts/agent_steps")
    assert steps[-1].value == steps[-1].step  # CartPole: a frame is an agent step
