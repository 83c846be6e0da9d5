"""Linear-layer merges and splits: sibling linears on views of one input (Q/K/V as exported), a fused linear
read only in column pieces (GPT-2's c_attn), and one weight applied to several inputs (Tensat)."""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import TupleGetItem, Var

from .base import Match, Rule, register
from .ir import Edit, Graph, channel_bias, const, float_tensor, op_name, permute_axes, split_outputs, static_shape
from .matmul import MergeParallelMatmul, const_weight_matmul


def _view_key(g: Graph, x: Var) -> tuple:
    """What `x` computes, equal for identical views: (source, op, target shape or axes) when `x` is a
    reshape / permute_dims of a variable, else (x,). `x` must have a static shape."""
    call = g.call(x, "relax.reshape", "relax.permute_dims")
    src = call.args[0] if call is not None else None
    if not isinstance(src, Var):
        return (x.name,)
    if op_name(call) == "relax.reshape":  # the same source and target shape: the same tensor
        return (src.name, "reshape", static_shape(x.ty))
    return (src.name, "permute", permute_axes(call, len(static_shape(x.ty))))


@register
class MergeSiblingLinear(Rule):
    """Sibling view_i(x) @ W_i (+ b_i) on identical views of one input -> view(x) @ concat(W_i) (+ concat(b_i))
    then split; as exported, where Q/K/V each reshape x themselves.

    One GEMM with N = sum(N_i) columns instead of several narrow ones: more parallel work per kernel at the
    small M of a transformer layer, and the input is read once. Groups whose matmuls all read the very same
    variable are merge_parallel_matmul's match, not offered twice."""

    name = "merge_sibling_linear"

    def find(self, g: Graph) -> list[Match]:
        groups: dict[tuple, list[tuple[str, str]]] = {}
        for name, _ in g.calls("relax.matmul"):
            mm = const_weight_matmul(g, name)
            if mm is None or g.single_use(name) is None:
                continue
            x = mm["x"]
            key = (_view_key(g, x), float_tensor(x), mm["out_dtype"], mm["dtype"])
            groups.setdefault(key, []).append((name, x.name))
        out = []
        for members in groups.values():
            if len({x for _, x in members}) < 2:
                continue
            names = tuple(n for n, _ in members)
            with_bias = all(channel_bias(g, n, const_weight_matmul(g, n)["shape"][-1], 1) for n in names)
            out.append(self.match(names, f"merge {', '.join(names)}" + (" (+bias)" if with_bias else ""),
                                  (with_bias,)))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        # The first sibling's view computes what every sibling's does, so the same-input merge applies as is.
        MergeParallelMatmul.rewrite(self, g, m, edit)


def _ints(tup) -> tuple[int, ...] | None:
    """The integers of a strided_slice argument tuple, None where one is not a known integer."""
    values = [getattr(f, "value", None) for f in getattr(tup, "fields", ())]
    return tuple(values) if all(isinstance(v, int) for v in values) else None


def _pieces(g: Graph, reader: str, shape: tuple[int, ...]) -> list[tuple[str, int, int]] | None:
    """(binding to replace, first column, end column) for each piece `reader` takes of the last axis of its
    input (of `shape`), when it is a split or a unit-stride strided_slice of that axis; else None."""
    call, ndim, n = g.values[reader], len(shape), shape[-1]
    if op_name(call) == "relax.split":
        fields = [static_shape(f) for f in g.vars[reader].ty.fields]
        if int(call.attrs.axis) % ndim != ndim - 1 or g.external[reader]:
            return None
        bounds = np.cumsum([0] + [f[-1] for f in fields]).tolist()
        items = [(u, g.values[u]) for u in g.users.get(reader, ())]
        if not all(isinstance(item, TupleGetItem) for _, item in items):
            return None  # the tuple itself escapes (returned, or read whole)
        return [(u, bounds[int(item.index)], bounds[int(item.index) + 1]) for u, item in items]
    if op_name(call) == "relax.strided_slice":
        axes, begin = _ints(call.args[1]), _ints(call.args[2])
        strides = _ints(call.args[4]) if len(call.args) > 4 else (1,)  # no strides: unit steps
        out = static_shape(g.vars[reader].ty)
        if [a % ndim for a in axes or ()] != [ndim - 1] or strides != (1,) or not begin or out is None:
            return None
        if out[-1] < 1:
            return None  # an empty piece (Relax types end < begin as a negative width)
        if call.attrs.assume_inbound and begin[0] < 0:
            return None  # taken as written then, not counted from the end: an index out of bounds
        lo = min(max(begin[0] + n if begin[0] < 0 else begin[0], 0), n)
        if lo + out[-1] > n:
            return None  # past the last column, which only an assumed-in-bounds slice is typed as
        return [(reader, lo, lo + out[-1])]
    return None


def _fused(g: Graph, name: str) -> dict | None:
    """x @ W [+ b] [-> reshape keeping the last axis], read only in disjoint column pieces: the plan."""
    mm = const_weight_matmul(g, name)
    if mm is None:
        return None
    n = mm["shape"][-1]
    chain, bias, shape = [name], channel_bias(g, name, n, 1), None
    if bias is not None:
        chain.append(bias[0])
    user = g.single_use(chain[-1])
    view = static_shape(g.vars[user].ty) if g.call(g.vars.get(user), "relax.reshape") is not None else None
    if view and view[-1] == n:  # regrouping the rows only: column pieces commute with it
        chain.append(user)
        shape = view
    tail = chain[-1]
    readers = sorted(set(g.users.get(tail, ())), key=g.pos.__getitem__)
    if g.external[tail]:
        return None
    pieces = []
    for reader in readers:
        found = _pieces(g, reader, shape or mm["shape"])
        if found is None:
            return None
        pieces += found
    ranges = sorted({(lo, hi) for _, lo, hi in pieces})
    if not ranges:
        return None  # nothing reads a piece: dead code, not ours to remove
    if any(lo < prev_hi for (_, prev_hi), (lo, _) in zip(ranges, ranges[1:])):
        return None  # overlapping pieces would compute some columns twice
    return {**mm, "chain": chain, "readers": readers, "pieces": pieces, "ranges": ranges,
            "bias": None if bias is None else bias[1], "view": shape}


@register
class SplitFusedMatmul(Rule):
    """x @ W (+ b) read only in column pieces (a split of the last axis, or disjoint strided_slices of it,
    also through a reshape keeping that axis) -> one x @ W[:, piece] (+ b[piece]) per piece.

    GPT-2 style fused projections: with each piece a GEMM of its own, the split's copy disappears and each
    piece's consumers (reshapes, attention) can fuse with its own matmul; columns no piece reads are not
    computed at all."""

    name = "split_fused_matmul"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, _ in g.calls("relax.matmul"):
            plan = _fused(g, name)
            if plan is not None:
                out.append(self.match((*plan["chain"], *plan["readers"]),
                                      f"split {name} into {len(plan['ranges'])} matmuls"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        name = m.names[0]
        plan = _fused(g, name)
        dtype = plan["dtype"]
        for lo, hi in plan["ranges"]:
            w = const(plan["weight"][:, lo:hi], dtype)
            y = edit.emit(name, relax.op.matmul(plan["x"], w, out_dtype=plan["out_dtype"]), f"{name}_{lo}")
            if plan["bias"] is not None:
                y = edit.emit(name, relax.op.add(y, const(plan["bias"][lo:hi], dtype)), f"{name}_{lo}_bias")
            if plan["view"] is not None:
                y = edit.emit(name, relax.op.reshape(y, (*plan["view"][:-1], hi - lo)), f"{name}_{lo}_view")
            for target, a, b in plan["pieces"]:
                if (a, b) == (lo, hi):
                    edit.replace(target, y)


@register
class MergeSharedWeightMatmul(Rule):
    """x_i @ W with one constant W (the same object or equal values) on several inputs ->
    concat(x_i, axis=0) @ W, then split along axis 0.

    One GEMM with M = sum(M_i) rows instead of several: the weight is read once and the kernel has more rows
    to spread over the GPU (Tensat's multi-pattern merge). Offered only where every result is first read after
    every input exists, so the merged matmul has a place (an input computed from a result would be a cycle)."""

    name = "merge_shared_weight_matmul"

    def find(self, g: Graph) -> list[Match]:
        buckets: dict[tuple, list[tuple[np.ndarray, dict[str, str]]]] = {}
        for name, _ in g.calls("relax.matmul"):
            mm = const_weight_matmul(g, name)
            if mm is None or g.single_use(name) is None:
                continue
            w, (shape, dtype) = mm["weight"], float_tensor(mm["x"])
            # A few leading values in the key: weights of one shape are mostly told apart without a full compare.
            key = (w.shape, str(w.dtype), w.ravel()[:16].tobytes(), shape[1:], dtype, mm["out_dtype"])
            groups = buckets.setdefault(key, [])
            group = next((grp for weight, grp in groups if weight is w or np.array_equal(weight, w)), None)
            if group is None:
                groups.append((w, group := {}))
            group.setdefault(mm["x"].name, name)  # the same input twice is dedup's, not a merge
        out = []
        for groups in buckets.values():
            for _, group in groups:
                names = tuple(group.values())
                if len(names) < 2 or self._anchor(g, names) is None:
                    continue
                out.append(self.match(names, f"merge {', '.join(names)} (shared weight)"))
        return out

    @staticmethod
    def _anchor(g: Graph, names: tuple[str, ...]) -> str | None:
        """The first reader of any result, when every input is bound before it and none is a result (else
        None): results are read once, so nothing before their first reader can be computed from them."""
        first = min((g.single_use(n) for n in names), key=g.pos.__getitem__)
        inputs = {g.values[n].args[0].name for n in names}
        if inputs & set(names) or max(g.pos.get(x, -1) for x in inputs) >= g.pos[first]:
            return None
        return first

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        mms = [const_weight_matmul(g, n) for n in m.names]
        anchor, m0 = self._anchor(g, m.names), mms[0]
        x = edit.emit(anchor, relax.op.concat([mm["x"] for mm in mms], axis=0), f"{m.names[0]}_rows")
        y = edit.emit(anchor, relax.op.matmul(x, const(m0["weight"], m0["dtype"]), out_dtype=m0["out_dtype"]),
                      f"{m.names[0]}_merged")
        split_outputs(edit, anchor, y, [mm["shape"][0] for mm in mms], 0, list(m.names), m.names[0])
