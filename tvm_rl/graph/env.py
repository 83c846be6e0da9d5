"""A Gymnasium environment over graph rewrites (X-RLflow's formulation on Relax).

State: the current IRModule. Actions: `enumerate_candidates` (capped at `cap`; with `shortlist=K`, the K of
them the cost function rates cheapest, as `RLRewritePass` shows its policy) followed by "stop" at the last
index (`cap`, or K); slots of absent candidates are masked. Observation: for every action, the graph it leads to ("stop"
leads to the current graph), as padded tensors a GNN reads:
  nodes (cap+1, N, F): op one-hot over OP_VOCAB + "other", output shape features, the op's roofline cost;
  edges (cap+1, M, 2) producer -> consumer node indices; edge_features (cap+1, M, E): the tensor's dims;
  n_nodes, n_edges (cap+1,); globals (cap+1, 2): cost / RT[0] and log(1 + cost in us);
  action_mask (cap+1,): 1 where the action is valid (also in `info["action_mask"]`).
Reward: (RT[t-1] - RT[t]) / RT[0] * 100 with RT from `cost` (default: the Relax roofline proxy), or, with
`measure` and `measure_every=N`, measured at reset, every N steps and at the episode's end, the proxy in
between being scaled by the last measured/proxy ratio, so an episode's rewards add up to the measured gain.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import tvm
from tvm.ir import GenericConst, Var

from . import cost as costs
from . import profiles, roofline, view
from . import fusion
from .candidates import CandidateSet, Shortlist, enumerate_candidates
from .fingerprint import module_key, same_graph
from .rules import Rule, all_rules
from .rules.ir import Graph

OP_VOCAB: tuple[str, ...] = (
    "input", "constant", "tuple", "tuple_get_item",
    "relax.nn.conv2d", "relax.matmul", "relax.nn.attention", "relax.nn.max_pool2d", "relax.nn.avg_pool2d",
    "relax.nn.adaptive_avg_pool2d", "relax.mean", "relax.sum", "relax.nn.softmax", "relax.nn.layer_norm",
    "relax.nn.batch_norm", "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.nn.relu",
    "relax.nn.gelu", "relax.nn.silu", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.reshape",
    "relax.permute_dims", "relax.broadcast_to", "relax.concat", "relax.split", "relax.strided_slice",
    "relax.take", "relax.zeros_like", "relax.astype", "relax.nn.pad",
)
_OP_INDEX = {op: i for i, op in enumerate(OP_VOCAB)}
MAX_RANK = 4  # trailing dimensions encoded per tensor
N_SHAPE = 2 + MAX_RANK  # rank, log numel, log of each trailing dim
NODE_FEATURES = len(OP_VOCAB) + 1 + N_SHAPE + 3  # one-hot (+ other), shape, log time/FLOPs/bytes
EDGE_FEATURES = N_SHAPE
GLOBAL_FEATURES = 2
_HIGH = 1e9  # features are logs and ratios; a finite bound keeps the env checker from warning


def _shape_features(expr) -> np.ndarray:
    """rank/8, log2(1+numel)/32 and log2(1+d)/16 of the last MAX_RANK dims (right-aligned) of a tensor."""
    return view.memo(("shape_features", expr), lambda: _compute_shape_features(view.tensor_info(expr)[0]))


def _compute_shape_features(shape) -> np.ndarray:
    out = np.zeros(N_SHAPE, np.float32)
    if shape is None:
        return out
    out[0] = len(shape) / 8
    out[1] = np.log2(1 + float(np.prod(shape, dtype=np.float64))) / 32
    tail = shape[-MAX_RANK:]
    for i, d in enumerate(tail):
        out[2 + MAX_RANK - len(tail) + i] = np.log2(1 + d) / 16
    return out


def global_features(cost: float, initial_cost: float) -> np.ndarray:
    """A graph's global features: its cost relative to the episode's first graph, and log(1 + cost in us)."""
    return np.array([cost / initial_cost, np.log1p(cost * 1e3)], np.float32)


@dataclass
class GraphTensors:
    """One graph, unpadded: node features (n, F), edges (m, 2), edge features (m, E)."""

    nodes: np.ndarray
    edges: np.ndarray
    edge_features: np.ndarray


def encode(mod: tvm.IRModule, hardware: roofline.Roofline) -> GraphTensors:
    """`main` as a graph: a node per input, constant use and dataflow binding; an edge per tensor read."""
    g = view.graph_of(mod)
    ops = profiles.op_profiles(mod, g)
    rows: list[np.ndarray] = []
    index: dict[str, int] = {}
    edges: list[tuple[int, int]] = []
    edge_feats: list[np.ndarray] = []

    def row(op: str, expr, flops: float = 0.0, nbytes: int = 0, kind: str = "elementwise") -> np.ndarray:
        out = np.zeros(NODE_FEATURES, np.float32)
        out[_OP_INDEX.get(op, len(OP_VOCAB))] = 1.0
        out[len(OP_VOCAB) + 1:len(OP_VOCAB) + 1 + N_SHAPE] = _shape_features(expr)
        us = hardware.time_ms(flops, nbytes, kind) * 1e3 if (flops or nbytes) else 0.0
        out[-3:] = (np.log1p(us), np.log1p(flops) / 32, np.log1p(nbytes) / 32)
        return out

    def node(key, make) -> int:
        rows.append(view.memo(("node", hardware, *key), make))
        return len(rows) - 1

    for param in g.func.params:
        index[param.name] = node((param,), lambda: row("input", param))
    for name, p in zip(g.order, ops):
        var, value = g.vars[name], g.values[name]
        me = node((var, value), lambda: row(p.op if p.op != "var" else "other", var, p.flops, p.nbytes, p.kind))
        for arg in fusion.inputs_of(value):
            if isinstance(arg, GenericConst):
                src = node((arg,), lambda: row("constant", arg))
            elif isinstance(arg, Var) and arg.name in index:
                src = index[arg.name]
            else:
                continue
            edges.append((src, me))
            edge_feats.append(_shape_features(arg))
        index[name] = me
    return GraphTensors(np.stack(rows), np.asarray(edges, np.int64).reshape(-1, 2),
                       np.asarray(edge_feats, np.float32).reshape(-1, EDGE_FEATURES))


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
                 check: bool = False, shortlist: int | None = None):
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
        self.measure, self.measure_every = measure, measure_every
        first = encode(mod, self.hardware)
        self.max_nodes = max_nodes or _round_up(2 * len(first.nodes))
        self.max_edges = max_edges or _round_up(2 * len(first.edges))
        if len(first.nodes) > self.max_nodes or len(first.edges) > self.max_edges:
            raise ValueError(f"the input graph has {len(first.nodes)} nodes and {len(first.edges)} edges, more "
                             f"than max_nodes={self.max_nodes} / max_edges={self.max_edges}")
        self.shortlist = Shortlist(shortlist, self.cost) if shortlist is not None and shortlist < cap else None
        self.slots = self.shortlist.size if self.shortlist is not None else cap  # candidate slots before "stop"
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
        self.mod: tvm.IRModule = mod
        self.candidates: CandidateSet | None = None
        self._obs: dict | None = None
        self._encoded: dict[int, tuple[tvm.IRModule, GraphTensors]] = {}

    # ---- Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.mod, self.t, self.applied = self.initial, 0, []
        self._scale = 1.0
        if self.shortlist is not None:
            self.shortlist.reset()
        self.rt0 = self.rt = self._latency(self.initial, force_measure=True)
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
            cand = self.candidates[action]
            self.mod = cand.mod
            self.applied.append(str(cand.match))
        truncated = not terminated and self.t >= self.horizon
        done = terminated or truncated
        measured = self.measure is not None and (done or self.t % self.measure_every == 0)
        prev = self.rt
        if not invalid or measured:
            self.rt = self._latency(self.mod, force_measure=measured)
        reward = (prev - self.rt) / self.rt0 * 100.0
        # A fresh copy even when the graph is unchanged: callers keep the observations they are given.
        obs = {k: v.copy() for k, v in self._obs.items()} if (invalid or terminated) else self._observe()
        info = self._info(measured=measured)
        info["invalid_action"] = invalid
        return obs, float(reward), terminated, truncated, info

    # ---- internals

    def _latency(self, mod: tvm.IRModule, force_measure: bool) -> float:
        proxy = self.cost(mod)
        if self.measure is not None and force_measure:
            real = self.measure(mod)
            self._scale = real / proxy if proxy > 0 else 1.0
            return real
        return proxy * self._scale

    def _observe(self) -> dict:
        k, n, m = self.slots + 1, self.max_nodes, self.max_edges
        obs = {"nodes": np.zeros((k, n, NODE_FEATURES), np.float32),
               "edges": np.zeros((k, m, 2), np.int64),
               "edge_features": np.zeros((k, m, EDGE_FEATURES), np.float32),
               "n_nodes": np.zeros(k, np.int64), "n_edges": np.zeros(k, np.int64),
               "globals": np.zeros((k, GLOBAL_FEATURES), np.float32),
               "action_mask": np.zeros(k, np.int8)}
        if self.shortlist is not None:
            now = self.cost(self.mod)
            self.candidates = self.shortlist.enumerate(self.mod, now, self.rules, cap=self.cap, check=self.check)
            self.shortlist.record(self.candidates, [self.cost(c.mod) for c in self.candidates], now)
        else:
            self.candidates = enumerate_candidates(self.mod, self.rules, cap=self.cap, check=self.check,
                                                   strict=False)
        self.oversize = 0
        graphs = [(i, c.mod) for i, c in enumerate(self.candidates)] + [(self.stop_action, self.mod)]
        for slot, mod in graphs:
            enc = self._encode(mod)
            if len(enc.nodes) > n or len(enc.edges) > m:
                self.oversize += 1
                continue
            obs["nodes"][slot, :len(enc.nodes)] = enc.nodes
            obs["edges"][slot, :len(enc.edges)] = enc.edges
            obs["edge_features"][slot, :len(enc.edges)] = enc.edge_features
            obs["n_nodes"][slot], obs["n_edges"][slot] = len(enc.nodes), len(enc.edges)
            c = self._latency(mod, force_measure=False)
            obs["globals"][slot] = global_features(c, self.rt0)
            obs["action_mask"][slot] = 1
        self._obs = obs
        return obs

    def _encode(self, mod: tvm.IRModule) -> GraphTensors:
        key = module_key(mod)
        hit = self._encoded.get(key)
        if hit is not None and same_graph(hit[0], mod):
            return hit[1]
        enc = encode(mod, self.hardware)
        if len(self._encoded) > 4096:  # bound memory on long runs
            self._encoded.clear()
        self._encoded[key] = (mod, enc)
        return enc

    def _info(self, measured: bool) -> dict:
        return {"action_mask": self._obs["action_mask"].copy(), "cost_ms": self.rt, "initial_cost_ms": self.rt0,
                "step": self.t, "n_candidates": len(self.candidates), "candidates": self.candidates.summary(),
                "oversize": self.oversize, "applied": list(self.applied), "measured": measured}

    def action_masks(self) -> np.ndarray:
        """The current mask as booleans (the method name sb3-contrib's MaskablePPO looks for)."""
        return self._obs["action_mask"].astype(bool)


def _round_up(x: int, to: int = 64) -> int:
    return max(to, -(-x // to) * to)
