"""Keep a kernel whose weight does not fit a core's L2 cache from replicating it across its parallel tasks.

MetaSchedule's CPU space parallelises the fused outermost tiles of a convolution or matmul, and its tiles keep the
block's loop order, so output rows or pixels (axes the weight does not depend on) come before output channels in
the parallel loop. Each core then works through several rows with all channels, streaming the whole weight once
per row; when the weight does not fit L2 that is a trip to L3 or memory per row. Splitting the output channels
across the cores instead has each core stream its share of the weight once. The pre-trained cost model does not see
this (it rated a row-parallel 3x3 convolution with a 9 MB weight above the channel-parallel one that ran faster,
docs/results/kernel_ceiling.md).

`WeightSplitParallel` is a postprocessor that rejects such schedules: for a workload whose weight (a layout-free
parameter read by its reduction block) is larger than L2 and whose other operands fit in it, a schedule is valid
only when no weight-independent spatial axis of that block is bound to a parallel loop. It is off by default
(`design_space.SPLIT_LARGE_WEIGHTS`): the whole models it was tried on were not faster (docs/tuner.md).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.postproc import PyPostproc

from .tir_blocks import blocks, main_func

L2_ENV = "TVM_RL_L2_BYTES"
_CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def l2_bytes() -> int | None:
    """One core's L2 cache in bytes: `$TVM_RL_L2_BYTES` when set, else what Linux reports for cpu0; None where
    neither says (the postprocessor then stays off)."""
    if os.environ.get(L2_ENV):
        try:
            return int(os.environ[L2_ENV])
        except ValueError:
            raise ValueError(f"{L2_ENV} must be a number of bytes, not {os.environ[L2_ENV]!r}") from None
    for index in sorted(_CPU_CACHES.glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2" and (index / "type").read_text().strip() != "Instruction":
                return _parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
    return None


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


@dataclass(frozen=True)
class LargeWeight:
    """A workload's reduction block reading a weight larger than L2: the block's name, the positions of its spatial
    iteration variables the weight does not depend on, and the weight's size."""

    block: str
    axes: tuple[int, ...]
    weight_bytes: int


def _bytes(buffer: Any) -> int:
    return math.prod(int(x) for x in buffer.shape) * tvm.DataType(buffer.dtype).bits // 8


def large_weight(mod: tvm.IRModule, l2: int | None) -> LargeWeight | None:
    """What `WeightSplitParallel` guards in `mod`, or None: no L2 size, no layout-free weight read by a reduction
    block, a weight that fits L2, other operands of that block that do not (then replicating them is the cost), or no
    weight-independent spatial axis."""
    func = main_func(mod)
    free = [int(i) for i in (func.attrs or {}).get("layout_free_buffers", [])]
    names = {func.params[i].name for i in free}
    if l2 is None or not names:
        return None
    best = None
    for block in blocks(func):
        if not any(int(v.iter_type) == 2 for v in block.iter_vars):  # 2: CommReduce
            continue
        weights = [r for r in block.reads if r.source.name in names]
        others = [r for r in block.reads if r.source.name not in names]
        if not weights:
            continue
        weight = max(weights, key=lambda r: _bytes(r.source))
        size = _bytes(weight.source)
        if size <= l2 or any(_bytes(r.source) > l2 for r in others):
            continue
        used = set()
        for rng in weight.region:
            used |= {v.name for v in tvm.tirx.analysis.undefined_vars(rng.min, [])}
        axes = tuple(i for i, v in enumerate(block.iter_vars)
                     if int(v.iter_type) == 0 and int(v.dom.extent) > 1 and v.var.name not in used)
        if axes and (best is None or size > best.weight_bytes):
            best = LargeWeight(block.name_hint, axes, size)
    return best


def replicates_weight(func: Any, guard: LargeWeight) -> bool:
    """Whether a scheduled `func` binds one of `guard`'s weight-independent axes of its block to a parallel loop."""
    names = {guard.block, guard.block + "_update"}
    todo: list[tuple[Any, frozenset]] = [(func.body, frozenset())]
    while todo:
        node, parallel = todo.pop()
        if node is None:
            continue
        if isinstance(node, tvm.tirx.For):
            if int(node.kind) == int(tvm.tirx.ForKind.PARALLEL):
                parallel = parallel | {node.loop_var.name}
            todo.append((node.body, parallel))
            continue
        if isinstance(node, tvm.s_tir.SBlockRealize):
            if parallel and node.block.name_hint in names:
                for axis in guard.axes:
                    used = tvm.tirx.analysis.undefined_vars(node.iter_values[axis], [])
                    if any(v.name in parallel for v in used):
                        return True
            todo.append((node.block, parallel))
            continue
        if isinstance(node, tvm.s_tir.SBlock):
            todo += [(node.body, parallel), (node.init, parallel)]
            continue
        for attr in ("body", "then_case", "else_case"):
            todo.append((getattr(node, attr, None), parallel))
        todo += [(s, parallel) for s in getattr(node, "seq", [])]
    return False


@derived_object
class WeightSplitParallel(PyPostproc):
    """Rejects a schedule (the postprocessor fails) whose parallel loop splits a large weight's kernel over output
    rows or pixels (`replicates_weight`); accepts every schedule of a workload `large_weight` finds nothing in. Put
    it after MetaSchedule's `RewriteParallelVectorizeUnroll`, which makes the parallel loop."""

    def __init__(self, l2: int | None = None) -> None:
        super().__init__()
        self.l2 = l2_bytes() if l2 is None else l2
        self.guard: LargeWeight | None = None

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.guard = None if context.mod is None else large_weight(context.mod, self.l2)

    def apply(self, sch: tvm.s_tir.Schedule) -> bool:
        return self.guard is None or not replicates_weight(sch.mod["main"], self.guard)

    def clone(self) -> ms.Postproc:
        out = WeightSplitParallel(self.l2)
        out.guard = self.guard
        return out
