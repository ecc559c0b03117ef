"""What one step of the shared optimizer costs (docs/log/speed.md, "The shared optimizer's step"): ``SharedAdam`` on a
network's weights in shared memory, flattened as a run holds them, one thread, against ``torch.optim.Adam`` on the
same weights (its single-tensor loop, which makes fresh temporaries as our step once did, and its foreach loop).
Each is timed over ``--steps`` steps, ``--repeats`` times in turn; the median is printed.

    python docs/optimizer_step_probe.py [--model nature] [--steps 200] [--repeats 5]
"""

import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from core.cli import OneLineParser  # noqa: E402
from model import FRAME_FORMAT, build_model, flatten_parameters, model_meta  # noqa: E402
from shared_optim import SharedAdam  # noqa: E402


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="nature", choices=sorted(FRAME_FORMAT))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    size, stack = FRAME_FORMAT[args.model]
    meta = model_meta(args.model, [stack, size, size], 6, 512 if args.model == "a3clstm" else 0, uint8=True)
    makers = {"SharedAdam": lambda ps: SharedAdam(ps, lr=3e-4, eps=1e-3),
              "torch.optim.Adam, single-tensor": lambda ps: torch.optim.Adam(ps, lr=3e-4, eps=1e-3, foreach=False),
              "torch.optim.Adam, foreach": lambda ps: torch.optim.Adam(ps, lr=3e-4, eps=1e-3, foreach=True)}
    optimizers = {}
    for name, make in makers.items():
        model = build_model(meta)
        flatten_parameters(model, shared=True)
        params = list(model.parameters())
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        optimizers[name] = make(params)
        for _ in range(10):  # torch makes its state at the first step
            optimizers[name].step()
    print(f"{args.model}: {sum(p.numel() for p in params):,} weights in {len(params)} tensors; one thread")
    times = {name: [] for name in optimizers}
    for _ in range(args.repeats):
        for name, optimizer in optimizers.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                optimizer.step()
            times[name].append((time.perf_counter() - start) / args.steps * 1e3)
    for name, ms in times.items():
        print(f"{name}: {statistics.median(ms):.2f} ms a step (median of {args.repeats}; "
              f"{', '.join(f'{x:.2f}' for x in ms)})")


if __name__ == "__main__":
    main()
