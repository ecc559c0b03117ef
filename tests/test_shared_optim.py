"""Shared optimizers: the same numbers as torch.optim, state in shared memory, one step count for all processes."""

import multiprocessing

import pytest
import torch

from shared_optim import SharedAdam, SharedRMSprop, make_optimizer

CASES = [
    (SharedAdam, torch.optim.Adam, {"lr": 1e-2}),
    (SharedAdam, torch.optim.Adam, {"lr": 1e-2, "amsgrad": True, "weight_decay": 0.1}),
    (SharedAdam, torch.optim.Adam, {"lr": 3e-3, "betas": (0.8, 0.9), "eps": 1e-6}),
    (SharedRMSprop, torch.optim.RMSprop, {"lr": 1e-2}),
    (SharedRMSprop, torch.optim.RMSprop, {"lr": 1e-2, "momentum": 0.9, "centered": True, "alpha": 0.95}),
]


def make_net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def loss_of(net, step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(8, 5, generator=g)
    return (net(x) - 1.0).pow(2).mean()


@pytest.mark.parametrize("shared_cls,torch_cls,kwargs", CASES)
def test_same_numbers_as_torch_optim(shared_cls, torch_cls, kwargs):
    ours, theirs = make_net(), make_net()
    opt_ours, opt_theirs = shared_cls(ours.parameters(), **kwargs), torch_cls(theirs.parameters(), **kwargs)
    for step in range(25):
        for net, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            loss_of(net, step).backward()
            opt.step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for p_ours, p_theirs in zip(ours.parameters(), theirs.parameters()):
        s_ours, s_theirs = opt_ours.state[p_ours], opt_theirs.state[p_theirs]
        assert set(s_ours) == set(s_theirs)
        for key in s_ours:
            torch.testing.assert_close(s_ours[key], s_theirs[key], rtol=0, atol=0)


@pytest.mark.parametrize("shared_cls,torch_cls,kwargs", CASES)
def test_state_in_shared_memory_from_construction(shared_cls, torch_cls, kwargs):
    net = make_net()
    opt = shared_cls(net.parameters(), **kwargs)
    states = [opt.state[p] for p in net.parameters()]
    assert all(len(s) > 0 for s in states)
    assert all(t.is_shared() for s in states for t in s.values())


def test_load_state_dict_keeps_state_shared():
    net = make_net()
    opt = SharedAdam(net.parameters(), lr=1e-3)
    loss_of(net, 0).backward()
    opt.step()
    saved = opt.state_dict()
    fresh = SharedAdam(make_net().parameters(), lr=1e-3)
    fresh.load_state_dict(saved)
    assert fresh.global_step == 1
    assert all(t.is_shared() for s in fresh.state.values() for t in s.values())


def _steps_in_child(net, opt, steps, seed):
    torch.manual_seed(seed)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    for step in range(steps):
        local = loss_of(net, seed * 1000 + step)
        grads = torch.autograd.grad(local, list(net.parameters()))
        for p, g in zip(net.parameters(), grads):
            p.grad.copy_(g)
        opt.step()


@pytest.mark.parametrize("name", ["Adam", "RMSprop"])
def test_global_step_and_updates_across_two_processes(name):
    net = make_net()
    net.share_memory()
    opt = make_optimizer(name, net.parameters(), shared=True, lr=1e-2)
    before = [p.detach().clone() for p in net.parameters()]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_steps_in_child, args=(net, opt, 10, seed)) for seed in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    # both processes stepped the same shared statistics and weights
    assert opt.global_step == 20
    first = next(iter(net.parameters()))
    assert int(opt.state[first]["step"].item()) == 20
    assert all(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
    second_moment = "exp_avg_sq" if name == "Adam" else "square_avg"
    assert opt.state[first][second_moment].abs().sum() > 0


def test_unshared_optimizer_is_plain_torch():
    net = make_net()
    assert type(make_optimizer("Adam", net.parameters(), shared=False, lr=1e-3)) is torch.optim.Adam
    assert type(make_optimizer("RMSprop", net.parameters(), shared=False, lr=1e-3)) is torch.optim.RMSprop
