"""What the graph policy reads, built in one place for the environment, training and `RLRewritePass`.

`observe(graphs, costs, initial_cost, features)` turns the graphs an agent chooses between (candidates, then
the current graph for "stop") into a `Decision`: per graph its node and edge tensors (`encode`, node costs
from the roofline of a `FeatureSpec`) and its global features (`global_features`, from the cost model's
prices). The environment pads a Decision into its fixed-size observation (`padded`) and training reads it
back (`decision_from_observation`); the pass hands it to the policy as it is.

A `FeatureSpec` names the roofline that node features are computed with. Training records it in its
checkpoints and `RLRewritePass` encodes with the recorded one: a policy sees the features it was trained on,
whatever roofline the pass prices candidates with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import tvm
from tvm.ir import GenericConst, Var

from .. import measure
from ..database import DatabaseLike, TuningDatabase
from ..errors import FeatureMismatchError
from . import fusion, keepalive, profiles, roofline, view
from .fingerprint import module_key, same_graph

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


# ---- the roofline node features come from


def target_kind(target: tvm.target.Target | str) -> str:
    """"gpu" or "cpu": the nominal rooflines, and so the features a policy learns from, differ by this alone."""
    return "gpu" if measure.is_gpu(measure.parse_target(target)) else "cpu"


def _numbers(r: roofline.Roofline) -> dict:
    """The figures of a roofline without its labels: two rooflines with equal figures give equal features."""
    d = r.as_dict()
    if "default" in d:
        return {k: {f: v for f, v in h.items() if f != "source"} for k, h in d.items() if k != "gemm"} | \
            {k: v for k, v in d.items() if k == "gemm"}
    return {f: v for f, v in d.items() if f != "source"}


def describe_database(database: DatabaseLike) -> str:
    """A tuning database (work dir, JSON database or other) as its folder, for messages and records."""
    folder = TuningDatabase.of(database)  # None: a database held in memory
    return str(folder.path) if folder is not None else f"an in-memory {type(database).__name__}"


@dataclass(frozen=True)
class FeatureSpec:
    """The roofline the policy's node features are computed with, where it came from, and the target kind
    ("cpu"/"gpu") it is for. Saved in checkpoints (`as_dict`) and rebuilt exactly (`from_dict`)."""

    roofline: roofline.Roofline
    source: str
    target_kind: str

    @classmethod
    def nominal(cls, target: tvm.target.Target | str) -> "FeatureSpec":
        """The nominal roofline of `target` (`roofline.default_hardware`)."""
        kind = target_kind(target)
        return cls(roofline.default_hardware(target), "nominal roofline", kind)

    @classmethod
    def for_target(cls, target: tvm.target.Target | str, database: DatabaseLike = None) -> "FeatureSpec":
        """The roofline `calibration.proxy_roofline` prices `target` with: fitted to `database`'s tuned
        kernels when it has any, else the nominal one."""
        from .calibration import proxy_roofline

        fitted = proxy_roofline(target, database)
        if fitted == roofline.default_hardware(target):
            return cls.nominal(target)
        return cls(fitted, f"roofline fitted to the tuned kernels in {describe_database(database)}",
                   target_kind(target))

    @classmethod
    def of(cls, r: roofline.Roofline, target: tvm.target.Target | str, source: str = "") -> "FeatureSpec":
        """A roofline given directly (named nominal when it is `target`'s nominal one)."""
        if r == roofline.default_hardware(target):
            return cls.nominal(target)
        label = r.source if isinstance(r, roofline.Hardware) else r.default.source
        return cls(r, source or f"roofline given directly ({label})", target_kind(target))

    def same_features(self, other: "FeatureSpec") -> bool:
        """True when both give the same features: same target kind and roofline figures (labels aside)."""
        return self.target_kind == other.target_kind and _numbers(self.roofline) == _numbers(other.roofline)

    def describe(self) -> str:
        return f"{self.source} ({self.target_kind} targets)"

    def as_dict(self) -> dict:
        """Plain values only, so that checkpoints holding it load with `torch.load(weights_only=True)`."""
        return {"roofline": self.roofline.as_dict(), "source": self.source, "target_kind": self.target_kind}

    @classmethod
    def from_dict(cls, d: dict) -> "FeatureSpec":
        return cls(roofline.from_dict(d["roofline"]), str(d["source"]), str(d["target_kind"]))


def features_for_policy(trained: FeatureSpec | None, checkpoint: str, target: tvm.target.Target | str,
                        asked: FeatureSpec | None = None, allow_mismatch: bool = False) -> FeatureSpec:
    """The features to show a policy trained on `trained` (None: a checkpoint without a record, trained on the
    nominal roofline of the target it is used for) when it runs for `target`: its own, or `asked`.

    FeatureMismatchError, naming `checkpoint` and both feature sources, when the policy was trained for another
    target kind or `asked` differs from what it was trained on, unless `allow_mismatch`.
    """
    if trained is None:
        nominal = FeatureSpec.nominal(target)
        trained = FeatureSpec(nominal.roofline, f"{nominal.source}, assumed as the checkpoint has no feature record",
                              nominal.target_kind)
    if not allow_mismatch:
        kind = target_kind(target)
        if trained.target_kind != kind:
            raise FeatureMismatchError(
                f"graph policy {checkpoint} was trained on node features from the {trained.describe()}, but it "
                f"was asked to rewrite for a {kind} target ({measure.parse_target(target).kind.name}): its node "
                f"costs would be on another scale than it learned. Train a policy for {kind} targets (`tvm-rl "
                "train --target ...`), or pass allow_feature_mismatch=True (CLI: --allow-feature-mismatch) to use "
                "it anyway")
        if asked is not None and not asked.same_features(trained):
            raise FeatureMismatchError(
                f"graph policy {checkpoint} was trained on node features from the {trained.describe()}, but "
                f"features from the {asked.describe()} were asked for. Leave `features` unset to use the policy's "
                "own, train a policy on those features (`tvm-rl train --database ...`), or pass "
                "allow_feature_mismatch=True to use them anyway")
    return asked if asked is not None else trained


# ---- graphs as tensors


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


class EncodingCache:
    """`encode` memoised by graph: episodes revisit graphs, and encoding is most of a step's time."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self._entries: dict[int, tuple[tvm.IRModule, roofline.Roofline, GraphTensors]] = {}
        self._flushes = keepalive.flushes()

    def encode(self, mod: tvm.IRModule, hardware: roofline.Roofline) -> GraphTensors:
        # Entries hold their graphs, and with them the weights rewrites made: cleared with the process-wide
        # caches, or a training worker on full-size CNNs kept thousands of graphs' folded weights (9 GB, OOM).
        if self._flushes != keepalive.flushes():
            self._entries.clear()
            self._flushes = keepalive.flushes()
        key = module_key(mod)
        hit = self._entries.get(key)
        if hit is not None and hit[1] == hardware and same_graph(hit[0], mod):
            return hit[2]
        enc = encode(mod, hardware)
        if len(self._entries) > self.limit:  # bound memory on long runs
            self._entries.clear()
        self._entries[key] = (mod, hardware, enc)
        return enc


# ---- the policy's input


@dataclass
class Decision:
    """One state: candidate graphs then the current graph (last row, the "stop" action), their global
    features, and for each row the environment action it stands for."""

    graphs: list[GraphTensors]
    globals: np.ndarray
    actions: np.ndarray

    def __len__(self) -> int:
        return len(self.graphs)


def observe(graphs: Sequence[tvm.IRModule], costs: Sequence[float], initial_cost: float,
            features: FeatureSpec | roofline.Roofline, actions: Sequence[int] | None = None,
            cache: EncodingCache | None = None) -> Decision:
    """What the policy reads of `graphs` (candidates, the current graph last): each encoded with `features`'
    roofline, with global features from its cost by the cost model (`costs`, relative to `initial_cost`, the
    episode's first graph's). `actions`: the action each graph stands for (default: its index)."""
    if len(graphs) != len(costs):
        raise ValueError(f"observe needs a cost per graph, got {len(graphs)} graphs and {len(costs)} costs")
    hardware = features.roofline if isinstance(features, FeatureSpec) else features
    enc: Callable[[tvm.IRModule], GraphTensors] = (
        (lambda g: cache.encode(g, hardware)) if cache is not None else (lambda g: encode(g, hardware)))
    return Decision([enc(g) for g in graphs],
                    np.stack([global_features(c, initial_cost) for c in costs]).reshape(-1, GLOBAL_FEATURES),
                    np.arange(len(graphs)) if actions is None else np.asarray(actions))


def padded(decision: Decision, slots: int, max_nodes: int, max_edges: int) -> dict:
    """`decision` as a `GraphRewriteEnv` observation: each graph at the slot of its action, `slots` slots (the
    last one "stop") of `max_nodes` nodes and `max_edges` edges; the slots it has no graph for are masked."""
    k, n, m = slots, max_nodes, max_edges
    obs = {"nodes": np.zeros((k, n, NODE_FEATURES), np.float32),
           "edges": np.zeros((k, m, 2), np.int64),
           "edge_features": np.zeros((k, m, EDGE_FEATURES), np.float32),
           "n_nodes": np.zeros(k, np.int64), "n_edges": np.zeros(k, np.int64),
           "globals": np.zeros((k, GLOBAL_FEATURES), np.float32),
           "action_mask": np.zeros(k, np.int8)}
    for slot, enc, glob in zip(decision.actions, decision.graphs, decision.globals):
        obs["nodes"][slot, :len(enc.nodes)] = enc.nodes
        obs["edges"][slot, :len(enc.edges)] = enc.edges
        obs["edge_features"][slot, :len(enc.edges)] = enc.edge_features
        obs["n_nodes"][slot], obs["n_edges"][slot] = len(enc.nodes), len(enc.edges)
        obs["globals"][slot] = glob
        obs["action_mask"][slot] = 1
    return obs


def decision_from_observation(obs: dict) -> Decision:
    """The valid slots of a `GraphRewriteEnv` observation, stop (the last slot) last: `padded` undone."""
    mask = np.asarray(obs["action_mask"]).astype(bool)
    stop = len(mask) - 1
    slots = [int(s) for s in np.flatnonzero(mask) if s != stop] + [stop]
    graphs = [GraphTensors(obs["nodes"][s, :obs["n_nodes"][s]], obs["edges"][s, :obs["n_edges"][s]],
                           obs["edge_features"][s, :obs["n_edges"][s]]) for s in slots]
    return Decision(graphs, obs["globals"][slots], np.asarray(slots))
