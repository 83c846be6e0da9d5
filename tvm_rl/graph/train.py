"""PPO training of the graph rewrite policy, readable top to bottom (CleanRL's style; the update is `train_update`).

    python -m tvm_rl.graph.train --models bert resnet18 --iterations 30

Each iteration plays `episodes_per_iteration` episodes (models in turn; in `workers` processes when > 1),
then runs `epochs` passes of clipped PPO (`tvm_rl.rl.ppo`) over minibatches of decisions. Everything lands in
`work_dir`: `checkpoint.pt` (policy + optimiser + history, rewritten atomically each iteration: a killed run
resumes from it), `policy.pt` (the policy alone, what `RLRewritePass(policy=...)` loads), `train.csv` (one row
per iteration: return, speedup, PPO's losses, entropy, approx_kl, clipfrac, explained_variance) and
`train.png` (the curve). Both checkpoints record the roofline the node features came from
(`observation.FeatureSpec`): the pass shows the policy the same features.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..errors import CheckpointError, UnknownModelError, exit_code
from ..interrupt import interrupt_pending
from ..rl.ppo import KL_STOPS
from .agent import GraphActorCritic, PolicyConfig
from .imitation import demonstrations, imitate
from .observation import FeatureSpec
from .train_config import TrainConfig, import_model_modules
from .train_files import load_checkpoint, plain_rows, plot_training, write_csv
from .train_play import feature_spec, make_env, play
from .train_pool import open_pool, play_in_pool, stop_workers
from .train_update import ppo_update, scale_rewards


def initial_weights(policy: GraphActorCritic, config: TrainConfig) -> None:
    """Load `config.init_policy`'s weights into `policy`; ValueError naming the flag when its sizes differ."""
    start = GraphActorCritic.load(config.init_policy)
    want = PolicyConfig(config.hidden, config.gat_layers, config.heads)
    if start.config != want:
        raise ValueError(f"--init-policy {config.init_policy} has network sizes {asdict(start.config)}; this run's "
                         f"are {asdict(want)}: pass the same --hidden / --gat-layers / --heads")
    policy.load_state_dict(start.state_dict())


def train(config: TrainConfig, progress: bool = True) -> GraphActorCritic:
    """Train (or resume training) a policy as `config` says; returns it and leaves the files in work_dir."""
    torch.set_num_threads(config.torch_threads)
    import_model_modules(config.model_modules)
    from .. import models
    from .env import REWARDS

    if config.reward not in REWARDS:
        raise ValueError(f"--reward must be one of {', '.join(REWARDS)}, got {config.reward!r}")
    if config.kl_stop not in KL_STOPS:
        raise ValueError(f"--kl-stop must be {' or '.join(map(repr, KL_STOPS))}, got {config.kl_stop!r}")
    if not 0.0 <= config.risk_epsilon <= 1.0:
        raise ValueError(f"--risk-epsilon must be in [0, 1] (0: learn from every episode), got {config.risk_epsilon}")
    unknown = [m for m in config.models if m not in models.names()]
    if unknown:
        raise UnknownModelError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(models.names())} "
                                "(models of your own: register them in a module and pass --model-modules)")
    work = Path(config.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    policy = GraphActorCritic(PolicyConfig(config.hidden, config.gat_layers, config.heads))
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, eps=1e-5)
    start, history, return_stats = 0, [], {}
    ckpt_path = work / "checkpoint.pt"
    if ckpt_path.exists():  # resume where a killed run stopped
        ckpt = load_checkpoint(ckpt_path)
        saved = asdict(TrainConfig()) | ckpt["config"]  # settings added since that run take their defaults
        # How long to train and on how many processes may change; what is learned may not (an episode's seed,
        # not its process, decides what it plays).
        if saved != asdict(config) | {k: saved[k] for k in ("iterations", "workers", "torch_threads")}:
            raise ValueError(f"{ckpt_path} was written by a run with other settings; use another --work-dir")
        policy.load_state_dict(ckpt["policy"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start, history = ckpt["iteration"], ckpt["history"]
        return_stats = {m: list(v) for m, v in ckpt.get("return_stats", {}).items()}
        # The run's own features, not the database's fit today: a database tuned further since would change
        # the features under a policy half trained on the old ones.
        if "feature_spec" in ckpt:
            try:
                policy.features = FeatureSpec.from_dict(ckpt["feature_spec"])
            except (KeyError, TypeError, AttributeError) as err:
                raise CheckpointError(f"training checkpoint {ckpt_path} has an unreadable feature record "
                                      f"({type(err).__name__}: {err}); use another --work-dir") from None
        if progress:
            print(f"resuming from {ckpt_path} at iteration {start}")
    elif config.init_policy:  # only a fresh run starts from it: a resumed one has its own weights
        initial_weights(policy, config)
    rng = np.random.default_rng([config.seed, start])
    if policy.features is None:
        policy.features = feature_spec(config)
    features = policy.features
    envs = {} if config.workers > 1 else {m: make_env(m, config, features) for m in config.models}
    if start == 0 and config.imitation_episodes > 0 and not config.init_policy:
        t0 = time.perf_counter()
        demo_envs = envs or {m: make_env(m, config, features) for m in config.models}
        pairs = [p for e in range(config.imitation_episodes)
                 for p in demonstrations(demo_envs[config.models[e % len(config.models)]], rng)]
        loss = imitate(policy, pairs, config, rng)
        if progress:
            print(f"imitation: {len(pairs)} greedy decisions from {config.imitation_episodes} episodes, "
                  f"cross-entropy {loss:.3f} [{time.perf_counter() - t0:.0f} s]", flush=True)
    pool = open_pool(config.workers) if config.workers > 1 else None
    try:
        for it in range(start, config.iterations):
            t0 = time.perf_counter()
            jobs = [(config.models[(it * config.episodes_per_iteration + e) % len(config.models)],
                     int(rng.integers(2 ** 31))) for e in range(config.episodes_per_iteration)]
            policy.eval()
            if pool is not None:
                episodes = play_in_pool(pool, jobs, config, policy.state_dict(), features)
            else:
                episodes = [play(envs[m], policy, np.random.default_rng(s), m) for m, s in jobs]
            if interrupt_pending():  # an interrupt swallowed mid-episode may have cut it short: do not learn from it
                raise KeyboardInterrupt
            row = {"iteration": it + 1, "episodes": len(episodes),
                   "mean_return": float(np.mean([e.ret for e in episodes])),
                   "mean_speedup": float(np.mean([e.speedup for e in episodes])),
                   "best_speedup": float(max(e.speedup for e in episodes))}
            if config.per_model_return > 0:
                scale_rewards(episodes, return_stats, config.per_model_return)
            policy.train()
            losses = ppo_update(policy, optimizer, episodes, config, rng)
            row |= {**losses, "seconds": time.perf_counter() - t0}
            history.append(row)
            meta = {"models": list(config.models), "size": config.size, "iterations": it + 1}
            policy.save(work / "policy.pt", **meta)
            if config.snapshot_every > 0 and (it + 1) % config.snapshot_every == 0:
                policy.save(work / f"policy_iter{it + 1:04d}.pt", **meta)
            tmp = ckpt_path.with_suffix(".tmp")
            torch.save({"config": asdict(config), "feature_spec": features.as_dict(),
                        "policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
                        "iteration": it + 1, "history": plain_rows(history), "return_stats": return_stats},
                       tmp)
            tmp.replace(ckpt_path)
            write_csv(work / "train.csv", history)
            plot_training(history, work / "train.png")  # each iteration: a stopped run has its curve too
            if progress:
                print(f"iter {it + 1}/{config.iterations}: return {row['mean_return']:+.2f}, speedup "
                      f"{row['mean_speedup']:.3f}x (best {row['best_speedup']:.3f}x), policy loss "
                      f"{row['policy_loss']:+.3f}, value loss {row['value_loss']:.3f}, entropy {row['entropy']:.2f}, "
                      f"approx_kl {row['approx_kl']:.4f}, clipfrac {row['clipfrac']:.2f}, explained variance "
                      f"{row['explained_variance']:.2f}"
                      f" [{row['seconds']:.0f} s]", flush=True)
    except BaseException:
        if pool is not None:  # interrupted or failed: the iteration is dropped, so stop the episodes it plays
            stop_workers(pool)
        raise
    finally:
        if pool is not None:
            pool.shutdown()
    return policy.eval()


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    ap = argparse.ArgumentParser(prog=prog, description=(
        "Train the graph rewrite policy with PPO on zoo models. Writes checkpoint.pt (resumes a killed run), "
        "policy.pt (for RLRewritePass(policy=...)), train.csv and train.png under --work-dir."))
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        value = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=value, help=f"default: {value}")
        elif isinstance(value, tuple):
            ap.add_argument(flag, nargs="+", default=list(value), help=f"default: {' '.join(value)}")
        else:
            ap.add_argument(flag, type=type(value), default=value, help=f"default: {value}")
    args = vars(ap.parse_args(argv))
    args["models"] = tuple(args["models"])
    from ..interrupt import interruptible

    ckpt = Path(args["work_dir"]) / "checkpoint.pt"
    # Ctrl-C inside TVM code comes back as a RuntimeError; `interruptible` turns it back into an interrupt.
    with interruptible(lambda: f"training interrupted; {ckpt} holds every finished iteration: rerun the same "
                               "command to resume"):
        train(TrainConfig(**args))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as err:
        print(f"\n{err}", file=sys.stderr)
        sys.exit(exit_code(err))
