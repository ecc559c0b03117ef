"""Optimizers whose state lives in shared memory, for hogwild training across processes.

``SharedAdam`` and ``SharedRMSprop`` are ``torch.optim.Adam`` and ``torch.optim.RMSprop``: same keyword arguments,
same update rule (torch's own ``step`` runs unchanged). The only difference is *when and where* the state is made:
torch creates it lazily at the first step, in the memory of whichever process steps first; we create it in the
constructor and move every state tensor into shared memory, so that all worker processes (started with ``spawn``
after the optimizer is built) update one set of moment estimates.

The step counter is a shared tensor too, incremented in place by every worker, so bias correction sees the global
number of updates, not the worker's own. Like the parameters, the state is updated without locks (hogwild):
concurrent updates may interleave, which A3C tolerates by design.
"""

import torch


class _SharedStateMixin:
    """Put before a torch optimizer class: its state is made at construction and placed in shared memory."""

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs)
        self._init_shared_state()

    def _init_state(self, group, p):  # pragma: no cover - implemented by each optimizer
        raise NotImplementedError

    def _init_shared_state(self):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if len(state) == 0:
                    self._init_state(group, p)
        self.share_memory()

    def share_memory(self):
        """Move every state tensor into shared memory (a no-op for tensors already there)."""
        for state in self.state.values():
            for value in state.values():
                if torch.is_tensor(value):
                    value.share_memory_()
        return self

    def load_state_dict(self, state_dict):
        # torch's load_state_dict replaces the state tensors with fresh (process-private) copies: share them again.
        super().load_state_dict(state_dict)
        self.share_memory()

    @property
    def global_step(self):
        """Number of optimizer steps taken by all processes together (read off the first parameter)."""
        first = self.param_groups[0]["params"][0]
        return int(self.state[first]["step"].item())


class SharedAdam(_SharedStateMixin, torch.optim.Adam):
    """``torch.optim.Adam`` (``amsgrad=True`` too) with its state in shared memory from construction on."""

    def _init_state(self, group, p):
        state = self.state[p]
        # torch keeps 'step' as a CPU float32 scalar unless capturable/fused; we match that so step() runs unchanged.
        state["step"] = torch.zeros((), dtype=torch.float32)
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)


class SharedRMSprop(_SharedStateMixin, torch.optim.RMSprop):
    """``torch.optim.RMSprop`` (momentum and centered too) with its state in shared memory from construction on."""

    def _init_state(self, group, p):
        state = self.state[p]
        state["step"] = torch.zeros((), dtype=torch.float32)
        state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if group["momentum"] > 0:
            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if group["centered"]:
            state["grad_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)


OPTIMIZERS = {"Adam": (SharedAdam, torch.optim.Adam), "RMSprop": (SharedRMSprop, torch.optim.RMSprop)}


def make_optimizer(name, params, shared, lr, amsgrad=False):
    """Build the optimizer ``--optimizer name`` names, shared (hogwild state) or process-private."""
    shared_cls, plain_cls = OPTIMIZERS[name]
    kwargs = {"lr": lr}
    if name == "Adam":
        kwargs["amsgrad"] = amsgrad
    return (shared_cls if shared else plain_cls)(params, **kwargs)
