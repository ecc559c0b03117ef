"""IMPALA's inference server with a real server process: batched answers equal the network's own, the latest
weights and their version are used, a killed server's replacement answers the request it left, and a stopped
run never leaves an actor waiting."""

import argparse
import os
import signal
import threading
import time

import pytest
import torch
import torch.multiprocessing as mp

from impala.inference import ANSWERED, ASKED, IDLE, InferenceClient, InferenceServer, InferenceStopped, inference
from impala.shm import SharedWeights
from model import build_model, feature_size, model_meta
from runtime.run_state import RunState

ACTORS, ENVS = 2, 3


@pytest.fixture
def setup():
    ctx = mp.get_context("spawn")
    torch.manual_seed(0)
    meta = model_meta("mlplstm", [4], 2, 8)
    model = build_model(meta)
    model.share_memory()
    state = RunState(ctx, ACTORS)
    # with features (a replay ranks unrolls by them): the clients that do not ask for them get the usual answer
    server = InferenceServer(ctx, ACTORS, ENVS, meta["obs_shape"], meta["num_actions"], meta["hidden_size"],
                             feature_size(meta))
    args = argparse.Namespace(seed=0, workers=ACTORS, envs_per_worker=ENVS, gpu_ids=[-1], channels_last=True,
                              bf16=False, inference_batch=0, inference_wait=20.0)
    weights = SharedWeights(ctx, model)
    processes = []

    def start_server():
        process = ctx.Process(target=inference, args=(args, meta, server, weights, state, os.getpid()), daemon=True)
        process.start()
        processes.append(process)
        return process

    yield ctx, model, server, weights, state, start_server
    state.stop.set()
    for process in processes:
        process.join(10)
        if process.is_alive():
            process.kill()


def ask_together(clients, requests):
    """Every client asks at once (threads, as actors would from their processes); returns their answers."""
    answers = [None] * len(clients)

    def ask(i):
        answers[i] = clients[i](*requests[i])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def test_batched_answers_are_the_networks_own_with_the_latest_weights(setup):
    ctx, model, server, weights, state, start_server = setup
    start_server()
    clients = [InferenceClient(server, rank, state.stop, os.getppid()) for rank in range(ACTORS)]
    requests = [(torch.randn(n, 4), (torch.randn(n, 8), torch.randn(n, 8))) for n in (3, 2)]
    for client in clients:
        client.begin_unroll()
    answers = ask_together(clients, requests)
    for (obs, hidden), (value, logits, (hx, cx)) in zip(requests, answers):
        with torch.no_grad():
            expected = model(obs, hidden)
        torch.testing.assert_close(value, expected[0])
        torch.testing.assert_close(logits, expected[1])
        torch.testing.assert_close(hx, expected[2][0])
    assert [c.unroll_version for c in clients] == [0, 0]
    assert state.inference[0] >= 1 and state.inference[1] == 5  # both requests answered, in one or two batches
    assert server.status.tolist() == [IDLE, IDLE]

    # the learner steps the shared model and publishes: the next answers use the new weights and say so
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    weights.publish()
    obs, hidden = requests[0]
    value, _, _ = clients[0](obs, hidden)
    with torch.no_grad():
        torch.testing.assert_close(value, model(obs, hidden)[0])
    assert clients[0].unroll_version == 0  # the oldest version of this unroll ...
    clients[0].begin_unroll()
    clients[0](obs, hidden)
    assert clients[0].unroll_version == 1  # ... and of the next one

    # elite sampling's features: what the network's heads read, from the same forward pass
    value, logits, (hx, cx), features = clients[1](obs, hidden, with_features=True)
    with torch.no_grad():
        expected = model(obs, hidden, with_features=True)
    torch.testing.assert_close(features, expected[3])
    torch.testing.assert_close(logits, expected[1])


def test_a_killed_servers_replacement_answers_the_request_it_left(setup):
    ctx, model, server, weights, state, start_server = setup
    first = start_server()
    client = InferenceClient(server, 0, state.stop, os.getppid())
    obs, hidden = torch.randn(2, 4), (torch.zeros(2, 8), torch.zeros(2, 8))
    client(obs, hidden)  # the server is up
    os.kill(first.pid, signal.SIGKILL)
    first.join(10)
    result = {}
    thread = threading.Thread(target=lambda: result.update(answer=client(obs, hidden)))
    thread.start()
    deadline = time.monotonic() + 10
    while server.status[0] != ASKED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.status[0] == ASKED  # waiting, with no server
    start_server()
    thread.join(60)
    with torch.no_grad():
        torch.testing.assert_close(result["answer"][0], model(obs, hidden)[0])


def test_a_stopped_run_never_leaves_an_actor_waiting(setup):
    ctx, model, server, weights, state, start_server = setup
    client = InferenceClient(server, 1, state.stop, os.getppid())  # no server at all
    threading.Timer(0.3, state.stop.set).start()
    start = time.monotonic()
    with pytest.raises(InferenceStopped):
        client(torch.randn(1, 4), (torch.zeros(1, 8), torch.zeros(1, 8)))
    assert time.monotonic() - start < 5


def test_a_new_actor_resets_the_row_its_predecessor_left(setup):
    ctx, model, server, weights, state, start_server = setup
    server.status[1] = ANSWERED
    server.answered[1].release()  # the wake-up its predecessor never consumed
    InferenceClient(server, 1, state.stop, os.getppid())
    assert server.status[1] == IDLE and not server.answered[1].acquire(block=False)


def test_a_forward_pass_holds_at_most_inference_batch_observations_and_every_actor_gets_its_turn():
    """``--inference-batch`` is the most observations in one forward pass (all that had asked went in one: 32 of
    8 here); the rows left over are answered next, at once, before an actor that asked again since."""
    from impala.inference import gather

    ctx = mp.get_context("spawn")
    server = InferenceServer(ctx, 4, 8, [4], 2, 8)
    server.count[:] = 8
    server.status[:] = ASKED
    for _ in range(4):
        server.asked.release()
    started = time.monotonic()
    batches = [gather(server, max_batch=8, max_wait=0.001)]
    for _ in range(2):
        server.status[batches[-1]] = IDLE  # answered
        batches.append(gather(server, max_batch=8, max_wait=0.001))
    server.status[batches[-1]] = IDLE
    server.status[0] = ASKED  # actor 0 asks again before actor 3 was answered
    server.asked.release()
    batches.append(gather(server, max_batch=8, max_wait=0.001))
    assert batches == [[0], [1], [2], [3]] and time.monotonic() - started < 0.1  # no POLL wait for a leftover
    server.status[3] = IDLE
    server.count[:2] = 3
    server.status[:2] = ASKED
    assert gather(server, max_batch=8, max_wait=0.001) == [0, 1]  # 6 observations fit: one pass
