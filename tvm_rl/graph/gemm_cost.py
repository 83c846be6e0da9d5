"""GEMM efficiency by shape: what a tuned matmul of shape (batch, M, N, K) runs at, fitted from a tuning database.

A roofline per kind prices every matmul at one FLOP rate, so merging three GEMMs into one, padding N to a
multiple of 16 or flattening a batch looks neutral to it: FLOPs are conserved. Tuned kernels say otherwise:
a GEMM with a small or odd dimension reaches a fraction of the rate of a square one. `GemmModel` predicts
log(FLOP rate) from the shape's log dimensions and their alignment (ridge regression over the database's tuned
matmuls), so a search prices such rewrites by what tuned kernels do. Too few matmuls in a database (fewer than
`MIN_KERNELS`): no model, and the matmul roofline prices them as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

MIN_KERNELS = 6
# Vector lanes of the widest float32 SIMD the CPU targets use (AVX-512: 16; AVX2 uses 8, which 16 covers):
# a dimension that is not a multiple leaves a ragged tail loop.
ALIGN = 16


@dataclass(frozen=True)
class GemmShape:
    """A (batched) GEMM: `batch` independent [M, K] @ [K, N] products."""

    batch: int
    m: int
    n: int
    k: int

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def gemm_shape(a: Sequence[int] | None, b: Sequence[int] | None) -> GemmShape | None:
    """The GEMM of `matmul(a, b)` for static operand shapes a [..., M, K] and b [..., K, N] (or b [K, N]); None
    for shapes that are not one (a vector operand, mismatched K)."""
    if not a or not b or len(a) < 2 or len(b) < 2 or int(a[-1]) != int(b[-2]):
        return None
    batch = int(np.prod([int(d) for d in a[:-2]], dtype=np.int64)) if len(a) > 2 else 1
    if len(b) > 2:  # a batched weight: the batch is the broadcast of both leading shapes
        batch = max(batch, int(np.prod([int(d) for d in b[:-2]], dtype=np.int64)))
    m, k, n = int(a[-2]), int(a[-1]), int(b[-1])
    return GemmShape(batch, m, n, k) if min(batch, m, n, k) > 0 else None


def kernel_gemm_shape(shapes: Sequence[Sequence[int]], flops: float) -> GemmShape | None:
    """The GEMM of a tuned matmul kernel from its buffers' shapes (A and B come first, as TVM legalizes
    `relax.matmul`), when its FLOP count agrees (an epilogue adds at most a few FLOPs per output)."""
    if len(shapes) < 3:
        return None
    shape = gemm_shape(shapes[0], shapes[1])
    if shape is None or not shape.flops <= flops <= shape.flops * 1.2:
        return None
    return shape


def matmul_gemm(kind: str, shapes: Sequence[Sequence[int]], flops: float) -> GemmShape | None:
    """`kernel_gemm_shape` of a kernel of `kind` "matmul"; None for every other kind."""
    return kernel_gemm_shape(shapes, flops) if kind == "matmul" else None


def features(shape: GemmShape) -> np.ndarray:
    """Log dimensions, their squares (rates saturate as a dimension grows) and misalignment flags."""
    logs = np.log2([shape.m, shape.n, shape.k, shape.batch]).astype(np.float64)
    ragged = [float(d % ALIGN != 0) for d in (shape.m, shape.n, shape.k)]
    return np.concatenate([logs, logs[:3] ** 2, ragged])


@dataclass(frozen=True)
class GemmModel:
    """log(GFLOP/s) of a tuned GEMM as a ridge regression over `features`, clipped to the fitted range."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    lo: float  # log GFLOP/s range seen when fitting: predictions are clipped to it
    hi: float
    kernels: int

    def gflops(self, shape: GemmShape) -> float:
        z = (features(shape) - np.asarray(self.mean)) / np.asarray(self.scale)
        return float(np.exp(np.clip(self.bias + z @ np.asarray(self.weights), self.lo, self.hi)))

    def time_ms(self, shape: GemmShape, flops: float | None = None) -> float:
        """Predicted latency of the GEMM; `flops` (the whole fused kernel's, epilogue included) if given."""
        return (shape.flops if flops is None else flops) / (self.gflops(shape) * 1e9) * 1e3

    def as_dict(self) -> dict:
        return {"mean": list(self.mean), "scale": list(self.scale), "weights": list(self.weights),
                "bias": self.bias, "lo": self.lo, "hi": self.hi, "kernels": self.kernels}

    @classmethod
    def from_dict(cls, d: dict) -> GemmModel:
        return cls(tuple(d["mean"]), tuple(d["scale"]), tuple(d["weights"]), float(d["bias"]), float(d["lo"]),
                   float(d["hi"]), int(d["kernels"]))


RIDGES = (0.01, 0.1, 1.0, 10.0)


def _solve(z: np.ndarray, y: np.ndarray, ridge: float) -> tuple[float, np.ndarray]:
    bias = float(y.mean())
    return bias, np.linalg.solve(z.T @ z + ridge * np.eye(z.shape[1]), z.T @ (y - bias))


def _choose_ridge(z: np.ndarray, y: np.ndarray) -> float:
    """The ridge of `RIDGES` with the least leave-one-out squared log error: a few kernels need a strong one,
    a database of many shapes a weak one."""
    def loo(ridge: float) -> float:
        errs = []
        for i in range(len(y)):
            keep = np.arange(len(y)) != i
            bias, w = _solve(z[keep], y[keep], ridge)
            errs.append((bias + z[i] @ w - y[i]) ** 2)
        return float(np.mean(errs))

    return min(RIDGES, key=loo)


def fit(shapes: Sequence[GemmShape], measured_ms: Sequence[float], ridge: float | None = None) -> GemmModel | None:
    """A `GemmModel` fitted to tuned GEMM latencies, or None with fewer than `MIN_KERNELS` of them.

    Least squares on log rates, so a 10 ms GEMM and a 0.1 ms one weigh the same; the ridge (chosen by
    leave-one-out unless given) keeps a few kernels from pinning eleven coefficients.
    """
    if len(shapes) != len(measured_ms):
        raise ValueError(f"fit needs one latency per shape; got {len(shapes)} shapes, {len(measured_ms)} latencies")
    if len(shapes) < MIN_KERNELS:
        return None
    x = np.stack([features(s) for s in shapes])
    y = np.log([s.flops / (t * 1e-3) / 1e9 for s, t in zip(shapes, measured_ms)])
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0  # a feature constant over the data carries nothing
    z = (x - mean) / scale
    bias, w = _solve(z, y, _choose_ridge(z, y) if ridge is None else ridge)
    return GemmModel(tuple(mean), tuple(scale), tuple(w), bias, float(y.min()), float(y.max()), len(shapes))


def leave_one_out(shapes: Sequence[GemmShape], measured_ms: Sequence[float], groups: Sequence[str] | None = None,
                  ridge: float | None = None) -> list[float]:
    """|predicted / measured - 1| of each GEMM by a model fitted without it (without its whole group, e.g. its
    model, when `groups` is given): the out-of-sample error."""
    groups = list(groups) if groups is not None else [str(i) for i in range(len(shapes))]
    out = []
    for i, (shape, ms) in enumerate(zip(shapes, measured_ms)):
        keep = [j for j in range(len(shapes)) if groups[j] != groups[i]]
        model = fit([shapes[j] for j in keep], [measured_ms[j] for j in keep], ridge)
        out.append(abs(model.time_ms(shape) / ms - 1) if model is not None else float("nan"))
    return out
