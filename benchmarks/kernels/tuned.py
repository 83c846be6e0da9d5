"""MetaSchedule tunings of one kernel through `tvm_rl.tune.tune_workloads` (resumable), and their best schedule."""
from __future__ import annotations

from pathlib import Path

import tvm

from .workloads import Shape, relax_module


def workload(shape: Shape, target) -> tvm.IRModule:
    """The kernel's TIR module as `tvm_rl` tunes and looks it up (`tune.extract_tasks`)."""
    from tvm_rl.tune import extract_tasks

    (task,) = extract_tasks(relax_module(shape), target)
    return task.dispatched[0]


def tune(shape: Shape, target, work_dir: Path, trials: int) -> tvm.IRModule:
    """Tune the kernel to `trials` records in `work_dir` (skipped when it has them) with our default space."""
    from tvm_rl.tune import tune_workloads

    mod = workload(shape, target)
    tune_workloads([(shape.name, mod, 1.0)], target, work_dir, trials_per_kernel=trials)
    return mod


def best(mod: tvm.IRModule, target, work_dir: Path) -> tuple[tvm.IRModule | None, float | None, int]:
    """(best schedule's module, its recorded mean seconds, records) of `mod` in `work_dir`'s database."""
    from tvm_rl.database import record_seconds
    from tvm_rl.tune import open_database

    db = open_database(work_dir)
    if not db.has_workload(mod):
        return None, None, 0
    records = db.get_top_k(db.commit_workload(mod), 10**6)
    if not records:
        return None, None, 0
    sch = db.query_schedule(mod, target, workload_name="main")
    return (sch.mod if sch is not None else None), record_seconds(records[0].run_secs), len(records)


# Variant design spaces for the 128x768x3072 question (d). Each is the same kernel tuned the same way
# (`tune_workloads`, same trials, strategy and cost model) with one thing changed.
VARIANTS = {
    # The weight marked layout-free, as TVM's own `relax.transform.AttachAttrLayoutFreeBuffers` marks a constant
    # weight: MetaSchedule's RewriteLayout postprocessor (already in our space) then packs it in the tile order.
    "prepack": "weight marked layout_free_buffers=[1] (relax.transform.AttachAttrLayoutFreeBuffers)",
    # ...and MultiLevelTiling with one reduction level ("SSRS": outer tiles, the whole k loop, the register
    # tile) in place of "SSRSRS": the hand schedule's loop structure, fewer tile decisions to search.
    "prepack_ssrs": "prepack + MultiLevelTiling(structure='SSRS', max_innermost_factor=64, "
                    "reuse_write=ReuseType(req='may', levels=[1, 2], scope='global'))",
}


def variant_space(target, variant: str):
    """The space generator of `variant`: tvm_rl's (`design_space.space_generator`) with the listed change to
    MetaSchedule's default LLVM schedule rules."""
    from tvm.s_tir import meta_schedule as ms

    from tvm_rl.tune.design_space import space_generator

    base = space_generator(target)
    if not variant.endswith("_ssrs"):
        return base
    rules = [ms.schedule_rule.MultiLevelTiling(
        structure="SSRS", max_innermost_factor=64,
        reuse_write=ms.schedule_rule.ReuseType(req="may", levels=[1, 2], scope="global"))
        if type(r).__name__ == "MultiLevelTiling" else r for r in ms.ScheduleRule.create("llvm")]
    return ms.space_generator.PostOrderApply(sch_rules=rules, postprocs=base.postprocs, mutator_probs="llvm")


def variant_workload(shape: Shape, target, variant: str) -> tvm.IRModule:
    mod = workload(shape, target)
    if variant.startswith("prepack"):
        return tvm.IRModule({"main": mod["main"].with_attr("layout_free_buffers", [1])})
    raise ValueError(f"unknown variant {variant!r}; known: {sorted(VARIANTS)}")


def tune_variant(shape: Shape, target, work_dir: Path, trials: int, variant: str) -> tvm.IRModule:
    from tvm_rl.tune import tasks, tune_workloads

    mod = variant_workload(shape, target, variant)
    # tune_workloads takes its space from `tasks.space_generator`; swapped for this call only (an experiment,
    # not an API: a design-space option belongs in tvm_rl.tune.design_space)
    default = tasks.space_generator
    tasks.space_generator = lambda tgt, guard=True: variant_space(tgt, variant)
    try:
        tune_workloads([(f"{shape.name}_{variant}", mod, 1.0)], target, work_dir, trials_per_kernel=trials)
    finally:
        tasks.space_generator = default
    return mod


def without_weight_rewrite(mod: tvm.IRModule) -> tvm.IRModule:
    """A tuned module with its weight-layout rewrite block removed (the weight then comes prepacked), as
    MetaSchedule's builder times it."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)


def prepacked_build(mod: tvm.IRModule, target, database):
    """`tvm_rl.measure.build` with the weights prepacked, as TVM's `static_shape_tuning_pipeline(
    cpu_weight_prepack=True)` does: constant weights marked layout-free before the database lookup (so the records
    of the `prepack` variants apply), and after it each kernel's layout-rewrite block split into its own function,
    lifted and folded into the constant. A sketch of what `measure.kernel_stage`/`build` would need."""
    from tvm import relax

    from tvm_rl.database import as_database
    from tvm_rl.measure import _backend

    passes = [*_backend(target).library_dispatch_passes(target), relax.transform.LegalizeOps(),
              relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(), relax.transform.FuseOps(),
              relax.transform.FuseTIR(), relax.transform.AttachAttrLayoutFreeBuffers()]
    with target, tvm.transform.PassContext(opt_level=3):
        mod = tvm.transform.Sequential(passes)(mod)
        with as_database(database):
            mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
        mod = tvm.transform.Sequential([relax.transform.SplitLayoutRewritePreproc(),
                                        relax.transform.LiftTransformParams(), relax.transform.FoldConstant()])(mod)
        finish = tvm.transform.Sequential(_backend(target).dataflow_lower_passes(target)
                                          + _backend(target).finalize_passes(target))
        return tvm.compile(mod, target, relax_pipeline=finish)
