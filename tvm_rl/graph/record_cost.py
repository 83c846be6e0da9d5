"""A graph's price from its kernels' own tuning records where a database holds them, the roofline elsewhere.

A roofline fitted per kind prices each kernel at its kind's median efficiency. A few trials per kernel leave
some kernels several times off that median (a fused 1x1 convolution priced at 0.09 ms measured 0.8 ms), and
which graph holds such kernels decides how graphs rank when built. The database already knows each tuned
kernel's best time, so a kernel it holds is priced by its record and only a kernel it has not seen (one a
rewrite creates) by the roofline, scaled per kind by the median ratio of the database's records to the
roofline's prices of them: a roofline fitted elsewhere (or nominal) can be 2x off this database's times, and
unscaled, every kernel the database has not seen would look cheap and a search would seek them out.

Kernels are matched without lowering, so pricing stays as fast as the roofline's: a kernel the pass predicts
(`profiles.fused_groups`) is a tuned workload when the shapes of the tensors it reads and writes are the
workload's argument shapes (as a multiset: argument order is TVM's). Layouts differ in shape, so an NCHW and an
NHWC convolution never match; where several workloads share the shapes (a convolution with and without its
activation fused), the one of the same kind with the nearest FLOPs is taken.

Known unsound: shapes do not name the computation. A kernel the database has not tuned can match a workload that
computes something else over the same shapes (a 1x1 matmul priced at its sibling's 0.14 ms, the sibling with a
clip fused). `LoweredRecordCost` is the exact form: it lowers the graph as the build does (about 0.2 s for a
full-size CNN) and looks each kernel up by the structural hash the database keys it by. Neither is a price to
search with on its own: searches steered by these prices made new kernels that then tuned badly and found
slower graphs than the roofline's (docs/results/graph_ablation.md). Use them to rank graphs whose kernels are
tuned.
"""
from __future__ import annotations

import functools
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import tvm
import tvm_ffi

from .. import measure
from ..database import DatabaseLike, TuningDatabase
from .gemm_cost import matmul_gemm
from .profiles import FusedKernel, fused_groups
from .roofline import Roofline

ShapeKey = tuple[tuple[int, ...], ...]


def _best_records(database: DatabaseLike) -> dict:
    """`calibration.best_records` of a database folder ({} for one with no records); ValueError naming what was
    given when it is no folder."""
    from .calibration import best_records

    folder = TuningDatabase.of(database)
    if folder is None:
        raise ValueError(f"pricing by tuning records needs a database folder, not {database!r}")
    return {} if folder.is_empty() else best_records(folder)


def shape_key(shapes: Sequence[tuple[int, ...] | None]) -> ShapeKey | None:
    """The multiset of a kernel's tensor shapes, sorted; None when one is not static (never matched)."""
    if not shapes or any(s is None for s in shapes):
        return None
    return tuple(sorted(tuple(int(d) for d in s) for s in shapes if s is not None))


@dataclass(frozen=True)
class PricedKernel:
    """One predicted kernel with its price (ms) and where the price came from: "record" or "roofline"."""

    kind: str
    flops: float
    shapes: tuple[tuple[int, ...] | None, ...]
    ms: float
    source: str


class RecordIndex:
    """The tuned kernels of a database by shape key (`calibration.TunedKernel`s: kind, FLOPs, best ms)."""

    def __init__(self, kernels: Sequence) -> None:
        self.by_shapes: dict[ShapeKey, list] = defaultdict(list)
        for k in kernels:
            key = shape_key(k.shapes)
            if key is not None:
                self.by_shapes[key].append(k)

    @classmethod
    def of(cls, database: DatabaseLike) -> RecordIndex:
        """The index of a database folder's tuned kernels; ValueError naming it when it is no folder."""
        return cls.of_best(_best_records(database))

    @classmethod
    def of_best(cls, best: dict) -> RecordIndex:
        """The index of a database's best records as `calibration.best_records` gives them."""
        from .calibration import tuned_kernel

        return cls([tuned_kernel(w, ms) for w, ms in best.values()])

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_shapes.values())

    def scales(self, hardware: Roofline) -> dict[str | None, float]:
        """Per kind, the median of (best record ms / `hardware`'s price) over the tuned kernels; under None, the
        median over all of them (1.0 for an empty index): what an unseen kernel's roofline price is scaled by."""
        ratios: dict[str, list[float]] = defaultdict(list)
        for found in self.by_shapes.values():
            for k in found:
                price = hardware.time_ms(k.flops, k.nbytes, k.kind, matmul_gemm(k.kind, k.shapes, k.flops))
                if price > 0 and k.best_ms > 0:
                    ratios[k.kind].append(k.best_ms / price)
        every = [r for rs in ratios.values() for r in rs]
        out: dict[str | None, float] = {kind: statistics.median(rs) for kind, rs in ratios.items()}
        out[None] = statistics.median(every) if every else 1.0
        return out

    def lookup(self, kernel: FusedKernel):
        """The tuned kernel that is `kernel`, or None: same shapes; of several, same kind, then nearest FLOPs."""
        key = shape_key(kernel.shapes)
        found = self.by_shapes.get(key) if key is not None else None
        if not found:
            return None
        if len(found) == 1:
            return found[0]

        def distance(k) -> tuple[bool, float]:
            flops = abs(math.log((k.flops + 1.0) / (kernel.flops + 1.0)))
            return k.kind != kernel.kind, flops

        return min(found, key=distance)


def coverage(priced: Sequence[PricedKernel]) -> float:
    """The share of kernels priced by a record (1.0 for none: the database has tuned every one)."""
    return sum(k.source == "record" for k in priced) / len(priced) if priced else 1.0


class _RecordPricing:
    """What both record prices share: a kernel the database has not tuned priced by the roofline on the
    database's scale for its kind (`RecordIndex.scales`), and a graph's price as the sum of its kernels'."""

    hardware: Roofline
    scale: dict[str | None, float]

    def price(self, mod: tvm.IRModule) -> list[PricedKernel]:
        raise NotImplementedError

    def roofline_ms(self, flops: float, nbytes: float, kind: str, gemm=None) -> float:
        """An unseen kernel's price: the roofline's, on the database's scale for its kind."""
        return self.hardware.time_ms(flops, nbytes, kind, gemm) * self.scale.get(kind, self.scale[None])

    def __call__(self, mod: tvm.IRModule) -> float:
        return sum(k.ms for k in self.price(mod))

    def coverage(self, mod: tvm.IRModule) -> float:
        """The share of `mod`'s kernels priced by a record (`coverage`)."""
        return coverage(self.price(mod))


class RecordCost(_RecordPricing):
    """CostFn (IRModule -> ms): each predicted kernel at its tuning record's best time where `index` holds it,
    else at `hardware`'s roofline price times its kind's scale. Use `record_cost` for a memoised one built from a
    database."""

    def __init__(self, index: RecordIndex, hardware: Roofline) -> None:
        self.index, self.hardware = index, hardware
        self.scale = index.scales(hardware)

    def price(self, mod: tvm.IRModule) -> list[PricedKernel]:
        """Every kernel `mod` will run, priced, with where each price came from."""
        out = []
        for k in fused_groups(mod):
            hit = self.index.lookup(k)
            if hit is not None:
                out.append(PricedKernel(k.kind, k.flops, k.shapes, hit.best_ms, "record"))
            else:
                out.append(PricedKernel(k.kind, k.flops, k.shapes,
                                        self.roofline_ms(k.flops, k.nbytes, k.kind, k.gemm), "roofline"))
        return out


def record_cost(database: DatabaseLike, hardware: Roofline | None = None,
                target: tvm.target.Target | str | None = None):
    """`RecordCost` of `database`'s records, memoised (`cost.Memo`). The roofline for kernels it has not tuned
    is `hardware`, else the one fitted to the same database (`calibration.proxy_roofline`; `target` names it)."""
    from .calibration import proxy_roofline
    from .cost import Memo

    if hardware is None:
        if target is None:
            raise ValueError("record_cost needs hardware (the roofline for unseen kernels) or the target to fit it")
        hardware = proxy_roofline(target, database)
    return Memo(RecordCost(RecordIndex.of(database), hardware))


@functools.lru_cache(maxsize=4)
def _shared_index(database: str) -> RecordIndex:
    return RecordIndex.of(database)


def shared_record_cost(database: str, hardware: Roofline):
    """A memoised `RecordCost` over `database`'s records read once per process (training's environments, one per
    model and worker, share them); a database that grows meanwhile is not read again."""
    from .cost import Memo

    return Memo(RecordCost(_shared_index(str(database)), hardware))


def workload_key(func) -> int:
    """The structural hash a tuning database keys a kernel by: the PrimFunc as its own module's "main"."""
    return tvm_ffi.structural_hash(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}))


class LoweredRecordCost(_RecordPricing):
    """CostFn (IRModule -> ms): `mod` lowered as the build lowers it (`measure.kernel_stage`) and every kernel priced
    by the best record of exactly that kernel (its structural hash, as the database keys it), calls times, else by
    the roofline on the database's scale for its kind. Sound where `RecordCost` is not (no kernel is taken for
    another over the same shapes), and slower: a lowering per graph priced."""

    def __init__(self, database: DatabaseLike, hardware: Roofline, target: tvm.target.Target | str) -> None:
        best = _best_records(database)  # read once: the exact keys and the scales both come from it
        self.target, self.hardware = measure.parse_target(target), hardware
        self.best = {tvm_ffi.structural_hash(workload.mod): ms for workload, ms in best.values()}
        self.scale = RecordIndex.of_best(best).scales(hardware)

    def price(self, mod: tvm.IRModule) -> list[PricedKernel]:
        """Every kernel `mod` lowers to, priced (calls x latency), with where each price came from."""
        from .profiles import arg_shapes, profiles_of

        lowered = measure.kernel_stage(mod, self.target, None)
        out = []
        for p in profiles_of(lowered):
            func = lowered[p.name]
            shapes = arg_shapes(func)
            ms = self.best.get(workload_key(func))
            if ms is not None:
                out.append(PricedKernel(p.kind, p.flops, shapes, p.calls * ms, "record"))
            else:
                ms = self.roofline_ms(p.flops, p.nbytes, p.kind, matmul_gemm(p.kind, shapes, p.flops))
                out.append(PricedKernel(p.kind, p.flops, shapes, p.calls * ms, "roofline"))
        return out
