"""Where a graph's priced time sits: per kernel kind, and how much of it a rewrite that keeps FLOPs could lower.

Nearly all of the graph pass's rewrites keep the FLOPs of the compute-bound kernels (they fold, fuse, move layouts
and merge); `dedup` and matmul re-association can remove some, and on the zoo models they match at most 4 times a
model (the transformers), so the bound below assumes the FLOPs stay. By the roofline proxy a kernel takes
max(FLOPs / peak, bytes / bandwidth) of its kind, so a kernel whose FLOPs term sets its price (compute-bound) gets
cheaper only by changing kind to one with a higher peak (`COMPUTE_KINDS`: a layout, or for an element-wise kernel
fusion into another kernel), and one whose bytes set it only by moving fewer bytes (fusion, folding). A 1x1
convolution can also become a matmul (`Conv1x1ToMatmul`, which the default arm applies to every match); the kernels
do not say their window, so that move is not counted: read graphs the default has already rewritten.
`cost_shares` splits a graph's priced time that way, so "no arm found room" can be read against "the proxy leaves
room here at all" (a learned policy can only win where the rewrites open cheaper graphs).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import tvm

from tvm_rl.graph.profiles import fused_groups
from tvm_rl.graph.roofline import KINDS, Roofline

# The kinds a compute-bound kernel's FLOPs could end up priced as, by the kind it has now: a kernel can become
# cheaper while keeping its FLOPs only by moving to a kind whose roofline has a higher peak. A convolution can
# change layout; element-wise and injective operators can be fused into any anchor's kernel (its epilogue or
# prologue), so their FLOPs could be priced at the best peak of all; matmuls, pools and reductions stay what they are.
COMPUTE_KINDS: dict[str, tuple[str, ...]] = {
    "conv": ("conv_nhwc",), "conv_nhwc": ("conv",), "group_conv": ("group_conv_nhwc",),
    "group_conv_nhwc": ("group_conv",), "elementwise": KINDS, "transpose": KINDS}


@dataclass
class KindShare:
    """One kind's kernels: their count, priced ms, and the ms of those whose FLOPs term sets the price."""

    kernels: int = 0
    ms: float = 0.0
    compute_bound_ms: float = 0.0
    # the compute-bound kernels' FLOPs at the highest peak a change of kind could give them: no rewrite lowers it
    fixed_ms: float = 0.0


@dataclass
class CostShares:
    """A graph's priced time by kind (`kinds`), and the part of it fixed by FLOPs (`fixed_ms`: the compute-bound
    kernels' FLOPs at the best peak a change of kind could give them)."""

    total_ms: float
    kinds: dict[str, KindShare] = field(default_factory=dict)

    @property
    def fixed_ms(self) -> float:
        return sum(k.fixed_ms for k in self.kinds.values())

    @property
    def movable_share(self) -> float:
        """The share of the priced time a FLOP-preserving rewrite could lower at all (an upper bound on its gain,
        as a fraction of the graph's time: 1 - fixed / total)."""
        return 1.0 - self.fixed_ms / self.total_ms if self.total_ms > 0 else 0.0

    @property
    def max_speedup(self) -> float:
        """The proxy speedup if every movable millisecond went away: total / fixed (inf when nothing is fixed)."""
        return self.total_ms / self.fixed_ms if self.fixed_ms > 0 else float("inf")

    def as_dict(self) -> dict:
        return {"total_ms": self.total_ms, "fixed_ms": self.fixed_ms, "movable_share": self.movable_share,
                "max_speedup": self.max_speedup, "kinds": {k: asdict(v) for k, v in self.kinds.items()}}


def cost_shares(mod: tvm.IRModule, model: Roofline) -> CostShares:
    """`mod`'s kernels (`profiles.fused_groups`) priced by `model`, split by kind and by what bounds them. A matmul
    that `model` prices by its GEMM shape counts as compute-bound and fixed (the shape model has no bytes term)."""
    out = CostShares(0.0)
    for k in fused_groups(mod):
        ms = model.time_ms(k.flops, k.nbytes, k.kind, k.gemm)
        share = out.kinds.setdefault(k.kind, KindShare())
        share.kernels += 1
        share.ms += ms
        out.total_ms += ms
        if model.prices_by_shape(k.kind, k.gemm):
            share.compute_bound_ms += ms
            share.fixed_ms += ms
            continue
        h = model.for_kind(k.kind)
        compute = k.flops / (h.peak_gflops * 1e9)
        if compute < k.nbytes / (h.gbps * 1e9):
            continue  # memory-bound: fusion or folding can move fewer bytes
        share.compute_bound_ms += ms
        best_peak = max([h.peak_gflops] + [model.for_kind(other).peak_gflops
                                           for other in COMPUTE_KINDS.get(k.kind, ())])
        # The FLOPs term at the best peak reachable stays; the launch and the rest could go.
        share.fixed_ms += k.flops / (best_peak * 1e9) * 1e3
    return out


__all__ = ["COMPUTE_KINDS", "CostShares", "KindShare", "cost_shares"]
