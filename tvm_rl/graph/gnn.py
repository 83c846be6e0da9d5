"""Graph encoder: a graph network over the environment's graph tensors, in plain PyTorch.

X-RLflow's shape: an input node/edge update (GN) layer, several graph-attention layers, a global update.
Graphs are batched the way PyTorch Geometric does it (nodes of all graphs concatenated, edges offset, a
graph index per node), so any number of graphs of any size go through in one call. Dataflow edges are used
in both directions (a direction flag joins the edge features): a rewrite's effect on cost depends on both
producers and consumers. Self-loops let a node keep its own state in attention. By default each distinct node
is computed once (`gnn_plan.shared_plan`): a decision's candidate graphs are near copies of each other, and
computing all of them was most of a PPO update's time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from .gnn_plan import Level, Plan, plain_plan, shared_plan
from .observation import EDGE_FEATURES, GLOBAL_FEATURES, NODE_FEATURES, GraphTensors


@dataclass
class GraphBatch:
    """Several graphs as one: nodes (N, F), edges (2, E) as (source, target) rows, edge features (E, Fe),
    the graph each node belongs to (N,), and per-graph features (G, Fg)."""

    nodes: np.ndarray
    edges: np.ndarray
    edge_features: np.ndarray
    node_graph: np.ndarray
    globals: torch.Tensor

    @property
    def n_graphs(self) -> int:
        return self.globals.shape[0]

    def plan(self, layers: int, shared: bool = True) -> Plan:
        """The encoder's work for this batch over `layers` message-passing layers: each distinct node once
        (`shared`), or every node."""
        make = shared_plan if shared else plain_plan
        return make(self.nodes, self.edges, self.edge_features, self.node_graph, self.n_graphs, layers)


def batch_graphs(graphs: Sequence[GraphTensors], globals_: np.ndarray) -> GraphBatch:
    """Concatenate `graphs` (and their (G, Fg) global features) into one GraphBatch."""
    offsets = np.cumsum([0] + [len(g.nodes) for g in graphs])
    edges = [g.edges + off for g, off in zip(graphs, offsets)]
    return GraphBatch(
        nodes=np.concatenate([g.nodes for g in graphs]).astype(np.float32, copy=False),
        edges=np.concatenate(edges).reshape(-1, 2).T.astype(np.int64),
        edge_features=np.concatenate([g.edge_features for g in graphs]).astype(np.float32, copy=False),
        node_graph=np.repeat(np.arange(len(graphs)), np.diff(offsets)),
        globals=torch.as_tensor(np.asarray(globals_, np.float32)))


def _mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.SiLU(), nn.Linear(h, o))


def scatter_mean(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.zeros(n, src.shape[1], dtype=src.dtype).index_add_(0, index, src)
    count = torch.zeros(n, dtype=src.dtype).index_add_(0, index, torch.ones_like(index, dtype=src.dtype))
    return out / count.clamp(min=1).unsqueeze(1)


def segment_softmax(scores: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """Softmax of `scores` (E, H) over the entries sharing an `index` (E,) value."""
    top = torch.full((n, scores.shape[1]), -torch.inf, dtype=scores.dtype)
    top = top.scatter_reduce(0, index.unsqueeze(1).expand_as(scores), scores, "amax", include_self=True)
    ex = (scores - top[index]).exp()
    total = torch.zeros(n, scores.shape[1], dtype=scores.dtype).index_add_(0, index, ex)
    return ex / total[index].clamp(min=1e-12)


class GraphNetLayer(nn.Module):
    """Edge update from (source, target, edge), then node update from (node, mean of in/out edge messages)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.edge = _mlp(3 * hidden, hidden, hidden)
        self.node = _mlp(3 * hidden, hidden, hidden)
        self.norm_e, self.norm_n = nn.LayerNorm(hidden), nn.LayerNorm(hidden)

    def forward(self, h: torch.Tensor, e: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
                level: Level) -> tuple[torch.Tensor, torch.Tensor]:
        """(node states of `level`, updated states of the edges `e`, whose ends are `edge_src`/`edge_dst` in `h`)."""
        e = self.norm_e(e + self.edge(torch.cat([h[edge_src], h[edge_dst], e], 1)))
        n, own = level.n_out, h[level.self_index]
        assert level.out_edge is not None and level.out_owner is not None
        into = scatter_mean(e[level.edge], level.owner, n)
        out_of = scatter_mean(e[level.out_edge], level.out_owner, n)
        return self.norm_n(own + self.node(torch.cat([own, into, out_of], 1))), e


class GATLayer(nn.Module):
    """Multi-head graph attention whose scores also read the edge's features; residual + LayerNorm."""

    def __init__(self, hidden: int, heads: int = 4):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of heads={heads}")
        self.heads, self.dim = heads, hidden // heads
        self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.edge_k = nn.Linear(hidden, hidden, bias=False)
        self.out = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.ff = _mlp(hidden, 2 * hidden, hidden)
        self.norm_ff = nn.LayerNorm(hidden)

    def forward(self, h: torch.Tensor, e: torch.Tensor, level: Level) -> torch.Tensor:
        """Node states of `level` from states `h` and edge states `e` (messages flow source -> owner)."""
        n, H, D = level.n_out, self.heads, self.dim
        own = h[level.self_index]
        q = self.q(own)[level.owner].view(-1, H, D)
        k = (self.k(h)[level.src] + self.edge_k(e)[level.edge]).view(-1, H, D)
        att = segment_softmax((q * k).sum(-1) / D ** 0.5, level.owner, n)  # (E, H)
        msg = (att.unsqueeze(-1) * self.v(h)[level.src].view(-1, H, D)).reshape(-1, H * D)
        agg = torch.zeros(n, h.shape[1], dtype=h.dtype).index_add_(0, level.owner, msg)
        own = self.norm(own + self.out(agg))
        return self.norm_ff(own + self.ff(own))


class GraphEncoder(nn.Module):
    """GraphBatch -> one embedding per graph (G, hidden) and per node (N, hidden)."""

    def __init__(self, hidden: int = 64, gat_layers: int = 3, heads: int = 4):
        super().__init__()
        self.hidden = hidden
        self.node_in = nn.Linear(NODE_FEATURES, hidden)
        self.edge_in = nn.Linear(EDGE_FEATURES + 1, hidden)  # + direction flag
        self.global_in = nn.Linear(GLOBAL_FEATURES, hidden)
        self.graph_net = GraphNetLayer(hidden)
        self.gat = nn.ModuleList(GATLayer(hidden, heads) for _ in range(gat_layers))
        self.global_out = _mlp(3 * hidden, hidden, hidden)

    def forward(self, batch: GraphBatch, shared: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """(graph embeddings (G, hidden), node states (N, hidden)); `shared` computes each distinct node once
        (`gnn_plan`), which gives the same result as computing all of them."""
        plan = batch.plan(1 + len(self.gat), shared)
        h = self.node_in(plan.node_inputs)
        e = self.edge_in(plan.edge_inputs)
        h, e = self.graph_net(h, e, plan.edge_src, plan.edge_dst, plan.levels[0])
        for layer, level in zip(self.gat, plan.levels[1:]):
            h = layer(h, e, level)
        g = plan.n_graphs
        rows = h[plan.readout_state]
        weighted = rows * plan.readout_count.unsqueeze(1)  # a state stands for this many of the graph's nodes
        mean = torch.zeros(g, self.hidden, dtype=rows.dtype).index_add_(0, plan.readout_graph, weighted)
        mean = mean / plan.n_nodes.clamp(min=1).unsqueeze(1)
        top = torch.full((g, self.hidden), -torch.inf, dtype=rows.dtype).scatter_reduce(
            0, plan.readout_graph.unsqueeze(1).expand_as(rows), rows, "amax", include_self=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # graphs without nodes
        z = self.global_out(torch.cat([mean, top, self.global_in(batch.globals)], 1))
        return z, h[plan.node_state]
