"""A Gymnasium environment over graph rewrites (X-RLflow's formulation on Relax).

State: the current IRModule, walked as `RLRewritePass` walks it (`episode.Walk`). Actions: the candidates
(capped at `cap`; with `shortlist=K`, the K of them the cost function rates cheapest, as the pass shows its
policy) followed by "stop" at the last index (`cap`, or K); slots of absent candidates are masked. Observation:
for every action, the graph it leads to ("stop" leads to the current graph), as padded tensors a GNN reads
(`observation.observe`, as `RLRewritePass` builds them):
  nodes (cap+1, N, F): op one-hot over OP_VOCAB + "other", output shape features, the op's cost by the
  roofline of `features` (default: the one pricing the reward, `hardware`);
  edges (cap+1, M, 2) producer -> consumer node indices; edge_features (cap+1, M, E): the tensor's dims;
  n_nodes, n_edges (cap+1,); globals (cap+1, 2): cost / RT[0] and log(1 + cost in us);
  action_mask (cap+1,): 1 where the action is valid (also in `info["action_mask"]`).
Reward ("delta", the default): (RT[t-1] - RT[t]) / RT[0] * 100 with RT from `cost` (default: the Relax roofline
proxy); "best": (B[t-1] - B[t]) / RT[0] * 100 with B[t] the cheapest RT seen so far, so an episode's return is what
the graph `RLRewritePass` keeps (the best one seen) gained, and uphill steps that lead lower cost nothing. With
`measure` and `measure_every=N`, measured at reset, every N steps and at the episode's end, the proxy in
between being scaled by the last measured/proxy ratio, so an episode's rewards add up to the measured gain.
"""
from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np
import tvm
from gymnasium import spaces

from . import cost as costs
from . import roofline
from .candidates import CandidateSet
from .episode import Walk
from .observation import (
    EDGE_FEATURES,
    GLOBAL_FEATURES,
    NODE_FEATURES,
    EncodingCache,
    FeatureSpec,
    encode,
    observe,
    padded,
)
from .rules import Rule, all_rules

REWARDS = ("delta", "best")  # per-step cost change, or change of the best cost seen (module docstring)
_HIGH = 1e9  # features are logs and ratios; a finite bound keeps the env checker from warning


class GraphRewriteEnv(gym.Env):
    """Rewrite a Relax module one (rule, match) at a time; see the module docstring for spaces and reward.

    Invalid actions (masked slots) leave the graph unchanged with reward 0 and `info["invalid_action"]`;
    they count towards the horizon. `max_nodes`/`max_edges` default to twice the input graph's (rounded up
    to 64); a candidate too large for them is masked out (counted in `info["oversize"]`).
    """

    metadata = {"render_modes": []}

    def __init__(self, mod: tvm.IRModule, cap: int = 64, horizon: int = 20, rules: Sequence[Rule] | None = None,
                 cost: costs.CostFn | None = None, hardware: roofline.Roofline | None = None,
                 target: tvm.target.Target | str = "llvm", measure: costs.CostFn | None = None,
                 measure_every: int | None = None, max_nodes: int | None = None, max_edges: int | None = None,
                 check: bool = False, shortlist: int | None = None, features: FeatureSpec | None = None,
                 reward: str = "delta"):
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        if cap < 1 or horizon < 1:
            raise ValueError(f"cap and horizon must be >= 1, got cap={cap}, horizon={horizon}")
        if (measure is None) != (measure_every is None):
            raise ValueError("give both `measure` (a cost function, e.g. cost.end_to_end_cost) and "
                             "`measure_every`, or neither")
        if measure_every is not None and measure_every < 1:
            raise ValueError(f"measure_every must be >= 1, got {measure_every}")
        self.initial = mod
        self.cap, self.horizon, self.check = cap, horizon, check
        self.rules = all_rules() if rules is None else list(rules)
        self.hardware = hardware or roofline.default_hardware(target)
        self.cost = cost or costs.roofline_cost(self.hardware)
        # Node features from `features` (what a policy trained here records), by default the pricing roofline.
        self.features = features or FeatureSpec.of(self.hardware, target)
        self.measure, self.measure_every = measure, measure_every
        self.reward = reward
        first = encode(mod, self.features.roofline)
        self.max_nodes = max_nodes or _round_up(2 * len(first.nodes))
        self.max_edges = max_edges or _round_up(2 * len(first.edges))
        if len(first.nodes) > self.max_nodes or len(first.edges) > self.max_edges:
            raise ValueError(f"the input graph has {len(first.nodes)} nodes and {len(first.edges)} edges, more "
                             f"than max_nodes={self.max_nodes} / max_edges={self.max_edges}")
        short = shortlist if shortlist is not None and shortlist < cap else None
        self.walk = Walk(mod, self.cost, self.rules, cap, short, check)
        self.slots = short if short is not None else cap  # candidate slots before "stop"
        k, n, m = self.slots + 1, self.max_nodes, self.max_edges
        f32 = np.float32
        self.observation_space = spaces.Dict({
            "nodes": spaces.Box(0.0, _HIGH, (k, n, NODE_FEATURES), f32),
            "edges": spaces.Box(0, n - 1, (k, m, 2), np.int64),
            "edge_features": spaces.Box(0.0, _HIGH, (k, m, EDGE_FEATURES), f32),
            "n_nodes": spaces.Box(0, n, (k,), np.int64),
            "n_edges": spaces.Box(0, m, (k,), np.int64),
            "globals": spaces.Box(0.0, _HIGH, (k, GLOBAL_FEATURES), f32),
            "action_mask": spaces.Box(0, 1, (k,), np.int8),
        })
        self.action_space = spaces.Discrete(k)
        self.stop_action = self.slots
        self.candidates: CandidateSet | None = None
        self._obs: dict | None = None
        self._cache = EncodingCache()

    # ---- Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.walk.reset()
        self.t = 0
        self._scale = 1.0
        self.rt0 = self.rt = self.best_rt = self._latency(self.initial, force_measure=True)
        obs = self._observe()
        return obs, self._info(measured=self.measure is not None)

    def step(self, action):
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        action = int(action)
        if not self.action_space.contains(action):
            raise ValueError(f"action {action} outside 0..{self.stop_action}")
        self.t += 1
        mask = self._obs["action_mask"]
        terminated = action == self.stop_action
        invalid = not terminated and not mask[action]
        if not terminated and not invalid:
            self.walk.take(self.candidates[action])
        truncated = not terminated and self.t >= self.horizon
        done = terminated or truncated
        measured = self.measure is not None and (done or self.t % self.measure_every == 0)
        prev = self.rt
        if not invalid or measured:
            self.rt = self._latency(self.mod, force_measure=measured)
        best_before, self.best_rt = self.best_rt, min(self.best_rt, self.rt)
        gain = best_before - self.best_rt if self.reward == "best" else prev - self.rt
        reward = gain / self.rt0 * 100.0
        # A fresh copy even when the graph is unchanged: callers keep the observations they are given.
        obs = {k: v.copy() for k, v in self._obs.items()} if (invalid or terminated) else self._observe()
        info = self._info(measured=measured)
        info["invalid_action"] = invalid
        return obs, float(reward), terminated, truncated, info

    @property
    def mod(self) -> tvm.IRModule:
        """The current graph."""
        return self.walk.mod

    @property
    def applied(self) -> list[str]:
        """The rewrites that led to the current graph."""
        return self.walk.applied

    # ---- internals

    def _latency(self, mod: tvm.IRModule, force_measure: bool) -> float:
        proxy = self.cost(mod)
        if self.measure is not None and force_measure:
            real = self.measure(mod)
            self._scale = real / proxy if proxy > 0 else 1.0
            return real
        return proxy * self._scale

    def _observe(self) -> dict:
        if self.walk.shortlist is not None:  # priced to rank them; without one they are priced below alone
            self.candidates, _, _ = self.walk.priced_candidates()
        else:
            self.candidates = self.walk.candidates(now=0.0)  # `now` ranks a shortlist's candidates only
        self.oversize = 0
        graphs = [(i, c.mod) for i, c in enumerate(self.candidates)] + [(self.stop_action, self.mod)]
        fits = []
        for slot, mod in graphs:
            enc = self._cache.encode(mod, self.features.roofline)
            if len(enc.nodes) > self.max_nodes or len(enc.edges) > self.max_edges:
                self.oversize += 1
                continue
            fits.append((slot, mod))
        decision = observe([mod for _, mod in fits], [self._latency(mod, force_measure=False) for _, mod in fits],
                           self.rt0, self.features, actions=[slot for slot, _ in fits], cache=self._cache)
        self._obs = padded(decision, self.slots + 1, self.max_nodes, self.max_edges)
        return self._obs

    def _info(self, measured: bool) -> dict:
        return {"action_mask": self._obs["action_mask"].copy(), "cost_ms": self.rt, "best_cost_ms": self.best_rt,
                "initial_cost_ms": self.rt0,
                "step": self.t, "n_candidates": len(self.candidates), "candidates": self.candidates.summary(),
                "oversize": self.oversize, "applied": list(self.applied), "measured": measured}

    def action_masks(self) -> np.ndarray:
        """The current mask as booleans (the method name sb3-contrib's MaskablePPO looks for)."""
        return self._obs["action_mask"].astype(bool)


def _round_up(x: int, to: int = 64) -> int:
    return max(to, -(-x // to) * to)
