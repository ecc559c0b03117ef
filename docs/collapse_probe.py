"""Probe of the early-collapse mechanism (docs/results/reliability.md, "Why a run could collapse"): two hogwild worker processes
train a fresh shared Nature network on Pong (8 envs each, bf16, lr 3e-4) for the first updates, and report per run
the lowest policy entropy, the largest value loss and gradient norm, and the largest change of any shared weight
in one optimizer step, in learning rates ("step/lr"; a sequential Adam step is at most ~1-7).

    python docs/collapse_probe.py --seeds 1 2 3 4 5 6 7 8 --eps 1e-8 --torch-step   # torch's Adam step (before)
    python docs/collapse_probe.py --seeds 1 2 3 4 5 6 7 8 --eps 1e-8                # a3g's bounded step (after)

Asynchronous: the same seed does not repeat; run several. The frames are normalised as when it was measured
(``--frame-norm running``: rl_a3c_pytorch's running normalisation, float32 frames).
"""

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from core.cli import OneLineParser

META = {"model": "nature", "obs_shape": [4, 84, 84], "num_actions": 6, "hidden_size": 0}


def worker(rank, seed, updates, lr, torch_step, shared, optimizer, queue):
    from envs.environment import EnvSettings, env_conf_for, load_env_config
    from envs.rollout_envs import RolloutEnvs
    from model import build_model, fast_layout
    from train import a3c_loss

    torch.set_num_threads(1)
    torch.manual_seed(seed * 100 + rank)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    crop = env_conf_for("PongNoFrameskip-v4", load_env_config(os.path.join(here, "envs", "atari.json")))
    envs = RolloutEnvs(EnvSettings("PongNoFrameskip-v4", crop=crop, frame_size=84, frame_stack=4,
                                   frame_norm="running"), 8,
                       seed=seed * 1000 + rank * 8, clip_rewards=True)
    model = fast_layout(build_model(META), META)
    shared_params, local_params = list(shared.parameters()), list(model.parameters())
    for p in shared_params:
        p.grad = torch.zeros_like(p)
    if torch_step:  # torch's own Adam step on the same shared state: what a3g ran before the bound
        optimizer.step = lambda: torch.optim.Adam.step(optimizer)
    T, B = 20, 8
    obs = torch.zeros((T + 1, B, 4, 84, 84))
    obs_np = obs.numpy()
    obs_np[-1] = envs.first_obs
    args = argparse.Namespace(tau=1.0, value_coef=0.5, entropy_coef=0.01, normalize_advantages=False,
                              bound_coef=0.0)
    for u in range(updates):
        model.load_state_dict(shared.state_dict())
        obs_np[0] = obs_np[-1]
        values, log_probs, entropies = [], [], []
        rewards, dones = torch.zeros(T, B), torch.zeros(T, B)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for t in range(T):
                value, logits, _ = model(obs[t], (None, None))
                log_prob = F.log_softmax(logits.float(), -1)
                action = log_prob.exp().multinomial(1)
                values.append(value.float())
                log_probs.append(log_prob.gather(1, action).squeeze(1))
                entropies.append(-(log_prob * log_prob.exp()).sum(-1))
                r, d, _ = envs.step(action.squeeze(1).numpy(), obs_np[t + 1])
                rewards[t], dones[t] = torch.from_numpy(r), torch.from_numpy(d)
            with torch.no_grad():
                bootstrap = model(obs[-1], (None, None))[0].float()
        loss, _, value_loss, entropy = a3c_loss(torch.stack(log_probs), torch.stack(entropies), torch.stack(values),
                                                rewards, 0.99 * (1 - dones), bootstrap, args)
        model.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.get_total_norm([p.grad for p in local_params])
        before = [p.detach().clone() for p in shared_params]
        for shared_param, local_param in zip(shared_params, local_params):  # hogwild: no lock
            shared_param.grad.copy_(local_param.grad)
        optimizer.step()
        jump = max((p.detach() - b).abs().max().item() for p, b in zip(shared_params, before)) / lr
        queue.put((entropy.item() / T, value_loss.item() / T, grad_norm.item(), jump))


def main():
    p = OneLineParser(prog="python docs/collapse_probe.py", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    p.add_argument("--updates", type=int, default=30, help="updates per worker")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--torch-step", action="store_true", help="torch.optim.Adam's step instead of a3g's bounded one")
    args = p.parse_args()
    from model import build_model
    from shared_optim import SharedAdam

    ctx = mp.get_context("spawn")
    for seed in args.seeds:
        torch.manual_seed(seed)
        shared = build_model(META)
        shared.share_memory()
        optimizer = SharedAdam(shared.parameters(), lr=args.lr, eps=args.eps)
        queue = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, seed, args.updates, args.lr, args.torch_step, shared, optimizer,
                                                  queue)) for r in range(2)]
        for proc in procs:
            proc.start()
        rows = np.array([queue.get(timeout=600) for _ in range(2 * args.updates)])
        for proc in procs:
            proc.join()
        print(f"seed {seed}: min entropy {rows[:, 0].min():.3f} (uniform 1.792), max value loss {rows[:, 1].max():.3g}, "
              f"max grad norm {rows[:, 2].max():.3g}, max step/lr {rows[:, 3].max():.3g}", flush=True)


if __name__ == "__main__":
    main()
