"""Matmul algebra (TASO / Tensat): reassociate and distribute matmuls; binary folding (Inductor): fold a
per-channel multiply into the weight before it; combine chains of constant adds or multiplies."""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import Var

from .base import Match, Rule, register
from .conv import make_conv, plain_conv
from .ir import Edit, Graph, channel_bias, const, float_tensor, op_name, with_args
from .matmul import const_weight_matmul

Shape = tuple[int, ...]


def _matmul(g: Graph, name: str) -> tuple | None:
    """(a, b, a's shape, b's shape, result shape, dtype) of matmul binding `name` when its operands and result
    are float tensors of static shape and one dtype (an out_dtype changing it is refused), else None."""
    call = g.values.get(name)
    if op_name(call) != "relax.matmul":
        return None
    a, b = call.args
    types = [float_tensor(e) for e in (a, b, g.vars[name])]
    if None in types or types[2][1] != types[0][1]:
        return None
    return a, b, types[0][0], types[1][0], types[2][0], types[2][1]


def _cost(a: Shape, out: Shape) -> int:
    """Multiply-adds of a matmul with left operand shape `a` and result shape `out`."""
    return int(np.prod(out)) * a[-1]


@register
class MatmulAssociate(Rule):
    """(A @ B) @ C -> A @ (B @ C), and A @ (B @ C) -> (A @ B) @ C; the constant pair (B, C or A, B, 2-D) is
    multiplied at compile time.

    With the pair constant one GEMM disappears (its product becomes one weight, e.g. two linears without a
    nonlinearity between them). Otherwise the order changes only where the static shapes make it strictly
    fewer multiply-adds (the description gives both counts)."""

    name = "matmul_associate"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, _ in g.calls("relax.matmul"):
            outer = _matmul(g, name)
            if outer is None:
                continue
            for side in (0, 1):  # 0: the inner product is the left operand, (A @ B) @ C
                inner_var = outer[side]
                if not isinstance(inner_var, Var) or g.single_use(inner_var.name) != name:
                    continue
                inner = _matmul(g, inner_var.name)
                if inner is None:
                    continue
                (a, sa), (b, sb) = ((inner[0], inner[2]), (inner[1], inner[3])) if side == 0 else \
                    ((outer[0], outer[2]), (inner[0], inner[2]))
                sc = outer[3] if side == 0 else inner[3]
                pair = [g.const(e) for e in ((b, outer[1]) if side == 0 else (a, b))]
                fold = all(v is not None and v.ndim == 2 for v in pair)
                if not fold and not (len(sa) == len(sb) == len(sc) >= 2 and sa[:-2] == sb[:-2] == sc[:-2]):
                    continue  # broadcast batch dimensions could change the products' shapes
                # The new inner product: B @ C (side 0) or A @ B; the remaining product contracts A's or B's
                # last axis.
                new_inner = _cost(sb, sb[:-1] + sc[-1:]) if side == 0 else _cost(sa, sa[:-1] + sb[-1:])
                before = _cost(inner[2], inner[4]) + _cost(outer[2], outer[4])
                after = int(np.prod(outer[4])) * (sa[-1] if side == 0 else sb[-1]) + (0 if fold else new_inner)
                if not fold and after >= before:
                    continue
                form = "(A@B)@C -> A@(B@C)" if side == 0 else "A@(B@C) -> (A@B)@C"
                out.append(self.match((inner_var.name, name), f"{name}: {form}" + (" (constants folded)" if fold
                                      else "") + f", FLOPs {2 * before} -> {2 * after}", (side, fold)))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (inner_name, name), (side, fold) = m.names, m.params
        outer, inner = _matmul(g, name), _matmul(g, inner_name)
        a, b, c = (inner[0], inner[1], outer[1]) if side == 0 else (outer[0], inner[0], inner[1])
        x, y = (b, c) if side == 0 else (a, b)  # the pair multiplied first
        if fold:
            pair = const(g.const(x).astype(np.float64) @ g.const(y).astype(np.float64), outer[5])
        else:
            pair = edit.emit(name, relax.op.matmul(x, y), f"{name}_assoc")
        edit.set_value(name, relax.op.matmul(a, pair) if side == 0 else relax.op.matmul(pair, c))


def _same_operand(g: Graph, a, b) -> bool:
    """Whether `a` and `b` are one variable or constants of equal value (each linear exports its own copy)."""
    if isinstance(a, Var) and isinstance(b, Var) and a.name == b.name:
        return True
    ca, cb = g.const(a), g.const(b)
    return ca is not None and cb is not None and np.array_equal(ca, cb)


@register
class MatmulDistribute(Rule):
    """A @ B + A @ C -> A @ (B + C), and A @ C + B @ C -> (A + B) @ C (B + C folded when both are constants).

    One GEMM disappears: the second matmul becomes an add on its operands (or nothing, folded into the
    weight), and the add of the two products goes with it."""

    name = "matmul_distribute"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.add"):
            p, q = call.args
            if not isinstance(p, Var) or not isinstance(q, Var):
                continue
            if g.single_use(p.name) != name or g.single_use(q.name) != name:
                continue  # both products are removed
            mp, mq = _matmul(g, p.name), _matmul(g, q.name)
            if mp is None or mq is None:
                continue
            for shared in (0, 1):
                other = 1 - shared
                # Equal shapes: B + C does not broadcast, so A @ (B + C) has exactly the products' shape.
                if _same_operand(g, mp[shared], mq[shared]) and mp[2 + other] == mq[2 + other]:
                    fold = g.const(mp[other]) is not None and g.const(mq[other]) is not None
                    form = "A@B + A@C -> A@(B+C)" if shared == 0 else "A@C + B@C -> (A+B)@C"
                    out.append(self.match((p.name, q.name, name), f"{name}: {form}" + (" (folded)" if fold
                                                                                       else ""), (shared, fold)))
                    break
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (p, q, name), (shared, fold) = m.names, m.params
        mp, mq = _matmul(g, p), _matmul(g, q)
        other = 1 - shared
        if fold:
            total = const(g.const(mp[other]).astype(np.float64) + g.const(mq[other]), mp[5])
        else:
            total = edit.emit(name, relax.op.add(mp[other], mq[other]), f"{name}_sum")
        args = [mp[shared], total] if shared == 0 else [total, mp[shared]]
        edit.set_value(name, relax.op.matmul(*args))


def _weighted(g: Graph, name: str) -> tuple[int, int] | None:
    """(output channels, their axis counted from the end) of x @ W or conv2d(x, W) with W a constant of the
    result's dtype (no out_dtype change), else None."""
    mm = const_weight_matmul(g, name)
    if mm is not None:
        return mm["weight"].shape[1], 1
    c = plain_conv(g, name)
    return (c["shape"][1], 3) if c is not None else None


def _per_channel(c: np.ndarray, n: int, axis: int) -> np.ndarray | None:
    """`c` as n factors when it broadcasts only along that axis (counted from the end) or is one number."""
    if c.size == 1:
        return np.full(n, c.reshape(-1)[0], np.float64)
    if c.ndim >= axis and c.shape[c.ndim - axis] == n and c.size == n:
        return c.reshape(-1).astype(np.float64)
    return None


@register
class FoldBinaryIntoWeight(Rule):
    """(x @ W [+ b]) * c -> x @ (W * c) [+ b * c] and conv2d(x, W) [+ b] * c -> conv2d(x, W * c) [+ b * c],
    for a constant c per output channel (or a scalar); a division by such a c (without zeros) too.

    The multiply kernel (or the fused epilogue's extra operand) disappears: the weight and bias absorb the
    factor at compile time (binary folding, as after a layer scale or an unfused batch norm)."""

    name = "fold_binary_into_weight"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.multiply", "relax.divide"):
            divide = op_name(call) == "relax.divide"
            for side in ((0,) if divide else (0, 1)):
                y, c = call.args[side], g.const(call.args[1 - side])
                if c is None or not isinstance(y, Var) or float_tensor(y) != float_tensor(g.vars[name]):
                    continue  # c must not broadcast the result bigger
                if divide and not np.all(c != 0):
                    continue
                if g.single_use(y.name) != name:
                    continue
                names, found = (name, y.name), _weighted(g, y.name)
                add = g.call(y, "relax.add")
                if found is None and add is not None:
                    z = next((a for a in add.args if isinstance(a, Var) and _weighted(g, a.name)), None)
                    # The bias must be per channel too (and the product read only by the add).
                    if z is not None and channel_bias(g, z.name, *_weighted(g, z.name)) is not None:
                        names, found = (name, y.name, z.name), _weighted(g, z.name)
                if found is None or _per_channel(c, *found) is None:
                    continue
                out.append(self.match(names, f"{name}: fold {'1 / ' if divide else ''}c into the weight of "
                                      f"{names[-1]}" + (" and bias" if len(names) == 3 else ""), (side,)))
                break
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        names, (side,) = m.names, m.params
        name, y, target = names[0], names[1], names[-1]
        call = g.values[name]
        n, axis = _weighted(g, target)
        scale = _per_channel(g.const(call.args[1 - side]), n, axis)
        if op_name(call) == "relax.divide":
            scale = 1.0 / scale
        mm = const_weight_matmul(g, target)
        if mm is not None:
            weight = const(mm["weight"].astype(np.float64) * scale[None, :], mm["dtype"])
            edit.set_value(target, relax.op.matmul(mm["x"], weight, out_dtype=mm["out_dtype"]))
        else:
            c = plain_conv(g, target)
            weight = const(c["weight"].astype(np.float64) * scale[:, None, None, None], c["dtype"])
            edit.set_value(target, make_conv(c["x"], weight, c))
        if len(names) == 3:  # the bias add: its constant scaled per channel, in its own shape
            add = g.values[y]
            args = [a if isinstance(a, Var) and a.name == target else
                    const((g.const(a).reshape(-1) * scale).reshape(g.const(a).shape), float_tensor(a)[1])
                    for a in add.args]
            edit.set_value(y, with_args(add, args))
        edit.replace(name, g.vars[y])


@register
class CombineConstAdds(Rule):
    """(y + c1) + c2 -> y + (c1 + c2) and (y * c1) * c2 -> y * (c1 * c2) for constants c1, c2 (either side).

    One element-wise kernel disappears (two bias adds left by binary and batch-norm folding become one);
    offered only where the combined constant broadcasts y to no bigger shape, so the add stays as cheap."""

    name = "combine_const_adds"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.add", "relax.multiply"):
            for side in (0, 1):
                u, c2 = call.args[side], g.const(call.args[1 - side])
                if c2 is None or not isinstance(u, Var) or g.single_use(u.name) != name:
                    continue
                inner = g.call(u, op_name(call))
                if inner is None:
                    continue
                k = next((k for k in (0, 1) if g.const(inner.args[1 - k]) is not None), None)
                if k is None:
                    continue
                y, c1 = inner.args[k], g.const(inner.args[1 - k])
                ty = float_tensor(y)
                if ty is None or np.broadcast_shapes(ty[0], c1.shape, c2.shape) != ty[0]:
                    continue
                kind = "+" if op_name(call) == "relax.add" else "*"
                out.append(self.match((u.name, name), f"{name}: (y {kind} c1) {kind} c2 -> y {kind} (c1 {kind} "
                                      "c2)", (side, k)))
                break
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (u, name), (side, k) = m.names, m.params
        call, inner = g.values[name], g.values[u]
        c1 = g.const(inner.args[1 - k]).astype(np.float64)
        c2 = g.const(call.args[1 - side]).astype(np.float64)
        y = inner.args[k]
        combined = const(c1 + c2 if op_name(call) == "relax.add" else c1 * c2, float_tensor(y)[1])
        edit.set_value(name, with_args(call, [y, combined]))
