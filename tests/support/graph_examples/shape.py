"""Small graphs of layout, shape, concat and elementwise ops, one per rule family that rewrites them."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import tvm
from tvm import relax

from .build import R, module, rand


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
