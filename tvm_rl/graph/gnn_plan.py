"""Which nodes and edges the graph encoder computes, layer by layer: all of them, or each distinct one once.

The graphs of one decision (a policy's candidates and the current graph) share all but a few nodes, the
decisions of one minibatch come from episodes that all start from the same model, and a CNN repeats blocks of
equal shapes. A node's state after layer l depends only on its l-hop neighbourhood (features, edge features,
structure), so nodes whose neighbourhoods are equal have equal states and need computing once. `shared_plan`
finds those classes by colour refinement (Weisfeiler-Lehman, one round per encoder layer, over exactly what the
layers read) and keeps one representative per class; `plain_plan` keeps every node. The encoder runs either
plan with the same arithmetic, so the shared one gives the plain one's result (up to float summation order)
at a fraction of the work: full-size MobileNet-V2 minibatches of PPO shrink by one to two orders of magnitude.

Neighbourhood multisets are compared by sums of random 64-bit keys in two independent lanes (a collision, which
would merge two different neighbourhoods, has probability about n^2 / 2^128).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

_LANES = 2  # independent 64-bit hash lanes for multisets


@dataclass
class Level:
    """One message-passing layer's work: for each output state (`n_out` of them), the input state it updates
    (`self_index`), and its incoming edges as (input state of the source `src`, edge state `edge`, the output
    it feeds `owner`). For the first layer, `out_edge`/`out_owner` list the edges leaving each output's node."""

    n_out: int
    self_index: torch.Tensor
    src: torch.Tensor
    edge: torch.Tensor
    owner: torch.Tensor
    out_edge: torch.Tensor | None = None
    out_owner: torch.Tensor | None = None


@dataclass
class Plan:
    """Everything the encoder computes for a batch of graphs.

    `node_inputs` (U0, F): the input node features computed; `edge_inputs` (Ue, Fe+1) with `edge_src`/`edge_dst`
    (indices into U0): the edges whose states are computed; `levels`: one per layer after the input one; the
    read-out takes state `readout_state` of the last level, `readout_count` times, into graph `readout_graph`;
    `node_state` maps every node of the batch to its last-level state; `n_graphs`, `n_nodes` (per graph)."""

    node_inputs: torch.Tensor
    edge_inputs: torch.Tensor
    edge_src: torch.Tensor
    edge_dst: torch.Tensor
    levels: list[Level]
    readout_graph: torch.Tensor
    readout_state: torch.Tensor
    readout_count: torch.Tensor
    node_state: torch.Tensor
    n_graphs: int
    n_nodes: torch.Tensor


def expanded_edges(edges: np.ndarray, edge_features: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sources, targets, input features) of the edges the encoder passes messages on: each dataflow edge
    forwards (direction flag +1) and backwards (-1), then a self-loop per node (zero features)."""
    src, dst = edges
    f = edge_features.shape[1]
    feats = np.concatenate([np.hstack([edge_features, np.ones((len(src), 1), np.float32)]),
                            np.hstack([edge_features, -np.ones((len(src), 1), np.float32)]),
                            np.zeros((n, f + 1), np.float32)])
    loops = np.arange(n)
    return np.concatenate([src, dst, loops]), np.concatenate([dst, src, loops]), feats


def plain_plan(nodes: np.ndarray, edges: np.ndarray, edge_features: np.ndarray, node_graph: np.ndarray,
               n_graphs: int, layers: int) -> Plan:
    """Every node and edge computed at every layer (the reference the shared plan must equal)."""
    n = len(nodes)
    src, dst, feats = expanded_edges(edges, edge_features, n)
    t = _long
    every_node, every_edge = t(np.arange(n)), t(np.arange(len(src)))
    first = Level(n, every_node, t(src), every_edge, t(dst), every_edge, t(src))
    rest = [Level(n, every_node, t(src), every_edge, t(dst)) for _ in range(layers - 1)]
    return Plan(torch.from_numpy(nodes), torch.from_numpy(feats), t(src), t(dst), [first, *rest],
                t(node_graph), every_node, torch.ones(n), every_node, n_graphs, _nodes_per_graph(node_graph, n_graphs))


def shared_plan(nodes: np.ndarray, edges: np.ndarray, edge_features: np.ndarray, node_graph: np.ndarray,
                n_graphs: int, layers: int, seed: int = 0) -> Plan:
    """One representative per class of nodes with equal neighbourhoods, per layer (see the module docstring)."""
    n = len(nodes)
    src, dst, feats = expanded_edges(edges, edge_features, n)
    rng = np.random.default_rng(seed)
    c0, node_rep = _classes(nodes)
    edge_input, _ = _classes(feats)
    ce, edge_rep = _classes(_columns(c0[src], c0[dst], edge_input))
    t = _long

    # First layer (edge update, then node update from the means of in- and out-edge states).
    # The in-edges decide the out-edges too: every edge comes with its reverse (the flag flipped).
    c1, rep = _classes(_columns(c0, _multiset(ce, dst, n, rng)))
    inn, out = _edges_of(rep, dst, n), _edges_of(rep, src, n)
    levels = [Level(len(rep), t(c0[rep]), t(c0[src[inn]]), t(ce[inn]), t(c1[dst[inn]]), t(ce[out]),
                    t(c1[src[out]]))]
    colour = c1
    for _ in range(layers - 1):  # attention layers: a node's state from its own and its in-edges' (source, edge)
        pair, _ = _classes(_columns(colour[src], ce))
        nxt, rep = _classes(_columns(colour, _multiset(pair, dst, n, rng)))
        inn = _edges_of(rep, dst, n)
        levels.append(Level(len(rep), t(colour[rep]), t(colour[src[inn]]), t(ce[inn]), t(nxt[dst[inn]])))
        colour = nxt

    per_graph, first = _classes(_columns(node_graph, colour))
    counts = np.bincount(per_graph).astype(np.float32)
    return Plan(torch.from_numpy(nodes[node_rep]), torch.from_numpy(feats[edge_rep]), t(c0[src[edge_rep]]),
                t(c0[dst[edge_rep]]), levels, t(node_graph[first]), t(colour[first]), torch.from_numpy(counts),
                t(colour), n_graphs, _nodes_per_graph(node_graph, n_graphs))


def _nodes_per_graph(node_graph: np.ndarray, n_graphs: int) -> torch.Tensor:
    """How many nodes each graph has (the read-out's mean divides by it), as floats."""
    return torch.from_numpy(np.bincount(node_graph, minlength=n_graphs).astype(np.float32))


def _long(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, np.int64))


def _columns(*cols: np.ndarray) -> np.ndarray:
    """Integer columns (1-D, or 2-D blocks of columns) side by side as uint64 rows."""
    return np.hstack([c.astype(np.uint64).reshape(len(c), -1) for c in cols])


def _classes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(class of every row, first row of every class) of the 2-D array `rows`: equal rows, equal class.

    Rows are sorted by a 64-bit hash of their bits (sorting the rows themselves was most of a plan's time);
    the classes are then checked row by row, and on a collision computed again from the rows' bytes."""
    rows = np.ascontiguousarray(rows)
    bits = rows.view(np.uint32 if rows.dtype.itemsize == 4 else np.uint64).astype(np.uint64)
    _, first, inverse = np.unique(_row_hash(bits), return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if not np.array_equal(bits, bits[first[inverse]]):  # a hash collision: fall back to the exact sort
        key = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        inverse = inverse.ravel()
    return inverse.astype(np.int64), first.astype(np.int64)


def _row_hash(bits: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row of the uint64 array `bits`: a fixed random odd weight per column, summed."""
    weights = np.random.default_rng(bits.shape[1]).integers(1, np.iinfo(np.uint64).max, bits.shape[1],
                                                            dtype=np.uint64, endpoint=True) | np.uint64(1)
    return (bits * weights).sum(1, dtype=np.uint64)


def _multiset(values: np.ndarray, owner: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, lanes) uint64 keys of the multiset of `values` (class ids) over the entries of each owner 0..n-1:
    sums of a random key per value, wrapping, in independent lanes."""
    keys = rng.integers(0, np.iinfo(np.uint64).max, size=(int(values.max(initial=0)) + 1, _LANES),
                        dtype=np.uint64, endpoint=True)
    out = np.zeros((n, _LANES), np.uint64)
    np.add.at(out, owner, keys[values])
    return out


def _edges_of(rep: np.ndarray, end: np.ndarray, n: int) -> np.ndarray:
    """Indices of the edges whose `end` (targets or sources, node ids below `n`) is a representative in `rep`."""
    chosen = np.zeros(n, bool)
    chosen[rep] = True
    return np.flatnonzero(chosen[end])
