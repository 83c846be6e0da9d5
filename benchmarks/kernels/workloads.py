"""The shapes `kernel_ceiling` measures: one-op Relax modules (what `tvm_rl` tunes) and their FLOP counts."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shape:
    """A GEMM (M, K, N: x[M,K] @ W[K,N]) or a 3x3 conv (batch 1, NCHW, stride 1, pad 1: C->C at H x W)."""

    kind: str  # "gemm" or "conv3x3"
    dims: tuple[int, ...]  # (M, K, N) or (C_in, H, W, C_out)

    @property
    def name(self) -> str:
        if self.kind == "gemm":
            return "gemm_{}x{}x{}".format(*self.dims)
        c, h, w, co = self.dims
        return f"conv3x3_{h}x{w}x{c}->{co}"

    @property
    def flops(self) -> float:
        if self.kind == "gemm":
            m, k, n = self.dims
            return 2.0 * m * k * n
        c, h, w, co = self.dims
        return 2.0 * co * h * w * c * 9

    def arrays(self, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(input, weight) in float32: x [M,K] and W [K,N], or x [1,C,H,W] and W [Co,C,3,3]."""
        rng = np.random.default_rng(seed)
        if self.kind == "gemm":
            m, k, n = self.dims
            return (rng.uniform(-1, 1, (m, k)).astype("float32"), rng.uniform(-1, 1, (k, n)).astype("float32"))
        c, h, w, co = self.dims
        return (rng.uniform(-1, 1, (1, c, h, w)).astype("float32"),
                rng.uniform(-1, 1, (co, c, 3, 3)).astype("float32"))

    def reference(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        if self.kind == "gemm":
            return x @ w
        _, c, h, wd = x.shape
        xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
        cols = np.stack([xp[:, i:i + h, j:j + wd] for i in range(3) for j in range(3)], axis=1)  # C,9,H,W
        return (w.reshape(w.shape[0], -1) @ cols.reshape(c * 9, h * wd)).reshape(1, -1, h, wd)


def parse_shape(text: str) -> Shape:
    """"gemm:128x768x3072" (M x K x N) or "conv:56x56x64x64" (H x W x C_in x C_out)."""
    kind, _, dims = text.partition(":")
    nums = tuple(int(v) for v in dims.lower().split("x"))
    if kind == "gemm" and len(nums) == 3:
        return Shape("gemm", nums)
    if kind == "conv" and len(nums) == 4:
        h, w, c, co = nums
        return Shape("conv3x3", (c, h, w, co))
    raise ValueError(f"bad shape {text!r}: use gemm:MxKxN or conv:HxWxCinxCout")


DEFAULT_SHAPES = ("gemm:128x768x768", "gemm:128x768x3072", "gemm:128x3072x768", "conv:56x56x64x64",
                  "conv:14x14x256x256")


def relax_module(shape: Shape):
    """The op as a Relax module with the weight a constant (as a model's weight is)."""
    import tvm
    from tvm import relax

    x, w = shape.arrays()
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(list(x.shape), "float32"))
    with bb.function("main", [xv]):
        with bb.dataflow():
            wc = relax.const(tvm.runtime.tensor(w))
            if shape.kind == "gemm":
                y = bb.emit(relax.op.matmul(xv, wc))
            else:
                y = bb.emit(relax.op.nn.conv2d(xv, wc, strides=1, padding=1))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()
