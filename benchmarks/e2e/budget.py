"""Whole-model budget arms of the end-to-end benchmark: N measurements for the whole model, spent three ways.

- `budget-ours`: what `tvm-rl optimize --budget N --library none` runs (evolutionary search, the shipped cost model,
  batches of 8 spread by `LatencyShare`), starting every kernel from nothing.
- `budget-even`: the same search and model, N split evenly over the kernels (what `--trials N/kernels` does).
- `budget-metaschedule`: MetaSchedule as its users run it (`tune_relax`'s defaults on the same kernels: its
  gradient task scheduler, evolutionary search, XGBModel, its own space generator, batches of 64), built by
  tvm-rl's PersistentBuilder, since MetaSchedule's LocalBuilder can time out on every candidate of a small CPU
  (docs/tuner.md, measurement notes): the builder decides whether a candidate builds, not which are proposed.
- `budget-ours-library`: `budget-ours` starting from a schedule library (`--library FILE`, `tune.library`), as
  `tvm-rl optimize` does by default with the shipped one: the library's records of the model's exact kernels
  applied unmeasured, and up to half of each kernel's first batch its schedules for that kind of kernel, moved to
  the kernel's shapes.
- `budget-optimize`: `tvm-rl optimize --budget N --no-channels-last` as a whole: the graph pass (its default rule,
  with fast math on CPU: `tvm_rl.flow.graph_stage`) first, then `budget-ours-library` on the rewritten graph. The
  other arms tune the model as imported, so they differ in kernel tuning alone; these two say what a user gets.
- `budget-optimize-nhwc`: the same with the convolutions then moved channels-last (`tvm_rl.graph.channels_last`),
  as `tvm-rl optimize --budget N` runs on CPU by default.
- `budget-optimize-nhwc-xgb`: `budget-optimize-nhwc` with MetaSchedule's XGBModel (trained on the run's own records
  only) in place of the pre-trained cost model: the pre-trained model's non-learned arm on the whole model.
- `budget-optimize-nhwc-stock`: `budget-optimize-nhwc` tuned in MetaSchedule's own CPU design space
  (`design_space.FUSE_EPILOGUE` off: element-wise epilogues may be a separate loop nest), as it was before
  2026-12-07: the ablation of `design_space.FusedEpilogueTiling`.
- `budget-optimize-nhwc-ssrs`: `budget-optimize-nhwc` with every pointwise (1x1) convolution tiled as a packed GEMM
  (`design_space.CONV_SSRS`: outer spatial tiles, the whole reduction, the register tile).
- `budget-optimize-nhwc-shipped`: `budget-optimize-nhwc` starting from the schedule library shipped in the package
  whatever `--library` names, so that a candidate library (`--library FILE`, the `budget-optimize-nhwc` arm) is
  held against the shipped one in one run.
- `budget-optimize-nhwc-cold`: `budget-optimize-nhwc` with every candidate timed as inside a model
  (`tvm_rl.tune.runner.cold_runner`: single calls, the weights flushed from the cache before each) instead of
  MetaSchedule's default (calls repeated for 100 ms, weights cached), as `tvm-rl optimize --measure cold` runs. The
  library's records were timed warm, so `tune_workloads` does not apply them unmeasured under a cold runner: they
  are among the first candidates, measured like the rest.
- `budget-optimize-nhwc-wsplit`: `budget-optimize-nhwc` with a kernel whose weight exceeds a core's L2 kept from
  parallelising over output rows or pixels (`design_space.SPLIT_LARGE_WEIGHTS`, `tune.weight_split`): each core
  streams its share of the weight once instead of the whole weight once per row.
- `budget-optimize-nhwc-pop128`: `budget-optimize-nhwc` with evolutionary search's population 128 (not 512).
- `budget-ms-static`: `budget-metaschedule` on the module TVM's own tuning pipeline
  (`relax.pipeline.static_shape_tuning_pipeline`) tunes: batch norms decomposed for inference
  (`DecomposeOpsForInference`), so that their arithmetic folds into constants and fuses into the convolutions'
  kernels. MetaSchedule's users who tune through that pipeline get this; `budget-metaschedule` tunes the model as
  imported, with each batch norm a kernel of its own.
- `budget-ours-library-exact`: the ablation of `budget-ours-library` without moved schedules: only the library's
  records of exact kernels applied unmeasured, then `budget-ours`.
- `budget-ms-droplet` / `budget-ours-droplet`: `budget-metaschedule` / `budget-ours` with the last DROPLET_SHARE
  of N spent by TVM's Droplet Search from each kernel's best (`droplet.droplet_stage`), as MetaSchedule's
  `post_optimization` does but inside the same budget.

A rerun resumes each with what is left of N (records already in its folder count as spent).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from tvm_rl.database import RECORDS, TuningDatabase
from tvm_rl.flow import graph_stage
from tvm_rl.tune import design_space, search_strategy
from tvm_rl.tune.intrin import preload_tensor_intrinsics
from tvm_rl.tune.library import SHIPPED, ScheduleLibrary
from tvm_rl.tune.measure_callback import AfterBatch
from tvm_rl.tune.runner import cold_runner
from tvm_rl.tune.search_strategy.budget_cap import BudgetCap
from tvm_rl.tune.tasks import (
    TuneReport,
    extract_tasks,
    model_workloads,
    records_per_workload,
    shared_builder,
    tune_model,
)

from .droplet import droplet_stage

# arm -> (search strategy, whether it takes the pre-trained cost model, how N is spread)
BUDGET_ARMS = {"budget-ours": ("evolutionary", True, "latency-share"),
               "budget-even": ("evolutionary", True, "even"),
               "budget-metaschedule": ("evolutionary", False, "metaschedule"),
               "budget-ms-droplet": ("evolutionary", False, "metaschedule+droplet"),
               "budget-ours-droplet": ("evolutionary", True, "latency-share+droplet"),
               "budget-ours-library": ("evolutionary", True, "latency-share+library"),
               "budget-ours-library-exact": ("evolutionary", True, "latency-share+library-exact"),
               "budget-optimize": ("evolutionary", True, "latency-share+library"),
               "budget-optimize-nhwc": ("evolutionary", True, "latency-share+library"),
               "budget-optimize-nhwc-xgb": ("evolutionary", False, "latency-share+library"),
               "budget-optimize-nhwc-stock": ("evolutionary", True, "latency-share+library+stock-space"),
               "budget-optimize-nhwc-shipped": ("evolutionary", True, "latency-share+library+shipped"),
               "budget-optimize-nhwc-ssrs": ("evolutionary", True, "latency-share+library+conv-ssrs"),
               "budget-optimize-nhwc-learned": ("evolutionary", True, "latency-share+library+learned-allocator"),
               "budget-optimize-nhwc-pop128": ("evolutionary", True, "latency-share+library+pop128"),
               "budget-optimize-nhwc-cold": ("evolutionary", True, "latency-share+library+cold"),
               "budget-optimize-nhwc-wsplit": ("evolutionary", True, "latency-share+library+weight-split"),
               "budget-ms-static": ("evolutionary", False, "metaschedule")}
GRAPH_FILE = "graph.json"  # that module, in the run's folder, so that a resumed run and its timing use the same one
METASCHEDULE_PER_ITER = 64  # tune_relax's default num_trials_per_iter
DROPLET_SHARE = 0.25  # of a budget-*-droplet arm's N, left to Droplet after the first stage


def arm_module(arm: str, mod: tvm.IRModule, target, folder: Path, seed: int = 0) -> tvm.IRModule:
    """The module arm `arm` tunes and builds: `mod` itself, or for a GRAPH_ARMS arm the graph stage's module, made
    once and kept in `folder` (the graph pass stops at a time budget, so running it again may choose another
    graph, whose kernels the run's records would not match)."""
    if arm not in GRAPH_ARMS:
        return mod
    path = Path(folder) / GRAPH_FILE
    if path.is_file():
        return tvm.ir.load_json(path.read_text())
    rewritten = GRAPH_ARMS[arm](mod, target, seed)
    if (Path(folder) / RECORDS).is_file():  # restored from the archive, which does not keep the graph
        print(f"WARNING: {folder} has records but not the graph they were tuned for ({GRAPH_FILE}); the graph pass "
              "ran again, and kernels of a graph it chose differently stay untuned", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(tvm.ir.save_json(rewritten))
    tmp.replace(path)
    return rewritten


def static_shape_stage(mod: tvm.IRModule) -> tvm.IRModule:
    """What `relax.pipeline.static_shape_tuning_pipeline` does to a module before its kernel stage (which is ours:
    legalise, fold constants, fuse, mark weights layout-free): decompose batch norms for inference."""
    from tvm import relax

    return tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                     relax.transform.CanonicalizeBindings()])(mod)


# arms that tune (and build) another module than the model as imported -> how it is made from (mod, target, seed):
# the graph pass's, or TVM's tuning pipeline's
def _optimize_graph(channels_last: bool) -> Callable[[tvm.IRModule, object, int], tvm.IRModule]:
    """The graph `tvm-rl optimize` tunes, with channels-last as given."""
    return lambda mod, target, seed: graph_stage(mod, target, seed=seed, channels_last=channels_last)[0]


GRAPH_ARMS: dict[str, Callable[[tvm.IRModule, object, int], tvm.IRModule]] = {
    "budget-optimize": _optimize_graph(False),
    "budget-optimize-nhwc": _optimize_graph(True),
    "budget-optimize-nhwc-xgb": _optimize_graph(True),
    "budget-optimize-nhwc-stock": _optimize_graph(True),
    "budget-optimize-nhwc-shipped": _optimize_graph(True),
    "budget-optimize-nhwc-ssrs": _optimize_graph(True),
    "budget-optimize-nhwc-learned": _optimize_graph(True),
    "budget-optimize-nhwc-pop128": _optimize_graph(True),
    "budget-optimize-nhwc-cold": _optimize_graph(True),
    "budget-optimize-nhwc-wsplit": _optimize_graph(True),
    "budget-ms-static": lambda mod, target, seed: static_shape_stage(mod)}


def tune_budget(arm: str, mod, target, folder: Path, budget: int, seed: int, trials_per_iter: int, cost_model,
                op_filter: str | None, before_tuning: Callable[[], None] | None,
                after_batch: Callable[[], object] | None, library: str | Path | None = None,
                gain_model: str | Path = "shipped", minutes: float | None = None):
    """Tune `mod`'s kernels into `folder` as budget arm `arm` does, `budget` measurements in all (and, with
    `minutes`, stopping at that many minutes, whichever comes first: the latency-share arms only); (database,
    report). `library` is the schedule library file the budget-ours-library arm starts from; `gain_model` the
    learned allocator's model (`batch_gain.open_gain_model`) the -learned arm ranks kernels by."""
    strategy, _, allocation = BUDGET_ARMS[arm]
    if minutes is not None and (not allocation.startswith("latency-share") or allocation.endswith("+droplet")):
        raise SystemExit(f"{arm} has no time budget (--minutes): only the latency-share arms stop on one")
    allocator = gain_model if allocation.endswith("+learned-allocator") else None
    allocation = allocation.removesuffix("+learned-allocator")
    if allocation.endswith("+pop128"):  # evolutionary search with a quarter of its population: cheaper rounds
        strategy = search_strategy.evolutionary(seed, population=128)
        allocation = allocation.removesuffix("+pop128")
    runner: ms.Runner | str = "local"
    if allocation.endswith("+cold"):  # timed as inside a model
        runner = cold_runner(target)
        allocation = allocation.removesuffix("+cold")
    if allocation.endswith("+stock-space"):
        with design_space.epilogue_fusion(False):
            return tune_budget(arm.removesuffix("-stock"), mod, target, folder, budget, seed, trials_per_iter,
                               cost_model, op_filter, before_tuning, after_batch, library, minutes=minutes)
    if allocation.endswith("+conv-ssrs"):
        with design_space.conv_tiling(True):
            return tune_budget(arm.removesuffix("-ssrs"), mod, target, folder, budget, seed, trials_per_iter,
                               cost_model, op_filter, before_tuning, after_batch, library, minutes=minutes)
    if allocation.endswith("+weight-split"):
        with design_space.weight_split(True):
            return tune_budget(arm.removesuffix("-wsplit"), mod, target, folder, budget, seed, trials_per_iter,
                               cost_model, op_filter, before_tuning, after_batch, library, minutes=minutes)
    if allocation.endswith("+shipped"):
        return tune_budget(arm.removesuffix("-shipped"), mod, target, folder, budget, seed, trials_per_iter,
                           cost_model, op_filter, before_tuning, after_batch, SHIPPED, minutes=minutes)
    if allocation.endswith("+droplet"):
        first = budget - int(budget * DROPLET_SHARE)
        if allocation.startswith("metaschedule"):
            # Its batches of 64 would overshoot `first` (96 -> 128) and leave Droplet nothing: cut there.
            database, report = tune_like_metaschedule(mod, target, folder, first, seed, op_filter, before_tuning,
                                                      after_batch, cap=True)
        else:
            database, report = tune_budget("budget-ours", mod, target, folder, first, seed, trials_per_iter,
                                           cost_model, op_filter, before_tuning, after_batch)
        late = droplet_stage(mod, target, database, budget, op_filter, after_batch)
        report.measured += late.measured
        report.seconds += late.seconds
        report.trials += late.trials
        return database, report
    common = dict(trials_per_iter=trials_per_iter, strategy=strategy, seed=seed, op_filter=op_filter,
                  cost_model=cost_model, before_tuning=before_tuning, after_batch=after_batch, allocator=allocator,
                  minutes=minutes, runner=runner)
    if allocation == "latency-share":
        return tune_model(mod, target, folder, budget=budget, **common)
    if allocation.startswith("latency-share+library"):
        if library is None:
            raise SystemExit(f"{arm} needs --library FILE (a schedule library: `tvm-rl library build`)")
        if allocation.endswith("-exact"):  # exact kernels applied, no moved schedules in the first batches
            kernels = [k for k in model_workloads(mod, target) if not op_filter or op_filter in k[0]]
            ScheduleLibrary(library).apply_to(TuningDatabase(folder), kernels, target)
            return tune_model(mod, target, folder, budget=budget, **common)
        return tune_model(mod, target, folder, budget=budget, library=library, **common)
    if allocation == "even":
        kernels = [t for t in extract_tasks(mod, target) if not op_filter or op_filter in t.task_name]
        return tune_model(mod, target, folder, trials_per_kernel=max(1, budget // max(1, len(kernels))), **common)
    return tune_like_metaschedule(mod, target, folder, budget, seed, op_filter, before_tuning, after_batch)


def tune_like_metaschedule(mod, target, folder: Path, budget: int, seed: int, op_filter: str | None = None,
                           before_tuning: Callable[[], None] | None = None,
                           after_batch: Callable[[], object] | None = None, cap: bool = False):
    """`ms.tune_tasks` with `tune_relax`'s defaults on the kernels `measure.build` looks up (`extract_tasks`), into
    `folder`'s database; what the folder already holds of them counts against `budget`, which its last batch of
    64 overshoots unless `cap` cuts it (`BudgetCap`). (database, report)."""
    tuning = TuningDatabase(folder)
    database = tuning.open()
    tasks = [t for t in extract_tasks(mod, target) if not op_filter or op_filter in t.task_name]
    report = TuneReport(tasks=len(tasks))
    done = records_per_workload(database)
    spent = sum(done.get(tvm_ffi.structural_hash(t.dispatched[0]), 0) for t in tasks)
    remaining = budget - spent
    if remaining <= 0 or not tasks:
        return database, report
    if before_tuning is not None:
        before_tuning()
    start = time.perf_counter()
    preload_tensor_intrinsics()
    strategy = BudgetCap(ms.search_strategy.EvolutionarySearch(), [remaining]) if cap else "evolutionary"
    contexts = [ms.TuneContext(mod=t.dispatched[0], target=target, space_generator="post-order-apply",
                               search_strategy=strategy, task_name=t.task_name, rand_state=rand_state,
                               num_threads="physical").clone()
                for t, rand_state in zip(tasks, ms.utils.fork_seed(seed, n=len(tasks)))]
    callbacks = [*ms.measure_callback.MeasureCallback.create("default"),
                 *([AfterBatch(after_batch)] if after_batch is not None else [])]
    ms.tune_tasks(tasks=contexts, task_weights=[float(t.weight) for t in tasks], work_dir=str(folder / "ms_logs"),
                  max_trials_global=remaining, num_trials_per_iter=METASCHEDULE_PER_ITER, database=database,
                  cost_model="xgb", measure_callbacks=callbacks, task_scheduler="gradient", builder=shared_builder())
    report.tuned = [t.task_name for t in tasks]
    report.trials = remaining
    report.measured = sum(records_per_workload(database).values()) - sum(done.values())
    report.seconds = time.perf_counter() - start
    return database, report
