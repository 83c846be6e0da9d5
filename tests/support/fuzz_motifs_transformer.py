"""The rule fuzzer's linear-algebra motifs, for the transformer rule families: merges, splits and folds of
linears (Q/K/V siblings, fused projections, shared weights, matmul chains and sums, scaled linears, constant
chains), transposed operands, GEMM shapes a little short of a tile, and pre-LN blocks."""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import TupleGetItem

from .fuzz_motifs import MotifBase, R, _Tensor


class TransformerMotifs(MotifBase):
    """Motifs on linears as transformers export them (mostly rank 2 / 3, features last)."""

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
        outs: list[_Tensor] = []
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
        outs: list[_Tensor] = []
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
