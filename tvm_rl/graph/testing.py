"""Small hand-built Relax graphs for testing rules: `module(body, shapes)` and random constants."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import tvm
from tvm import relax

Body = Callable[..., object]


def module(body: Body, shapes: Sequence[Sequence[int]], dtype: str = "float32") -> tvm.IRModule:
    """A module whose `main(x0, x1, ...)` (inputs of `shapes`) is built by `body(emit, x0, x1, ...)`.

    `emit(expr)` binds `expr` in the dataflow block and returns the variable; `body` returns the result
    expression (a variable, or a tuple of them).
    """
    return module_of([relax.Var(f"x{i}", relax.TensorType(list(s), dtype)) for i, s in enumerate(shapes)], body)


def module_of(params: Sequence[relax.Var], body: Body) -> tvm.IRModule:
    """Like `module`, for inputs it cannot make (unknown rank, symbolic shapes): `main(params)` returns
    `body(emit, *params)`."""
    bb = relax.BlockBuilder()
    with bb.function("main", list(params)):
        with bb.dataflow():
            out = body(bb.emit, *params)
            if isinstance(out, (list, tuple)):
                out = relax.Tuple(list(out))
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    return bb.get()


def rand(rng: np.random.Generator, *shape: int, low: float | None = None, high: float | None = None,
         dtype: str = "float32") -> relax.Expr:
    """A constant of `shape`: standard normal, or uniform in [low, high)."""
    if low is None:
        data = rng.standard_normal(shape)
    else:
        data = rng.uniform(low, high, size=shape)
    return relax.const(np.asarray(data).astype(dtype), dtype)


# ----------------------------------------------------------------------------- one small graph per family

R = relax.op


def _conv(x, w, stride=1, pad=0, groups=1):
    return R.nn.conv2d(x, w, strides=stride, padding=pad, groups=groups)


def bn_graph(cin: int = 3, cout: int = 4, hw: int = 6, k: int = 3, stride: int = 1, groups: int = 1,
             eps: float = 1e-5, seed: int = 0) -> tvm.IRModule:
    """conv2d -> inference batch_norm (random statistics) -> [0] -> relu."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        y = emit(_conv(x, rand(rng, cout, cin // groups, k, k), stride, k // 2, groups))
        t = emit(R.nn.batch_norm(y, rand(rng, cout, low=0.5, high=1.5), rand(rng, cout), rand(rng, cout),
                                 rand(rng, cout, low=0.5, high=1.5), axis=1, epsilon=eps, training=False))
        return emit(R.nn.relu(emit(relax.TupleGetItem(t, 0))))

    return module(body, [(1, cin, hw, hw)])


def merge_conv_graph(cin: int = 3, outs: Sequence[int] = (4, 6), k: int = 3, stride: int = 1, hw: int = 7,
                     bias: bool = True, seed: int = 0) -> tvm.IRModule:
    """Sibling kxk conv2d on one input, each with a (1, O, 1, 1) bias add, then relu."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        ys = []
        for o in outs:
            y = emit(_conv(x, rand(rng, o, cin, k, k), stride, k // 2))
            if bias:
                y = emit(R.add(y, rand(rng, 1, o, 1, 1)))
            ys.append(emit(R.nn.relu(y)))
        return ys

    return module(body, [(1, cin, hw, hw)])


def enlarge_graph(cin: int = 3, hw: int = 7, stride: int = 1, outs: Sequence[int] = (4, 5), k: int = 3,
                  seed: int = 0) -> tvm.IRModule:
    """A 1x1 conv2d and a kxk (padding k//2) sibling with the same stride, concatenated (SqueezeNet fire)."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        a = emit(_conv(x, rand(rng, outs[0], cin, 1, 1), stride, 0))
        b = emit(_conv(x, rand(rng, outs[1], cin, k, k), stride, k // 2))
        return emit(R.concat([emit(R.nn.relu(a)), emit(R.nn.relu(b))], axis=1))

    return module(body, [(1, cin, hw, hw)])


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


def permute_graph(shape: Sequence[int] = (2, 3, 4), pairs=(((1, 2, 0), (2, 0, 1)), ((1, 0, 2), (0, 2, 1)))
                  ) -> tvm.IRModule:
    """One permute_dims(permute_dims(x, p1), p2) per pair; the first pair composes to the identity."""

    def body(emit, x):
        outs = [emit(R.permute_dims(emit(R.permute_dims(x, list(p1))), list(p2))) for p1, p2 in pairs]
        return [emit(R.nn.relu(o)) for o in outs]

    return module(body, [tuple(shape)])


def reshape_graph(shape: Sequence[int] = (2, 3, 4), chains=(((6, 4), (4, 6)), ((24,), (2, 3, 4)))
                  ) -> tvm.IRModule:
    """One reshape(reshape(x, s1), s2) per chain; the second returns to x's own shape."""

    def body(emit, x):
        return [emit(R.nn.relu(emit(R.reshape(emit(R.reshape(x, s1)), s2)))) for s1, s2 in chains]

    return module(body, [tuple(shape)])


def identity_shape_graph() -> tvm.IRModule:
    """reshape / broadcast_to / permute_dims that change nothing, and a broadcast_to that does."""

    def body(emit, x):
        a = emit(R.reshape(x, (2, 3, 4)))
        b = emit(R.broadcast_to(a, (2, 3, 4)))
        c = emit(R.permute_dims(b, [0, 1, 2]))
        return [emit(R.nn.relu(c)), emit(R.broadcast_to(x, (2, 2, 3, 4)))]

    return module(body, [(2, 3, 4)])


def const_transform_graph(seed: int = 0) -> tvm.IRModule:
    """x @ permute_dims(W) + reshape(b): both constant layouts can be pre-computed."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        y = emit(R.matmul(x, emit(R.permute_dims(rand(rng, 6, 8), [1, 0]))))
        return emit(R.add(y, emit(R.reshape(rand(rng, 6), (1, 6)))))

    return module(body, [(3, 8)])


def identity_arith_graph() -> tvm.IRModule:
    """x*1, 0+x, x-0, x/1 (neutral constants of several shapes), and x*2 and a broadcasting +0 (kept)."""
    f = np.float32

    def body(emit, x):
        a = emit(R.multiply(x, relax.const(f(1.0))))
        b = emit(R.add(relax.const(np.zeros(4, f)), a))
        c = emit(R.subtract(b, relax.const(np.zeros((1, 4), f))))
        d = emit(R.divide(c, relax.const(np.ones((), f))))
        return [emit(R.multiply(d, relax.const(f(2.0)))), emit(R.add(d, relax.const(np.zeros((3, 2, 4), f))))]

    return module(body, [(2, 4)])


def dedup_graph() -> tvm.IRModule:
    """relu(x) twice and permute_dims(x) twice; relu(y) and another permutation are not duplicates."""

    def body(emit, x, y):
        a, b, c = emit(R.nn.relu(x)), emit(R.nn.relu(x)), emit(R.nn.relu(y))
        d, e = emit(R.permute_dims(x, [1, 0])), emit(R.permute_dims(x, [1, 0]))
        return [emit(R.add(emit(R.add(a, b)), c)), emit(R.add(d, e)), emit(R.permute_dims(y, [0, 1]))]

    return module(body, [(4, 4), (4, 4)])


def split_concat_graph(shape: Sequence[int] = (2, 6, 3), parts: int = 3, axis: int = 1,
                       order: Sequence[int] | None = None) -> tvm.IRModule:
    """concat of the parts of split(x) (in `order`, all of them by default) along the split's axis."""

    def body(emit, x):
        s = emit(R.split(x, parts, axis=axis))
        items = [emit(relax.TupleGetItem(s, i)) for i in range(parts)]
        chosen = [items[i] for i in (order if order is not None else range(parts))]
        return [emit(R.nn.relu(emit(R.concat(chosen, axis=axis)))), emit(R.sigmoid(items[1]))]

    return module(body, [tuple(shape)])


def act_into_concat_graph(act: str = "relu") -> tvm.IRModule:
    """act(concat(x, y))."""
    fn = {"relu": R.nn.relu, "gelu": R.nn.gelu, "sigmoid": R.sigmoid}[act]

    def body(emit, x, y):
        return emit(fn(emit(R.concat([x, y], axis=1))))

    return module(body, [(2, 3), (2, 5)])


def act_out_of_concat_graph(hi: Sequence[float] = (6.0, 6.0)) -> tvm.IRModule:
    """concat(relu(x), relu(y)) and concat(clip(x, 0, hi0), clip(y, 0, hi1)) (one activation when equal)."""

    def body(emit, x, y):
        a = emit(R.concat([emit(R.nn.relu(x)), emit(R.nn.relu(y))], axis=1))
        b = emit(R.concat([emit(R.clip(x, 0.0, hi[0])), emit(R.clip(y, 0.0, hi[1]))], axis=1))
        return [a, b]

    return module(body, [(2, 3), (2, 5)])


def tuple_graph() -> tvm.IRModule:
    """max_pool2d's exported (output, zeros_like(output))[0], and split(x)[1] (an operator's tuple)."""

    def body(emit, x):
        y = emit(R.nn.max_pool2d(x, pool_size=2, strides=2))
        pair = emit(relax.Tuple([y, emit(R.zeros_like(y))]))
        part = emit(relax.TupleGetItem(emit(R.split(x, 2, axis=1)), 1))
        return [emit(R.nn.relu(emit(relax.TupleGetItem(pair, 0)))), part]

    return module(body, [(1, 4, 6, 6)])


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


def pointwise_graph(cin: int = 3, cout: int = 4, hw: int = 5, batch: int = 1, seed: int = 0) -> tvm.IRModule:
    """A 1x1 conv2d (rewritable as a matmul), beside a strided 1x1 and a 3x3 conv2d (not)."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        a = emit(R.nn.relu(emit(_conv(x, rand(rng, cout, cin, 1, 1)))))
        b = emit(_conv(x, rand(rng, cout, cin, 1, 1), stride=2))
        c = emit(_conv(x, rand(rng, cout, cin, 3, 3), pad=1))
        return [a, b, c]

    return module(body, [(batch, cin, hw, hw)])


def dense_graph(n: int = 2, c: int = 6, o: int = 5, seed: int = 0) -> tvm.IRModule:
    """x [N, C] @ permute_dims(W) + b (a classifier head), beside a 3-D x @ W (not a dense layer)."""
    rng = np.random.default_rng(seed)

    def body(emit, x, y):
        a = emit(R.add(emit(R.matmul(x, emit(R.permute_dims(rand(rng, o, c), [1, 0])))), rand(rng, o)))
        return [a, emit(R.matmul(y, rand(rng, c, o)))]

    return module(body, [(n, c), (2, n, c)])


def conv_chain_graph(cin: int = 3, mid: int = 4, cout: int = 5, hw: int = 6, k: int = 3, stride: int = 1,
                     groups: int = 1, seed: int = 0) -> tvm.IRModule:
    """conv2d -> per-channel bias add -> relu -> conv2d (groups on the second), as a folded CNN has them."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        y = emit(_conv(x, rand(rng, mid, cin, k, k), stride, k // 2))
        y = emit(R.nn.relu(emit(R.add(y, rand(rng, 1, mid, 1, 1)))))
        return emit(_conv(y, rand(rng, cout * groups, mid // groups, k, k), 1, k // 2, groups))

    return module(body, [(1, cin, hw, hw)])


def permute_elementwise_graph(shape: Sequence[int] = (1, 3, 4, 5), axes: Sequence[int] = (0, 2, 3, 1),
                              seed: int = 0) -> tvm.IRModule:
    """permute_dims(x) + per-channel constant, then relu (twice on the way back: relu of a transpose)."""
    rng = np.random.default_rng(seed)
    permuted = [shape[a] for a in axes]

    def body(emit, x, y):
        a = emit(R.add(emit(R.permute_dims(x, list(axes))), rand(rng, permuted[-1])))
        b = emit(R.nn.relu(emit(R.permute_dims(y, list(axes)))))
        return emit(R.multiply(a, b))

    return module(body, [tuple(shape), tuple(shape)])


def reshape_elementwise_graph(shape: Sequence[int] = (2, 3, 4), seed: int = 0) -> tvm.IRModule:
    """Element-wise ops after a reshape that merges x's leading axes: relu of it, it plus a per-last-axis constant,
    a constant minus it (the reshaped operand second); and a per-axis constant the reshape does not keep (no match)."""
    rng = np.random.default_rng(seed)
    merged = (int(np.prod(shape[:-1])), shape[-1])

    def body(emit, x):
        a = emit(R.nn.relu(emit(R.reshape(x, merged))))
        b = emit(R.add(emit(R.reshape(x, merged)), rand(rng, shape[-1])))
        c = emit(R.subtract(rand(rng, 1, shape[-1]), emit(R.reshape(x, merged))))
        flat = emit(R.multiply(emit(R.reshape(x, (merged[0] * merged[1],))), rand(rng, merged[0] * merged[1])))
        return emit(R.add(emit(R.multiply(a, b)), c)), flat

    return module(body, [tuple(shape)])


def maxpool_graph(act: str = "relu", k: int = 3, stride: int = 2, pad: int = 1, hw: int = 7,
                  ceil_mode: bool = False) -> tvm.IRModule:
    """max_pool2d(act(x)) (ResNet's stem: relu then a padded 3x3 stride-2 pool)."""
    fns = {"relu": R.nn.relu, "sigmoid": R.sigmoid, "tanh": R.tanh, "gelu": R.nn.gelu, "silu": R.nn.silu,
           "clip": lambda x: R.clip(x, 0.0, 6.0), "leakyrelu": lambda x: R.nn.leakyrelu(x, 0.1),
           "neg_leakyrelu": lambda x: R.nn.leakyrelu(x, -0.5)}

    def body(emit, x):
        return emit(R.nn.max_pool2d(emit(fns[act](x)), pool_size=k, strides=stride, padding=pad,
                                    ceil_mode=ceil_mode))

    return module(body, [(1, 3, hw, hw)])


def avgpool_graph(k: int = 3, stride: int = 1, pad: int = 1, hw: int = 6, channels: int = 3,
                  count_include_pad: bool = True) -> tvm.IRModule:
    """avg_pool2d (Inception's 3x3 stride-1 padded branch pool by default) then relu."""

    def body(emit, x):
        return emit(R.nn.relu(emit(R.nn.avg_pool2d(x, pool_size=k, strides=stride, padding=pad,
                                                   count_include_pad=count_include_pad))))

    return module(body, [(1, channels, hw, hw)])


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


def fold_binary_graph(shape: Sequence[int] = (2, 3, 8), n: int = 6, cin: int = 3, cout: int = 4, hw: int = 5,
                      seed: int = 0) -> tvm.IRModule:
    """(x @ W^T + b) * c (bias first, as exported; c per column), conv2d(y, W) * c (c [1, O, 1, 1]), and
    (conv2d(y, W) + b) / c (c [O, 1, 1] without zeros)."""
    rng = np.random.default_rng(seed)

    def body(emit, x, y):
        a = emit(R.add(rand(rng, n), emit(R.matmul(x, emit(R.permute_dims(rand(rng, n, shape[-1]), [1, 0]))))))
        a = emit(R.multiply(a, rand(rng, n)))
        b = emit(R.multiply(emit(_conv(y, rand(rng, cout, cin, 3, 3), 1, 1)), rand(rng, 1, cout, 1, 1)))
        c = emit(R.add(emit(_conv(y, rand(rng, cout, cin, 1, 1))), rand(rng, cout, 1, 1)))
        c = emit(R.divide(c, rand(rng, cout, 1, 1, low=0.5, high=2.0)))
        return [emit(R.nn.relu(a)), emit(R.nn.relu(b)), emit(R.nn.relu(c))]

    return module(body, [tuple(shape), (1, cin, hw, hw)])


def combine_const_graph(shape: Sequence[int] = (2, 3, 4), seed: int = 0) -> tvm.IRModule:
    """(b1 + relu(x)) + b2 (constants on either side, shapes [4] and [3, 4]) and (relu(x) * s1) * s2."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        r = emit(R.nn.relu(x))
        a = emit(R.add(rand(rng, *shape[-1:]), r))
        a = emit(R.add(emit(R.add(a, rand(rng, *shape[-2:]))), rand(rng, 1, *shape[-1:])))
        b = emit(R.multiply(emit(R.multiply(r, rand(rng, *shape[-1:]))), relax.const(0.5, "float32")))
        return [emit(R.nn.gelu(a)), emit(R.nn.gelu(b))]

    return module(body, [tuple(shape)])


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


EXAMPLES: dict[str, Callable[[], tvm.IRModule]] = {
    "merge_sibling_linear": sibling_linear_graph,
    "split_fused_matmul": fused_matmul_graph,
    "merge_shared_weight_matmul": shared_weight_graph,
    "matmul_associate": associate_graph,
    "matmul_distribute": distribute_graph,
    "fold_binary_into_weight": fold_binary_graph,
    "combine_const_adds": combine_const_graph,
    "fold_batchnorm": bn_graph,
    "merge_parallel_conv2d": merge_conv_graph,
    "enlarge_conv_kernel": enlarge_graph,
    "merge_parallel_matmul": merge_matmul_graph,
    "scalar_mul_motion": scale_graph,
    "permute_compose": permute_graph,
    "reshape_compose": reshape_graph,
    "identity_shape_op": identity_shape_graph,
    "fold_const_transform": const_transform_graph,
    "identity_arith": identity_arith_graph,
    "dedup": dedup_graph,
    "split_concat_cancel": split_concat_graph,
    "activation_into_concat": act_into_concat_graph,
    "activation_out_of_concat": act_out_of_concat_graph,
    "fold_tuple_get_item": tuple_graph,
    "fuse_attention": lambda: attention_graph(bias=True),
    "conv1x1_to_matmul": pointwise_graph,
    "matmul_to_conv1x1": dense_graph,
    "conv2d_to_nhwc": conv_chain_graph,
    "permute_past_elementwise": permute_elementwise_graph,
    "activation_after_maxpool": maxpool_graph,
    "avg_pool_to_conv": avgpool_graph,
    "transpose_into_matmul": transpose_matmul_graph,
    "pad_gemm": pad_gemm_graph,
    "fold_layernorm_affine": layernorm_linear_graph,
    "reshape_past_elementwise": reshape_elementwise_graph,
}
"""A small graph on which each rule family matches (at least once), for tests and examples."""


def bn_chain_graph(layers: int = 3, seed: int = 0) -> tvm.IRModule:
    """conv -> batch_norm -> relu, `layers` times: one batch-norm fold per layer."""
    rng = np.random.default_rng(seed)
    R = relax.op

    def body(emit, x):
        for _ in range(layers):
            y = emit(R.nn.conv2d(x, rand(rng, 4, 4, 3, 3), padding=1))
            t = emit(R.nn.batch_norm(y, rand(rng, 4, low=0.5, high=1.5), rand(rng, 4), rand(rng, 4),
                                     rand(rng, 4, low=0.5, high=1.5), axis=1, training=False))
            x = emit(R.nn.relu(emit(relax.TupleGetItem(t, 0))))
        return x

    return module(body, [(1, 4, 6, 6)])
