"""GEMM shape rules: read a transposed activation inside the matmul, pad a GEMM dimension to a tile size."""
from __future__ import annotations

import string

import numpy as np
from tvm import relax
from tvm.ir import Var

from .base import Match, Rule, register
from .ir import Edit, Graph, channel_bias, const, float_tensor, permute_axes
from .matmul import const_weight_matmul

# float32 vectors hold 16 lanes with AVX-512 (two AVX2 registers of 8), and 16 is the tensor-core fragment
# size (m16n16k16): a multiple of 16 is a multiple of every vector width the targets use.
TILE = 16
MAX_OVERHEAD = 1.25  # padded / original: more padding than this costs more than any tiling gain


def _swap_last_two(g: Graph, expr) -> tuple[Var, list[str]] | None:
    """(the untransposed source, the chain's bindings) when `expr` is permute_dims swapping only the last two
    axes, possibly followed by identity broadcasts and reshapes that keep the last two dimensions."""
    chain = []
    # `expr` is a static float tensor: the matmul operand (checked by find), then each link's checked source.
    while isinstance(expr, Var):
        call = g.values.get(expr.name)
        src = getattr(call, "args", [None])[0]
        if float_tensor(src) is None:
            return None
        op = getattr(getattr(call, "op", None), "name", None)
        shape, src_shape = float_tensor(expr)[0], float_tensor(src)[0]
        if op == "relax.permute_dims":
            n = len(shape)
            # A transposed constant is fold_const_transform's (also one whose payload is not a tensor).
            if permute_axes(call, n) != (*range(n - 2), n - 1, n - 2) or not isinstance(src, Var):
                return None
            return src, chain + [expr.name]
        # Both are views of whole matrices: a reshape keeping the last two dims only regroups the batch of
        # matrices, and a broadcast to the same shape copies nothing.
        if op == "relax.broadcast_to" and src_shape == shape:
            chain.append(expr.name)
        elif op == "relax.reshape" and src_shape[-2:] == shape[-2:]:
            chain.append(expr.name)
        else:
            return None
        expr = src
    return None


def _subscripts(rank: int, side: int) -> str:
    batch = string.ascii_lowercase[:rank - 2]
    if side == 1:  # A [.., m, k] times B^T with B [.., n, k]
        return f"{batch}mk,{batch}nk->{batch}mn"
    return f"{batch}km,{batch}kn->{batch}mn"  # A^T with A [.., k, m] times B [.., k, n]


@register
class TransposeIntoMatmul(Rule):
    """matmul(A, permute_dims(B, last two axes swapped)) (or the lhs form) -> einsum((A, B), "..mk,..nk->..mn").

    TVM runs the transpose of an activation (attention's K^T) as its own copy kernel before the matmul; the
    einsum legalises to one reduction kernel that reads B transposed, so the copy disappears. Identity
    broadcasts and batch-regrouping reshapes between the transpose and the matmul (as exported) go with it."""

    name = "transpose_into_matmul"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.matmul"):
            result = float_tensor(g.vars[name])
            operands = [float_tensor(a) for a in call.args]
            if result is None or None in operands:
                continue
            (sa, dtype), (sb, _) = operands  # Relax requires both operands of one dtype
            # einsum keeps the operands' dtype (no out_dtype) and has no batch broadcasting.
            if dtype != result[1] or len(sa) != len(sb) or sa[:-2] != sb[:-2]:
                continue
            for side in (1, 0):
                found = _swap_last_two(g, call.args[side])
                if found is None or g.const(call.args[side]) is not None:
                    continue
                src, chain = found
                # A second reader of any link keeps the transpose alive: the copy would stay.
                users = [name] + chain[:-1]
                if any(g.single_use(link) != user for link, user in zip(chain, users)):
                    continue
                out.append(self.match((name, *chain), f"{name}: read {src.name} transposed "
                                      f"({'rhs' if side else 'lhs'})", (side,)))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        name, (side,) = m.names[0], m.params
        call = g.values[name]
        src, _ = _swap_last_two(g, call.args[side])
        operand = float_tensor(call.args[side])[0]
        shape = (*operand[:-2], operand[-1], operand[-2])
        if float_tensor(src)[0] != shape:
            src = edit.emit(name, relax.op.reshape(src, shape), f"{name}_src")
        args = list(call.args)
        args[side] = src
        edit.set_value(name, relax.op.einsum(args, _subscripts(len(shape), side)))


def _padded(n: int) -> int | None:
    up = -(-n // TILE) * TILE
    return up if up != n and up <= MAX_OVERHEAD * n else None


@register
class PadGemm(Rule):
    """x @ W (constant W [K, N]) -> a GEMM on zero-padded operands whose extra results are sliced off.

    N: W's columns (and the bias) padded to a multiple of 16, the result sliced back after the bias add;
    M: x's rows padded, the rows sliced back; K: x's columns and W's rows padded (zeros add nothing). A
    dimension that is a multiple of the vector width / tensor-core tile avoids the scalar remainder loops
    TVM's schedules emit for ragged edges (ViT's 65 tokens, a 1000-class head)."""

    name = "pad_gemm"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, _ in g.calls("relax.matmul"):
            # The weight's dtype is the result's (checked there), so the operands' is too: no out_dtype change.
            mm = const_weight_matmul(g, name)
            if mm is None:
                continue
            (k, n), rows = mm["weight"].shape, float_tensor(mm["x"])[0][-2]
            for dim, size in (("N", n), ("M", rows), ("K", k)):
                padded = _padded(size)
                if padded is not None:
                    out.append(self.match((name,), f"{name}: pad {dim} {size} -> {padded}", (dim, padded)))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,), (dim, padded) = m.names, m.params
        mm = const_weight_matmul(g, name)
        x, weight, dtype = mm["x"], mm["weight"], mm["dtype"]
        rank = len(float_tensor(x)[0])
        (k, n), rows = weight.shape, float_tensor(x)[0][-2]
        if dim == "K":
            x = edit.emit(name, relax.op.nn.pad(x, [0, 0] * (rank - 1) + [0, padded - k]), f"{name}_xpad")
            weight = np.pad(weight, ((0, padded - k), (0, 0)))
        elif dim == "M":
            x = edit.emit(name, relax.op.nn.pad(x, [0, 0] * (rank - 2) + [0, padded - rows, 0, 0]),
                          f"{name}_xpad")
        else:
            weight = np.pad(weight, ((0, 0), (0, padded - n)))
        y = relax.op.matmul(x, const(weight, dtype), out_dtype=mm["out_dtype"])
        if dim == "K":
            edit.set_value(name, y)
            return
        last, size = (len(mm["shape"]) - 1, n) if dim == "N" else (len(mm["shape"]) - 2, rows)
        y, target = edit.emit(name, y, f"{name}_padded"), name
        bias = channel_bias(g, name, n, 1)
        if bias is not None:  # the bias add joins the padded GEMM; one slice after it
            target, values = bias
            values = np.pad(values, (0, padded - n)) if dim == "N" else values
            y = edit.emit(target, relax.op.add(y, const(values, dtype)), f"{name}_padded_bias")
        edit.set_value(target, relax.op.strided_slice(y, [last], [0], [size]))
