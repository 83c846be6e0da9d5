"""The rule fuzzer's graph motifs: what every family of motifs builds on, and the table of all of them.

A motif is a `GraphGen` method that takes tensors from a pool (the graph's inputs or earlier results) and adds
its results to it, shaped to make rules *match* and, now and then, to set the traps the rules must refuse. The
motifs live in one mixin per kind of input, all on `MotifBase` (the pool, random constants, activations, and
the convolutions and linears several families share):

    fuzz_motifs_image        NCHW convolutions, batch norms, pooling, NHWC regions
    fuzz_motifs_sequence     linears, sibling projections, attention, classifier heads
    fuzz_motifs_any          any rank: scalar motion, permute / reshape chains, identities, splits and concats,
                             dtype hops, tuples
    fuzz_motifs_transformer  merges, splits and folds of linears, GEMM shapes, pre-LN blocks

`MOTIFS` names each motif with its draw weight and the kind of input it needs; `fuzz.GraphGen` combines the
mixins and draws from it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from tvm import relax

R = relax.op

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


class MotifBase:
    """A graph under construction: the tensor pool, the random draws, and the building blocks the motifs share.

    `read` counts each tensor's readers: `fuzz.GraphGen.build` makes the unread ones the graph's outputs.
    """

    def __init__(self, rng: np.random.Generator, dtype: str = "float32"):
        self.rng = rng
        self.dtype = dtype
        self.pool: list[_Tensor] = []
        self.reads: Counter = Counter()
        self.extra_outputs: list[_Tensor] = []
        self._emit: Callable[[relax.Expr], relax.Var] | None = None  # set by build, inside its block

    # ---- plumbing

    def emit(self, expr) -> _Tensor:
        if self._emit is None:
            raise RuntimeError("a motif emitted outside GraphGen.build (no dataflow block to emit into)")
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
            if high is None:
                raise ValueError("const: `low` given without `high`")
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

    # ---- convolutions (NCHW; the image motifs' and scaled_linear's)

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

    # ---- linears (rank 2 / 3, features last; the sequence and transformer motifs')

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
