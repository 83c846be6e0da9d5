"""The graph trainer's settings (`TrainConfig`), in a module of their own: the trainer, its worker processes, the
update and the imitation warm start all read them."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Sequence

from .. import paths


@dataclass
class TrainConfig:
    """Hyperparameters in one place; X-RLflow's PPO settings are the defaults."""

    models: tuple[str, ...] = ("bert", "resnet18")
    size: str = "tiny"
    target: str = "llvm"
    iterations: int = 30
    episodes_per_iteration: int = 4
    horizon: int = 10
    cap: int = 64  # candidates enumerated per step
    # Also offer "apply every match of this rule" per family (rules.AllMatches), as RLRewritePass does.
    all_matches: bool = True
    shortlist: int = 16  # of those, the cheapest by the proxy are shown to the agent, as RLRewritePass does (0: all)
    database: str = ""  # MetaSchedule work dir: price kernels with the roofline fitted to its tuned kernels
    # Or a benchmark JSON whose recorded "proxy" prices kernels (benchmarks/graph_rl.py --proxy-from): training
    # then sees the same costs as the ablation it is compared with.
    proxy_from: str = ""
    # A tuning database folder whose records price every kernel it has tuned (`record_cost`; the roofline above
    # prices the rest and computes the node features): the reward follows the kernels the graph will be built with.
    # Searches steered by it found slower graphs (kernels matched by shapes: `record_cost`'s docstring).
    price_records: str = ""
    gamma: float = 0.99
    gae_lambda: float = 0.95
    learning_rate: float = 5e-4
    clip: float = 0.2
    epochs: int = 4
    minibatch: int = 16
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_grad_norm: float = 0.5
    target_kl: float = 0.0  # > 0: stop an update's epochs once one moves the policy by more (CleanRL's)
    kl_stop: str = "epoch"  # check target_kl after each epoch ("epoch") or before each minibatch's step ("step")
    # "delta": each step's cost change (X-RLflow's reward); "best": the change of the cheapest graph seen, the one
    # the pass keeps, so an uphill step that leads lower is not penalised (env.REWARDS)
    reward: str = "delta"
    # > 0: each model's rewards are scaled so that its episodes' running mean return is this. Models whose gains
    # differ by several times then weigh alike in the update, and the critic predicts returns of one scale.
    per_model_return: float = 0.0
    # > 0: learn for the pass's objective, the best of a few episodes (risk_seeking): per model, only the episodes
    # above the (1 - this) quantile of the iteration's speedups are learned from. 0: every episode, GAE advantages.
    risk_epsilon: float = 0.0
    # A policy.pt to start from instead of random weights (fine-tuning; no imitation then). Its network sizes
    # must be hidden / gat_layers / heads; node features come from this run's pricing, as for a new policy.
    init_policy: str = ""
    imitation_episodes: int = 8  # greedy demonstrations cloned before PPO starts (0: PPO from scratch)
    imitation_epochs: int = 20
    hidden: int = 64
    gat_layers: int = 3
    heads: int = 4
    seed: int = 0
    workers: int = 1
    torch_threads: int = 1
    work_dir: str = field(default_factory=lambda: str(paths.work_dir() / "graph_train"))
    snapshot_every: int = 0  # also keep policy_iterNNNN.pt every this many iterations, for a learning curve (0: no)
    # Python modules imported first, in every worker too, so models they add with `models.register` exist there.
    model_modules: tuple[str, ...] = ()


def import_model_modules(modules: Sequence[str]) -> None:
    """Import the modules that register the user's models; name the one that cannot be imported."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ImportError(f"--model-modules: cannot import {name!r} ({err}); it must be importable from "
                              "the current directory or PYTHONPATH") from err
