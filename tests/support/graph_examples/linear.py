"""Small graphs of matmuls, linears and attention, one per rule family that rewrites them."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import tvm
from tvm import relax

from .build import R, module, rand


def merge_matmul_graph(shape: Sequence[int] = (2, 5, 8), outs: Sequence[int] = (4, 6, 4), bias: bool = True,
                       seed: int = 0) -> tvm.IRModule:
    """Sibling x @ permute_dims(W_i) (+ b_i, the bias first as PyTorch exports it) on one input."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        ys = []
        for o in outs:
            y = emit(R.matmul(x, emit(R.permute_dims(rand(rng, o, shape[-1]), [1, 0]))))
            if bias:
                y = emit(R.add(rand(rng, o), y))
            ys.append(emit(R.nn.gelu(y)))
        return ys

    return module(body, [tuple(shape)])


def scale_graph(scale: float = 0.125, seed: int = 0) -> tvm.IRModule:
    """(x @ W^T + b), reshaped and permuted, times a scalar: the attention-scale pattern."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        y = emit(R.matmul(x, emit(R.permute_dims(rand(rng, 6, 8), [1, 0]))))
        y = emit(R.add(rand(rng, 6), y))
        y = emit(R.permute_dims(emit(R.reshape(y, (2, 2, 6))), [0, 2, 1]))
        return emit(R.nn.softmax(emit(R.multiply(y, relax.const(scale, "float32"))), axis=-1))

    return module(body, [(4, 8)])


def attention_graph(groups: int = 2, queries: int = 5, keys: int = 6, dim: int = 4, dim_v: int = 3,
                    scale: float | None = 0.3, bias: bool = False, seed: int = 0) -> tvm.IRModule:
    """softmax(q @ permute(k) [* scale] [+ mask]) @ v, with the reshapes and broadcast the exporters emit."""
    rng = np.random.default_rng(seed)

    def body(emit, q, k, v):
        s = emit(R.matmul(q, emit(R.permute_dims(k, [0, 2, 1]))))
        s = emit(R.reshape(s, (1, groups, queries, keys)))
        if scale is not None:
            s = emit(R.multiply(s, relax.const(scale, "float32")))
        if bias:
            mask = np.where(np.tril(np.ones((queries, keys))) > 0, 0.0, -1e9) + rng.standard_normal(keys)
            s = emit(R.add(s, relax.const(mask.astype("float32"))))
        p = emit(R.nn.softmax(s, axis=-1))
        p = emit(R.reshape(emit(R.broadcast_to(p, (1, groups, queries, keys))), (groups, queries, keys)))
        return emit(R.nn.relu(emit(R.matmul(p, v))))

    return module(body, [(groups, queries, dim), (groups, keys, dim), (groups, keys, dim_v)])


def associate_graph(shape: Sequence[int] = (2, 5, 8), mid: int = 6, out: int = 4, m: int = 2, k: int = 16,
                    seed: int = 0) -> tvm.IRModule:
    """Two linears without a nonlinearity, (x @ W1^T) @ W2^T (constants: folded), and x1 @ (x2 @ x3) with
    x1 [m, k], x2, x3 [k, k] (cheaper as (x1 @ x2) @ x3 when m < k)."""
    rng = np.random.default_rng(seed)

    def body(emit, x, x1, x2, x3):
        y = emit(R.matmul(x, emit(R.permute_dims(rand(rng, mid, shape[-1]), [1, 0]))))
        y = emit(R.matmul(y, emit(R.permute_dims(rand(rng, out, mid), [1, 0]))))
        return [emit(R.nn.relu(y)), emit(R.nn.relu(emit(R.matmul(x1, emit(R.matmul(x2, x3))))))]

    return module(body, [tuple(shape), (m, k), (k, k), (k, k)])


def distribute_graph(m: int = 3, k: int = 8, n: int = 5, seed: int = 0) -> tvm.IRModule:
    """x @ W1 + x @ W2 (constants: folded) and x1 @ x3 + x2 @ x3 (a shared right operand)."""
    rng = np.random.default_rng(seed)

    def body(emit, x, x1, x2, x3):
        a = emit(R.add(emit(R.matmul(x, rand(rng, k, n))), emit(R.matmul(x, rand(rng, k, n)))))
        b = emit(R.add(emit(R.matmul(x1, x3)), emit(R.matmul(x2, x3))))
        return [emit(R.nn.relu(a)), emit(R.nn.relu(b))]

    return module(body, [(m, k), (m, k), (m, k), (k, n)])


def transpose_matmul_graph(batch: Sequence[int] = (1, 2), m: int = 5, n: int = 6, k: int = 4, lhs: bool = False,
                           chain: bool = True) -> tvm.IRModule:
    """matmul(A, permute_dims(B)) then softmax, as attention exports Q K^T: with `chain`, an identity
    broadcast_to and a reshape merging the batch dims sit between each operand and the matmul. `lhs`: the
    transposed operand is the left one (A [.., k, m] transposed)."""
    rank = len(batch) + 2
    swap = [*range(rank - 2), rank - 1, rank - 2]

    def view(emit, v, shape):
        if not chain:
            return v
        v = emit(R.broadcast_to(v, shape))
        return emit(R.reshape(v, (int(np.prod(batch)), *shape[-2:])))

    def body(emit, a, b):
        if lhs:
            a = view(emit, emit(R.permute_dims(a, swap)), (*batch, m, k))
            b = view(emit, b, (*batch, k, n))
        else:
            a = view(emit, a, (*batch, m, k))
            b = view(emit, emit(R.permute_dims(b, swap)), (*batch, k, n))
        return emit(R.nn.softmax(emit(R.matmul(a, b)), axis=-1))

    shapes = [(*batch, k, m), (*batch, k, n)] if lhs else [(*batch, m, k), (*batch, n, k)]
    return module(body, shapes)


def pad_gemm_graph(shape: Sequence[int] = (2, 13, 14), n: int = 15, bias: bool = True, seed: int = 0
                   ) -> tvm.IRModule:
    """x @ permute_dims(W) (+ b, bias first as exported) then gelu; by default M 13, K 14 and N 15 are each
    one tile-padding away from 16."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        y = emit(R.matmul(x, emit(R.permute_dims(rand(rng, n, shape[-1]), [1, 0]))))
        if bias:
            y = emit(R.add(rand(rng, n), y))
        return emit(R.nn.gelu(y))

    return module(body, [tuple(shape)])


def layernorm_linear_graph(shape: Sequence[int] = (1, 5, 8), outs: Sequence[int] = (8, 8, 12),
                           bias: Sequence[bool] = (True, True, False), reshape: bool = True,
                           residual: bool = False, seed: int = 0) -> tvm.IRModule:
    """A pre-LN block's start: layer_norm(x, gamma, beta) read by linears (each through its own reshape to
    [B*S, K], as exported), each optionally with a bias; `residual` adds a residual reader (post-LN)."""
    rng = np.random.default_rng(seed)
    k, rows = shape[-1], int(np.prod(shape[:-1]))

    def body(emit, x):
        ln = emit(R.nn.layer_norm(x, rand(rng, k, low=0.5, high=1.5), rand(rng, k), axes=[-1]))
        ys = []
        for o, with_bias in zip(outs, bias):
            v = emit(R.reshape(ln, (rows, k))) if reshape else ln
            y = emit(R.matmul(v, emit(R.permute_dims(rand(rng, o, k), [1, 0]))))
            ys.append(emit(R.nn.gelu(emit(R.add(rand(rng, o), y)) if with_bias else y)))
        if residual:
            ys.append(emit(R.add(x, ln)))
        return ys

    return module(body, [tuple(shape)])


def sibling_linear_graph(batch: int = 2, seq: int = 3, k: int = 8, outs: Sequence[int] = (4, 6, 4),
                         bias: bool = True, seed: int = 0) -> tvm.IRModule:
    """Q/K/V as torch.export gives them: each linear reshapes x to [B*S, K] itself, then x @ permute_dims(W)
    (+ b, the bias first), reshaped back to [B, S, N]."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        ys = []
        for o in outs:
            y = emit(R.matmul(emit(R.reshape(x, (batch * seq, k))), emit(R.permute_dims(rand(rng, o, k), [1, 0]))))
            if bias:
                y = emit(R.add(rand(rng, o), y))
            ys.append(emit(R.nn.gelu(emit(R.reshape(y, (batch, seq, o))))))
        return ys

    return module(body, [(batch, seq, k)])


def fused_matmul_graph(batch: int = 2, seq: int = 3, k: int = 6, width: int = 4, parts: int = 3,
                       bias: bool = True, seed: int = 0) -> tvm.IRModule:
    """GPT-2's c_attn as exported: reshape(x) @ W [K, parts*width] (+ b), reshaped to [B, S, parts*width],
    split(parts, axis=-1); the parts combined unsymmetrically (q + k * v ...)."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        y = emit(R.matmul(emit(R.reshape(x, (batch * seq, k))), rand(rng, k, parts * width)))
        if bias:
            y = emit(R.add(rand(rng, parts * width), y))
        s = emit(R.split(emit(R.reshape(y, (batch, seq, parts * width))), parts, axis=-1))
        items = [emit(relax.TupleGetItem(s, i)) for i in range(parts)]
        out = items[0]
        for i, item in enumerate(items[1:]):
            out = emit(R.multiply(out, item) if i % 2 else R.add(out, emit(R.sigmoid(item))))
        return out

    return module(body, [(batch, seq, k)])


def shared_weight_graph(shapes: Sequence[Sequence[int]] = ((3, 6), (5, 6)), n: int = 4, same: bool = True,
                        seed: int = 0) -> tvm.IRModule:
    """x_i @ W for each input, one weight constant for all (`same`) or a different one each, then relu."""
    rng = np.random.default_rng(seed)
    shared = rand(rng, shapes[0][-1], n)

    def body(emit, *xs):
        return [emit(R.nn.relu(emit(R.matmul(x, shared if same else rand(rng, shapes[0][-1], n))))) for x in xs]

    return module(body, [tuple(s) for s in shapes])
