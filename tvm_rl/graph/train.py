"""PPO training of the graph rewrite policy, readable top to bottom (CleanRL's style; the update is `train_update`).

    python -m tvm_rl.graph.train --models bert resnet18 --iterations 30 --work-dir logs/graph_train

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
import importlib
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..errors import CheckpointError, UnknownModelError, exit_code
from ..interrupt import interrupt_pending
from ..rl.ppo import KL_STOPS
from .agent import GraphActorCritic, PolicyConfig
from .imitation import demonstrations, imitate
from .observation import FeatureSpec, decision_from_observation
from .rules import all_rules, with_all_matches
from .train_files import load_checkpoint, plain_rows, plot_training, write_csv
from .train_pool import open_pool, play_in_pool, stop_workers
from .train_update import Episode, ppo_update, scale_rewards


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
    work_dir: str = "logs/graph_train"
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


def feature_spec(config: TrainConfig) -> FeatureSpec:
    """The roofline a run prices kernels and computes node features with: the nominal one, fitted to
    `config.database`'s tuned kernels (what `RLRewritePass` prices with), or the one recorded in
    `config.proxy_from`."""
    if config.proxy_from:
        if config.database:
            raise ValueError("give --database or --proxy-from, not both: each names the roofline to price with")
        from .calibration import recorded_proxy

        return FeatureSpec.of(recorded_proxy(config.proxy_from), config.target,
                              source=f"roofline recorded in {config.proxy_from}")
    return FeatureSpec.for_target(config.target, config.database or None)


def make_env(model: str, config: TrainConfig, features: FeatureSpec | None = None):
    """The rewrite environment of a zoo model, with the roofline cost as reward (fast enough to train on), or with
    `config.price_records` the records' (as fast), and node features from the roofline: `features`, by default
    `feature_spec(config)`."""
    from .. import models
    from .env import GraphRewriteEnv

    import_model_modules(config.model_modules)
    features = features or feature_spec(config)
    cost = None
    if config.price_records:
        from .record_cost import shared_record_cost

        cost = shared_record_cost(config.price_records, features.roofline)
    return GraphRewriteEnv(models.load(model, config.size).mod, cap=config.cap, horizon=config.horizon,
                           target=config.target, hardware=features.roofline, features=features, cost=cost,
                           shortlist=config.shortlist or None, reward=config.reward,
                           rules=with_all_matches(all_rules()) if config.all_matches else None)


def play(env, policy: GraphActorCritic, rng: np.random.Generator, model: str = "", greedy: bool = False
         ) -> Episode:
    """One episode of `policy` in `env` (sampled from the policy with `rng`, or greedy)."""
    ep = Episode(model)
    obs, info = env.reset()
    done = False
    while not done:
        decision = decision_from_observation(obs)
        row, action, logp, value = policy.act(decision, rng, greedy=greedy)
        obs, reward, terminated, truncated, info = env.step(action)
        ep.decisions.append(decision)
        ep.rows.append(row)
        ep.logps.append(logp)
        ep.values.append(value)
        ep.rewards.append(reward)
        done = terminated or truncated
    # What the episode is rewarded for: its final graph, or with reward "best" the cheapest one it saw.
    ep.speedup = info["initial_cost_ms"] / info["best_cost_ms" if env.reward == "best" else "cost_ms"]
    ep.applied = info["applied"]
    return ep


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
