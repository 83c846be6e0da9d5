"""The rule fuzzer's motifs for tensors of any rank: scalar factors moved through ops, permute and reshape
chains, identities and their look-alikes, duplicated computations, split / concat, activations around concats,
element-wise ops after a transpose or a reshape, residual joins, regions in the other float type, and tuple items."""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import TupleGetItem

from .fuzz_motifs import _ACTS, MotifBase, R


class AnyMotifs(MotifBase):
    """Motifs that take a tensor of any rank (some need rank 2 or more)."""

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
        dims: list[int] = []
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
        """act / binary-with-constant after a permute_dims of any rank, or after a reshape (one that keeps the last
        axis, or any other: then a constant along the view's last axis cannot move above it)."""
        x = self.pick(None, lambda t: len(t.shape) >= 2)
        if x is None:
            return
        rank = len(x.shape)
        if self.chance(0.3):
            merged = (int(np.prod(x.shape[:-1])), x.shape[-1])
            y = self.emit(R.reshape(self.read(x), merged if self.chance(0.6) else self._factor(x.shape)))
            rank = len(y.shape)
        else:
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
