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
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(list(s), dtype)) for i, s in enumerate(shapes)]
    with bb.function("main", params):
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


EXAMPLES: dict[str, Callable[[], tvm.IRModule]] = {
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
}
"""A small graph on which each rule family matches (at least once), for tests and examples."""
