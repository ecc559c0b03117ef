"""Shared optimizers: the same numbers as torch.optim, state in shared memory, one step count for all processes."""

import math
import multiprocessing

import pytest
import torch

from shared_optim import DEFAULT_EPS, SharedAdam, SharedRMSprop, adam_step_bound, make_optimizer

CASES = [
    (SharedAdam, torch.optim.Adam, {"lr": 1e-2, "eps": 1e-8}),
    (SharedAdam, torch.optim.Adam, {"lr": 1e-2, "eps": 1e-3}),
    (SharedAdam, torch.optim.Adam, {"lr": 1e-2, "eps": 1e-8, "amsgrad": True, "weight_decay": 0.1}),
    (SharedAdam, torch.optim.Adam, {"lr": 3e-3, "betas": (0.8, 0.9), "eps": 1e-6}),
    (SharedRMSprop, torch.optim.RMSprop, {"lr": 1e-2, "eps": 1e-8}),
    (SharedRMSprop, torch.optim.RMSprop, {"lr": 1e-2, "eps": 0.1, "momentum": 0.9}),
    (SharedRMSprop, torch.optim.RMSprop, {"lr": 1e-2, "eps": 1e-8, "momentum": 0.9, "centered": True, "alpha": 0.95}),
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


def test_flags_reach_the_optimizer_and_a_resume_applies_them():
    import argparse

    from shared_optim import hyperparameters, optimizer_for

    args = argparse.Namespace(optimizer="RMSprop", lr=1e-3, eps=0.01, amsgrad=False, alpha=0.9, momentum=0.5)
    net = make_net()
    opt = optimizer_for(args, net.parameters(), shared=True)
    group = opt.param_groups[0]
    assert (group["lr"], group["eps"], group["alpha"], group["momentum"]) == (1e-3, 0.01, 0.9, 0.5)
    first = group["params"][0]
    assert opt.state[first]["momentum_buffer"].is_shared()
    saved = optimizer_for(argparse.Namespace(**{**vars(args), "momentum": 0.0, "alpha": 0.99}), net.parameters(),
                          shared=True).state_dict()
    opt.load_state_dict(saved)  # a resume: the saved groups come back ...
    assert opt.param_groups[0]["momentum"] == 0.0
    opt.set_hyperparameters(**hyperparameters(args))  # ... and the flags given now win
    assert (opt.param_groups[0]["alpha"], opt.param_groups[0]["momentum"]) == (0.9, 0.5)
    assert opt.state[opt.param_groups[0]["params"][0]]["momentum_buffer"].is_shared()
    adam = optimizer_for(argparse.Namespace(**{**vars(args), "optimizer": "Adam", "amsgrad": True}),
                         net.parameters(), shared=False)
    assert adam.param_groups[0]["amsgrad"] and "alpha" not in adam.param_groups[0]


def test_defaults_are_rl_a3c_pytorchs_eps():
    net = make_net()
    assert make_optimizer("Adam", net.parameters(), shared=True, lr=1e-3).defaults["eps"] == 1e-3
    assert make_optimizer("RMSprop", net.parameters(), shared=True, lr=1e-3).defaults["eps"] == 0.1
    assert make_optimizer("Adam", net.parameters(), shared=False, lr=1e-3, eps=1e-5).defaults["eps"] == 1e-5


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.8, 0.9), (0.5, 0.99)])
def test_adam_step_bound_holds_and_is_reached(betas):
    """No gradient sequence takes sequential Adam past adam_step_bound(t); the Cauchy-Schwarz worst case
    (g_{t-k} proportional to (b1 / b2)^k) reaches it."""
    b1, b2 = betas
    g = torch.Generator().manual_seed(0)
    for t in (1, 2, 5, 50, 2000):
        worst = torch.tensor([(b1 / b2) ** (t - i) for i in range(1, t + 1)], dtype=torch.float64)
        sequences = [worst, torch.randn(t, generator=g, dtype=torch.float64),
                     torch.randn(t, generator=g, dtype=torch.float64).exp()]
        for grads in sequences:
            m = v = 0.0
            for x in grads.tolist():
                m, v = b1 * m + (1 - b1) * x, b2 * v + (1 - b2) * x * x
            ratio = abs(m / (1 - b1**t)) / math.sqrt(v / (1 - b2**t))
            assert ratio <= adam_step_bound(b1, b2, t) * (1 + 1e-9)
        m = v = 0.0
        for x in worst.tolist():
            m, v = b1 * m + (1 - b1) * x, b2 * v + (1 - b2) * x * x
        assert abs(m / (1 - b1**t)) / math.sqrt(v / (1 - b2**t)) == pytest.approx(adam_step_bound(b1, b2, t))
    assert adam_step_bound(0.9, 0.999, 1) == pytest.approx(1.0)
    assert adam_step_bound(0.9, 0.999, 10**6) == pytest.approx(0.1 / math.sqrt(0.001 * (1 - 0.81 / 0.999)))


@pytest.mark.parametrize("betas", [(0.9, 0.5), (0.9, 0.0)])
def test_adam_with_a_second_moment_faster_than_the_first_steps_as_torch_does(betas):
    """beta2 < beta1^2: the bound grows past a float (beta1^2 / beta2)^t at ~1,500 steps for (0.9, 0.5), and beta2 = 0
    divides by zero at once; the bound is then infinite and the steps torch's."""
    assert adam_step_bound(*betas, 1500.0) == math.inf
    ours, theirs = make_net(), make_net()
    opt_ours = SharedAdam(ours.parameters(), lr=1e-4, betas=betas)
    opt_theirs = torch.optim.Adam(theirs.parameters(), lr=1e-4, betas=betas, eps=DEFAULT_EPS["Adam"])
    for step in range(1500):
        for net, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            loss_of(net, step % 25).backward()
            opt.step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b)


def test_torn_hogwild_state_cannot_make_a_wild_step():
    """What a worker can read under hogwild: another worker's new first moment already written, its second moment
    not yet. torch's Adam then divides by eps alone where this worker's own gradient was zero; ours stays within
    the sequential bound. This is what collapsed a Pong run in its first 50k frames (docs/results/reliability.md)."""
    lr, eps = 3e-4, 1e-8
    steps = {}
    for name, cls in (("shared", SharedAdam), ("torch", torch.optim.Adam)):
        weight = torch.nn.Parameter(torch.zeros(4))
        opt = cls([weight], lr=lr, eps=eps)
        weight.grad = torch.tensor([0.0, 0.0, 1e-3, 0.5])  # this worker's gradient: zero on two elements
        if name == "torch":
            opt.step()  # make torch's lazy state, then tear it like the shared one
            weight.data.zero_()
        state = opt.state[weight]
        state["step"].fill_(1)
        state["exp_avg"].copy_(torch.tensor([0.1 * 0.8, 0.0, 0.0, 0.0]))  # another worker's m landed...
        state["exp_avg_sq"].zero_()  # ... its v did not
        opt.step()
        steps[name] = weight.detach().abs().max().item() / lr
    assert steps["shared"] <= adam_step_bound(0.9, 0.999, 2) * 1.001
    assert steps["torch"] > 1e5  # the wild step, for contrast
