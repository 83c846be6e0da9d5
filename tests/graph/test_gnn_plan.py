"""The encoder's shared plan (each distinct node computed once) gives what computing every node gives."""
import numpy as np
import pytest
import torch

from tvm_rl import models
from tvm_rl.graph import gnn_plan
from tvm_rl.graph.agent import GraphActorCritic, PolicyConfig
from tvm_rl.graph.env import GraphRewriteEnv
from tvm_rl.graph.gnn import batch_graphs
from tvm_rl.graph.observation import (
    EDGE_FEATURES,
    GLOBAL_FEATURES,
    NODE_FEATURES,
    GraphTensors,
    decision_from_observation,
)


def chain(n: int, odd: int | None = None, odd_edge: bool = False) -> GraphTensors:
    """A chain of `n` equal nodes; node `odd` (if any) has other features, or with `odd_edge` the edge into it."""
    nodes = np.zeros((n, NODE_FEATURES), np.float32)
    nodes[:, 0] = 1.0
    edges = np.stack([np.arange(n - 1), np.arange(1, n)], 1)
    feats = np.full((n - 1, EDGE_FEATURES), 0.5, np.float32)
    if odd is not None and odd_edge:
        feats[odd - 1, 1] = 1.0
    elif odd is not None:
        nodes[odd, 1] = 1.0
    return GraphTensors(nodes, edges, feats)


def both_ways(encoder, graphs):
    """(embeddings, node states, input-layer gradient) with the plain plan and with the shared one, in double
    precision: in single precision the two sum in other orders and differ by rounding (~1e-5 relative)."""
    encoder = encoder.double()
    batch = batch_graphs(graphs, np.tile(np.array([[1.0, 0.5]]), (len(graphs), 1)))
    batch.nodes, batch.edge_features = batch.nodes.astype(np.float64), batch.edge_features.astype(np.float64)
    batch.globals = batch.globals.double()
    out = []
    for shared in (False, True):
        encoder.zero_grad()
        z, h = encoder(batch, shared=shared)
        (z.square().sum() + h.sum()).backward()
        out.append((z.detach(), h.detach(), encoder.node_in.weight.grad.clone()))
    return out


def encoder(layers: int = 3):
    torch.manual_seed(0)
    return GraphActorCritic(PolicyConfig(hidden=32, gat_layers=layers, heads=4)).encoder


@pytest.mark.parametrize("odd,odd_edge", [(0, False), (3, False), (6, False), (6, True)])
def test_a_difference_reaches_as_far_as_the_layers_do(odd, odd_edge):
    # A chain and the same chain with one node (or the edge into it) changed: each node's state depends on its
    # neighbourhood up to 4 hops (1 + 3 layers), so the shared plan must tell apart the nodes the change reaches.
    enc = encoder()
    graphs = [chain(12), chain(12, odd, odd_edge), chain(12)]
    (z0, h0, g0), (z1, h1, g1) = both_ways(enc, graphs)
    for shared, plain in ((z1, z0), (h1, h0), (g1, g0)):
        torch.testing.assert_close(shared, plain, rtol=1e-9, atol=1e-9)
    assert not torch.allclose(z0[0], z0[1]) and torch.allclose(z1[0], z1[2])
    changed = (h0[12:24] - h0[:12]).abs().sum(1) > 1e-6
    reach = range(odd - 4, odd + 4) if odd_edge else range(odd - 4, odd + 5)  # the edge odd-1 -> odd
    assert changed.tolist() == [i in reach for i in range(12)]


def test_which_edge_brings_which_message_counts():
    # v and u read the same two sources over the same two kinds of edge, paired the other way round: v gets
    # x over e1 and y over e2, u gets x over e2 and y over e1. x and y look alike but for x's own input z, so
    # v and u agree on everything but the pairing, and differ from the second layer on.
    x, y, v, u, z = range(5)
    nodes = np.zeros((5, NODE_FEATURES), np.float32)
    nodes[[x, y], 0], nodes[[v, u], 1], nodes[z, 2] = 1.0, 1.0, 1.0
    e1, e2, e3 = (np.full(EDGE_FEATURES, f, np.float32) for f in (0.1, 0.2, 0.3))
    edges = np.array([(z, x), (x, v), (y, v), (x, u), (y, u)])
    graph = GraphTensors(nodes, edges, np.stack([e3, e1, e2, e2, e1]))
    (z0, h0, g0), (z1, h1, g1) = both_ways(encoder(), [graph])
    assert not torch.allclose(h0[v], h0[u])
    for shared, plain in ((z1, z0), (h1, h0), (g1, g0)):
        torch.testing.assert_close(shared, plain, rtol=1e-9, atol=1e-9)


def test_candidate_graphs_give_the_same_scores_and_far_less_work():
    env = GraphRewriteEnv(models.load("mobilenet_v2", "tiny").mod, cap=16, horizon=3)
    obs, _ = env.reset()
    decisions = [decision_from_observation(obs)]
    obs, *_ = env.step(0)
    decisions.append(decision_from_observation(obs))
    graphs = [g for d in decisions for g in d.graphs]
    enc = encoder()
    (z0, h0, g0), (z1, h1, g1) = both_ways(enc, graphs)
    for shared, plain in ((z1, z0), (h1, h0), (g1, g0)):
        torch.testing.assert_close(shared, plain, rtol=1e-9, atol=1e-9)
    batch = batch_graphs(graphs, np.zeros((len(graphs), GLOBAL_FEATURES), np.float32))
    plan = batch.plan(4)
    assert max(level.n_out for level in plan.levels) < len(batch.nodes) / 3
    # Copies of the batch add no work.
    twice = batch_graphs(graphs * 2, np.zeros((2 * len(graphs), GLOBAL_FEATURES), np.float32)).plan(4)
    assert [lv.n_out for lv in twice.levels] == [lv.n_out for lv in plan.levels]


def test_equal_rows_share_a_class_even_when_their_hashes_collide(monkeypatch):
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 3, (200, 3)).astype(np.uint64)

    def check(inverse, first):
        assert np.array_equal(rows[first[inverse]], rows)  # every row equals its class's first row
        assert len(first) == len(np.unique(rows, axis=0))  # and unequal rows are in different classes

    check(*gnn_plan._classes(rows))
    monkeypatch.setattr(gnn_plan, "_row_hash", lambda bits: np.zeros(len(bits), np.uint64))
    check(*gnn_plan._classes(rows))
