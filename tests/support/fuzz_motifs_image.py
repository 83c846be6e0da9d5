"""The rule fuzzer's image motifs (NCHW): convolutions with their biases and batch norms, sibling convolutions,
pooling, NHWC regions, and the step from an image to a sequence."""
from __future__ import annotations

from tvm import relax
from tvm.ir import TupleGetItem

from .fuzz_motifs import MotifBase, R, _Tensor


class ImageMotifs(MotifBase):
    """Motifs on rank-4 NCHW tensors."""

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
