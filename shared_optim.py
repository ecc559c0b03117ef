"""Optimizers whose state lives in shared memory, for hogwild training across processes.

``SharedAdam`` and ``SharedRMSprop`` take ``torch.optim.Adam``'s and ``torch.optim.RMSprop``'s keyword arguments
and compute the same numbers as they do for any sequence of gradients one process applies (tested bit for bit).
They differ in two ways:

1. *When and where* the state is made: torch creates it lazily at the first step, in the memory of whichever
   process steps first; we create it in the constructor and move every state tensor into shared memory, so that
   all worker processes (started with ``spawn`` after the optimizer is built) update one set of statistics. The step
   counter is a shared tensor too, so bias correction sees the global number of updates.
2. *A bound on each element's step.* Hogwild updates the statistics without locks, and a worker can read another
   worker's new first moment ``m`` before that worker's new second moment ``v`` has landed (torch's step reads
   ``v``, then ``m``; another worker writes ``m``, then ``v``; read-modify-writes can also lose an update). Where
   ``v`` is still 0 (an element this worker's gradient did not touch yet: early in training that is most of
   them), Adam divides by ``eps`` alone: with eps 1e-8 one step moved a weight by ~1e7 x lr and Pong's policy
   collapsed within 50k frames (docs/results/reliability.md, "Why a run could collapse"). No sequential Adam can take such a
   step: by Cauchy-Schwarz, ``|m_hat| / sqrt(v_hat) <= step_bound(t)`` (1 at the first step, at most ~7.3 for
   betas (0.9, 0.999)). We clip each element's ``m_hat / (sqrt(v_hat) + eps)`` to that bound, which never changes
   a sequential step and caps a torn one. RMSprop likewise: ``|g| / sqrt(v) <= 1 / sqrt(1 - alpha)`` since ``v``
   holds ``(1 - alpha) g^2`` (not for ``centered``, whose denominator can legitimately approach 0).

Defaults are rl_a3c_pytorch's: eps 1e-3 for Adam and 0.1 for RMSprop (torch's are 1e-8), so that a learning rate
means the same as there. Like the parameters, the state is updated without locks: concurrent updates may
interleave, which A3C tolerates by design, once no single step can be wild.

``Update`` is the one update step that A3G's workers and IMPALA's learner share: a loss on a replica, backward,
the gradient norm, the gradients into the shared model, an optimizer step, or a skip when a number is not finite.
"""

import argparse
import math
from typing import TYPE_CHECKING, Any, Callable, Self

import torch
from torch.optim.optimizer import ParamsT

from core.timing import PhaseClock

if TYPE_CHECKING:  # for the annotations only: this module needs nothing of model.py at run time
    from model import Replica

DEFAULT_EPS = {"Adam": 1e-3, "RMSprop": 0.1}  # rl_a3c_pytorch's SharedAdam / SharedRMSprop
BOUND_SLACK = 1.0 + 1e-4  # float rounding in m and v: never clip a step that sequential Adam takes


def adam_step_bound(beta1: float, beta2: float, step: float) -> float:
    """The largest ``|m_hat| / sqrt(v_hat)`` any gradient sequence gives sequential Adam at step ``step``.

    ``m_t = (1 - b1) sum_k b1^k g_{t-k}`` and ``v_t = (1 - b2) sum_k b2^k g_{t-k}^2``; Cauchy-Schwarz with weights
    ``b2^k`` gives ``|m_t| <= (1 - b1) sqrt(sum_k (b1^2 / b2)^k) sqrt(v_t / (1 - b2))``; the bias corrections
    ``1 - b1^t`` and ``1 - b2^t`` complete it. Where ``b2 < b1^2`` the bound grows without end (infinite once past
    a float; ``b2 = 0``: from the first step), and nothing is clipped."""
    if beta2 == 0.0:
        return math.inf
    r = beta1 * beta1 / beta2
    try:
        geometric = step if r == 1.0 else (1.0 - r**step) / (1.0 - r)
    except OverflowError:
        return math.inf
    return ((1.0 - beta1) / (1.0 - beta1**step) * math.sqrt(geometric)
            * math.sqrt((1.0 - beta2**step) / (1.0 - beta2)))


def _clip_into(numerator, denom, bound, scratch):
    """``numerator`` clipped elementwise to ``[-bound * denom, bound * denom]`` (``numerator / denom`` is then at
    most ``bound``, and an element within it is unchanged, so addcdiv gives torch's exact numbers), read once, into
    the last of the three ``scratch`` buffers, which it returns."""
    limit, low, out = scratch
    torch.mul(denom, bound * BOUND_SLACK, out=limit)
    torch.neg(limit, out=low)
    return torch.clamp(numerator, low, limit, out=out)


class _SharedStateMixin:
    """Put before a torch optimizer class: its state is made at construction and placed in shared memory."""

    def __init__(self, params: ParamsT, **kwargs: Any):
        super().__init__(params, **kwargs)
        for group in self.param_groups:
            if group.get("maximize") or group.get("differentiable") or group.get("capturable"):
                raise ValueError("shared optimizers support neither maximize, differentiable nor capturable")
            for p in group["params"]:
                self._init_state(group, p)
        self.share_memory()

    def _init_state(self, group, p, missing_only=False):  # pragma: no cover - implemented by each optimizer
        raise NotImplementedError

    def _zeros(self, p, key, missing_only, like=None):
        """State tensor ``key`` of ``p``: zeros (or a copy of ``like``), unless ``missing_only`` and it exists."""
        state = self.state[p]
        if not (missing_only and key in state):
            state[key] = torch.zeros_like(p, memory_format=torch.preserve_format) if like is None else like.clone()

    def _scratch(self, p, count: int) -> list[torch.Tensor]:
        """``count`` buffers shaped like ``p`` for a step's temporaries, made at this process's first step and kept
        out of ``state`` (never shared, saved nor pickled to a child). A fresh tensor for each temporary cost more
        than the arithmetic (page faults): with the Nature network's 1.7M weights a step took 14.7 ms, not 3.8."""
        buffers = self.__dict__.setdefault("_buffers", {})
        if p not in buffers:
            buffers[p] = [torch.empty_like(p, memory_format=torch.preserve_format) for _ in range(count)]
        return buffers[p]

    def share_memory(self) -> Self:
        """Move every state tensor into shared memory (a no-op for tensors already there)."""
        for state in self.state.values():
            for value in state.values():
                if torch.is_tensor(value):
                    value.share_memory_()
        return self

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # torch's load_state_dict replaces the state tensors with fresh (process-private) copies: share them again.
        super().load_state_dict(state_dict)
        self.share_memory()

    def set_hyperparameters(self, **values: Any) -> None:
        """Apply values given now (``lr``, ``eps``, ``amsgrad``, ...) to every parameter group. Needed after
        ``load_state_dict``, which keeps the saved groups' values: a resumed run's new ``--lr`` would be ignored."""
        for group in self.param_groups:
            for key, value in values.items():
                if key in group:
                    group[key] = value
            for p in group["params"]:
                self._init_state(group, p, missing_only=True)  # e.g. amsgrad's maximum, switched on now
        self.share_memory()

    @property
    def global_step(self) -> int:
        """Number of optimizer steps taken by all processes together (read off the first parameter)."""
        first = self.param_groups[0]["params"][0]
        return int(self.state[first]["step"].item())


class SharedAdam(_SharedStateMixin, torch.optim.Adam):
    """``torch.optim.Adam`` (``amsgrad=True`` too) with its state in shared memory and each element's step bounded
    by what sequential Adam can take (module docstring)."""

    def __init__(self, params: ParamsT, lr: float = 1e-4, eps: float = DEFAULT_EPS["Adam"], **kwargs: Any):
        super().__init__(params, lr=lr, eps=eps, **kwargs)

    def _init_state(self, group, p, missing_only=False):
        state = self.state[p]
        # torch keeps 'step' as a CPU float32 scalar unless capturable/fused; we match that (and its state_dict).
        if not (missing_only and "step" in state):
            state["step"] = torch.zeros((), dtype=torch.float32)
        self._zeros(p, "exp_avg", missing_only)
        self._zeros(p, "exp_avg_sq", missing_only)
        if group["amsgrad"]:  # switched on at a resume: the maximum so far is at least the current estimate
            self._zeros(p, "max_exp_avg_sq", missing_only, like=state["exp_avg_sq"] if missing_only else None)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None if closure is None else closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad if weight_decay == 0 else p.grad.add(p, alpha=weight_decay)
                state = self.state[p]
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                t = state["step"].item()
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                bias_correction1 = 1 - beta1**t
                second = exp_avg_sq
                if group["amsgrad"]:
                    torch.maximum(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"])
                    second = state["max_exp_avg_sq"]
                denom, *scratch = self._scratch(p, 4)
                torch.sqrt(second, out=denom).div_((1 - beta2**t) ** 0.5).add_(eps)
                # read m once, clipped so that m_hat / denom stays within sequential Adam's bound
                first = _clip_into(exp_avg, denom, adam_step_bound(beta1, beta2, t) * bias_correction1, scratch)
                p.addcdiv_(first, denom, value=-lr / bias_correction1)
        return loss


class SharedRMSprop(_SharedStateMixin, torch.optim.RMSprop):
    """``torch.optim.RMSprop`` (momentum and centered too) with its state in shared memory and, unless centered,
    each element's ``g / (sqrt(v) + eps)`` bounded by ``1 / sqrt(1 - alpha)`` (module docstring)."""

    def __init__(self, params: ParamsT, lr: float = 1e-4, eps: float = DEFAULT_EPS["RMSprop"], **kwargs: Any):
        super().__init__(params, lr=lr, eps=eps, **kwargs)

    def _init_state(self, group, p, missing_only=False):
        state = self.state[p]
        if not (missing_only and "step" in state):
            state["step"] = torch.zeros((), dtype=torch.float32)
        self._zeros(p, "square_avg", missing_only)
        if group["momentum"] > 0:
            self._zeros(p, "momentum_buffer", missing_only)
        if group["centered"]:
            self._zeros(p, "grad_avg", missing_only)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None if closure is None else closure()
        for group in self.param_groups:
            lr, alpha, eps, momentum = group["lr"], group["alpha"], group["eps"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad if group["weight_decay"] == 0 else p.grad.add(p, alpha=group["weight_decay"])
                state = self.state[p]
                state["step"] += 1
                square_avg = state["square_avg"]
                square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                avg, *scratch = self._scratch(p, 4)
                if group["centered"]:
                    grad_avg = state["grad_avg"]
                    grad_avg.lerp_(grad, 1 - alpha)
                    torch.addcmul(square_avg, grad_avg, grad_avg, value=-1, out=avg).sqrt_().add_(eps)
                else:
                    torch.sqrt(square_avg, out=avg).add_(eps)
                    grad = _clip_into(grad, avg, 1.0 / math.sqrt(1.0 - alpha), scratch) if alpha < 1 else grad
                if momentum > 0:
                    buf = state["momentum_buffer"]
                    buf.mul_(momentum).addcdiv_(grad, avg)
                    p.add_(buf, alpha=-lr)
                else:
                    p.addcdiv_(grad, avg, value=-lr)
        return loss


OPTIMIZERS = {"Adam": (SharedAdam, torch.optim.Adam), "RMSprop": (SharedRMSprop, torch.optim.RMSprop)}


def make_optimizer(name: str, params: ParamsT, shared: bool, lr: float, amsgrad: bool = False, eps: float | None = None,
                   alpha: float = 0.99, momentum: float = 0.0) -> torch.optim.Optimizer:
    """Build the optimizer ``--optimizer name`` names, shared (hogwild state, bounded steps) or process-private
    (``--no-shared-optimizer``: torch's own). ``eps=None``: rl_a3c_pytorch's default for that optimizer.
    ``amsgrad`` is Adam's, ``alpha`` and ``momentum`` RMSprop's."""
    shared_cls, plain_cls = OPTIMIZERS[name]
    kwargs = {"lr": lr, "eps": DEFAULT_EPS[name] if eps is None else eps}
    kwargs.update({"amsgrad": amsgrad} if name == "Adam" else {"alpha": alpha, "momentum": momentum})
    return (shared_cls if shared else plain_cls)(params, **kwargs)


def optimizer_for(args: argparse.Namespace, params: ParamsT, shared: bool) -> torch.optim.Optimizer:
    """The optimizer the flags name (``--optimizer --lr --eps --amsgrad --alpha --momentum``), over the parameters
    that learn (``requires_grad``: not the observation statistics of ``model.ObsNorm``, which one process sets)."""
    return make_optimizer(args.optimizer, [p for p in params if p.requires_grad], shared, args.lr, args.amsgrad, args.eps, args.alpha,
                          args.momentum)


def hyperparameters(args: argparse.Namespace) -> dict[str, Any]:
    """The flags' values for ``set_hyperparameters`` after a resume (each optimizer applies the keys it has)."""
    return {"lr": args.lr, "eps": args.eps, "amsgrad": args.amsgrad, "alpha": args.alpha, "momentum": args.momentum}


def push_gradients(replica: "Replica", optimizer: torch.optim.Optimizer) -> None:
    """The replica's gradients into this process's ``.grad`` buffers of the shared parameters (one flat copy,
    ``model.Replica``), then one optimizer step on the shared weights."""
    replica.push_grads()
    optimizer.step()


class Update:
    """One update of the shared model from a loss on the replica, for A3G's workers and IMPALA's learner alike:
    backward, the gradient norm (clipped to ``--max-grad-norm`` when set), then ``push_gradients``, unless the loss
    or the gradient is not finite: such an update never reaches the shared model; it is skipped and counted in
    ``state.nonfinite`` (slot ``slot``), and ``--max-nonfinite`` of them in a row mark the run as diverged.
    ``update(loss, lr)`` returns ``(grad_norm, applied)``, stepping with learning rate ``lr`` (``--lr-decay``'s;
    None: the optimizer's own); ``clock`` (a ``core.timing.PhaseClock``) gets the backward's seconds as ``learn``
    and the push and step's as ``optimize``."""

    def __init__(self, replica: "Replica", optimizer: torch.optim.Optimizer, args: argparse.Namespace, state: Any,
                 slot: int, clock: PhaseClock | None = None):
        self.replica, self.optimizer, self.state, self.slot = replica, optimizer, state, slot
        self.clock = clock or PhaseClock()
        self.max_grad_norm, self.max_nonfinite = args.max_grad_norm, args.max_nonfinite
        self.params = list(replica.model.parameters())
        self.skipped_in_a_row = 0

    def __call__(self, loss: torch.Tensor, lr: float | None = None) -> tuple[torch.Tensor, bool]:
        with self.clock.phase("learn"):
            self.replica.model.zero_grad(set_to_none=False)
            loss.backward()
            grad_norm = (torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm) if self.max_grad_norm > 0
                         else torch.nn.utils.get_total_norm([p.grad for p in self.params]))
            finite = bool(torch.isfinite(grad_norm) and torch.isfinite(loss))  # on a GPU: waits for the backward
        if finite:
            with self.clock.phase("optimize"):
                if lr is not None:  # this process's optimizer object: its param_groups are its own
                    for group in self.optimizer.param_groups:
                        group["lr"] = lr
                push_gradients(self.replica, self.optimizer)
            self.skipped_in_a_row = 0
            return grad_norm, True
        self.skipped_in_a_row += 1
        self.state.nonfinite.add(self.slot, 1)
        if self.skipped_in_a_row >= self.max_nonfinite:
            self.state.diverged.value = 1
        return grad_norm, False
