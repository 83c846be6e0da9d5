"""Rooflines: a kernel's latency from its FLOPs and bytes, one roofline per kernel kind, fitted to measurements.

`op_kind` names the kind of a Relax operator, a lowered kernel or a TIR block set; `Hardware` is one roofline,
`RooflineModel` one per kind; `calibrate`/`calibrate_by_kind` fit them to measured kernel latencies.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import tvm
from tvm import tirx
from tvm.ir import Call

from .. import measure
from .gemm_cost import GemmModel, GemmShape
from .rules.ir import op_name


@dataclass(frozen=True)
class Hardware:
    """A roofline: a kernel takes max(FLOPs / peak, bytes / bandwidth) plus a fixed launch overhead."""

    peak_gflops: float
    gbps: float
    launch_us: float = 0.0
    source: str = "assumed"

    def time_ms(self, flops: float, nbytes: float, kind: str | None = None, gemm: GemmShape | None = None) -> float:
        """Roofline time of one kernel; `kind` (see `op_kind`) and `gemm` are accepted for `RooflineModel`'s
        sake."""
        return max(flops / (self.peak_gflops * 1e9), nbytes / (self.gbps * 1e9)) * 1e3 + self.launch_us * 1e-3

    def for_kind(self, kind: str | None) -> Hardware:
        """The roofline a kernel of `kind` is priced with: this one, for every kind."""
        return self

    def prices_by_shape(self, kind: str | None, gemm: GemmShape | None) -> bool:
        """Whether a kernel is priced by its GEMM shape instead of a roofline: never, by one roofline."""
        return False

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Hardware:
        """The roofline whose `as_dict()` is `d`."""
        return cls(**d)


# Convolutions by layout and grouping: tuned on CPU, depthwise convs ran 1.2-3.6x faster in NHWC than the same
# shapes in NCHW, and a layout-blind proxy priced every layout change as a loss (logs/tuning/llvm_s16).
KINDS = ("conv", "conv_nhwc", "group_conv", "group_conv_nhwc", "matmul", "attention", "pool", "reduce",
         "transpose", "elementwise")
# A kind without a roofline of its own borrows its family's before the all-kinds one: a conv in another layout
# runs closer to a conv than to the average (mostly element-wise) kernel, and a roofline fitted before
# transposes had a kind of their own prices them as it did then.
FAMILY = {"conv_nhwc": "conv", "group_conv": "conv", "group_conv_nhwc": "group_conv", "transpose": "elementwise"}


# Reductions by name: softmax and the norms, or sum/max/min/prod/red as a whole word ("relax.max", "lv4_sum",
# "lv88_red"), not inside one ("relax.maximum" is element-wise).
_REDUCE = re.compile(r"softmax|norm|mean|variance|(?:^|[ ._])(?:sum|max|min|prod|red)(?:$|[ ._\d])")


def op_kind(name: str) -> str:
    """The kind of a Relax operator, a lowered kernel's name ("fused_conv2d3_add1_relu1" -> "conv") or a
    kernel's TIR block names joined by spaces: kernels of one kind reach similar fractions of peak, so each
    kind may get its own roofline."""
    name = name.lower()
    if "conv" in name:  # TIR blocks say "group_conv2d_nhwc"; `call_kind` spells a Relax call's attributes so
        kind = "group_conv" if "group" in name or "depthwise" in name else "conv"
        return f"{kind}_nhwc" if "nhwc" in name else kind
    # Attention is its own kind: its tuned kernel (two batch matmuls around a softmax) ran at a fraction of a
    # tuned matmul's rate on a 2-core CPU (docs/results/graph_search.md), and priced as a matmul every
    # transformer search preferred it, 20-45% slower.
    if "attention" in name or ("matmul" in name and "softmax" in name):
        return "attention"
    if "matmul" in name or "dense" in name or "einsum" in name:
        return "matmul"
    if "pool" in name:
        return "pool"
    if "batch_norm" in name:  # at inference a per-channel scale and shift: element-wise
        return "elementwise"
    if _REDUCE.search(name):
        return "reduce"
    # A transpose reads or writes with a stride: tuned on CPU, MobileNet-V2's largest NCHW<->NHWC transposes ran
    # at 10-15 GB/s where the element-wise roofline assumed twice that, and priced as element-wise the
    # transposes that 1x1-conv-to-matmul rewrites leave were underpriced until a graph with 34 of them measured
    # 12% slower than one the proxy ranked below it (docs/results/graph_ablation.md, the proxy audit).
    if "transpose" in name or "permute_dims" in name or "layout_transform" in name:
        return "transpose"
    return "elementwise"


def call_kind(call: Call) -> str:
    """`op_kind` of a Relax call, with a convolution's grouping and data layout read from its attributes."""
    name = op_name(call) or ""
    if name.startswith("relax.nn.conv"):
        groups = int(getattr(call.attrs, "groups", 1))
        name += (" group" if groups > 1 else "") + " " + str(call.attrs.data_layout).lower()
    return op_kind(name)


@dataclass(frozen=True)
class RooflineModel:
    """One roofline per kernel kind (`KINDS`), `default` for the kinds without one."""

    default: Hardware
    per_kind: tuple[tuple[str, Hardware], ...] = ()
    gemm: GemmModel | None = None  # matmuls of a known shape are priced by it (`gemm_cost`)

    def time_ms(self, flops: float, nbytes: float, kind: str | None = None, gemm: GemmShape | None = None) -> float:
        if self.prices_by_shape(kind, gemm):
            return self.gemm.time_ms(gemm, flops)
        return self.for_kind(kind).time_ms(flops, nbytes)

    def prices_by_shape(self, kind: str | None, gemm: GemmShape | None) -> bool:
        """Whether a kernel of `kind` and GEMM shape `gemm` is priced by the shape model (`gemm`) instead of a
        roofline: a matmul of known shape, when there is a shape model."""
        return self.gemm is not None and gemm is not None and kind == "matmul"

    def for_kind(self, kind: str | None) -> Hardware:
        """The roofline a kernel of `kind` is priced with (a matmul of known shape aside, when `gemm` prices it):
        its own, else its family's (`FAMILY`), else `default`."""
        own = dict(self.per_kind)
        while kind not in own and kind in FAMILY:
            kind = FAMILY[kind]
        return own.get(kind, self.default)

    def as_dict(self) -> dict:
        out = {"default": self.default.as_dict(), **{k: h.as_dict() for k, h in self.per_kind}}
        return out | ({"gemm": self.gemm.as_dict()} if self.gemm is not None else {})

    @classmethod
    def from_dict(cls, d: dict) -> RooflineModel:
        """The model whose `as_dict()` is `d`, rebuilt exactly (kinds in their order; a "gemm" of None: none)."""
        gemm = GemmModel.from_dict(d["gemm"]) if d.get("gemm") is not None else None
        return cls(Hardware.from_dict(d["default"]),
                   tuple((k, Hardware.from_dict(h)) for k, h in d.items() if k not in ("default", "gemm")), gemm)


Roofline = Hardware | RooflineModel  # what the roofline functions accept


def from_dict(d: dict) -> Roofline:
    """The roofline whose `as_dict()` is `d`: a `RooflineModel` (its form has a "default"), else a `Hardware`."""
    return RooflineModel.from_dict(d) if "default" in d else Hardware.from_dict(d)


def default_hardware(target: tvm.target.Target | str) -> Hardware:
    """Nominal figures, stated rather than measured: calibrate them (`calibrate`) before trusting a proxy.

    LLVM: 2 Zen 3 cores, AVX2 FMA at ~3 GHz (16 fp32 FLOP/cycle/core, ~100 GFLOP/s) and ~20 GB/s of DRAM
    bandwidth. Untuned TVM kernels on CPU are naive scalar loops, far below both, so the nominal CPU
    roofline underestimates untuned builds by orders of magnitude. CUDA: an H100 SXM, 67 TFLOP/s fp32
    without tensor cores, 3350 GB/s HBM3, ~3 us per kernel launch.
    """
    target = measure.parse_target(target)
    if measure.is_gpu(target):
        return Hardware(67_000.0, 3350.0, 3.0, "assumed: H100 SXM fp32 (no tensor cores)")
    return Hardware(100.0, 20.0, 1.0, "assumed: 2 Zen 3 cores, AVX2 FMA")


def calibrate(flops: Sequence[float], nbytes: Sequence[float], measured_ms: Sequence[float],
              source: str = "calibrated") -> Hardware:
    """The roofline (peak, bandwidth, launch overhead) that best predicts measured kernel latencies.

    Least mean |log(predicted / measured)| over a log grid: a few kernels suffice, and the log error keeps
    one slow kernel from deciding the fit for all the fast ones.
    """
    f, b, t = (np.asarray(v, dtype=np.float64) for v in (flops, nbytes, measured_ms))
    if not (len(f) == len(b) == len(t)) or len(t) == 0:
        raise ValueError(f"calibrate needs equal, non-empty lists; got {len(f)}, {len(b)}, {len(t)}")
    if np.any(t <= 0):
        raise ValueError("calibrate needs positive measured latencies")
    best = (math.inf, None)
    peaks, bws = np.logspace(-1, 5, 61), np.logspace(-1, 4, 51)  # GFLOP/s, GB/s
    compute = f[None, :] / (peaks[:, None] * 1e9) * 1e3  # (peaks, kernels) in ms
    memory = b[None, :] / (bws[:, None] * 1e9) * 1e3
    for launch_us in (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0):
        pred = np.maximum(compute[:, None, :], memory[None, :, :]) + launch_us * 1e-3
        err = np.abs(np.log(np.maximum(pred, 1e-12) / t)).mean(axis=-1)
        i, j = np.unravel_index(np.argmin(err), err.shape)
        if err[i, j] < best[0]:
            best = (float(err[i, j]), Hardware(float(peaks[i]), float(bws[j]), launch_us, source))
    return best[1]


def calibrate_by_kind(kinds: Sequence[str], flops: Sequence[float], nbytes: Sequence[float],
                      measured_ms: Sequence[float], min_kernels: int = 3) -> RooflineModel:
    """A roofline per kernel kind with at least `min_kernels` measurements, one fitted on all for the rest."""
    rows = list(zip(kinds, flops, nbytes, measured_ms))
    default = calibrate(*zip(*[r[1:] for r in rows]), source="calibrated on all kinds")
    per_kind = []
    for kind in KINDS:
        mine = [r[1:] for r in rows if r[0] == kind]
        if len(mine) >= min_kernels:
            per_kind.append((kind, calibrate(*zip(*mine), source=f"calibrated on {len(mine)} {kind} kernels")))
    return RooflineModel(default, tuple(per_kind))


_BLOCK = re.compile(r'T\.s?block\("([^"]+)"')


def block_kind(block_names: list[str]) -> str:
    """The kind (`KINDS`) of a kernel from its TIR blocks' names, named as `op_kind` names Relax ops."""
    return op_kind(" ".join(block_names))


def tir_kind(func: tirx.PrimFunc) -> str:
    """`block_kind` of a PrimFunc's blocks."""
    return block_kind(_BLOCK.findall(func.script()))

