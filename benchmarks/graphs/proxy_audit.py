"""Where a graph's proxy price and its measured kernels part: every lowered kernel priced by the roofline and
timed alone with the database's schedules, summed per kind.

A graph search trusts its proxy to rank graphs; when a measured build ranks them the other way, this says
which kernels the proxy mispriced: the Relax-level price the search used (`graph_roofline_ms`, TVM's fusion
predicted), the same roofline over the kernels TVM actually lowers to (the fusion prediction's error is the
difference), and the kernels' measured times (the roofline's error per kind).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import tvm

from tvm_rl import measure
from tvm_rl.database import DatabaseLike
from tvm_rl.graph.gemm_cost import matmul_gemm
from tvm_rl.graph.profiles import arg_shapes, graph_roofline_ms, profiles_of
from tvm_rl.graph.roofline import Roofline


@dataclass(frozen=True)
class KernelAudit:
    """One lowered kernel: name, kind, calls, FLOPs and bytes, the roofline's and the measured latency (ms,
    per call)."""

    name: str
    kind: str
    calls: int
    flops: float
    nbytes: int
    proxy_ms: float
    measured_ms: float


def audit_kernels(mod: tvm.IRModule, target: tvm.target.Target | str, proxy: Roofline,
                  database: DatabaseLike = None, repeat: int = 10) -> list[KernelAudit]:
    """Every kernel `mod` lowers to (with `database`'s schedules), priced by `proxy` and timed alone."""
    target = measure.parse_target(target)
    lowered = measure.kernel_stage(mod, target, database)
    timed = {k.name: k for k in measure.time_lowered_kernels(lowered, target, repeat)}
    out = []
    for p in profiles_of(lowered):
        gemm = matmul_gemm(p.kind, arg_shapes(lowered[p.name]), p.flops)
        out.append(KernelAudit(p.name, p.kind, p.calls, p.flops, p.nbytes,
                               proxy.time_ms(p.flops, p.nbytes, p.kind, gemm), timed[p.name].timing.median_ms))
    return out


def by_kind(kernels: list[KernelAudit]) -> dict[str, dict]:
    """Per kind: kernels, calls, and the proxy's and the measured total ms (calls x per-call latency)."""
    out: dict[str, dict] = {}
    for k in kernels:
        row = out.setdefault(k.kind, {"kernels": 0, "calls": 0, "proxy_ms": 0.0, "measured_ms": 0.0})
        row["kernels"] += 1
        row["calls"] += k.calls
        row["proxy_ms"] += k.calls * k.proxy_ms
        row["measured_ms"] += k.calls * k.measured_ms
    return dict(sorted(out.items()))


def audit_graph(mod: tvm.IRModule, target: tvm.target.Target | str, proxy: Roofline,
                database: DatabaseLike = None, repeat: int = 10) -> dict:
    """A JSON-ready audit of one graph: the search's Relax-level price, the roofline over the lowered kernels,
    their measured sum, the same per kind, and every kernel."""
    kernels = audit_kernels(mod, target, proxy, database, repeat)
    return {"relax_proxy_ms": graph_roofline_ms(mod, proxy),
            "kernel_proxy_ms": sum(k.calls * k.proxy_ms for k in kernels),
            "measured_kernels_ms": sum(k.calls * k.measured_ms for k in kernels),
            "by_kind": by_kind(kernels), "kernels": [asdict(k) for k in kernels]}


def audit_table(audits: dict[str, dict]) -> list[str]:
    """Markdown rows: per graph and kind, the proxy's and the measured ms and their ratio; then the totals."""
    lines = ["| graph | kind | kernels | calls | proxy ms | measured ms | measured / proxy |", "|---" * 7 + "|"]
    for name, a in audits.items():
        for kind, r in a["by_kind"].items():
            ratio = r["measured_ms"] / r["proxy_ms"] if r["proxy_ms"] > 0 else float("nan")
            lines.append(f"| {name} | {kind} | {r['kernels']} | {r['calls']} | {r['proxy_ms']:.3f} | "
                         f"{r['measured_ms']:.3f} | {ratio:.2f} |")
        lines.append(f"| {name} | **all** (Relax-level price {a['relax_proxy_ms']:.3f}) | {len(a['kernels'])} | "
                     f"{sum(r['calls'] for r in a['by_kind'].values())} | {a['kernel_proxy_ms']:.3f} | "
                     f"{a['measured_kernels_ms']:.3f} | {a['measured_kernels_ms'] / a['kernel_proxy_ms']:.2f} |")
    return lines
