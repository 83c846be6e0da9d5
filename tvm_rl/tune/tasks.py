"""A model's kernels as MetaSchedule tasks, tuned into one shared, resumable JSON database.

Identical kernels (same structural hash) across models are tuned once: a task whose workload already has
`trials_per_kernel` records in the database is skipped, and one with fewer gets only the remainder, so an
interrupted run resumes where it stopped (MetaSchedule appends each record as it is measured).
"""
from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from ..database import TuningDatabase, record_seconds
from ..errors import TargetError, TvmRlError
from ..interrupt import interruptible
from ..measure import kernel_stage, parse_target
from . import search_strategy
from .batch_gain import GainModel, open_gain_model
from .cost_model import default as default_cost_model
from .cost_model.warm import warm_tasks
from .design_space import guarded, space_generator
from .intrin import preload_tensor_intrinsics
from .library import ScheduleLibrary, open_library
from .measure_callback import AfterBatch, ProgressLine, StopOnInterrupt
from .runner import CheckedRunner, FailureLog, PersistentBuilder, is_cold
from .search_strategy.budget_cap import BudgetCap
from .search_strategy.exhaustion import StopWhenExhausted, skip_measured_until_exhausted
from .search_strategy.seeded import Seeded
from .task_scheduler import LatencyShare, untuned_seconds


def extract_tasks(mod: tvm.IRModule, target: tvm.target.Target | str) -> list[ms.ExtractedTask]:
    """The distinct kernels of `mod` as MetaSchedule tasks, keyed exactly as `measure.build` looks them up
    (before dlight schedules a GPU build's untuned kernels: MetaSchedule skips scheduled functions, and the
    database lookup sees the unscheduled ones)."""
    target = parse_target(target)
    return list(ms.relax_integration.extract_tasks(kernel_stage(mod, target, schedule_rest=False), target))


def model_workloads(mod: tvm.IRModule, target: tvm.target.Target) -> list[tuple[str, tvm.IRModule, float]]:
    """`mod`'s kernels as `tune_workloads` takes them: (task name, TIR module, calls per run)."""
    return [(t.task_name, t.dispatched[0], float(t.weight)) for t in extract_tasks(mod, target)]


def records_per_workload(database: ms.Database) -> Counter:
    """How many tuning records the database holds for each workload (by structural hash)."""
    return Counter(tvm_ffi.structural_hash(r.workload.mod) for r in database.get_all_tuning_records())


def prepare_metaschedule_logging(verbose: bool = False) -> None:
    """Get MetaSchedule's logger ready for a tuning call (which re-runs its logging set-up every time).

    The set-up lists the handlers already on the "tvm.s_tir.meta_schedule" logger by name and fails on one
    without a name (pytest's capture handlers, many user logging set-ups); it replaces that logger's handlers
    anyway, so dropping the unnamed ones first changes nothing else. Its console handler takes the logger's
    level, so unless `verbose` the level is WARNING: MetaSchedule's per-task tables stay in the log files.
    """
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in list(logger.handlers):
        if handler.get_name() is None:
            logger.removeHandler(handler)
    if not verbose:
        logger.setLevel(logging.WARNING)


_BUILDER: PersistentBuilder | None = None


def shared_builder() -> PersistentBuilder:
    """The process-wide PersistentBuilder (its workers start on first use)."""
    global _BUILDER
    if _BUILDER is None:
        _BUILDER = PersistentBuilder()
    return _BUILDER


@dataclass
class TuneReport:
    """What a tuning call did: tasks seen, tasks tuned, trials asked for, records measured, seconds spent.
    (A task whose design space runs out ends early: `measured` can be below `trials`.)"""

    tasks: int = 0
    tuned: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    trials: int = 0
    measured: int = 0
    seconds: float = 0.0
    failures: Counter = field(default_factory=Counter)  # failed candidates by kind (failures.KINDS)
    failure_log: Path | None = None  # one JSON line per failed candidate, with its reason
    from_library: list[str] = field(default_factory=list)  # kernels given a library's record, unmeasured
    search_errors: dict[str, str] = field(default_factory=dict)  # kernel: why its search failed (it ended there)


def tune_model(mod: tvm.IRModule, target: tvm.target.Target | str, work_dir: str | Path | TuningDatabase,
               trials_per_kernel: int = 64, trials_per_iter: int = 16, strategy: ms.SearchStrategy | str | None = None,
               seed: int = 0, op_filter: str | None = None, builder: ms.Builder | None = None,
               runner: ms.Runner | str = "local", verbose: bool = False, check_results: bool = False,
               cost_model: ms.CostModel | str | None = None,
               before_tuning: Callable[[], None] | None = None,
               after_batch: Callable[[], object] | None = None, budget: int | None = None,
               minutes: float | None = None,
               library: ScheduleLibrary | str | os.PathLike | None = None,
               allocator: GainModel | str | os.PathLike | None = None) -> tuple[ms.Database, TuneReport]:
    """Tune each kernel of `mod` up to `trials_per_kernel` measured candidates into `work_dir`'s database, or
    spend a whole-model `budget` of measurements and/or `minutes` where the model's latency is.

    Kernels are extracted as `measure.build` looks them up, so the database applies to the build; the rest is
    `tune_workloads`. Returns the database (ready for `measure.build(..., database=...)`) and a report.
    """
    target = parse_target(target)
    check_local_device(target, runner)
    return tune_workloads(model_workloads(mod, target), target, work_dir, trials_per_kernel, trials_per_iter,
                          strategy, seed, op_filter, builder, runner, verbose, check_results, cost_model,
                          before_tuning, after_batch, budget, minutes, library, allocator)


def tune_workloads(workloads: Sequence[tuple[str, tvm.IRModule, float]], target: tvm.target.Target | str,
                   work_dir: str | Path | TuningDatabase, trials_per_kernel: int = 64, trials_per_iter: int = 16,
                   strategy: ms.SearchStrategy | str | None = None, seed: int = 0, op_filter: str | None = None,
                   builder: ms.Builder | None = None, runner: ms.Runner | str = "local",
                   verbose: bool = False, check_results: bool = False,
                   cost_model: ms.CostModel | str | None = None,
                   before_tuning: Callable[[], None] | None = None,
                   after_batch: Callable[[], object] | None = None, budget: int | None = None,
                   minutes: float | None = None,
                   library: ScheduleLibrary | str | os.PathLike | None = None,
                   allocator: GainModel | str | os.PathLike | None = None) -> tuple[ms.Database, TuneReport]:
    """Tune (name, TIR module with one PrimFunc, weight) workloads into `work_dir`'s database, each up to
    `trials_per_kernel` records: a workload already there is skipped or given only the remainder, so an
    interrupted run resumes.

    `budget` (measurements for all the workloads together) and/or `minutes` (of this call) replace
    `trials_per_kernel` with a whole-model budget: each batch goes where `task_scheduler.LatencyShare` expects it
    to save the most time per model run (weight = calls per run), a kernel may get none, and the database's
    earlier records of these workloads count as spent, so a rerun resumes (and a larger budget adds the
    difference). A budget can be overshot by less than one batch; the deadline is checked between batches.

    `strategy` is a MetaSchedule SearchStrategy or a name `search_strategy.create` knows ("ppo" is PPOSearch); by
    default `search_strategy.evolutionary()` (evolutionary search), which is wrapped so that a task whose space is
    exhausted ends instead of being re-searched for nothing (the knob-space strategies end such tasks themselves, and
    may measure fewer than `trials_per_iter` in a round on purpose). The default builder is a process-wide
    PersistentBuilder, so its warm workers serve every call. Progress is one line per measured batch;
    MetaSchedule's own per-task tables go to `work_dir/ms_logs` (and the console if `verbose`).

    Failed candidates (build errors, crashes, timeouts) are counted in the report and their reasons appended
    to `work_dir/failures.jsonl`; `check_results` also fails candidates whose outputs differ from the
    unscheduled kernel's (`failures.CheckedRunner`); with the local runner the candidates of kernels tuned
    without MetaSchedule's layout rewrite (fused attention on CPU: `design_space`) are always checked. Ctrl-C
    raises TuningInterrupted, saying how to resume.
    `cost_model` rates candidates for every task of the call: by default (None) `cost_model.default(kind)`, the
    pre-trained model shipped for the target kind refined on the run's records, or MetaSchedule's XGBModel where
    none is shipped; "xgb" is MetaSchedule's XGBModel; or any MetaSchedule CostModel (`cost_model.create(...)`).
    `before_tuning` is called once, just before the first measurement, and not at all when every kernel is tuned
    already (a benchmark waits there for quiet cores). `after_batch` is called after every measured batch, once
    its records are in `work_dir`'s database files (a benchmark archives them there).

    `library` (a `ScheduleLibrary`, its file, "shipped": the one shipped for the target kind, or "default") starts from
    schedules measured before: a kernel with no record whose exact workload the library measured on this target
    gets that record with no measurement (listed in `from_library.json`; it counts against neither
    `trials_per_kernel` nor `budget`), and with evolutionary search up to half of each kernel's first batch is the
    library's schedules for its kind of kernel, the best by the cost model (`search_strategy.seeded`). None (the
    default here; `optimize` and the CLI start from the shipped one) starts every kernel from nothing. A library's
    times were measured warm, so with a cold-cache `runner` (`runner.cold_runner`) its exact records are not
    applied: they are among the first candidates, measured like the rest.
    `allocator` ranks a whole-model budget's measured kernels by a learned gain model (`batch_gain.open_gain_model`:
    a GainModel, its file, or "shipped") instead of MetaSchedule's gradient rule (None, the default).
    """
    target = parse_target(target)
    check_local_device(target, runner)
    if check_results and not _is_local(runner):
        raise TvmRlError("check_results runs each candidate on this machine, so it needs the local runner; "
                         "drop it to measure remotely")
    # A TuningDatabase handed down (`optimize` opens one per run) is used as it is, already open or not.
    folder = work_dir if isinstance(work_dir, TuningDatabase) else TuningDatabase(work_dir)
    work_dir = folder.path
    database = folder.open()
    report = TuneReport()
    library = open_library(library, target.kind.name)
    gain_model = open_gain_model(allocator, target.kind.name) if budget is not None or minutes is not None else None
    if library is not None and not is_cold(runner):  # its records were timed warm: under a cold runner they seed
        report.from_library = library.apply_to(folder, [w for w in workloads if not op_filter or op_filter in w[0]],
                                               target)
    from_library = folder.read_from_library()
    done = records_per_workload(database)
    exhausted = folder.read_exhausted()
    whole_model = budget is not None or minutes is not None
    if budget is not None and budget < 0 or minutes is not None and minutes <= 0:
        raise TvmRlError(f"a tuning budget must be positive (got budget={budget}, minutes={minutes})")
    todo, budgets, keys = [], [], []
    spent = 0  # records the database already has of these workloads (what a whole-model budget has spent)
    for name, mod, weight in workloads:
        report.tasks += 1
        if op_filter and op_filter not in name:
            continue
        key = tvm_ffi.structural_hash(mod)
        have = done.get(key, 0)
        measured = have - from_library.get(str(key), 0)  # a library's records were not measured: not spent
        spent += measured
        # A kernel whose space ran out before its budget is not searched again (each retry costs a full search
        # round for nothing); the mark names its record count, so records added since re-open it.
        if (not whole_model and measured >= trials_per_kernel) or (have and exhausted.get(str(key)) == have):
            report.skipped.append(name)
            continue
        todo.append((name, mod, weight))
        keys.append(key)
        budgets.append(trials_per_kernel - measured)
    remaining = (budget - spent if budget is not None else _UNLIMITED) if whole_model else 0
    if not todo or (whole_model and remaining <= 0):
        return database, report
    if before_tuning is not None:
        before_tuning()
    start = time.perf_counter()
    preload_tensor_intrinsics()
    prepare_metaschedule_logging(verbose)
    strategy = search_strategy.create(strategy, seed)
    resumed = False  # an evolutionary run with records already measured for some task: its model is warmed below
    if search_strategy.is_evolutionary(strategy):
        if library is not None:  # up to half of each task's first batch: the library's schedules for it
            strategy = Seeded(strategy, library)
        # A resumed run must not measure the database's schedules again (SkipMeasured), and a task whose space ran
        # out ends (StopWhenExhausted).
        strategy = skip_measured_until_exhausted(strategy, report.search_errors)
        resumed = any(done.get(key, 0) for key in keys)
    else:  # the knob-space strategies end spent tasks themselves; a failed search still ends only its own task
        strategy = StopWhenExhausted(strategy, report.search_errors, end_when_short=False)
    if budget is not None:
        strategy = BudgetCap(strategy, [remaining])  # the batch that reaches the budget is cut to what is left
    names = [name for name, _, _ in todo]
    # Kernels whose layout rewrite breaks every build (fused attention) are tuned without it only where their
    # candidates can be checked, since some of those schedules compute wrong results (`design_space`).
    local = _is_local(runner)
    to_check = [mod for _, mod, _ in todo if local and guarded(mod, target)]
    loggers = ms.logging.get_loggers_from_work_dir(str(work_dir / "ms_logs"), names)
    # Each task needs its own strategy state: cloning the context clones its strategy (as MetaSchedule does).
    contexts = [ms.TuneContext(mod=mod, target=target, space_generator=space_generator(target, guard=local, mod=mod),
                               search_strategy=strategy,
                               task_name=name, logger=logger, rand_state=rand_state, num_threads="physical").clone()
                for (name, mod, _), logger, rand_state in zip(todo, loggers, ms.utils.fork_seed(seed, n=len(todo)))]
    if cost_model is None:
        cost_model = default_cost_model(target.kind.name)
    # Each task's records already in the database (one walk), for a resumed model and a resumed scheduler.
    earlier = _records_by_key(database, keys) if resumed or whole_model else {}
    if resumed:
        # The knob-space strategies train their model on the database's records themselves; evolutionary search's
        # would search a resumed task with a model that forgot them. Made here as tune_tasks would make it.
        if not isinstance(cost_model, ms.CostModel):
            cost_model = ms.CostModel.create(cost_model, num_tuning_cores=contexts[0].num_threads, tree_method="auto")
        warm_tasks(cost_model, [(context, earlier.get(key, [])) for context, key in zip(contexts, keys)])
    if check_results or to_check:
        runner = CheckedRunner([mod for _, mod, _ in todo], inner=runner, only=None if check_results else to_check)
    report.failure_log = folder.failures_path
    scheduler = None
    with interruptible(lambda: _resume_hint(folder)):
        if whole_model:
            scheduler = _latency_share(todo, keys, earlier, trials_per_iter, minutes, seed, gain_model)
            failures = FailureLog(report.failure_log, names)
            ms.tune_tasks(
                task_scheduler=scheduler,
                measure_callbacks=_callbacks(ProgressLine("  ", names, total=budget, already=spent), failures,
                                             after_batch, scheduler.observer),
                tasks=contexts, task_weights=[w for _, _, w in todo], work_dir=str(work_dir / "ms_logs"),
                max_trials_global=remaining, max_trials_per_task=remaining,
                num_trials_per_iter=min(trials_per_iter, remaining), database=database,
                builder=builder or shared_builder(), runner=runner, cost_model=cost_model)
            report.tuned += names
            report.trials += remaining if budget is not None else 0
            report.failures += failures.counts()
        # One call per remaining budget level keeps MetaSchedule's per-task cap exact for resumed tasks.
        for budget_left in [] if whole_model else sorted(set(budgets)):
            group = [i for i, b in enumerate(budgets) if b == budget_left]
            failures = FailureLog(report.failure_log, [names[i] for i in group])
            callbacks = _callbacks(ProgressLine("  ", [names[i] for i in group]), failures, after_batch)
            # Round-robin, not MetaSchedule's default gradient scheduler: both give each task exactly `budget`
            # trials here (the per-task cap sums to the global one), but the gradient scheduler commits no record
            # until every task has had its first batch (on a 75-kernel model, 20 minutes a kill would lose), where
            # round-robin commits each batch as soon as it is measured.
            ms.tune_tasks(
                task_scheduler="round-robin",
                measure_callbacks=callbacks, tasks=[contexts[i] for i in group],
                task_weights=[todo[i][2] for i in group], work_dir=str(work_dir / "ms_logs"),
                max_trials_global=budget_left * len(group), max_trials_per_task=budget_left,
                num_trials_per_iter=min(trials_per_iter, budget_left), database=database,
                builder=builder or shared_builder(), runner=runner,
                cost_model=cost_model)
            report.tuned += [names[i] for i in group]
            report.trials += budget_left * len(group)
            report.failures += failures.counts()
    after = records_per_workload(database)
    for i, key in enumerate(keys):
        # the search ended short of its budget: space exhausted
        ended = i in scheduler.exhausted if scheduler is not None else after.get(key, 0) < trials_per_kernel
        if ended and after.get(key, 0) > 0:
            exhausted[str(key)] = after[key]
    if exhausted:
        folder.write_exhausted(exhausted)
    report.measured = sum(after.values()) - sum(done.values())
    report.seconds = time.perf_counter() - start
    return database, report


# What "no budget" (minutes only) caps the measurements at: far more than any deadline allows.
_UNLIMITED = 1_000_000


def _latency_share(todo: Sequence[tuple[str, tvm.IRModule, float]], keys: Sequence[int],
                   earlier: dict[int, list], trials_per_iter: int, minutes: float | None, seed: int,
                   gain_model: GainModel | None = None) -> LatencyShare:
    """The whole-model scheduler for `todo`, its history resumed from each task's `earlier` records."""
    prior: list[tuple[float | None, int]] = []
    for key in keys:
        records = earlier.get(key, [])
        seconds = [s for s in (record_seconds(r.run_secs) for r in records) if s is not None]
        prior.append((min(seconds) if seconds else None, -(-len(records) // trials_per_iter)))
    deadline = time.monotonic() + 60 * minutes if minutes is not None else None
    return LatencyShare([untuned_seconds(mod) for _, mod, _ in todo], prior, deadline=deadline, seed=seed,
                        gain_model=gain_model)


def _records_by_key(database: ms.Database, keys: Sequence[int]) -> dict[int, list]:
    """The database's records of the workloads `keys` (structural hashes), by key."""
    wanted = set(keys)
    by_key: dict[int, list] = {}
    for record in database.get_all_tuning_records():
        key = tvm_ffi.structural_hash(record.workload.mod)
        if key in wanted:
            by_key.setdefault(key, []).append(record)
    return by_key


def _callbacks(progress: ProgressLine, failures: FailureLog, after_batch: Callable[[], object] | None,
               *extra: ms.MeasureCallback) -> list[ms.MeasureCallback]:
    """A tuning call's measure callbacks, in order: interrupt check, MetaSchedule's defaults (the batch into the
    database), `extra`, progress line, failure log, `after_batch` (which then sees the batch's records)."""
    return [StopOnInterrupt(), *ms.measure_callback.MeasureCallback.create("default"), *extra, progress, failures,
            *([AfterBatch(after_batch)] if after_batch is not None else [])]


def check_local_device(target: tvm.target.Target, runner: ms.Runner | str) -> None:
    """TargetError if candidates would be measured on this machine (the local runner) and it has no device of
    the target's kind (building for CUDA works without a GPU; measuring does not)."""
    kind = target.kind.name
    if _is_local(runner) and kind != "llvm" and not tvm.device(kind, 0).exist:
        raise TargetError(f"no {kind} device on this machine, and tuning measures every candidate on one: tune on "
                          f"a machine with a {kind} device, or measure remotely through an RPC runner")


def _is_local(runner: ms.Runner | str) -> bool:
    return runner == "local" if isinstance(runner, str) else isinstance(runner, ms.runner.LocalRunner)


def _resume_hint(folder: TuningDatabase) -> str:
    return (f"interrupted; the {folder.record_count()} measured records so far are kept in {folder.records_path}. "
            "Run the same command again to resume: each kernel gets what is left of its budget, nothing is "
            "measured twice.")
