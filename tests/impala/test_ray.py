"""IMPALA on Ray (--backend ray): flags, one run format with the shared-memory backend, faults, clean stops, a
user's cluster (two nodes on this machine). Ray is an optional extra: without it the tests that need it skip."""

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import (
    child_pids,
    evaluator_games,
    live_processes,
    main_in_process,
    out_dirs,
    read_json,
    run_main,
    start_run,
    stop_run,
    training_games,
    wait_for,
)

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="Ray is an optional extra (pip install -r requirements-ray.txt)")
RAY = ["--algo", "impala", "--backend", "ray", "--env", "CartPole-v1", "--workers", "2", "--no-tensorboard-logger"]
QUIET_RAY = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}


def run_log(tmp_path, env="CartPole-v1"):
    log = tmp_path / "logs" / f"{env}_log"
    return log.read_text() if log.exists() else ""


def actor_placements(tmp_path, env="CartPole-v1"):
    """rank -> (Ray node id, pid), the latest of each actor, from the learner's lines in the run's log."""
    found = {}
    for rank, node, pid in re.findall(r"actor (\d+) runs on Ray node (\w+) \(host .*?, pid (\d+)\)",
                                      run_log(tmp_path, env)):
        found[int(rank)] = (node, int(pid))
    return found


def session_commands(session):
    """(pid, command line) of a session's live processes (a run started with start_new_session: its pid)."""
    found = []
    for pid in live_processes(session):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        found.append((pid, command))
    return found


def test_backend_ray_is_for_impala_and_the_address_for_ray(tmp_path):
    for flags, message in ((["--backend", "ray"], "--backend is for --algo impala, and this run is --algo a3g"),
                           (["--algo", "impala", "--ray-address", "127.0.0.1:6379"],
                            "--ray-address is for --backend ray"),
                           (["--algo", "impala", "--backend", "ray", "--ray-address", "127.0.0.1:99999999999999999999"],
                            "--ray-address '127.0.0.1:99999999999999999999': expected HOST:PORT with a port from 1 to "
                            "65535, as `ray start --head` prints it")):
        result = main_in_process("--env", "CartPole-v1", *flags, *out_dirs(tmp_path))
        assert result.returncode == 2 and result.stderr.strip() == f"main.py: error: {message}"


def test_backend_ray_without_ray_says_how_to_install_it(tmp_path):
    fake = tmp_path / "site" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    result = run_main(*RAY, *out_dirs(tmp_path), timeout=120, env={**os.environ, "PYTHONPATH": str(fake.parent)})
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "pip install -r requirements-ray.txt" in result.stderr
    assert not (tmp_path / "run").exists()  # bad input: nothing written


def actor_arrays(T, envs, first, hidden=3):
    """An actor call's result as ``Acting.unroll`` lays it out, environment ``j``'s observations all ``first + j``."""
    obs = np.repeat((first + np.arange(envs, dtype=np.float32))[None, :, None], T + 1, axis=0)
    return {"obs": obs, "actions": np.zeros((T, envs), np.int64), "rewards": np.zeros((T, envs), np.float32),
            "dones": np.zeros((T, envs), np.float32), "truncated": np.zeros((T, envs), np.float32),
            "final_obs": np.zeros((1, envs, 1), np.float32), "logits": np.zeros((T, envs, 2), np.float32),
            "values": np.zeros((T, envs), np.float32), "features": np.zeros((T, envs, 0), np.float32),
            "hx": np.zeros((envs, hidden), np.float32),
            "cx": np.zeros((envs, hidden), np.float32)}


@needs_ray
def test_learner_queue_drops_the_oldest_when_full_and_batches_as_the_slots_do():
    from impala.ray_backend import UnrollQueue
    from impala.shm import UnrollStore

    queue = UnrollQueue(capacity=6)
    assert queue.put(actor_arrays(3, 4, first=0), version=1) == 0
    assert queue.put(actor_arrays(3, 4, first=10), version=2) == 2  # unrolls 0 and 1 go: the oldest
    assert queue.full() and queue.drop_older_than(2) == 2  # --max-policy-lag: 2 and 3 were acted by version 1
    batch, versions = queue.take(3)
    assert versions.tolist() == [2, 2, 2] and batch["obs"][0, :, 0].tolist() == [10, 11, 12] and len(queue) == 1
    # the same layout as the shared-memory slots' read-out, which LearnerStep takes from either backend
    store = UnrollStore(slots=3, per_actor=3, unroll_length=3, obs_shape=[1], num_actions=2, hidden_size=3)
    slots = store.claim(0, 3)
    store.write(slots, {k: torch.from_numpy(v[:, :3] if k not in ("hx", "cx") else v[:3])
                        for k, v in actor_arrays(3, 4, first=10).items()})
    store.commit(slots, version=2)
    expected = store.take(store.full())
    assert {k: v.shape for k, v in batch.items()} == {k: v.shape for k, v in expected.items()}
    assert all(torch.equal(batch[k], expected[k]) for k in expected)


@needs_ray
def test_unreachable_address_is_bad_input_within_seconds(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    result = run_main(*RAY, "--ray-address", f"127.0.0.1:{port}", *out_dirs(tmp_path), timeout=60, env=QUIET_RAY)
    assert result.returncode == 2 and time.monotonic() - started < 30
    assert result.stderr.strip().splitlines() == [
        f"main.py: error: --ray-address 127.0.0.1:{port}: no Ray cluster answers there (Connection refused); start "
        f"one with `ray start --head --port {port}`, or leave --ray-address out for a local one"]


@needs_ray
def test_address_that_answers_but_is_no_ray_cluster_is_bad_input_within_30_seconds(tmp_path):
    with socket.socket() as silent:  # accepts connections, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        started = time.monotonic()
        result = run_main(*RAY, "--ray-address", f"127.0.0.1:{silent.getsockname()[1]}", *out_dirs(tmp_path),
                          timeout=60, env=QUIET_RAY)
    assert result.returncode == 2 and time.monotonic() - started < 30
    assert len(result.stderr.strip().splitlines()) == 1 and "no Ray cluster took this run" in result.stderr


@needs_ray
def test_ray_run_writes_the_same_run_directory_and_resumes_with_shm_and_back(tmp_path):
    first = run_main(*RAY, "--max-frames", "10000", *out_dirs(tmp_path), timeout=300, env=QUIET_RAY)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "a local Ray cluster at 127.0.0.1:" in first.stdout
    run = tmp_path / "run"
    summary = read_json(run / "summary.json")
    assert summary["stop_reason"] == "max_frames" and summary["frames"] >= 10000 and summary["skipped_updates"] == 0
    assert {"dropped_unrolls", "actor_waits"} <= set(summary)
    assert evaluator_games(tmp_path) > 0 and (tmp_path / "trained_models" / "CartPole-v1.pt").exists()
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
    assert checkpoint["optimizer"]["state"][0]["step"] > 0  # the learner stepped the shared optimizer
    assert {rank for rank in actor_placements(tmp_path)} == {0, 1}  # each actor's node, logged once
    # the same checkpoint continues on shared memory (--backend is this machine's choice, not the run's)...
    # (each budget past where the run before stopped: a run ends a few unrolls past its own)
    target = summary["frames"] + 4000
    second = run_main("--resume", run, "--max-frames", target, *out_dirs(tmp_path)[2:], timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    summary = read_json(run / "summary.json")
    assert read_json(run / "args.json")["backend"] == "shm" and summary["frames"] >= target
    # ...and back on Ray, with PPO's epochs over each batch now (APPO: the learner's step, the same on both backends)
    target = summary["frames"] + 4000
    steps = torch.load(run / "checkpoint.pt", weights_only=True)["optimizer"]["state"][0]["step"]
    third = run_main("--resume", run, "--backend", "ray", "--objective", "ppo", "--max-frames", target,
                     *out_dirs(tmp_path)[2:], timeout=300, env=QUIET_RAY)
    assert third.returncode == 0, third.stderr[-2000:]
    assert "(impala, ppo)" in third.stdout
    assert read_json(run / "summary.json")["frames"] >= target and read_json(run / "args.json")["objective"] == "ppo"
    assert torch.load(run / "checkpoint.pt", weights_only=True)["optimizer"]["state"][0]["step"] > steps


@needs_ray
def test_float_actions_replay_and_trust_region_sit_on_the_ray_boundary_too(tmp_path):
    """A Box task's float actions cross the wire, and elite sampling ranks by the features the actors store: they
    travel with the Ray actors' unrolls; LASER's mask masks some of them."""
    replay = ('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "custom", "capacity": 100, '
              '"sample_ratio": 0.5, "dist_function": "ln_norm", "sample_strategy": "elite_sampling"}]')
    result = run_main(*RAY, "--env", "Pendulum-v1", "--replay-parameters", replay, "--kl-mask", "--max-frames",
                      "10000", *out_dirs(tmp_path), timeout=300, env=QUIET_RAY)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Gaussian policy over 1 dimension" in result.stdout + result.stderr
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["masked_of_steps"] > 0 and summary["skipped_updates"] == 0 and summary["frames"] >= 10000


@needs_ray
def test_a_killed_actor_then_a_killed_learner_are_replaced_and_ctrl_c_stops_every_ray_process(tmp_path):
    """One run, three faults in turn: actor 0 killed is replaced by a new actor and the run goes on; the learner
    killed is restarted, Ray ends the dead learner's actors (they belong to its job) and the new learner starts its
    own; Ctrl-C then stops the run (130, state saved) and every process it started, Ray's GCS, raylet and workers
    included. Each step waits for what it proves, not for a time limit (the run has none it could reach)."""
    proc = start_run(tmp_path, *RAY, "--max-seconds", "900", env=QUIET_RAY)
    wait_for(lambda: len(actor_placements(tmp_path)) == 2 and evaluator_games(tmp_path) >= 1, 120)
    assert any("raylet" in command for _, command in session_commands(proc.pid))
    node, pid = actor_placements(tmp_path)[0]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: actor_placements(tmp_path).get(0, (None, pid))[1] != pid, 60)
    wait_for(lambda: re.search(r"actor 0 failed \(\w+: .*\); replaced by a new actor", run_log(tmp_path)), 60)
    games = evaluator_games(tmp_path)
    wait_for(lambda: evaluator_games(tmp_path) > games + 2, 90)

    old_actors = {pid for _, pid in actor_placements(tmp_path).values()}
    learner = child_pids(tmp_path)["learner"]
    os.kill(learner, signal.SIGKILL)
    wait_for(lambda: child_pids(tmp_path)["learner"] != learner, 60)
    wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") and "ray::" in open(f"/proc/{pid}/cmdline").read()
                             for pid in old_actors), 60)
    wait_for(lambda: {pid for _, pid in actor_placements(tmp_path).values()}.isdisjoint(old_actors), 90)
    games = evaluator_games(tmp_path)
    wait_for(lambda: evaluator_games(tmp_path) > games + 2, 90)

    stdout, stderr = stop_run(proc)
    assert proc.returncode == 130, stderr[-2000:]
    assert re.search(r"actor 0 failed \(\w+: .*\); replaced by a new actor", stderr)
    assert f"learner (pid {learner}) was killed by SIGKILL; restarting it" in stderr
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["restarts"] == 2 and summary["stop_reason"] == "interrupted"
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["frames"] > 0
    wait_for(lambda: not session_commands(proc.pid), 30)  # GCS, raylet, workers: none left behind


@needs_ray
def test_a_pong_actor_replaced_mid_run_sends_its_first_frames_again_and_sigterm_stops_every_ray_process(tmp_path):
    """Stacked frames cross the wire once: an actor's later unrolls leave out their first observation, which the
    learner kept from the actor's unroll before. A new actor of the same rank begins afresh, and the learner
    takes its unrolls (it would fail, and be restarted, on one that continues an unroll it never had). SIGTERM (a
    scheduler's stop) then ends the run, 143, state saved, no Ray process left."""
    pong = "PongNoFrameskip-v4"
    # games cut at 50 steps: games.csv shows the actors' unrolls going on (an unroll is 20 steps)
    proc = start_run(tmp_path, *RAY, "--env", pong, "--max-episode-length", "50", "--max-seconds", "900",
                     env=QUIET_RAY)
    node, pid = wait_for(lambda: actor_placements(tmp_path, pong).get(0), 120)
    wait_for(lambda: training_games(tmp_path) >= 2, 120)  # unrolls that continue the one before
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: actor_placements(tmp_path, pong).get(0, (None, pid))[1] != pid, 60)
    games = training_games(tmp_path)
    wait_for(lambda: training_games(tmp_path) >= games + 4, 120)  # the new actor's unrolls, taken by the learner
    stdout, stderr = stop_run(proc, signal.SIGTERM)
    assert proc.returncode == 143, stderr[-2000:]
    assert re.search(r"actor 0 failed \(\w+: .*\); replaced by a new actor", stderr)
    assert "never arrived" not in stderr and "Traceback" not in stderr
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["restarts"] == 1 and summary["stop_reason"] == "interrupted"  # the actor's, not the learner's
    wait_for(lambda: not session_commands(proc.pid), 30)


@needs_ray
def test_more_actor_deaths_than_max_restarts_end_the_run_in_one_line(tmp_path):
    proc = start_run(tmp_path, *RAY, "--max-restarts", "0", "--max-seconds", "120", env=QUIET_RAY)
    node, pid = wait_for(lambda: actor_placements(tmp_path).get(0), 60)
    os.kill(pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 1, stderr[-2000:]
    assert re.search(r"actor 0 failed \(.*\): 1 actor deaths within 60 s is more than --max-restarts 0; stopping",
                     stderr)
    assert "Traceback" not in stderr and "restarting it" not in stderr  # the learner is not restarted for it
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["stop_reason"] == "error" and summary["restarts"] == 0


@needs_ray
def test_a_local_cluster_that_cannot_start_is_one_line(tmp_path):
    result = run_main(*RAY, "--max-seconds", "5", *out_dirs(tmp_path), timeout=120,
                      env={**QUIET_RAY, "RAY_TMPDIR": "/dev/null/ray"})  # Ray's folder cannot be made there
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("main.py: error: could not start a local Ray cluster")
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ray_session(flags, env):
    """``ray start FLAGS`` in a session of its own; returns the session's id, which finds the node's processes."""
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    starter = subprocess.Popen([ray, "start", *map(str, flags)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env, start_new_session=True)
    output, _ = starter.communicate(timeout=120)
    assert starter.returncode == 0, output[-2000:]
    return starter.pid


@needs_ray
def test_two_node_cluster_runs_actors_on_both_and_survives_losing_one(tmp_path):
    """A user's cluster: a head and a second node on this machine (``ray start``), joined with --ray-address; one
    actor on each node; the second node's raylet killed mid-run; the cluster left running when the run ends.
    Ray 2.60 cannot keep a multi-node cluster on the loopback address (it turns 127.0.0.1 into the machine's
    address, and a second node cannot join a head bound to 127.0.0.1): a token of this test's own keeps others out."""
    port = free_port()
    env = {**QUIET_RAY, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex()}
    sessions = []
    try:
        for flags in (["--head", "--port", port, "--node-ip-address", "127.0.0.1", "--num-cpus", "2",
                       "--include-dashboard", "false", "--disable-usage-stats"],
                      ["--address", f"127.0.0.1:{port}", "--num-cpus", "1"]):
            sessions.append(ray_session(flags, env))
        head, second = sessions
        proc = start_run(tmp_path, *RAY, "--ray-address", f"127.0.0.1:{port}", "--max-seconds", "900", env=env)
        wait_for(lambda: len({node for node, _ in actor_placements(tmp_path).values()}) == 2, 90)
        raylet = next(pid for pid, command in session_commands(second) if "raylet" in command)
        os.kill(raylet, signal.SIGKILL)
        wait_for(lambda: "replaced by a new actor" in run_log(tmp_path), 60)
        games = evaluator_games(tmp_path)
        wait_for(lambda: evaluator_games(tmp_path) > games + 2, 90)
        stdout, stderr = stop_run(proc)  # Ctrl-C: the run's processes stop, the user's cluster stays
        assert proc.returncode == 130, stderr[-2000:]
        assert "2 node(s)" in stdout and read_json(tmp_path / "run" / "summary.json")["restarts"] >= 1
        assert any("gcs_server" in command for _, command in session_commands(head))  # the user's, still there
    finally:
        for session in sessions:
            for pid, _ in session_commands(session):
                os.kill(pid, signal.SIGKILL)


@needs_ray
def test_ray_moves_each_frame_once_and_only_the_cut_observations_an_unroll_used():
    """Two unrolls an actor plays one after the other (4-frame stacks, T = 10, 3 environments, 3 rows for cut
    observations, one used by the first): the first goes over the wire as T + 4 frames per environment and one row,
    the second, which begins where the first ended, as T frames (episodes begin in both, and on the step before
    the second's first observation); the learner's queue rebuilds the slots' layout of both exactly."""
    from impala.ray_backend import UnrollQueue, to_wire
    from impala.unrolls import unpack_frames

    T, n, k = 10, 3, 4
    generator = torch.Generator().manual_seed(0)
    dones = torch.zeros(2 * T, n)
    dones[[2, 3, 7, T - 1, T + 1, T + 4], [0, 0, 2, 1, 1, 0]] = 1.0
    obs = unpack_frames(torch.randint(0, 256, (2 * T + k, n, 5, 6), dtype=torch.uint8, generator=generator), dones, k)
    unrolls = []
    for part in range(2):
        steps = slice(part * T, (part + 1) * T)
        unroll = {key: torch.from_numpy(value) for key, value in actor_arrays(T, n, 0).items()}
        unroll.update(obs=obs[part * T: (part + 1) * T + 1], dones=dones[steps],
                      truncated=dones[steps] * (torch.arange(n) == 2), final_obs=torch.zeros(3, n, k, 5, 6,
                                                                                              dtype=torch.uint8))
        del unroll["features"]  # none: no replay ranks by them
        unrolls.append(unroll)
    unrolls[0]["final_obs"][0, 2] = 7
    first, second = to_wire(unrolls[0], k, cuts=1), to_wire(unrolls[1], k, cuts=0, continues=True)
    assert first["obs"].shape == (T + k, n, 5, 6) and first["final_obs"].shape == (1, n, k, 5, 6)
    assert second["obs"].shape == (T, n, 5, 6) and second["final_obs"].shape == (0, n, k, 5, 6)
    queue = UnrollQueue(capacity=6, final_slots=3, frame_stack=k)
    queue.put(first, version=4, rank=1)
    with pytest.raises(RuntimeError, match="actor 0's unroll continues one that never arrived"):
        queue.put(second, version=5, rank=0)  # another actor's: its first observation is not this queue's to make
    queue.put(second, version=5, rank=1)
    for unroll, version in zip(unrolls, (4, 5)):
        batch, versions = queue.take(n)
        assert versions.tolist() == [version] * n
        assert {key: value.shape for key, value in batch.items()} == {key: value.shape for key, value in unroll.items()}
        assert all(torch.equal(batch[key], unroll[key]) for key in unroll)
