"""The rule fuzzer's sequence motifs (rank 2 / 3, features last): linear layers, sibling projections on one
input, exported attention chains, and classifier heads."""
from __future__ import annotations

import numpy as np
from tvm import relax

from .fuzz_motifs import MotifBase, R, _Tensor


class SequenceMotifs(MotifBase):
    """Motifs on rank-2 and rank-3 tensors with the features last."""

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

    def dense_head(self) -> None:
        """[N, C] @ W (+ b): a classifier head, which matmul_to_conv1x1 turns into a 1x1 conv2d."""
        x = self.pick(2)
        if x is None:
            return
        y = self._linear(x, int(self.rng.integers(2, 7)))
        self.add(self.maybe_act(y, 0.3))
