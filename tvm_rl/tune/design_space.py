"""The design space `tune_workloads` tunes in: MetaSchedule's own, with one postprocessor guarded and element-wise
epilogues always fused into the tile on CPU.

On LLVM, MetaSchedule's `RewriteLayout` postprocessor pre-transforms every buffer a block lists as a
"layout_free_placeholders" (a weight, normally a function parameter), and the builder then removes that
pre-transform block (`RemoveWeightLayoutRewriteBlock`). TOPI's attention marks the second operand of its batch
matmuls layout-free, but once Relax fuses the kernel that operand is an intermediate (a reshape of K or V computed
in the same kernel), so every schedule of an `R.nn.attention` kernel fails to build ("Buffer T_reshape_global is
used before its definition") and the kernel ships untuned. `GuardedRewriteLayout` skips the layout rewrite for a
workload whose layout-free placeholders are not all parameters, and applies it unchanged everywhere else.

MetaSchedule's `MultiLevelTiling` offers a conv or matmul with an element-wise epilogue (bias, ReLU6) both with the
epilogue computed inside the output tile and as a separate loop nest over the whole output. On CPU the separate
nest costs a round trip of the output through memory, and its vectorised loop over the flattened output gathers a
per-channel bias through a modulo; the pre-trained cost model nonetheless rated those spaces first, so evolutionary
search measured nothing else on MobileNet-V2's channels-last convolutions (docs/results/kernel_ceiling.md).
`FusedEpilogueTiling` keeps only the fused spaces wherever `MultiLevelTiling` offers one.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.postproc import PyPostproc
from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule

from .. import measure
from .tir_blocks import blocks, main_func
from .weight_split import WeightSplitParallel, l2_bytes, large_weight

LAYOUT_FREE = "layout_free_placeholders"


def intermediate_layout_free(mod: tvm.IRModule) -> list[str]:
    """The names of the buffers `mod`'s main function marks layout-free that are not its parameters (empty when
    `RewriteLayout` is safe for it)."""
    func = mod["main"]
    params = list(func.params)
    out = []
    for block in blocks(func):
        for buf in block.annotations.get(LAYOUT_FREE, []):
            if not any(buf.same_as(p) for p in params):
                out.append(str(buf.name))
    return out


@derived_object
class GuardedRewriteLayout(PyPostproc):
    """MetaSchedule's `RewriteLayout`, skipped (the schedule kept as it is) for a workload that marks an
    intermediate buffer layout-free."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = ms.postproc.RewriteLayout()
        self.skip = False

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.skip = context.mod is not None and bool(intermediate_layout_free(context.mod))

    def apply(self, sch: tvm.s_tir.Schedule) -> bool:
        if self.skip:
            return True
        return bool(self.inner.apply(sch))

    def clone(self) -> ms.Postproc:
        out = GuardedRewriteLayout()
        out.skip = self.skip
        return out


def _fused_downstream(sch: tvm.s_tir.Schedule, block: tvm.s_tir.schedule.SBlockRV) -> bool:
    """Whether every block that consumes `block`'s output, directly or through other consumers, is computed inside
    `block`'s outermost loop."""
    loops = sch.get_loops(block)
    if not loops:
        return False
    outer = sch.get_sref(loops[0])
    todo = list(sch.get_consumers(block))
    while todo:
        consumer = todo.pop()
        loops = sch.get_loops(consumer)
        if not loops or not sch.get_sref(loops[0]).same_as(outer):
            return False
        todo.extend(sch.get_consumers(consumer))
    return True


@derived_object
class FusedEpilogueTiling(PyScheduleRule):
    """MetaSchedule's `MultiLevelTiling` (`inner`) keeping, for a block with consumers, only the spaces where its
    whole epilogue is computed inside its tile, when there are any (all spaces otherwise)."""

    def __init__(self, inner: ms.ScheduleRule) -> None:
        super().__init__()
        self.inner = inner

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.inner._initialize_with_tune_context(context)

    def apply(self, sch: tvm.s_tir.Schedule, block: tvm.s_tir.schedule.SBlockRV) -> list[tvm.s_tir.Schedule]:
        # Inspected on copies: get_consumers and get_loops are traced, and the traces are what gets tuned.
        has_epilogue = sch.get(block).name_hint != "root" and bool(sch.copy().get_consumers(block))
        spaces = list(self.inner.apply(sch, block))
        if not has_epilogue:
            return spaces
        fused = [s for s in spaces if _fused_downstream(s.copy(), block)]
        return fused or spaces

    def clone(self) -> ms.ScheduleRule:
        return FusedEpilogueTiling(self.inner.clone())


def guarded(mod: tvm.IRModule, target: tvm.target.Target) -> bool:
    """Whether `space_generator(target)` tunes `mod` without its layout rewrite. Such kernels' schedules must be
    checked (`runner.failures.CheckedRunner`): with it, some compute-at decisions that MetaSchedule samples in
    fused attention compute wrong results, which the failing build used to hide."""
    return not measure.is_gpu(target) and bool(intermediate_layout_free(mod))


def packed_gemm(mod: tvm.IRModule) -> bool:
    """Whether `mod` is a GEMM-like kernel (one reduction block, over one axis: a matmul, dense or batch matmul
    with its element-wise epilogue; not a convolution, not fused attention) with a weight marked layout-free
    (`kernel_stage` marks constants), which RewriteLayout packs."""
    return _reduction_axes(mod) == [1]


def packed_conv(mod: tvm.IRModule) -> bool:
    """Whether `mod` is a pointwise convolution (one reduction block, over several axes of which one is longer than
    1: a 1x1 conv, a GEMM in disguise, with its element-wise epilogue) with a weight marked layout-free."""
    reductions = _reduction_axes(mod)
    return reductions is not None and len(reductions) == 1 and reductions[0] > 1 and _long_reductions(mod) == 1


def _long_reductions(mod: tvm.IRModule) -> int:
    """How many reduction axes longer than 1 `mod`'s blocks have in all."""
    return sum(int(v.iter_type) == 2 and int(v.dom.extent) > 1 for b in blocks(main_func(mod)) for v in b.iter_vars)


def _reduction_axes(mod: tvm.IRModule) -> list[int] | None:
    """How many reduction axes each of `mod`'s blocks that reduce has; None when no weight is marked layout-free."""
    func = main_func(mod)
    if not list((func.attrs or {}).get("layout_free_buffers", [])):
        return None
    counts = (sum(int(v.iter_type) == 2 for v in b.iter_vars) for b in blocks(func))  # iter_type 2: CommReduce
    return [n for n in counts if n]


# The register tile of a packed GEMM: outer spatial tiles, the whole reduction, then the innermost spatial tile
# ("SSRS"), which keeps the k loop outside the vectorised output columns. MetaSchedule's default "SSRSRS" splits
# the reduction between two tile levels; in 64 trials it did not find this loop nest, and the packed GEMMs tuned
# with "SSRS" ran 1.4-1.7x those tuned in the default space (docs/results/kernel_ceiling.md).
GEMM_TILING = {"structure": "SSRS", "max_innermost_factor": 64}
GEMM_REUSE_WRITE = {"req": "may", "levels": [1, 2], "scope": "global"}


# Whether `space_generator` fuses epilogues by default; False gives MetaSchedule's spaces (an ablation's switch).
FUSE_EPILOGUE = True
# Whether `space_generator` tiles a `packed_conv` (1x1) workload as GEMM_TILING too (an experiment's switch).
CONV_SSRS = False
# Whether `space_generator` keeps a kernel whose weight exceeds L2 from parallelising over output rows or pixels
# (`weight_split.WeightSplitParallel`).
SPLIT_LARGE_WEIGHTS = False


@contextlib.contextmanager
def _switched(name: str, on: bool) -> Iterator[None]:
    """Module switch `name` set to `on` inside the block (tuning there takes that space) and restored after it."""
    before = globals()[name]
    globals()[name] = on
    try:
        yield
    finally:
        globals()[name] = before


def epilogue_fusion(on: bool) -> contextlib.AbstractContextManager[None]:
    """FUSE_EPILOGUE set to `on` inside the block and restored after it."""
    return _switched("FUSE_EPILOGUE", on)


def conv_tiling(ssrs: bool) -> contextlib.AbstractContextManager[None]:
    """CONV_SSRS set to `ssrs` inside the block and restored after it."""
    return _switched("CONV_SSRS", ssrs)


def weight_split(on: bool) -> contextlib.AbstractContextManager[None]:
    """SPLIT_LARGE_WEIGHTS set to `on` inside the block and restored after it."""
    return _switched("SPLIT_LARGE_WEIGHTS", on)


def space_generator(target: tvm.target.Target, guard: bool = True, mod: tvm.IRModule | None = None,
                    fuse_epilogue: bool | None = None, conv_ssrs: bool | None = None,
                    split_weights: bool | None = None) -> ms.SpaceGenerator | str:
    """MetaSchedule's default design space for `target` ("post-order-apply"); on CPU its multi-level tiling
    wrapped in `FusedEpilogueTiling` where `fuse_epilogue` (None: FUSE_EPILOGUE), with `guard` `RewriteLayout`
    replaced by `GuardedRewriteLayout` (unless `mod` is given and marks no intermediate buffer layout-free), and
    for a `packed_gemm` workload `mod` its multi-level tiling as GEMM_TILING (a `packed_conv` one too where
    `conv_ssrs`, None: CONV_SSRS); where `split_weights` (None: SPLIT_LARGE_WEIGHTS) and `mod` reads a weight
    larger than this machine's L2, `WeightSplitParallel` rejects the schedules that parallelise it over output rows
    or pixels. Pass it as a TuneContext's `space_generator`, and check the candidates of the `guarded` workloads."""
    if measure.is_gpu(target):
        return "post-order-apply"
    fuse_epilogue = FUSE_EPILOGUE if fuse_epilogue is None else fuse_epilogue
    conv_ssrs = CONV_SSRS if conv_ssrs is None else conv_ssrs
    split_weights = SPLIT_LARGE_WEIGHTS if split_weights is None else split_weights
    gemm = mod is not None and (packed_gemm(mod) or (conv_ssrs and packed_conv(mod)))
    # Like the guard below, a Python postprocessor runs for every candidate: added only where it has work.
    split = split_weights and mod is not None and large_weight(mod, l2_bytes()) is not None
    if not guard and not gemm and not fuse_epilogue and not split:
        return "post-order-apply"
    # The guard is a Python postprocessor, called back from MetaSchedule's worker threads for every candidate a
    # search round samples or mutates: a workload known not to need it keeps MetaSchedule's own.
    needs_guard = guard and (mod is None or bool(intermediate_layout_free(mod)))
    postprocs = [GuardedRewriteLayout() if needs_guard and isinstance(p, ms.postproc.RewriteLayout) else p
                 for p in ms.Postproc.create("llvm")]
    if split:
        postprocs.append(WeightSplitParallel())
    tiling = {}
    if gemm:
        tiling = dict(GEMM_TILING, reuse_write=ms.schedule_rule.ReuseType(**GEMM_REUSE_WRITE))
    rules = []
    for rule in ms.ScheduleRule.create("llvm"):
        if type(rule) is ms.schedule_rule.MultiLevelTiling:
            rule = ms.schedule_rule.MultiLevelTiling(**tiling) if tiling else rule
            rule = FusedEpilogueTiling(rule) if fuse_epilogue else rule
        rules.append(rule)
    return ms.space_generator.PostOrderApply(sch_rules=rules, postprocs=postprocs, mutator_probs="llvm")
