"""# Tutorial (d): training the graph policy on your own models

The policy shipped with tvm-rl was trained on four zoo models. If your models look different (other blocks,
other shapes), train one on them: register each as a zoo model (a function `size -> (nn.Module, example
inputs)`), then PPO-train with `tvm_rl.graph.train`, and hand the checkpoint to `RLRewritePass(policy=...)`.
The command-line equivalent is `tvm-rl train --models NAME ... --work-dir DIR`; for models of your own, put the
`models.register` calls in a module and add `--model-modules MODULE` (imported in every worker of `--workers N`).

Training runs the rewrite environment with the roofline proxy as its cost, so it needs no kernel builds: an
iteration on small models takes seconds to a minute on 2 cores. The run writes `policy.pt`, a resumable
`checkpoint.pt` (rerun and it continues), `train.csv` and `train.png` under its work dir.

- **Quick** (`--quick`, ~1 min, run in CI): 2 iterations of 2 short episodes: it shows the mechanics, it does
  not learn much.
- **Full** (default, ~6 min): 10 iterations of 4 episodes, 10 steps each, after a greedy warm start.
"""
import argparse
import csv
from pathlib import Path

import torch
from torch import nn

from tvm_rl import measure, models
from tvm_rl.graph import RLRewritePass, cost, roofline
from tvm_rl.graph.train import TrainConfig, train

ap = argparse.ArgumentParser(description="Tutorial (d): training the graph policy on your own models")
ap.add_argument("--quick", action="store_true", help="2 iterations of 2 short episodes (~1 min)")
ap.add_argument("--out", default="logs/tutorial_train", help="the training work dir")
args = ap.parse_args()


# 1. Your model, registered under a name (sizes "tiny" and "full", as the zoo's).
@models.register("my_block", "transformer", "a user's pre-norm attention + MLP block")
def my_block(size: str):
    hidden, seq = (32, 8) if size == "tiny" else (256, 64)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
            self.out = nn.Linear(hidden, hidden)
            self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

        def forward(self, x):
            h = self.norm1(x)
            scores = self.q(h) @ self.k(h).transpose(-1, -2) * hidden ** -0.5
            x = x + self.out(torch.softmax(scores, dim=-1) @ self.v(h))
            return x + self.mlp(self.norm2(x))

    return Block().eval(), (torch.randn(1, seq, hidden),)


# 2. PPO on your model and a zoo CNN (X-RLflow's hyperparameters are TrainConfig's defaults).
config = TrainConfig(models=("my_block", "squeezenet1_1"), size="tiny", work_dir=args.out, seed=0,
                     iterations=2 if args.quick else 10, episodes_per_iteration=2 if args.quick else 4,
                     horizon=4 if args.quick else 10, imitation_episodes=0 if args.quick else 4)
policy = train(config, progress=False)
with open(Path(args.out) / "train.csv") as f:
    for row in csv.DictReader(f):
        print(f"iteration {row['iteration']}: mean return {float(row['mean_return']):+.2f}, "
              f"mean speedup {float(row['mean_speedup']):.3f}x (roofline proxy)")

# 3. The trained policy in the pass, against the shipped one, on your model (proxy cost: no builds needed;
#    in a compile script keep confirm=True, the default, to measure before trusting it).
target = measure.parse_target("llvm")
proxy = cost.roofline_cost(roofline.default_hardware(target))
mod = models.load("my_block", "tiny").mod
for label, chosen in (("shipped policy", None), ("your policy", Path(args.out) / "policy.pt")):
    rl = RLRewritePass(target, chosen, max_steps=10, episodes=2, time_budget_s=30, confirm=False, cost=proxy)
    rl(mod)
    print(f"{label:<15} on my_block: {rl.last_report.reason}")
print(f"figure: {Path(args.out) / 'train.png'}")
