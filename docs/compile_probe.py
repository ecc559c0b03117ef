"""Does ``torch.compile`` make the workers' network faster on a CPU? (docs/log/speed.md, "torch.compile on a CPU".) The Nature
network on uint8 Pong frames, batch 8, one thread, as ``python -m tools.bench`` measures a network's cost
(``tools.bench.network_cost``: acting forward per step, and a 20-step training rollout with backward and Adam per
sample), eagerly and through ``torch.compile``, in float32 and bf16 autocast; with the seconds the compiled variant
spends compiling before its first step (start-up a run would pay in every worker).

    python docs/compile_probe.py [--model nature] [--envs 8]
"""

import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from core.cli import OneLineParser  # noqa: E402
from model import FRAME_FORMAT, model_meta  # noqa: E402
from tools.bench import network_cost  # noqa: E402


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="nature", choices=sorted(FRAME_FORMAT))
    parser.add_argument("--envs", type=int, default=8)
    args = parser.parse_args()
    size, stack = FRAME_FORMAT[args.model]
    meta = model_meta(args.model, [stack, size, size], 6, 512 if args.model == "a3clstm" else 0, uint8=True)
    print(f"{args.model}, batch {args.envs}, one thread, torch {torch.__version__}")
    print("| precision | network | inference ms/step | training ms/sample | seconds before the first measured step |")
    print("|---|---|---|---|---|")
    for bf16 in (False, True):
        for compiled in (False, True):
            torch._dynamo.reset()
            started = time.perf_counter()
            infer, train = network_cost(meta, args.envs, bf16, True, compiled=compiled)
            total = time.perf_counter() - started
            # the measured part: 20 inference steps and 3 rollouts of 20 steps, at the costs just measured
            measured = 20 * args.envs * infer + 3 * 20 * args.envs * train
            print(f"| {'bf16' if bf16 else 'float32'} | {'torch.compile' if compiled else 'eager'} | "
                  f"{infer * 1e3:.3f} | {train * 1e3:.3f} | {total - measured:.1f} |", flush=True)


if __name__ == "__main__":
    main()
