"""Which kernels a Relax graph becomes, predicted from its bindings without lowering.

The graph proxy (`profiles.fused_groups`) must cost the kernels TVM will actually run, not the Relax operators:
a weight transpose is folded away by FoldConstant, a bias add rides in its matmul's epilogue, but a reshape
between a matmul and its scale is a kernel boundary. Lowering every candidate to find out takes seconds a
graph at full size, so this module replays the two passes that decide it on the bindings themselves:

  * FoldConstant: a binding whose tensor inputs are all constants (or folded bindings) costs nothing;
  * FuseOps: TVM's post-dominator partitioner (the algorithm of `relax/transform/fuse_ops.cc`: phase 0 fuses
    elementwise epilogues into matmul/conv/reduction anchors and elementwise ops forward, phase 1 chains
    injective ops, phase 2 folds injective ops into tuples), over the operator patterns TVM's
    `AnnotateTIROpPattern` assigns to each operator's legalised PrimFunc (`PATTERNS`, read off the zoo).

Groups made only of reshapes are free: TVM turns a lone reshape kernel into a view (RewriteDataflowReshape).
`tests/graph/test_graph_fusion.py` checks the predicted kernel count against TVM's lowering on every zoo model.
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm.ir import Call, GenericConst, Tuple, TupleGetItem, Var

from . import keepalive
from .rules.ir import Graph, op_name, static_shape

# TVM's OpPatternKind.
ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE, TUPLE, OPAQUE = 0, 1, 2, 3, 4, 7, 8

_ELEMWISE_OPS = (
    "add subtract multiply divide floor_divide power maximum minimum nn.relu nn.gelu nn.gelu_tanh nn.silu "
    "nn.leakyrelu nn.softplus sigmoid tanh exp log sqrt rsqrt negative abs erf clip astype broadcast_to "
    "zeros_like ones_like full_like zeros ones full where equal not_equal less greater less_equal "
    "greater_equal round floor ceil sign square")
_INJECTIVE_OPS = (
    "reshape permute_dims concat split strided_slice expand_dims squeeze flatten nn.batch_norm "
    "layout_transform nn.pad tile repeat flip collapse_sum_to")
_OUT_EWISE_OPS = (
    "matmul nn.conv1d nn.conv2d nn.conv3d nn.conv2d_transpose nn.max_pool1d nn.max_pool2d nn.avg_pool1d "
    "nn.avg_pool2d nn.adaptive_avg_pool1d nn.adaptive_avg_pool2d mean sum max min prod variance nn.softmax "
    "nn.log_softmax nn.layer_norm nn.group_norm nn.rms_norm einsum")
PATTERNS: dict[str, int] = {
    **{f"relax.{op}": ELEMWISE for op in _ELEMWISE_OPS.split()},
    **{f"relax.{op}": INJECTIVE for op in _INJECTIVE_OPS.split()},
    **{f"relax.{op}": OUT_EWISE_FUSABLE for op in _OUT_EWISE_OPS.split()},
}
# Operators that become views when they make up a kernel alone.
VIEW_OPS = frozenset({"relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten"})


def pattern_of(value) -> int:
    """TVM's fusion pattern of one binding's value (unknown operators are opaque: a kernel of their own)."""
    if isinstance(value, TupleGetItem):
        return INJECTIVE
    if isinstance(value, Tuple):
        return TUPLE
    return PATTERNS.get(op_name(value) or "", OPAQUE)


@keepalive.per_object(4096)  # entries hold bindings and their constants: keep about a step's worth
def inputs_of(value) -> tuple:
    """The Vars and constants a binding reads (fields of an inline tuple argument included).

    Remembered per value object: the candidates of one step share almost all their bindings, and reading
    arguments through TVM's FFI is what pricing a graph spends most of its time on."""
    return _read_inputs(value)


def _read_inputs(value) -> tuple:
    if isinstance(value, Call):
        out = []
        for a in value.args:
            out.extend(a.fields if isinstance(a, Tuple) else [a])
        return tuple(a for a in out if isinstance(a, (Var, GenericConst)))
    if isinstance(value, Tuple):
        return tuple(f for f in value.fields if isinstance(f, (Var, GenericConst)))
    if isinstance(value, TupleGetItem):
        return (value.tuple_value,)
    if isinstance(value, Var):
        return (value,)
    return ()


# Operators that read only their input's shape: legalised, their kernel has no tensor inputs at all.
_SHAPE_ONLY_OPS = frozenset({"relax.zeros_like", "relax.ones_like", "relax.zeros", "relax.ones"})


def folded(g: Graph) -> set[str]:
    """Bindings FoldConstant evaluates at compile time: every tensor they read is constant or folded, or
    they read only a static shape (zeros_like)."""
    out: set[str] = set()
    for name in g.order:
        value = g.values[name]
        if op_name(value) in _SHAPE_ONLY_OPS and static_shape(g.vars[name].ty) is not None:
            out.add(name)
            continue
        ins = inputs_of(value)
        if ins and all(isinstance(a, GenericConst) or a.name in out for a in ins):
            out.add(name)
    return out


@dataclass
class _Group:
    pattern: int
    anchored: bool
    parent: "_Group | None" = None

    def root(self) -> "_Group":
        g = self
        while g.parent is not None:
            g = g.parent
        return g


def partition(g: Graph) -> list[list[str]]:
    """The kernels `main`'s dataflow bindings fuse into, as lists of binding names in program order.

    Folded bindings belong to no kernel. A replay of TVM's GraphPartitioner on the bindings: each node's
    immediate post-dominator (with the strongest pattern on the paths to it) decides what it may fuse into.
    """
    fold = folded(g)
    nodes = [n for n in g.order if n not in fold]
    index = {n: i for i, n in enumerate(nodes)}
    pattern = [pattern_of(g.values[n]) for n in nodes]
    outputs: list[list[tuple[int, int]]] = [[] for _ in nodes]  # (consumer, edge pattern)
    for i, n in enumerate(nodes):
        for a in inputs_of(g.values[n]):
            if isinstance(a, Var) and a.name in index:
                outputs[index[a.name]].append((i, pattern[i]))
    extern = [g.external[n] > 0 for n in nodes]

    # Post-dominator tree, built from the last binding backwards (consumers come after producers).
    parent: list[int | None] = [None] * len(nodes)
    depth = [1] * len(nodes)
    dom_pattern = [OPAQUE] * len(nodes)

    def lca(a: int | None, b: int | None, pat: int) -> tuple[int | None, int]:
        while a != b:
            if a is None or b is None:
                return None, pat
            if depth[a] < depth[b]:
                pat, b = max(pat, dom_pattern[b]), parent[b]
            elif depth[b] < depth[a]:
                pat, a = max(pat, dom_pattern[a]), parent[a]
            else:
                pat = max(pat, dom_pattern[a], dom_pattern[b])
                a, b = parent[a], parent[b]
        return a, pat

    for i in range(len(nodes) - 1, -1, -1):
        if extern[i] or not outputs[i]:
            continue
        pat = max(ELEMWISE, outputs[i][0][1])
        dom: int | None = outputs[i][0][0]
        for j, edge in outputs[i][1:]:
            dom, pat = lca(dom, j, pat)
            pat = max(pat, edge)
        parent[i], dom_pattern[i] = dom, pat
        depth[i] = depth[dom] + 1 if dom is not None else 1

    groups = [_Group(p, p == OUT_EWISE_FUSABLE) for p in pattern]

    def check_path(src: int, sink: int, cond) -> bool:
        seen: set[int] = set()

        def visit(k: int) -> bool:
            if k in seen:
                return True
            seen.add(k)
            if not cond(groups[k].root().pattern, k == sink):
                return False
            return k == sink or all(visit(j) for j, _ in outputs[k])

        return all(visit(j) for j, _ in outputs[src])

    def commit(src: int, sink: int) -> None:
        target = groups[sink]
        seen: set[int] = set()

        def visit(k: int) -> None:
            if k == sink or k in seen:
                return
            seen.add(k)
            child, into = groups[k].root(), target.root()
            if child is not into:
                child.parent = into
                if child.anchored:
                    into.anchored = True
                    into.pattern = max(child.pattern, into.pattern)
            for j, _ in outputs[k]:
                visit(j)

        visit(src)

    for phase in range(3):
        for i in range(len(nodes)):
            group, dom = groups[i], parent[i]
            if group.pattern == OPAQUE or dom is None:
                continue
            dom_group = groups[dom]
            if phase == 2:
                if group.pattern > INJECTIVE or dom_group.root().pattern == TUPLE:
                    continue
                if dom_group.pattern == TUPLE and dom_group.root().pattern <= INJECTIVE:
                    if check_path(i, dom, lambda k, sink: k <= INJECTIVE):
                        commit(i, dom)
                continue
            if group.root() is dom_group.root() or dom_group.pattern == TUPLE:
                continue
            if group.pattern == OUT_EWISE_FUSABLE:
                if phase == 0 and dom_pattern[i] == ELEMWISE:
                    if check_path(i, dom, lambda k, sink: k <= BROADCAST):
                        commit(i, dom)
            elif group.pattern <= BROADCAST:
                if dom_pattern[i] <= INJECTIVE or dom_pattern[i] == COMM_REDUCE:
                    if check_path(i, dom, lambda k, sink: k <= INJECTIVE if not sink else
                                  k <= INJECTIVE or k in (COMM_REDUCE, OUT_EWISE_FUSABLE)):
                        commit(i, dom)
            elif group.pattern in (INJECTIVE, TUPLE) and phase == 1:
                if check_path(i, dom, lambda k, sink: k <= INJECTIVE):
                    commit(i, dom)

    members: dict[int, list[str]] = {}
    for i, n in enumerate(nodes):
        members.setdefault(id(groups[i].root()), []).append(n)
    return list(members.values())


def is_free(g: Graph, names: list[str]) -> bool:
    """Whether a kernel costs nothing at run time: only reshapes (a view), tuple plumbing or aliases."""
    ops = [op_name(g.values[n]) for n in names]
    return all(op in VIEW_OPS or op is None for op in ops)
