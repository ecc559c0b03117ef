"""The network's cost of one A3G rollout, per sample, both ways of building the loss (``--train-forward``):
``stepped`` (forward with autograd at every step, then backward), ``batched`` (acting forwards without autograd,
then ``model.unroll`` over the whole rollout and backward). One CPU thread, best of a few repetitions.

    python docs/train_forward_probe.py
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from model import build_model, fast_layout, model_meta  # noqa: E402


def probe(name, shape, batch, steps=20, reps=4):
    torch.manual_seed(0)
    meta = model_meta(name, list(shape), 6, 512 if name != "mlplstm" else 64)
    model = fast_layout(build_model(meta), meta, True)
    obs, dones = torch.randn(steps, batch, *shape), torch.zeros(steps, batch)

    def act():
        state = model.initial_state(batch)
        with torch.no_grad():
            for t in range(steps):
                _, _, state = model(obs[t], state)

    def stepped():
        state, losses = model.initial_state(batch), []
        for t in range(steps):
            value, logits, state = model(obs[t], state)
            losses.append(value.pow(2).mean() - logits.log_softmax(-1).mean())
        model.zero_grad()
        torch.stack(losses).sum().backward()

    def batched():
        act()
        value, logits, _ = model.unroll(obs, model.initial_state(batch), dones)
        model.zero_grad()
        (value.pow(2).mean() - logits.log_softmax(-1).mean()).backward()

    best = {}
    for fn in (stepped, batched, stepped, batched):  # warm-up
        fn()
    for _ in range(reps):
        for fn in (stepped, batched):
            start = time.perf_counter()
            fn()
            seconds = (time.perf_counter() - start) / (steps * batch)
            best[fn.__name__] = min(best.get(fn.__name__, float("inf")), seconds)
    print(f"{name}:{batch}  stepped {best['stepped'] * 1e3:.2f} ms  batched {best['batched'] * 1e3:.2f} ms per sample"
          f"  (stepped / batched = {best['stepped'] / best['batched']:.2f})", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    probe("nature", (4, 84, 84), 8)
    probe("a3clstm", (1, 80, 80), 1)
    probe("a3clstm", (1, 80, 80), 8)
    probe("mlplstm", (4,), 4)
