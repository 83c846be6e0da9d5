"""Playing the graph trainer's episodes: a zoo model's environment as a `TrainConfig` sets it up (`make_env`,
its roofline from `feature_spec`) and one episode of the policy in it (`play`), in the trainer or a worker."""
from __future__ import annotations

import numpy as np

from .agent import GraphActorCritic
from .observation import FeatureSpec, decision_from_observation
from .rules import all_rules, with_all_matches
from .train_config import TrainConfig, import_model_modules
from .train_update import Episode


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
