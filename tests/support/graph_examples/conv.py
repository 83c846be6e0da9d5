"""Small graphs of convolutions, batch norms and pools, one per rule family that rewrites them."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import tvm
from tvm import relax

from .build import R, module, rand


def conv2d(x, w, stride=1, pad=0, groups=1):
    """conv2d of `x` by the weight `w` (NCHW, OIHW), with one stride and padding for both axes."""
    return R.nn.conv2d(x, w, strides=stride, padding=pad, groups=groups)


def bn_graph(cin: int = 3, cout: int = 4, hw: int = 6, k: int = 3, stride: int = 1, groups: int = 1,
             eps: float = 1e-5, seed: int = 0) -> tvm.IRModule:
    """conv2d -> inference batch_norm (random statistics) -> [0] -> relu."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        y = emit(conv2d(x, rand(rng, cout, cin // groups, k, k), stride, k // 2, groups))
        t = emit(R.nn.batch_norm(y, rand(rng, cout, low=0.5, high=1.5), rand(rng, cout), rand(rng, cout),
                                 rand(rng, cout, low=0.5, high=1.5), axis=1, epsilon=eps, training=False))
        return emit(R.nn.relu(emit(relax.TupleGetItem(t, 0))))

    return module(body, [(1, cin, hw, hw)])


def bn_chain_graph(layers: int = 3, seed: int = 0) -> tvm.IRModule:
    """conv -> batch_norm -> relu, `layers` times: one batch-norm fold per layer."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        for _ in range(layers):
            y = emit(R.nn.conv2d(x, rand(rng, 4, 4, 3, 3), padding=1))
            t = emit(R.nn.batch_norm(y, rand(rng, 4, low=0.5, high=1.5), rand(rng, 4), rand(rng, 4),
                                     rand(rng, 4, low=0.5, high=1.5), axis=1, training=False))
            x = emit(R.nn.relu(emit(relax.TupleGetItem(t, 0))))
        return x

    return module(body, [(1, 4, 6, 6)])


def merge_conv_graph(cin: int = 3, outs: Sequence[int] = (4, 6), k: int = 3, stride: int = 1, hw: int = 7,
                     bias: bool = True, seed: int = 0) -> tvm.IRModule:
    """Sibling kxk conv2d on one input, each with a (1, O, 1, 1) bias add, then relu."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        ys = []
        for o in outs:
            y = emit(conv2d(x, rand(rng, o, cin, k, k), stride, k // 2))
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
        a = emit(conv2d(x, rand(rng, outs[0], cin, 1, 1), stride, 0))
        b = emit(conv2d(x, rand(rng, outs[1], cin, k, k), stride, k // 2))
        return emit(R.concat([emit(R.nn.relu(a)), emit(R.nn.relu(b))], axis=1))

    return module(body, [(1, cin, hw, hw)])


def pointwise_graph(cin: int = 3, cout: int = 4, hw: int = 5, batch: int = 1, seed: int = 0) -> tvm.IRModule:
    """A 1x1 conv2d (rewritable as a matmul), beside a strided 1x1 and a 3x3 conv2d (not)."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        a = emit(R.nn.relu(emit(conv2d(x, rand(rng, cout, cin, 1, 1)))))
        b = emit(conv2d(x, rand(rng, cout, cin, 1, 1), stride=2))
        c = emit(conv2d(x, rand(rng, cout, cin, 3, 3), pad=1))
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
        y = emit(conv2d(x, rand(rng, mid, cin, k, k), stride, k // 2))
        y = emit(R.nn.relu(emit(R.add(y, rand(rng, 1, mid, 1, 1)))))
        return emit(conv2d(y, rand(rng, cout * groups, mid // groups, k, k), 1, k // 2, groups))

    return module(body, [(1, cin, hw, hw)])


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


def fold_binary_graph(shape: Sequence[int] = (2, 3, 8), n: int = 6, cin: int = 3, cout: int = 4, hw: int = 5,
                      seed: int = 0) -> tvm.IRModule:
    """(x @ W^T + b) * c (bias first, as exported; c per column), conv2d(y, W) * c (c [1, O, 1, 1]), and
    (conv2d(y, W) + b) / c (c [O, 1, 1] without zeros)."""
    rng = np.random.default_rng(seed)

    def body(emit, x, y):
        a = emit(R.add(rand(rng, n), emit(R.matmul(x, emit(R.permute_dims(rand(rng, n, shape[-1]), [1, 0]))))))
        a = emit(R.multiply(a, rand(rng, n)))
        b = emit(R.multiply(emit(conv2d(y, rand(rng, cout, cin, 3, 3), 1, 1)), rand(rng, 1, cout, 1, 1)))
        c = emit(R.add(emit(conv2d(y, rand(rng, cout, cin, 1, 1))), rand(rng, cout, 1, 1)))
        c = emit(R.divide(c, rand(rng, cout, 1, 1, low=0.5, high=2.0)))
        return [emit(R.nn.relu(a)), emit(R.nn.relu(b)), emit(R.nn.relu(c))]

    return module(body, [tuple(shape), (1, cin, hw, hw)])
