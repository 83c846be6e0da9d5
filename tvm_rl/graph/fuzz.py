"""A fuzzer for the rewrite rules: random small Relax graphs, random rewrite sequences, numerical checks.

`random_graph(seed)` builds a well-formed `main` (static shapes, float32 or float16) from motifs of the
operators the rules touch. The motifs are chosen to make rules *match* (sibling convolutions and matmuls on
one input, batch_norm after conv2d, exported attention chains, x * 1, permute chains, concats of
activations, ...) and, now and then, to set the traps the rules must refuse (a second reader, a
broadcasting constant, a training batch_norm, a gelu before max pooling, a dtype change).

`fuzz_example` then walks random rewrite sequences from each graph, picking (rule, match) pairs from
`enumerate_candidates`, and checks every graph it reaches against the original on random inputs, each
output to a tolerance relative to its own scale; all of one graph's variants are compiled in one build
(`verify.run_variants`), which is the expensive part.

    python -m tvm_rl.graph.fuzz --examples 200 --seed 1 [--steps 4]

prints progress and a per-family coverage table, and exits non-zero after printing a reproducer for any
rewrite that changed a result.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.ir import TupleGetItem

from .. import measure
from ..errors import MismatchError
from .candidates import enumerate_candidates
from .rules import Match, all_rules, rule_names
from .verify import random_inputs, run_variants

R = relax.op

# Rewrites reorder float arithmetic (merged convolutions, folded constants); float16 keeps ~3 digits.
TOLERANCES = {"float32": (1e-4, 1e-4), "float16": (2e-2, 2e-2)}

_ACTS: dict[str, Callable] = {
    "relu": R.nn.relu,
    "gelu": R.nn.gelu,
    "silu": R.nn.silu,
    "sigmoid": R.sigmoid,
    "tanh": R.tanh,
    "clip": lambda x: R.clip(x, 0.0, 6.0),
    "clip1": lambda x: R.clip(x, -1.0, 1.0),
    "leakyrelu": lambda x: R.nn.leakyrelu(x, 0.1),
    "neg_leakyrelu": lambda x: R.nn.leakyrelu(x, -0.5),
}
# Drawn more often: the ones most rules (concat, max pooling) accept.
_ACT_WEIGHTS = {"relu": 4, "gelu": 2, "silu": 1, "sigmoid": 2, "tanh": 1, "clip": 2, "clip1": 1,
                "leakyrelu": 1, "neg_leakyrelu": 1}


@dataclass
class _Tensor:
    var: relax.Var
    shape: tuple[int, ...]


class GraphGen:
    """Builds one random graph: a few motifs applied to tensors from a growing pool.

    Each motif takes tensors from the pool (inputs or earlier results) and adds its results to it. The
    tensors nobody reads become the outputs, so no binding is dead code.
    """

    def __init__(self, rng: np.random.Generator, dtype: str = "float32"):
        self.rng = rng
        self.dtype = dtype
        self.pool: list[_Tensor] = []
        self.reads: Counter = Counter()
        self.extra_outputs: list[_Tensor] = []
        self._emit = None

    # ---- plumbing

    def emit(self, expr) -> _Tensor:
        var = self._emit(expr)
        ty = var.ty
        # A tuple (split's parts, a literal pair) has no shape; it is read through TupleGetItem only.
        shape = tuple(int(d) for d in ty.shape.values) if isinstance(ty, relax.TensorType) else ()
        return _Tensor(var, shape)

    def add(self, t: _Tensor) -> _Tensor:
        self.pool.append(t)
        return t

    def read(self, t: _Tensor) -> relax.Var:
        self.reads[t.var.name] += 1
        return t.var

    def pick(self, rank: int | Sequence[int] | None = None, pred: Callable[[_Tensor], bool] | None = None
             ) -> _Tensor | None:
        """A tensor of the pool of that rank, preferring ones not read yet (keeps the graph connected)."""
        ranks = (rank,) if isinstance(rank, int) else rank
        options = [t for t in self.pool if (ranks is None or len(t.shape) in ranks) and (pred is None or pred(t))]
        if not options:
            return None
        fresh = [t for t in options if self.reads[t.var.name] == 0]
        if fresh and self.rng.random() < 0.8:
            options = fresh
        return options[int(self.rng.integers(len(options)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def choice(self, options: Sequence):
        return options[int(self.rng.integers(len(options)))]

    def const(self, *shape: int, scale: float = 1.0, low: float | None = None, high: float | None = None
              ) -> relax.Expr:
        if low is not None:
            data = self.rng.uniform(low, high, size=shape)
        else:
            data = self.rng.standard_normal(shape) * scale
        return relax.const(np.asarray(data).astype(self.dtype), self.dtype)

    def scalar(self, value: float) -> relax.Expr:
        return relax.const(np.asarray(value).astype(self.dtype), self.dtype)

    def axis(self, axis: int, rank: int) -> int:
        """`axis`, or now and then the same axis counted from the end (rules must normalise both)."""
        return axis - rank if self.chance(0.3) else axis

    def act_name(self) -> str:
        names = list(_ACT_WEIGHTS)
        p = np.array([_ACT_WEIGHTS[n] for n in names], float)
        return names[int(self.rng.choice(len(names), p=p / p.sum()))]

    def act(self, t: _Tensor, name: str | None = None) -> _Tensor:
        return self.emit(_ACTS[name or self.act_name()](self.read(t)))

    def maybe_act(self, t: _Tensor, p: float = 0.6, name: str | None = None) -> _Tensor:
        return self.act(t, name) if self.chance(p) else t

    # ---- image motifs (NCHW)

    def _conv(self, x: _Tensor, out_c: int, k: int | tuple[int, int], stride: int = 1,
              pad: int | tuple[int, ...] | None = None, groups: int = 1, dilation: int = 1) -> _Tensor:
        """conv2d with a random weight; `k` square or (kh, kw), `pad` as Relax takes it (1, 2 or 4 ints)."""
        cin = x.shape[1]
        kh, kw = (k, k) if isinstance(k, int) else k
        w = self.const(out_c, cin // groups, kh, kw, scale=1.0 / np.sqrt(cin // groups * kh * kw))
        same = (kh // 2 * dilation, kw // 2 * dilation, kh // 2 * dilation, kw // 2 * dilation)
        pad = same if pad is None else pad
        full = (pad,) * 4 if isinstance(pad, int) else tuple(pad) * 2 if len(pad) == 2 else tuple(pad)
        if any(x.shape[2 + a] + full[a] + full[a + 2] < (kk - 1) * dilation + 1 for a, kk in enumerate((kh, kw))):
            pad = same  # the kernel must fit the padded input
        return self.emit(R.nn.conv2d(self.read(x), w, strides=stride, padding=pad, groups=groups,
                                     dilation=dilation))

    def _bias(self, y: _Tensor) -> _Tensor:
        """A per-channel bias add as exporters write it, now and then one that is not per channel."""
        n, c, h, w = y.shape
        shapes = [(1, c, 1, 1)] * 4 + [(c, 1, 1)] * 2 + [(1, 1, 1, w), (1, c, h, w), (1,)]
        shape = self.choice(shapes)
        b = self.const(*shape, scale=0.5)
        return self.emit(R.add(self.read(y), b) if self.chance(0.7) else R.add(b, self.read(y)))

    def _batch_norm(self, y: _Tensor, axis: int = 1) -> _Tensor:
        """An inference (now and then training) batch_norm over `axis` (its parameters as long as that axis)."""
        c = y.shape[axis]
        axis = axis - len(y.shape) if self.chance(0.3) else axis  # a negative axis names the same one
        training = self.chance(0.08)
        bn = self.emit(R.nn.batch_norm(self.read(y), self.const(c, low=0.5, high=1.5), self.const(c, scale=0.5),
                                       self.const(c, scale=0.5), self.const(c, low=0.5, high=1.5), axis=axis,
                                       epsilon=float(self.choice([1e-5, 1e-3])), center=self.chance(0.9),
                                       scale=self.chance(0.9), training=training))
        return self.emit(TupleGetItem(bn.var, 0))

    def conv_block(self) -> None:
        """conv2d [+ bias] [-> batch_norm] [-> activation]: kernels 1x1 to 5x5, strides, groups, odd padding."""
        x = self.pick(4)
        if x is None:
            return
        cin = x.shape[1]
        k = self.choice([1, 1, 3, 3, 3, 5]) if min(x.shape[2:]) >= 3 else 1
        stride = self.choice([1, 1, 1, 2])
        groups = self.choice([g for g in (1, 1, 1, 2, cin) if cin % g == 0])
        out_c = groups * int(self.rng.integers(1, 4)) if groups > 1 else int(self.rng.integers(2, 9))
        pad = k // 2 if self.chance(0.85) else int(self.rng.integers(0, k))
        if self.chance(0.15):  # TensorFlow's SAME padding: one more at the bottom and right
            pad = (pad, pad, pad + 1, pad + 1)
        # Dilated (and strided) convs: a rewrite that drops an attribute changes the shape or the values.
        dilation = self.choice([2, 3]) if k > 1 and self.chance(0.2) else 1
        bn_axis = 1
        if self.chance(0.1):
            # A batch norm over the batch or a spatial axis, as long as the channels: its parameters' shape fits
            # the channels too, so only fold_batchnorm's axis check tells it apart. Same padding and stride 1 keep
            # the input's H and W, so out_c can be chosen to equal the axis.
            bn_axis = self.choice([0, 2, 3])
            groups, stride, pad, out_c = 1, 1, None, x.shape[bn_axis]
        y = self._conv(x, out_c, k, stride, pad, groups, dilation)
        if self.chance(0.35):
            y = self._bias(y)
        if bn_axis != 1 or self.chance(0.45):
            y = self._batch_norm(y, bn_axis)
            if self.dtype == "float16":
                # TVM legalizes a float16 batch_norm to float32 outputs (its declared type says float16), so
                # any float16 operator reading it fails to build: keep it an output of the graph.
                self.extra_outputs.append(y)
                return
        self.add(self.maybe_act(y))

    def parallel_convs(self) -> None:
        """Sibling conv2d on one input: same window (merge), or a 1x1 beside a kxk (enlarge, then merge)."""
        x = self.pick(4, lambda t: min(t.shape[2:]) >= 3)
        if x is None:
            return
        n = self.choice([2, 2, 3])
        stride = self.choice([1, 1, 2])
        mode = self.choice(["same", "same", "enlarge", "enlarge", "mixed", "rect"])
        k = self.choice([3, 3, 5]) if min(x.shape[2:]) >= 5 else 3
        specs = []
        for i in range(n):
            if mode == "same":
                specs.append((k, k // 2))
            elif mode == "enlarge":
                specs.append((1, 0) if i == 0 else (k, k // 2))
            elif mode == "rect":  # Inception's 1x3 / 3x1 branches beside a 1x1
                kh, kw = self.choice([(1, 1), (1, 3), (3, 1), (3, 3)])
                specs.append(((kh, kw), (kh // 2, kw // 2) if self.chance(0.85) else (kh // 2, 0)))
            else:
                kk = self.choice([1, 3])
                specs.append((kk, self.choice([0, kk // 2])))
        with_bias = self.chance(0.5)
        act = self.act_name() if self.chance(0.6) else None
        outs = []
        for kk, pad in specs:
            y = self._conv(x, int(self.rng.integers(2, 7)), kk, stride, pad)
            if with_bias:
                y = self._bias(y)
            if self.chance(0.15):  # a second reader of one branch pins it
                self.extra_outputs.append(y)
            outs.append(self.act(y, act) if act else y)
        spatial = {t.shape[2:] for t in outs}
        if len(spatial) == 1 and self.chance(0.6):
            self.add(self.emit(R.concat([self.read(t) for t in outs], axis=1)))
        else:
            for t in outs:
                self.add(t)

    def pool_block(self) -> None:
        """max_pool2d(act(x)) (monotone or not, padded, dilated, ceil mode) or avg_pool2d (with and without
        padding), on large maps and on the 1-3 pixel maps of late stages."""
        x = self.pick(4)
        if x is None:
            return
        small = min(x.shape[2:])
        k = self.choice([1, 2, 3, 3]) if small >= 3 else self.choice([1, 2, 2, 3])
        stride = self.choice([1, 2, 2])
        dilation = self.choice([2, 3]) if k > 1 and self.chance(0.3) else 1
        extent = (k - 1) * dilation + 1
        # Padding up to the window's extent minus one: past k // 2 a dilated window can miss the input.
        limit = extent - 1 if dilation > 1 else k // 2
        pad = int(self.rng.integers(0, limit + 1)) if self.chance(0.7) else 0
        pad = max(pad, -(-(extent - small) // 2))  # the window must fit the padded input
        ceil = self.chance(0.15)
        if self.chance(0.6):
            a = self.act(x)
            y = self.emit(R.nn.max_pool2d(self.read(a), pool_size=k, strides=stride, padding=pad, ceil_mode=ceil,
                                          dilation=dilation))
            if self.chance(0.3):  # exported as (output, indices-placeholder)[0]
                pair = self.emit(relax.Tuple([self.read(y), self.emit(R.zeros_like(y.var)).var]))
                y = self.emit(TupleGetItem(pair.var, 0))
        else:
            y = self.emit(R.nn.avg_pool2d(self.read(x), pool_size=k, strides=stride, padding=pad, ceil_mode=ceil,
                                          count_include_pad=self.chance(0.5), dilation=dilation))
        self.add(self.maybe_act(y, 0.3))

    def nhwc_region(self) -> None:
        """permute to NHWC -> element-wise ops with per-channel constants -> permute back to NCHW."""
        x = self.pick(4)
        if x is None:
            return
        n, c, h, w = x.shape
        p = self.emit(R.permute_dims(self.read(x), [0, 2, 3, 1]))
        for _ in range(int(self.rng.integers(1, 3))):
            kind = self.choice(["add", "mul", "act", "scalar"])
            if kind == "act":
                p = self.act(p)
            elif kind == "scalar":
                p = self.emit(R.multiply(self.read(p), self.scalar(float(self.choice([0.5, 2.0, -1.5])))))
            else:
                shape = self.choice([(c,), (1, 1, 1, c), (w, 1), (1, h, w, c)])
                op = R.add if kind == "add" else R.multiply
                p = self.emit(op(self.read(p), self.const(*shape, scale=0.5)))
        self.add(self.emit(R.permute_dims(self.read(p), [0, 3, 1, 2])))

    def to_sequence(self) -> None:
        """NCHW -> (N, HW, C) tokens (a patch embedding), or a global average pool and flatten to (N, C)."""
        x = self.pick(4)
        if x is None:
            return
        n, c, h, w = x.shape
        if self.chance(0.5):
            t = self.emit(R.reshape(self.read(x), (n, c, h * w)))
            self.add(self.emit(R.permute_dims(self.read(t), [0, 2, 1])))
        else:
            if self.chance(0.5):
                y = self.emit(R.nn.adaptive_avg_pool2d(self.read(x), output_size=1))
                self.add(self.emit(R.reshape(self.read(y), (n, c))))
            else:
                self.add(self.emit(R.mean(self.read(x), axis=[2, 3])))

    # ---- sequence motifs (rank 2 / 3, features last)

    def width(self) -> int:
        """A linear's output width: mostly 2-8; now and then one a tile padding away from 16 (13-15, 27-31),
        one too far from it to pad (9-12), or 16 itself."""
        r = self.rng.random()
        if r < 0.15:
            return int(self.choice([13, 14, 15, 27, 29, 30, 31]))
        if r < 0.22:
            return int(self.choice([9, 10, 11, 12, 16]))
        return int(self.rng.integers(2, 9))

    def _weight(self, k: int, n: int, torch_layout: bool | None = None, data: np.ndarray | None = None
                ) -> relax.Expr:
        """A [k, n] weight `data` (random by default): a constant, or as PyTorch exports it (mostly),
        permute_dims of the [n, k] one."""
        data = self.rng.standard_normal((k, n)) / np.sqrt(k) if data is None else data
        if torch_layout if torch_layout is not None else self.chance(0.7):
            wt = relax.const(np.ascontiguousarray(data.T).astype(self.dtype), self.dtype)
            return self.emit(R.permute_dims(wt, [1, 0])).var
        return relax.const(data.astype(self.dtype), self.dtype)

    def _bias_add(self, y: _Tensor, bias: bool | None = None) -> _Tensor:
        """y + b (either side, as exporters write it) with b per column, or now and then a full-shape b."""
        if not (bias if bias is not None else self.chance(0.6)):
            return y
        b = self.const(*self.choice([y.shape[-1:], y.shape[-1:], (1, y.shape[-1]), y.shape]), scale=0.5)
        return self.emit(R.add(b, self.read(y)) if self.chance(0.5) else R.add(self.read(y), b))

    def _linear(self, x: _Tensor, out: int, bias: bool | None = None, torch_layout: bool | None = None,
                w: relax.Expr | None = None, pin: float = 0.0) -> _Tensor:
        """x @ W (+ b); `w` a weight to use instead of a random one; with chance `pin` the product itself
        is an output too (a second reader: merges, splits and folds must refuse it)."""
        y = self.emit(R.matmul(self.read(x), self._weight(x.shape[-1], out, torch_layout) if w is None else w))
        if self.chance(pin):
            self.extra_outputs.append(y)
        return self._bias_add(y, bias)

    def linear_block(self) -> None:
        """x @ W^T (+ b) -> activation [* scalar], as PyTorch exports a Linear layer."""
        x = self.pick((2, 3))
        if x is None:
            return
        y = self._linear(x, int(self.rng.integers(2, 9)))
        y = self.maybe_act(y, 0.5)
        if self.chance(0.3):
            y = self.emit(R.multiply(self.read(y), self.scalar(0.25)))
        self.add(y)

    def parallel_linear(self) -> None:
        """Sibling matmuls on one input (Q, K, V projections), with or without biases."""
        x = self.pick((2, 3))
        if x is None:
            return
        bias = self.chance(0.6)
        outs = []
        for _ in range(self.choice([2, 3, 3])):
            y = self._linear(x, int(self.rng.integers(2, 7)), bias=bias if self.chance(0.9) else not bias,
                             torch_layout=True if self.chance(0.8) else None)
            if self.chance(0.1):
                self.extra_outputs.append(y)
            outs.append(self.maybe_act(y, 0.3))
        for t in outs:
            self.add(t)

    def attention(self) -> None:
        """softmax(Q K^T * s [+ mask]) V as exporters write it: heads folded into the batch by reshapes."""
        x = self.pick(3, lambda t: t.shape[-1] % 2 == 0 or t.shape[-1] <= 8)
        if x is None:
            return
        b, s, d = x.shape
        heads = self.choice([h for h in (1, 2, 4) if d % h == 0])
        hd = d // heads
        q, k, v = (self._linear(x, d, bias=self.chance(0.5), torch_layout=True) for _ in range(3))

        def split_heads(t: _Tensor) -> _Tensor:
            if heads == 1 and b == 1 and self.chance(0.5):
                return t
            t = self.emit(R.reshape(self.read(t), (b, s, heads, hd)))
            t = self.emit(R.permute_dims(self.read(t), [0, 2, 1, 3]))
            return self.emit(R.reshape(self.read(t), (b * heads, s, hd)))

        q, k, v = split_heads(q), split_heads(k), split_heads(v)
        g = q.shape[0]
        kt = self.emit(R.permute_dims(self.read(k), [0, 2, 1]))
        scores = self.emit(R.matmul(self.read(q), self.read(kt)))
        four_d = self.chance(0.7)
        if four_d:
            scores = self.emit(R.reshape(self.read(scores), (b, heads, s, s)))
        scale = 1.0 / np.sqrt(hd)
        kind = self.choice(["mul", "mul", "div", "none", "mul_tensor", "rdiv"])
        if kind == "mul":
            scores = self.emit(R.multiply(self.read(scores), self.scalar(scale)))
        elif kind == "rdiv" and self.dtype == "float32":  # c / scores is no scale: no fusion
            # The constant added first keeps the divisor away from zero, so legitimate rewrites stay well
            # conditioned; fuse_attention would still take a divide on the wrong side as a scale.
            scores = self.emit(R.add(self.read(scores), self.scalar(20.0)))
            scores = self.emit(R.divide(self.scalar(20.0), self.read(scores)))
        elif kind == "div":
            scores = self.emit(R.divide(self.read(scores), self.scalar(1.0 / scale)))
        elif kind == "mul_tensor":  # a per-head factor is not a scalar: no fusion
            shape = (1, heads, 1, 1) if four_d else (g, 1, 1)
            scores = self.emit(R.multiply(self.read(scores), self.const(*shape, low=0.2, high=0.5)))
        if self.chance(0.4):
            mask = np.where(np.tril(np.ones((s, s))) > 0, 0.0, -1e4) if self.chance(0.5) else \
                self.rng.standard_normal((s, s))
            mask = mask.reshape(self.choice([(s, s), (1, s, s)] if not four_d else [(s, s), (1, 1, s, s)]))
            scores = self.emit(R.add(self.read(scores), relax.const(mask.astype(self.dtype), self.dtype)))
        axis = -1 if self.chance(0.9) else -2
        p = self.emit(R.nn.softmax(self.read(scores), axis=axis))
        if four_d:
            if self.chance(0.5):
                p = self.emit(R.broadcast_to(self.read(p), (b, heads, s, s)))
            p = self.emit(R.reshape(self.read(p), (g, s, s)))
        o = self.emit(R.matmul(self.read(p), self.read(v)))
        if g != b:
            o = self.emit(R.reshape(self.read(o), (b, heads, s, hd)))
            o = self.emit(R.permute_dims(self.read(o), [0, 2, 1, 3]))
            o = self.emit(R.reshape(self.read(o), (b, s, d)))
        self.add(o)

    def scalar_motion(self) -> None:
        """op(x) * s for op a reshape / transpose / broadcast, a matmul, or an add / multiply by a constant."""
        x = self.pick(None, lambda t: len(t.shape) >= 2)
        if x is None:
            return
        shape = x.shape
        kind = self.choice(["reshape", "permute", "broadcast", "matmul", "add", "mul"])
        if kind == "reshape":
            y = self.emit(R.reshape(self.read(x), (int(np.prod(shape[:-1])), shape[-1])))
        elif kind == "permute":
            y = self.emit(R.permute_dims(self.read(x), list(self.rng.permutation(len(shape)))))
        elif kind == "broadcast":
            y = self.emit(R.broadcast_to(self.read(x), (2, *shape) if self.chance(0.5) else shape))
        elif kind == "matmul":
            y = self.emit(R.matmul(self.read(x), self.const(shape[-1], 3, scale=1 / np.sqrt(shape[-1]))))
        else:
            c = self.const(*self.choice([(shape[-1],), (1,), shape]), scale=0.5)
            op = R.add if kind == "add" else R.multiply
            y = self.emit(op(self.read(x), c) if self.chance(0.5) else op(c, self.read(x)))
        s = self.scalar(float(self.choice([0.125, 0.5, -2.0, 3.0])))
        if self.chance(0.1):  # a per-column factor is not a scalar
            s = self.const(y.shape[-1], scale=1.0)
        self.add(self.emit(R.multiply(self.read(y), s) if self.chance(0.7) else R.multiply(s, self.read(y))))

    def permute_chain(self) -> None:
        """permute_dims(permute_dims(x, p1), p2), p2 often p1's inverse, sometimes a third one."""
        x = self.pick(None, lambda t: len(t.shape) >= 2)
        if x is None:
            return
        rank = len(x.shape)
        p1 = list(self.rng.permutation(rank))
        y = self.emit(R.permute_dims(self.read(x), p1 if self.chance(0.9) else None))
        for _ in range(self.choice([1, 1, 2])):
            if self.chance(0.4):
                p2 = list(np.argsort(p1))
            else:
                p2 = list(self.rng.permutation(rank))
            y = self.emit(R.permute_dims(self.read(y), p2))
            p1 = p2
        self.add(self.maybe_act(y, 0.3))

    def _factor(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A random shape with as many elements as `shape`."""
        n = int(np.prod(shape))
        dims = []
        while n > 1 and len(dims) < 3:
            divisors = [d for d in range(2, n + 1) if n % d == 0]
            d = self.choice(divisors)
            dims.append(d)
            n //= d
        if n > 1:
            dims.append(n)
        if self.chance(0.3):
            dims.insert(int(self.rng.integers(len(dims) + 1)), 1)
        return tuple(dims) or (1,)

    def _unknown_dim(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """`shape`, now and then with one dimension left to Relax to infer (-1)."""
        if self.chance(0.25):
            i = int(self.rng.integers(len(shape)))
            return tuple(-1 if j == i else d for j, d in enumerate(shape))
        return shape

    def reshape_chain(self) -> None:
        """reshape(reshape(x, s1), s2), s2 often x's own shape."""
        x = self.pick(None)
        if x is None:
            return
        y = self.emit(R.reshape(self.read(x), self._unknown_dim(self._factor(x.shape))))
        for _ in range(self.choice([1, 1, 2])):
            target = x.shape if self.chance(0.5) else self._factor(x.shape)
            y = self.emit(R.reshape(self.read(y), self._unknown_dim(target)))
        self.add(self.maybe_act(y, 0.3))

    def identities(self) -> None:
        """x * 1, x + 0, x - 0, x / 1 (neutral constants of several shapes), reshape / broadcast / permute
        to x's own shape; and their look-alikes that are not no-ops."""
        x = self.pick(None)
        if x is None:
            return
        shape = x.shape
        y = x
        for _ in range(int(self.rng.integers(1, 4))):
            kind = self.choice(["mul1", "add0", "sub0", "div1", "zero_minus", "mul1_bigger", "reshape", "broadcast",
                                "permute", "broadcast_bigger", "mul_near1"])
            small = self.choice([(), (1,), shape[-1:], shape])
            if kind in ("mul1", "div1", "mul1_bigger", "mul_near1"):
                data = np.ones((2, *shape) if kind == "mul1_bigger" else small)
                if kind == "mul_near1":
                    data = data * 1.001
                c = relax.const(data.astype(self.dtype), self.dtype)
                if kind == "div1":
                    y = self.emit(R.divide(self.read(y), c))
                else:
                    y = self.emit(R.multiply(self.read(y), c) if self.chance(0.5) else R.multiply(c, self.read(y)))
            elif kind in ("add0", "sub0", "zero_minus"):
                c = relax.const(np.zeros(small).astype(self.dtype), self.dtype)
                if kind == "add0":
                    y = self.emit(R.add(self.read(y), c) if self.chance(0.5) else R.add(c, self.read(y)))
                elif kind == "sub0":
                    y = self.emit(R.subtract(self.read(y), c))
                else:
                    y = self.emit(R.subtract(c, self.read(y)))
            elif kind == "reshape":
                y = self.emit(R.reshape(self.read(y), y.shape))
            elif kind == "broadcast":
                y = self.emit(R.broadcast_to(self.read(y), y.shape))
            elif kind == "broadcast_bigger":
                y = self.emit(R.broadcast_to(self.read(y), (2, *y.shape)))
            else:
                y = self.emit(R.permute_dims(self.read(y), list(range(len(y.shape)))))
        self.add(y)

    def dedup(self) -> None:
        """The same computation twice on one input, both results used."""
        x = self.pick(None, lambda t: len(t.shape) >= 2)
        if x is None:
            return
        kind = self.choice(["act", "permute", "add_const", "softmax"])
        rank = len(x.shape)
        if kind == "act":
            name = self.act_name()
            make = lambda: _ACTS[name](self.read(x))  # noqa: E731
        elif kind == "permute":
            axes = list(self.rng.permutation(rank))
            make = lambda: R.permute_dims(self.read(x), axes)  # noqa: E731
        elif kind == "add_const":
            data = self.rng.standard_normal(x.shape[-1:]).astype(self.dtype)
            make = lambda: R.add(self.read(x), relax.const(data, self.dtype))  # noqa: E731
        else:
            make = lambda: R.nn.softmax(self.read(x), axis=-1)  # noqa: E731
        a, b = self.emit(make()), self.emit(make())
        if a.shape == b.shape and self.chance(0.7):
            self.add(self.emit(R.add(self.read(a), self.read(b))))
        else:
            self.add(a)
            self.add(b)

    def split_concat(self) -> None:
        """concat of the parts of split(x): all in order on the same axis (cancels), or not quite."""
        x = self.pick(None, lambda t: any(d >= 2 for d in t.shape))
        if x is None:
            return
        axes = [a for a, d in enumerate(x.shape) if d >= 2]
        axis = self.choice(axes)
        n = self.choice([p for p in (2, 3) if x.shape[axis] % p == 0] or [2])
        if x.shape[axis] % n == 0 and self.chance(0.6):
            sections = n
        else:
            sections = sorted(self.rng.choice(np.arange(1, x.shape[axis]), size=min(n - 1, x.shape[axis] - 1),
                                              replace=False).tolist())
            n = len(sections) + 1
        rank = len(x.shape)
        parts = self.emit(R.split(self.read(x), sections, axis=self.axis(axis, rank)))
        items = [self.emit(TupleGetItem(parts.var, i)) for i in range(n)]
        mode = self.choice(["cancel", "cancel", "cancel", "shuffle", "acts"])
        if mode == "shuffle":
            order = list(self.rng.permutation(n))
            if self.chance(0.3) and n > 2:
                order = order[:-1]
            chosen = [items[i] for i in order]
        elif mode == "acts":
            name = self.act_name()
            chosen = [self.act(t, name if self.chance(0.85) else None) for t in items]
        else:
            chosen = items
        if mode == "cancel" and self.chance(0.15):
            self.extra_outputs.append(items[0])
        out = self.emit(R.concat([self.read(t) for t in chosen], axis=self.axis(axis, rank)))
        for t in items:
            if t not in chosen and self.reads[t.var.name] == 0:
                self.add(t)
        self.add(self.maybe_act(out, 0.4))

    def concat_acts(self) -> None:
        """concat(act(a), act(b)) (same or different activation) or act(concat(a, b)), now and then with a
        constant among the joined tensors."""
        x = self.pick(None)
        if x is None:
            return
        rank = len(x.shape)
        axis = int(self.rng.integers(rank))
        others = [t for t in self.pool if t is not x and len(t.shape) == rank
                  and all(d == e for i, (d, e) in enumerate(zip(t.shape, x.shape)) if i != axis)]
        y = self.choice(others) if others and self.chance(0.7) else x
        if self.chance(0.6):
            name = self.act_name()
            parts = [self.act(t, name if self.chance(0.85) else None) for t in (x, y)]
            self.add(self.emit(R.concat([self.read(t) for t in parts], axis=self.axis(axis, rank))))
        else:
            fields = [self.read(x), self.read(y)]
            if self.chance(0.2):
                fields.append(self.const(*x.shape))
            cat = self.emit(R.concat(fields, axis=self.axis(axis, rank)))
            self.add(self.act(cat))

    def transpose_elementwise(self) -> None:
        """act / binary-with-constant after a permute_dims of any rank."""
        x = self.pick(None, lambda t: len(t.shape) >= 2)
        if x is None:
            return
        rank = len(x.shape)
        axes = [self.axis(int(a), rank) for a in self.rng.permutation(rank)]
        y = self.emit(R.permute_dims(self.read(x), axes))
        if self.chance(0.5):
            y = self.act(y)
        else:
            # The last option broadcasts the result bigger: the transpose cannot move past that.
            shape = self.choice([y.shape[-1:], (1,) * (rank - 1) + y.shape[-1:], y.shape, (), (2, *y.shape)])
            op = self.choice([R.add, R.subtract, R.multiply])
            c = self.const(*shape, scale=0.5)
            y = self.emit(op(self.read(y), c) if self.chance(0.6) else op(c, self.read(y)))
        self.add(y)

    def join(self) -> None:
        """a + b or a * b for two same-shaped tensors of the pool (residuals; a second reader of each)."""
        x = self.pick(None)
        if x is None:
            return
        others = [t for t in self.pool if t is not x and t.shape == x.shape]
        if not others:
            return
        op = R.add if self.chance(0.7) else R.multiply
        self.add(self.emit(op(self.read(x), self.read(self.choice(others)))))

    def dense_head(self) -> None:
        """[N, C] @ W (+ b): a classifier head, which matmul_to_conv1x1 turns into a 1x1 conv2d."""
        x = self.pick(2)
        if x is None:
            return
        y = self._linear(x, int(self.rng.integers(2, 7)))
        self.add(self.maybe_act(y, 0.3))

    def _other_const(self, dtype: str, *shape: int) -> relax.Expr:
        data = self.rng.standard_normal(shape) / np.sqrt(max(1, int(np.prod(shape[1:]))))
        return relax.const(data.astype(dtype), dtype)

    def dtype_hop(self) -> None:
        """A region in the other float type: astype there and back, or a conv2d / matmul with an out_dtype
        (and a weight of either type), followed by ops the rules rewrite (a scalar factor, siblings)."""
        other = "float16" if self.dtype == "float32" else "float32"
        x = self.pick(None)
        if x is None:
            return
        wdt = self.choice([self.dtype, other])
        kind = self.choice(["conv", "matmul", "matmul_vars", "astype"])
        if kind == "conv" and len(x.shape) == 4:
            outs = [self.emit(R.nn.conv2d(self.read(x), self._other_const(wdt, 3, x.shape[1], 1, 1), out_dtype=other))
                    for _ in range(self.choice([1, 2]))]
        elif kind == "matmul" and len(x.shape) >= 2:
            outs = [self.emit(R.matmul(self.read(x), self._other_const(wdt, x.shape[-1], 3), out_dtype=other))
                    for _ in range(self.choice([1, 2]))]
        elif kind == "matmul_vars" and len(x.shape) >= 2:
            xt = self.emit(R.permute_dims(self.read(x), [*range(len(x.shape) - 2), len(x.shape) - 1,
                                                         len(x.shape) - 2]))
            outs = [self.emit(R.matmul(self.read(x), self.read(xt), out_dtype=other))]
        else:
            outs = [self.emit(R.astype(self.read(x), other))]
        for y in outs:
            if self.chance(0.5):  # x * s (or x * 1) in the other dtype
                y = self.emit(R.multiply(self.read(y), relax.const(np.asarray(self.choice([1.0, 0.5])), other)))
            self.add(self.emit(R.astype(self.read(y), self.dtype)))

    def tuple_item(self) -> None:
        """(a, b)[i] for a tuple built in the block, as exporters leave after max pooling."""
        x = self.pick(None)
        if x is None:
            return
        y = self.act(x)
        kind = self.choice(["zeros", "zeros", "input", "const"])
        other = self.emit(R.zeros_like(y.var)).var if kind == "zeros" else x.var if kind == "input" else \
            self.const(*x.shape)
        pair = self.emit(relax.Tuple([self.read(y), other] if self.chance(0.7) else [other, self.read(y)]))
        for i in range(self.choice([1, 1, 2])):
            self.add(self.emit(TupleGetItem(pair.var, i if self.chance(0.8) else 1 - i)))

    # ---- linear-algebra motifs (merges, splits and folds of linears; GEMM shapes; pre-LN blocks)

    def _swap(self, t: _Tensor) -> _Tensor:
        """t with its last two axes swapped."""
        n = len(t.shape)
        return self.emit(R.permute_dims(self.read(t), [*range(n - 2), n - 1, n - 2]))

    def _rows(self, t: _Tensor) -> _Tensor:
        """t flattened to 2-D rows [prod(leading), last], as exporters do before each linear."""
        return self.emit(R.reshape(self.read(t), (int(np.prod(t.shape[:-1])), t.shape[-1])))

    def _unrows(self, y: _Tensor, like: _Tensor) -> _Tensor:
        """2-D rows y back to `like`'s leading dimensions (when y came from `_rows(like)`)."""
        return self.emit(R.reshape(self.read(y), (*like.shape[:-1], y.shape[-1]))) if len(like.shape) != 2 else y

    def _twin(self, x: _Tensor) -> _Tensor:
        """Another tensor of x's rank and trailing shape: one of the pool, or one computed from x (an
        activation, a scaled copy, fewer rows)."""
        others = [t for t in self.pool if t is not x and len(t.shape) == len(x.shape) and t.shape[1:] == x.shape[1:]]
        if others and self.chance(0.5):
            return self.choice(others)
        if x.shape[0] >= 2 and self.chance(0.3):
            return self.emit(R.strided_slice(self.read(x), [0], [int(self.rng.integers(1, x.shape[0]))],
                                             [x.shape[0]]))
        if self.chance(0.5):
            return self.act(x)
        return self.emit(R.multiply(self.read(x), self.const(x.shape[-1], scale=1.0)))

    def _finish(self, *ts: _Tensor, p: float = 0.4) -> None:
        """Each of `ts` (or an activation of it, with chance `p`) into the pool."""
        for t in ts:
            self.add(self.maybe_act(t, p))

    def sibling_linears(self) -> None:
        """Q/K/V as torch.export writes them: each sibling flattens x to rows itself (or swaps its last two
        axes), view @ permute_dims(W) (+ b, either side), then back to x's leading shape. Traps: one
        sibling's view differs, a second reader of one product, a bias on some siblings only."""
        x = self.pick((2, 3))
        if x is None:
            return
        kind = "rows" if len(x.shape) == 3 and self.chance(0.75) else "swap"
        bias = self.chance(0.6)
        for i in range(self.choice([2, 2, 3])):
            own = kind if i == 0 or self.chance(0.9) else self.choice(["rows", "swap", "x"])
            v = self._rows(x) if own == "rows" else self._swap(x) if own == "swap" else x
            y = self._linear(v, self.width(), bias=bias if self.chance(0.9) else not bias,
                             torch_layout=self.chance(0.85), pin=0.08)
            self._finish(self._unrows(y, x) if own == "rows" else y, p=0.7)

    def fused_linear(self) -> None:
        """GPT-2's c_attn: one linear `parts` pieces wide (on x's rows, reshaped back), then split(parts,
        axis=-1) and TupleGetItems (uneven sections, a piece nobody reads), or strided slices of the last
        axis. Traps: overlapping slices, a split of another axis, a second reader of the product."""
        x = self.pick((2, 3))
        if x is None:
            return
        rows = len(x.shape) == 3 and self.chance(0.6)
        parts, width = self.choice([2, 3, 3]), self.choice([2, 3, 4, 5])
        n = parts * width
        y = self._linear(self._rows(x) if rows else x, n, torch_layout=self.chance(0.4), pin=0.06)
        if rows:
            y = self._unrows(y, x)
        rank = len(y.shape)
        mode = self.choice(["split", "split", "split", "sections", "slices", "slices", "overlap", "other_axis"])
        if mode in ("slices", "overlap"):
            bounds = [i * width for i in range(parts + 1)]
            pieces = []
            for i in range(parts):
                lo, hi = bounds[i], bounds[i + 1]
                if mode == "overlap" and i == parts - 1:
                    lo -= 1
                if i and self.chance(0.15):
                    continue  # columns no piece reads
                pieces.append(self.emit(R.strided_slice(self.read(y), [self.axis(rank - 1, rank)], [lo], [hi])))
        else:
            axis = rank - 1
            if mode == "other_axis" and y.shape[0] >= 2:
                axis = 0
            size = y.shape[axis]
            if mode == "sections" or size % parts:
                k = min(parts - 1, size - 1)
                sections = sorted(int(v) for v in self.rng.choice(np.arange(1, size), size=k, replace=False))
            else:
                sections = parts
            count = sections if isinstance(sections, int) else len(sections) + 1
            s = self.emit(R.split(self.read(y), sections, axis=self.axis(axis, rank)))
            pieces = [self.emit(TupleGetItem(s.var, i)) for i in range(count) if i == 0 or self.chance(0.9)]
        if len(pieces) >= 2 and pieces[0].shape == pieces[1].shape and self.chance(0.5):
            # q + sigmoid(k) (as attention would combine them); the rest stay outputs
            g = self.act(pieces[1], "sigmoid")
            self.add(self.emit(R.add(self.read(pieces[0]), self.read(g))))
            pieces = pieces[2:]
        self._finish(*pieces, p=0.3)

    def shared_weight(self) -> None:
        """One weight applied to two or three inputs of one trailing shape: the same constant object, or
        equal copies (each call site exports its own, maybe transposed). Traps: a copy with one value
        changed, an input computed from another's result (merging would make a cycle)."""
        x = self.pick((2, 3))
        if x is None:
            return
        k = x.shape[-1]
        mode = self.choice(["same", "same", "copy", "copy", "differ", "chained"])
        n = k if mode == "chained" else self.width()
        data = self.rng.standard_normal((k, n)) / np.sqrt(k)
        shared = self._weight(k, n, False, data)
        outs = []
        for i in range(self.choice([2, 2, 3])):
            t = x if not i else self.act(outs[-1]) if mode == "chained" else self._twin(x)
            w = shared
            if mode in ("copy", "differ") and i:
                changed = data.copy()
                if mode == "differ":
                    changed[int(self.rng.integers(k)), int(self.rng.integers(n))] += 0.5
                w = self._weight(k, n, self.chance(0.5), changed)
            y = self.emit(R.matmul(self.read(t), w))
            if self.chance(0.06):
                self.extra_outputs.append(y)
            outs.append(y)
        if mode == "chained":  # each result but the last read only by the next input: a cycle to refuse
            outs = outs[-1:]
        self._finish(*outs, p=0.85)  # a result that is also an output is not single-use: no merge

    def matmul_chain(self) -> None:
        """Two matmuls, nothing between: (x @ W1) @ W2 (two linears; constants fold), W0 @ (W1 @ x) from the
        left, or x @ (x^T @ x) (cheaper as (x @ x^T) @ x with fewer rows than columns). Traps: a second
        reader of the inner product, a bias between, a batched constant."""
        x = self.pick((2, 3))
        if x is None:
            return
        kind = self.choice(["right", "right", "left", "gram"])
        if kind == "right":
            inner = self._linear(x, self.width(), bias=self.chance(0.12), pin=0.08)
            y = self._linear(inner, self.width(), bias=self.chance(0.4))
        elif kind == "left":
            m = x.shape[-2]
            q, p = int(self.rng.integers(2, 7)), int(self.rng.integers(2, 7))
            batched = len(x.shape) == 3 and self.chance(0.1)  # a batched constant: no fold
            w1 = self.const(*((x.shape[0], q, m) if batched else (q, m)), scale=1 / np.sqrt(m))
            inner = self.emit(R.matmul(w1, self.read(x)))
            if self.chance(0.08):
                self.extra_outputs.append(inner)
            y = self.emit(R.matmul(self.const(p, q, scale=1 / np.sqrt(q)), self.read(inner)))
        else:
            gram = self.emit(R.matmul(self.read(self._swap(x)), self.read(x)))
            y = self.emit(R.matmul(self.read(x), self.read(gram)))
        self._finish(y)

    def matmul_sum(self) -> None:
        """x @ W1 + x @ W2 (two constant weights of one shape), or x1 @ C + x2 @ C (one weight, or x^T, for
        two inputs of one shape). Traps: a second reader of one product, a bias on one."""
        x = self.pick((2, 3))
        if x is None:
            return
        if self.chance(0.5):
            n = self.width()
            p, q = (self.emit(R.matmul(self.read(x), self._weight(x.shape[-1], n))) for _ in range(2))
        else:
            x2 = self.act(x) if self.chance(0.6) else self.emit(R.multiply(self.read(x), self.scalar(-0.5)))
            if self.chance(0.5):
                c = self._weight(x.shape[-1], self.width(), False)
            else:
                c = self._swap(self.act(x, "tanh")).var
            p, q = (self.emit(R.matmul(self.read(t), c)) for t in (x, x2))
        if self.chance(0.08):
            self.extra_outputs.append(p)
        elif self.chance(0.08):
            q = self._bias_add(q, True)
        self._finish(self.emit(R.add(self.read(p), self.read(q))))

    def scaled_linear(self) -> None:
        """(x @ W + b) * c or / c with c per output column or a scalar (a layer scale; either side), or
        conv2d(x, W) (+ b) * c per channel. Traps: c per row, c of the result's full shape, c broadcasting the
        result bigger, a second reader of the product."""
        x = self.pick((2, 3, 4))
        if x is None:
            return
        if len(x.shape) == 4:
            y = self._conv(x, int(self.rng.integers(2, 7)), self.choice([1, 3]) if min(x.shape[2:]) >= 3 else 1)
            if self.chance(0.1):
                self.extra_outputs.append(y)
            y = self._bias(y) if self.chance(0.5) else y
            c = y.shape[1]
            shapes = [(1, c, 1, 1)] * 3 + [(c, 1, 1), (), (1, 1, 1, y.shape[3]), (2, *y.shape)]
        else:
            y = self._linear(x, self.width(), pin=0.08)
            n, rank = y.shape[-1], len(y.shape)
            shapes = [(n,)] * 3 + [(1,) * (rank - 1) + (n,), (), (1,), (*y.shape[:-1], 1), y.shape, (2, *y.shape)]
        shape = self.choice(shapes)
        if self.chance(0.3):  # a divide: c kept away from zero
            c = self.rng.uniform(0.5, 2.0, size=shape) * self.rng.choice([-1, 1], size=shape)
            y = self.emit(R.divide(self.read(y), relax.const(np.asarray(c).astype(self.dtype), self.dtype)))
        else:
            c = self.const(*shape, low=0.5, high=1.5)
            y = self.emit(R.multiply(self.read(y), c) if self.chance(0.6) else R.multiply(c, self.read(y)))
        self._finish(y, p=0.3)

    def const_chain(self) -> None:
        """(y + c1) + c2 or (y * c1) * c2, two or three long, constants on either side of shapes that
        broadcast within y. Traps: a constant broadcasting y bigger, a second reader of a link, a mix of add
        and multiply."""
        x = self.pick(None, lambda t: len(t.shape) >= 1)
        if x is None:
            return
        y, shape = x, x.shape
        op = self.choice([R.add, R.add, R.multiply])
        for i in range(self.choice([2, 2, 3])):
            if i and self.chance(0.1):
                op = R.multiply if op is R.add else R.add
            if i and self.chance(0.08):
                self.extra_outputs.append(y)
            cshape = self.choice([(), (1,), shape[-1:], shape[-1:], (1, shape[-1]), shape, shape[-2:]])
            if i and self.chance(0.06):
                cshape = (2, *shape)
            c = self.const(*cshape, low=0.5, high=1.5) if op is R.multiply else self.const(*cshape, scale=0.5)
            y = self.emit(op(self.read(y), c) if self.chance(0.6) else op(c, self.read(y)))
            shape = y.shape
        self._finish(y, p=0.3)

    def transposed_operand(self) -> None:
        """matmul(A, permute_dims(B, last two swapped)) for an activation B (or the lhs form, A^T @ B), as
        attention exports Q K^T: now and then heads split off by a reshape, then an identity broadcast_to
        and a reshape merging the batch dims. Traps: a second reader of the transpose, a constant B, B with
        fewer batch dims (broadcast), a float32 result of float16 operands."""
        x = self.pick((2, 3))
        if x is None:
            return
        b_src = self.act(x) if self.chance(0.6) else self._linear(x, x.shape[-1], bias=False)
        a = x
        if len(x.shape) == 3 and self.chance(0.08):  # b [B*S, D]: the batch broadcasts, no einsum
            b_src = self._rows(b_src)
        elif len(x.shape) == 3 and x.shape[-1] % 2 == 0 and self.chance(0.4):  # heads: [B, 2, S, D/2]
            bsz, s, d = x.shape
            a, b_src = (self.emit(R.reshape(self.read(t), (bsz, 2, s, d // 2))) for t in (a, b_src))
        if self.chance(0.1):  # a constant B (fold_const_transform's); the activation stays an output
            self.add(b_src)
            b_src = _Tensor(self.const(*b_src.shape), b_src.shape)
        lhs = len(b_src.shape) == len(a.shape) and self.chance(0.3)
        bt = self._swap(b_src) if isinstance(b_src.var, relax.Var) else \
            self.emit(R.permute_dims(b_src.var, [*range(len(b_src.shape) - 2), len(b_src.shape) - 1,
                                                 len(b_src.shape) - 2]))
        if self.chance(0.08):
            self.extra_outputs.append(bt)
        if len(bt.shape) >= 3 and self.chance(0.6):
            merged = (int(np.prod(bt.shape[:-2])),)
            if self.chance(0.5):
                bt = self.emit(R.broadcast_to(self.read(bt), bt.shape))
            bt = self.emit(R.reshape(self.read(bt), (*merged, *bt.shape[-2:])))
            a = self.emit(R.reshape(self.read(a), (*merged, *a.shape[-2:])))
        wide = self.dtype == "float16" and self.chance(0.15)  # float16 operands, a float32 result
        args = [self.read(bt), self.read(a)] if lhs else [self.read(a), self.read(bt)]
        y = self.emit(R.matmul(*args, out_dtype="float32" if wide else None))
        if wide:
            y = self.emit(R.astype(self.read(y), self.dtype))
        self._finish(y, p=0.0)
        if self.chance(0.3):
            self.add(self.emit(R.nn.softmax(self.read(y), axis=-1)))

    def ragged_linear(self) -> None:
        """Linears whose M, N or K is a little short of a multiple of 16: an MLP up to 13-15 or 27-31 wide and
        back (N, then K), or token mixing (x^T @ W, transposed back: M ragged for the next linear)."""
        x = self.pick((2, 3))
        if x is None:
            return
        ragged = lambda: int(self.choice([13, 14, 15, 13, 14, 15, 27, 30, 31, 11, 12, 17]))  # noqa: E731
        if self.chance(0.5):
            h = self.act(self._linear(x, ragged(), pin=0.05), "gelu")
            y = self._linear(h, self.choice([x.shape[-1], ragged()]))
        else:
            t = self._linear(self._swap(x), ragged(), bias=self.chance(0.3), torch_layout=self.chance(0.5))
            y = self._linear(self._swap(t), self.width())
        self._finish(y, p=0.3)

    def prenorm(self) -> None:
        """A pre-LN block's start: layer_norm over the last axis read only by 1-3 linears (each through its
        own reshape to rows, as exported). Traps: a residual add reading the norm, a norm over another axis
        or two axes, no scale / shift, a reshape that changes the last axis."""
        x = self.pick((2, 3))
        if x is None:
            return
        rank, k = len(x.shape), x.shape[-1]
        trap = self.choice(["none"] * 15 + ["residual", "axis", "axes", "affine", "reshape"])
        axes = [self.axis(rank - 1, rank)]
        if trap == "axis":
            axes = [rank - 2]
        elif trap == "axes":
            axes = [rank - 2, rank - 1]
        pshape = tuple(x.shape[a] for a in axes)
        ln = self.emit(R.nn.layer_norm(self.read(x), self.const(*pshape, low=0.5, high=1.5),
                                       self.const(*pshape, scale=0.5), axes=axes, center=trap != "affine",
                                       scale=trap != "affine" or self.chance(0.5)))
        outs = []
        for _ in range(self.choice([1, 2, 3])):
            rows = rank == 3 and self.chance(0.6)
            v = self._rows(ln) if rows else ln
            if trap == "reshape" and not outs:
                v = self.emit(R.reshape(self.read(ln), (*x.shape[:-2], x.shape[-2] * k)))
                v = self.emit(R.reshape(self.read(v), x.shape))
            y = self._linear(v, self.width(), bias=self.chance(0.7))
            outs.append(self._unrows(y, x) if rows else y)
        if trap == "residual":
            outs.append(self.emit(R.add(self.read(x), self.read(ln))))
        self._finish(*outs, p=0.4)

    MOTIFS: dict[str, tuple[float, str]] = {
        # name: (weight, kind of input it needs: image / sequence / any)
        "conv_block": (3.0, "image"),
        "parallel_convs": (3.0, "image"),
        "pool_block": (2.5, "image"),
        "nhwc_region": (1.5, "image"),
        "to_sequence": (0.7, "image"),
        "linear_block": (1.5, "sequence"),
        "parallel_linear": (1.5, "sequence"),
        "attention": (2.5, "sequence"),
        "dense_head": (1.0, "sequence"),
        "scalar_motion": (1.5, "any"),
        "permute_chain": (1.5, "any"),
        "reshape_chain": (1.2, "any"),
        "identities": (1.5, "any"),
        "dedup": (1.0, "any"),
        "split_concat": (1.2, "any"),
        "concat_acts": (1.2, "any"),
        "transpose_elementwise": (1.0, "any"),
        "join": (0.8, "any"),
        "dtype_hop": (0.7, "any"),
        "tuple_item": (0.5, "any"),
        "sibling_linears": (1.5, "sequence"),
        "fused_linear": (1.3, "sequence"),
        "shared_weight": (1.8, "sequence"),
        "matmul_chain": (1.3, "sequence"),
        "matmul_sum": (1.6, "sequence"),
        "scaled_linear": (0.8, "any"),
        "const_chain": (0.7, "any"),
        "transposed_operand": (0.6, "sequence"),
        "ragged_linear": (0.8, "sequence"),
        "prenorm": (2.0, "sequence"),
    }

    # ---- the whole graph

    def build(self, n_motifs: int, theme: str) -> tvm.IRModule:
        rng = self.rng
        shapes = []
        if theme in ("image", "mixed"):
            # Mostly 4-9 pixels; now and then the 1-3 pixel maps of a network's last stages.
            h, w = (int(rng.integers(1, 4)) if self.chance(0.15) else int(rng.integers(4, 10)) for _ in range(2))
            shapes.append((int(rng.integers(1, 3)), self.choice([2, 3, 4, 4, 6, 8]), h, w))
        if theme in ("sequence", "mixed"):
            d = self.choice([4, 6, 8, 8])
            if self.chance(0.75):
                shapes.append((int(rng.integers(1, 3)), int(rng.integers(2, 7)), d))
            else:
                shapes.append((int(rng.integers(2, 6)), d))
        bb = relax.BlockBuilder()
        params = [relax.Var(f"x{i}", relax.TensorType(list(s), self.dtype)) for i, s in enumerate(shapes)]
        with bb.function("main", params):
            with bb.dataflow():
                self._emit = bb.emit
                self.pool = [_Tensor(p, tuple(s)) for p, s in zip(params, shapes)]
                names = list(self.MOTIFS)
                for _ in range(n_motifs):
                    kinds = {"any"} | ({"image"} if self.pick(4) else set()) | \
                        ({"sequence"} if self.pick((2, 3)) else set())
                    usable = [m for m in names if self.MOTIFS[m][1] in kinds]
                    w = np.array([self.MOTIFS[m][0] for m in usable])
                    getattr(self, usable[int(rng.choice(len(usable), p=w / w.sum()))])()
                param_names = {p.name for p in params}
                outs = [t for t in self.pool if self.reads[t.var.name] == 0 and t.var.name not in param_names]
                outs += [t for t in self.extra_outputs if t not in outs]
                if not outs:  # every motif bailed out: still compute something
                    outs = [self.act(self.pool[0], "relu")]
                result = outs[0].var if len(outs) == 1 else relax.Tuple([t.var for t in outs])
                gv = bb.emit_output(result)
            bb.emit_func_output(gv)
        return bb.get()


def random_graph(seed: int | Sequence[int] | np.random.Generator, dtype: str | None = None,
                 n_motifs: int | None = None, theme: str | None = None) -> tvm.IRModule:
    """A random well-formed graph (`main` only, static shapes) biased towards places where rules match.

    dtype: float32 (most graphs) or float16; theme: "image" (NCHW convolutions), "sequence" (matmuls,
    attention) or "mixed"; all drawn from `seed` unless given.
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    dtype = dtype or ("float16" if rng.random() < 0.25 else "float32")
    theme = theme or ["image", "sequence", "mixed"][int(rng.choice(3, p=[0.4, 0.35, 0.25]))]
    n_motifs = n_motifs or int(rng.integers(2, 6))
    return GraphGen(rng, dtype).build(n_motifs, theme)


def graph_dtype(mod: tvm.IRModule) -> str:
    """The dtype of `main`'s first parameter (a fuzz graph is all one float type, bar dtype hops)."""
    return str(mod["main"].params[0].ty.dtype)


def graphs(**kwargs):
    """A hypothesis strategy of random graphs (one integer seed drawn per graph; shrinks towards seed 0)."""
    from hypothesis import strategies as st

    return st.integers(0, 2**32 - 1).map(lambda s: random_graph(s, **kwargs))


# ------------------------------------------------------------------------------------ rewrite sequences


@dataclass
class Failure:
    """A rewritten graph that differs from its original (or failed to rewrite or to build)."""

    seed: int
    example: int
    original: tvm.IRModule = field(repr=False)
    matches: list[Match]
    reason: str
    options: str = ""  # the walk options (--walks ...) the example ran with, for the reproducer

    def report(self) -> str:
        steps = "\n".join(f"  {i + 1}. {m!r}" for i, m in enumerate(self.matches)) or "  none"
        # A find that raised broke on the graph the rewrites lead to; otherwise the last rewrite broke it.
        which = "leading to the graph it failed on" if "find raised" in self.reason else "the last one broke it"
        return (f"FAILED example {self.example} (seed {self.seed}): {self.reason}\n"
                f"reproduce: python -m tvm_rl.graph.fuzz --seed {self.seed} --first {self.example} --examples 1"
                f"{self.options}\n"
                f"rewrites, in order ({which}):\n{steps}\n"
                f"original graph:\n{self.original.script()}")


@dataclass
class Coverage:
    """Per rule family: matches offered, rewrites applied (walk steps) and rewritten graphs checked whose
    last rewrite was of that family; plus totals."""

    offered: Counter = field(default_factory=Counter)
    applied: Counter = field(default_factory=Counter)
    checked: Counter = field(default_factory=Counter)
    graphs: int = 0
    examples: int = 0
    no_match: int = 0
    builds: int = 0
    unbuildable: list[str] = field(default_factory=list)

    def merge(self, other: "Coverage") -> None:
        for mine, theirs in ((self.offered, other.offered), (self.applied, other.applied),
                             (self.checked, other.checked)):
            mine.update(theirs)
        self.graphs += other.graphs
        self.examples += other.examples
        self.no_match += other.no_match
        self.builds += other.builds
        self.unbuildable += other.unbuildable

    def families(self) -> int:
        """Rule families with at least one rewritten graph checked."""
        return sum(1 for v in self.checked.values() if v)

    def table(self) -> str:
        rows = [f"{'family':28s} {'offered':>8s} {'applied':>8s} {'checked':>8s}"]
        for name in rule_names():
            rows.append(f"{name:28s} {self.offered[name]:8d} {self.applied[name]:8d} {self.checked[name]:8d}")
        rows.append(f"{'total':28s} {sum(self.offered.values()):8d} {sum(self.applied.values()):8d} "
                    f"{sum(self.checked.values()):8d}")
        rows.append(f"{self.graphs} rewritten graphs checked in {self.builds} builds over {self.examples} "
                    f"random graphs ({self.no_match} with no match); {self.families()} of {len(rule_names())} "
                    "families exercised")
        if self.unbuildable:
            rows.append(f"{len(self.unbuildable)} random graphs skipped, their original does not build:")
            rows += [f"  {line}" for line in self.unbuildable]
        return "\n".join(rows)


class RewriteCrash(RuntimeError):
    """A rule raised while rewriting a match it offered (the path ends with that match), or while looking
    for matches (`what` names the family; the path leads to the graph it looked at)."""

    def __init__(self, path: list[Match], err: BaseException, what: str = "the rewrite raised"):
        super().__init__(_error_line(err))
        self.path = path
        self.what = what


def _candidates(mod: tvm.IRModule, path: list[Match]):
    """`enumerate_candidates(mod)`; when a rewrite raises, a RewriteCrash naming the match that did."""
    try:
        return enumerate_candidates(mod)
    except Exception as err:  # noqa: BLE001  (RuleError or a TVM type error from a bad rewrite)
        for rule in all_rules():
            try:
                matches = rule.matches(mod)
            except Exception as culprit:  # noqa: BLE001  (a bug in the family's find)
                raise RewriteCrash(path, culprit, f"{rule.name}'s find raised") from culprit
            for match in matches:
                try:
                    rule.apply(mod, match)
                except Exception as culprit:  # noqa: BLE001
                    raise RewriteCrash(path + [match], culprit) from culprit
        raise RewriteCrash(path, err) from err


def _walks(mod: tvm.IRModule, rng: np.random.Generator, walks: int, steps: int, cov: Coverage
           ) -> list[tuple[list[Match], tvm.IRModule]]:
    """Random rewrite sequences from `mod`: each step picks a family uniformly among those offering a
    candidate (so frequent families do not crowd out rare ones), then one of its candidates.

    Returns every distinct graph reached with the matches leading to it. The first step of all walks
    shares one candidate set, and every candidate in it is kept (they are all checked anyway).
    """
    seen: set[int] = {tvm_ffi.structural_hash(mod)}
    out: list[tuple[list[Match], tvm.IRModule]] = []

    def keep(path: list[Match], new: tvm.IRModule) -> None:
        key = tvm_ffi.structural_hash(new)
        if key not in seen:
            seen.add(key)
            out.append((path, new))
            cov.checked[path[-1].rule] += 1

    first = _candidates(mod, [])
    for cand in first:
        cov.offered[cand.rule.name] += 1
        keep([cand.match], cand.mod)
    if not len(first):
        return out
    for _ in range(walks):
        cands, path, cur = first, [], mod
        for step in range(steps):
            if step:
                cands = _candidates(cur, path)
                for cand in cands:
                    cov.offered[cand.rule.name] += 1
            if not len(cands):
                break
            families = sorted({c.rule.name for c in cands}, key=rule_names().index)
            family = families[int(rng.integers(len(families)))]
            options = [c for c in cands if c.rule.name == family]
            cand = options[int(rng.integers(len(options)))]
            cov.applied[family] += 1
            path, cur = path + [cand.match], cand.mod
            if step:
                keep(path, cur)
    return out


class Unbuildable(RuntimeError):
    """The original graph itself does not build (a TVM limitation the generator should steer clear of)."""


def _error_line(err: BaseException) -> str:
    """The telling line of an error (TVM's messages end in a script dump or a metadata note)."""
    cause = err.__cause__ or err
    lines = [ln.strip() for ln in str(cause).splitlines() if ln.strip() and not ln.strip().startswith("#")]
    text = next((ln for ln in reversed(lines) if "Error" in ln or "must" in ln), lines[-1] if lines else "")
    return f"{type(cause).__name__}: {text[:400]}"


def compare_outputs(original: tvm.IRModule, variants: dict[str, tvm.IRModule], inputs: Sequence[np.ndarray],
                    rtol: float, atol: float) -> dict[str, measure.Comparison]:
    """Like `verify.compare_variants` (one build for all variants), but with `atol` relative to each output's
    own largest magnitude: fuzz graphs return several outputs of very different scales, and one shared
    scale would let a wrong small output pass."""
    outs = run_variants(original, variants, inputs)
    ref = outs.pop("original")
    scales = [max(float(np.max(np.abs(r.astype(np.float64)))) if r.size else 0.0, 1e-30) for r in ref]
    results = {}
    for key, out in outs.items():
        if len(out) != len(ref):
            raise MismatchError(f"{len(out)} outputs, the original has {len(ref)}")
        per = [measure.compare([o], [r], rtol=rtol, atol=atol * sc) for o, r, sc in zip(out, ref, scales)]
        worst = next((i for i, c in enumerate(per) if not c.ok), int(np.argmax([c.max_abs_err for c in per])))
        results[key] = measure.Comparison(max(c.max_abs_err for c in per), max(c.max_rel_err for c in per),
                                          worst, all(c.ok for c in per))
    return results


def _check(mod: tvm.IRModule, variants: list[tuple[list[Match], tvm.IRModule]], seed: int, cov: Coverage
           ) -> list[tuple[list[Match], str]]:
    """Compare every variant with `mod` (one build; on a build error, one build per variant to find it)."""
    dtype = graph_dtype(mod)
    rtol, atol = TOLERANCES.get(dtype, TOLERANCES["float16"])
    inputs = random_inputs(mod, seed)
    bad = []
    try:
        cov.builds += 1
        results = compare_outputs(mod, {str(i): v for i, (_, v) in enumerate(variants)}, inputs, rtol, atol)
    except Exception:  # noqa: BLE001  (a build or shape error somewhere: find the variant that has it)
        try:
            cov.builds += 1
            compare_outputs(mod, {}, inputs, rtol, atol)
        except Exception as err:  # noqa: BLE001
            raise Unbuildable(_error_line(err)) from err
        results = {}
        for i, (path, v) in enumerate(variants):
            try:
                cov.builds += 1
                results[str(i)] = compare_outputs(mod, {"v": v}, inputs, rtol, atol)["v"]
            except Exception as err:  # noqa: BLE001
                bad.append((path, _error_line(err)))
    for i, (path, _) in enumerate(variants):
        c = results.get(str(i))
        if c is not None and not c.ok:
            bad.append((path, f"max abs error {c.max_abs_err:.3g} (max rel {c.max_rel_err:.3g}) in output "
                              f"{c.worst_output}, {dtype} tolerance rtol={rtol:g} atol={atol:g}*(output scale)"))
    return bad


def _spread(variants: list[tuple[list[Match], tvm.IRModule]], n: int) -> set[int]:
    """Indices of `n` variants taken round-robin over the family of their last rewrite, deepest first
    within a family: a graph with eight constant transposes should not spend the build on them alone."""
    by_family: dict[str, list[int]] = {}
    for i, (path, _) in enumerate(variants):
        by_family.setdefault(path[-1].rule, []).append(i)
    queues = [sorted(idx, key=lambda i: (-len(variants[i][0]), i)) for _, idx in sorted(by_family.items())]
    keep: set[int] = set()
    while len(keep) < n:
        for q in queues:
            if q and len(keep) < n:
                keep.add(q.pop(0))
    return keep


def fuzz_example(seed: int, example: int, walks: int = 3, steps: int = 4, max_variants: int = 24
                 ) -> tuple[Coverage, list[Failure]]:
    """Fuzz one random graph: random rewrite walks from it, every graph reached checked numerically.

    The graph and the walks depend on (seed, example) only, so any example re-runs on its own.
    `max_variants` bounds the graphs checked (and so the build time) per example.
    """
    rng = np.random.default_rng([seed, example])
    options = f" --walks {walks} --steps {steps} --max-variants {max_variants}"
    cov = Coverage(examples=1)
    try:
        mod = random_graph(rng)
    except Exception as err:  # noqa: BLE001  (the generator itself is wrong: never hide it)
        raise RuntimeError(f"generator failed on seed {seed} example {example}: {err}") from err
    failures = []
    try:
        variants = _walks(mod, rng, walks, steps, cov)
    except RewriteCrash as err:
        return cov, [Failure(seed, example, mod, err.path, f"{err.what} {err}", options)]
    if not variants:
        cov.no_match += 1
        return cov, []
    if len(variants) > max_variants:
        keep = _spread(variants, max_variants)
        for i, (path, _) in enumerate(variants):
            if i not in keep:
                cov.checked[path[-1].rule] -= 1
        variants = [v for i, v in enumerate(variants) if i in keep]
    cov.graphs += len(variants)
    try:
        bad = _check(mod, variants, seed * 1000 + example, cov)
    except Unbuildable as err:
        cov.unbuildable.append(f"example {example}: {err}")
        cov.graphs -= len(variants)
        for path, _ in variants:
            cov.checked[path[-1].rule] -= 1
        return cov, []
    # A path extending a failing one fails for the same reason: report the shortest, whose last rewrite
    # is the culprit (every prefix of a walk is checked too).
    bad.sort(key=lambda b: len(b[0]))
    for path, reason in bad:
        if not any(f.matches == path[:len(f.matches)] for f in failures):
            failures.append(Failure(seed, example, mod, path, reason, options))
    return cov, failures


def fuzz(examples: int, seed: int = 0, first: int = 0, walks: int = 3, steps: int = 4,
         max_variants: int = 24, progress: Callable[[str], None] | None = None
         ) -> tuple[Coverage, list[Failure]]:
    """Run `fuzz_example` for examples first .. first + examples - 1; returns the coverage and failures."""
    cov, failures = Coverage(), []
    start = time.perf_counter()
    for i in range(first, first + examples):
        c, f = fuzz_example(seed, i, walks, steps, max_variants)
        cov.merge(c)
        failures += f
        if progress is not None:
            progress(f"[{i - first + 1}/{examples}] example {i}: {c.graphs} graphs checked "
                     f"({', '.join(sorted(k for k, v in c.applied.items() if v)) or 'no rewrite'})"
                     + (f"  {len(f)} FAILED" if f else "")
                     + f"  total {cov.graphs} graphs, {time.perf_counter() - start:.0f} s")
    return cov, failures


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvm_rl.graph.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=100, help="random graphs to fuzz")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--first", type=int, default=0, help="index of the first example (to re-run one)")
    p.add_argument("--steps", type=int, default=4, help="rewrites per walk")
    p.add_argument("--walks", type=int, default=3, help="random walks per graph")
    p.add_argument("--max-variants", type=int, default=24, help="rewritten graphs checked per random graph")
    p.add_argument("--quiet", action="store_true", help="no per-example progress lines")
    args = p.parse_args(argv)
    say = None if args.quiet else (lambda line: print(line, flush=True))
    start = time.perf_counter()
    cov, failures = fuzz(args.examples, args.seed, args.first, args.walks, args.steps, args.max_variants, say)
    print(cov.table())
    print("offered: distinct candidates enumerated on the graphs visited; applied: rewrites the walks took; "
          "checked: rewritten graphs compared whose last rewrite is the family's "
          f"({time.perf_counter() - start:.0f} s)")
    for f in failures:
        print("\n" + f.report())
    if failures:
        print(f"\n{len(failures)} rewritten graphs differ from their original", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
