"""Graph encoder: a graph network over the environment's graph tensors, in plain PyTorch.

X-RLflow's shape: an input node/edge update (GN) layer, several graph-attention layers, a global update.
Graphs are batched the way PyTorch Geometric does it (nodes of all graphs concatenated, edges offset, a
graph index per node), so any number of graphs of any size go through in one call. Dataflow edges are used
in both directions (a direction flag joins the edge features): a rewrite's effect on cost depends on both
producers and consumers. Self-loops let a node keep its own state in attention.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from .observation import EDGE_FEATURES, GLOBAL_FEATURES, NODE_FEATURES, GraphTensors


@dataclass
class GraphBatch:
    """Several graphs as one: nodes (N, F), edges (2, E) as (source, target) rows, edge features (E, Fe),
    the graph each node belongs to (N,), and per-graph features (G, Fg)."""

    nodes: torch.Tensor
    edges: torch.Tensor
    edge_features: torch.Tensor
    node_graph: torch.Tensor
    globals: torch.Tensor

    @property
    def n_graphs(self) -> int:
        return self.globals.shape[0]


def batch_graphs(graphs: Sequence[GraphTensors], globals_: np.ndarray) -> GraphBatch:
    """Concatenate `graphs` (and their (G, Fg) global features) into one GraphBatch."""
    offsets = np.cumsum([0] + [len(g.nodes) for g in graphs])
    edges = [g.edges + off for g, off in zip(graphs, offsets)]
    return GraphBatch(
        nodes=torch.from_numpy(np.concatenate([g.nodes for g in graphs])),
        edges=torch.from_numpy(np.concatenate(edges).reshape(-1, 2).T.copy()),
        edge_features=torch.from_numpy(np.concatenate([g.edge_features for g in graphs])),
        node_graph=torch.from_numpy(np.repeat(np.arange(len(graphs)), np.diff(offsets))),
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

    def forward(self, h: torch.Tensor, e: torch.Tensor, edges: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        src, dst = edges
        e = self.norm_e(e + self.edge(torch.cat([h[src], h[dst], e], 1)))
        n = h.shape[0]
        h = self.norm_n(h + self.node(torch.cat([h, scatter_mean(e, dst, n), scatter_mean(e, src, n)], 1)))
        return h, e


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

    def forward(self, h: torch.Tensor, e: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        src, dst = edges  # messages flow src -> dst
        n, H, D = h.shape[0], self.heads, self.dim
        q = self.q(h)[dst].view(-1, H, D)
        k = (self.k(h)[src] + self.edge_k(e)).view(-1, H, D)
        att = segment_softmax((q * k).sum(-1) / D ** 0.5, dst, n)  # (E, H)
        msg = (att.unsqueeze(-1) * self.v(h)[src].view(-1, H, D)).reshape(-1, H * D)
        agg = torch.zeros_like(h).index_add_(0, dst, msg)
        h = self.norm(h + self.out(agg))
        return self.norm_ff(h + self.ff(h))


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

    def forward(self, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        n, g = batch.nodes.shape[0], batch.n_graphs
        loops = torch.arange(n).expand(2, n)
        edges = torch.cat([batch.edges, batch.edges.flip(0), loops], 1)
        ef = batch.edge_features
        fwd = torch.cat([ef, torch.ones(len(ef), 1)], 1)
        bwd = torch.cat([ef, -torch.ones(len(ef), 1)], 1)
        e = self.edge_in(torch.cat([fwd, bwd, torch.zeros(n, ef.shape[1] + 1)], 0))
        h = self.node_in(batch.nodes)
        h, e = self.graph_net(h, e, edges)
        for layer in self.gat:
            h = layer(h, e, edges)
        mean = scatter_mean(h, batch.node_graph, g)
        top = torch.full((g, self.hidden), -torch.inf).scatter_reduce(
            0, batch.node_graph.unsqueeze(1).expand_as(h), h, "amax", include_self=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # graphs without nodes
        z = self.global_out(torch.cat([mean, top, self.global_in(batch.globals)], 1))
        return z, h
