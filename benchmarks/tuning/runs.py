"""The tuner benchmark's measuring: the runner, the load check, the shared first batch, one run, re-timing.

- `Measuring`: how every candidate is timed (MetaSchedule's LocalRunner with `repeat` timings per candidate,
  each of `number` calls, the cache flushed before each on a CPU), and the same settings for re-timing.
- `wait_for_cores`: before a run, wait (up to a limit) until other processes leave the cores free, and say how
  busy they were, so a reader can tell runs that shared the cores.
- `shared_first_batch`: per (task, seed), `size` random schedules (ReplayTrace) measured once into a folder;
  every arm's run starts from a copy of it and counts it in its trials.
- `run_arm`: one tuning run from that copy; returns the run record (see `stats`).
- `retime_task`: every best-so-far improver of every run of a task built and timed again, round-robin over the
  runs (so arms interleave), in several passes; each improver's value is the median over the passes.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from tvm_rl.database import RECORDS, WORKLOADS, TuningDatabase
from tvm_rl.measure import device_for, random_args
from tvm_rl.tune.cost_model.warm import warm
from tvm_rl.tune.measure_callback.progress import ProgressLine
from tvm_rl.tune.search_strategy.exhaustion import skip_measured_until_exhausted
from tvm_rl.tune.search_strategy.skip_measured import SkipMeasured
from tvm_rl.tune.tasks import prepare_metaschedule_logging

from .archive import Archive
from .stats import improvers, median_seconds

Write = Callable[[str], None]
SHARED_MARK = "shared.json"  # written once a shared batch is measured whole


@dataclass(frozen=True)
class Measuring:
    """How candidates are timed during tuning and again at the end: `repeat` timings (the curves take their
    median), each the mean of `number` calls, the cache flushed before each timing on a CPU (with number 1, every
    call is a cold one), `min_repeat_ms` 0 so that `number` stays as given."""

    repeat: int = 7
    number: int = 1
    min_repeat_ms: int = 0
    cache_flush: bool = True
    timeout_sec: float = 30.0

    def __post_init__(self) -> None:
        if self.repeat < 1 or self.number < 1 or self.min_repeat_ms < 0:
            raise ValueError(f"repeat and number must be at least 1 and min_repeat_ms at least 0, got {self}")

    def evaluator(self, target: tvm.target.Target) -> ms.runner.EvaluatorConfig:
        return ms.runner.EvaluatorConfig(number=self.number, repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
                                         enable_cpu_cache_flush=self.flushes(target))

    def flushes(self, target: tvm.target.Target) -> bool:
        return self.cache_flush and target.kind.name == "llvm"

    def runner(self, target: tvm.target.Target) -> ms.runner.LocalRunner:
        """MetaSchedule's LocalRunner with these settings."""
        return ms.runner.LocalRunner(timeout_sec=self.timeout_sec, evaluator_config=self.evaluator(target))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _tree_cpu_seconds(proc: Any) -> float:
    """CPU seconds used by `proc`, its live descendants and the children they have reaped."""
    import psutil

    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:  # exited between listing and reading
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def others_busy_cores(window: float = 3.0, sleep: Callable[[float], None] = time.sleep) -> float:
    """Cores kept busy over `window` seconds by processes other than this one and its descendants (the builder
    and runner workers). The 1-minute load average would also count this benchmark's own last run, which is not
    competition: the check is there to catch other jobs."""
    import psutil

    me = psutil.Process()

    def busy() -> float:
        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)

    start, own = time.perf_counter(), _tree_cpu_seconds(me)
    total = busy()
    sleep(window)
    elapsed = max(time.perf_counter() - start, 1e-6)
    return max(0.0, (busy() - total) - (_tree_cpu_seconds(me) - own)) / elapsed


def wait_for_cores(max_wait: float, threshold: float | None = None, poll: float = 15.0, write: Write = print,
                   others: Callable[[], float] = others_busy_cores,
                   sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Wait until other processes keep at most `threshold` cores busy (default 0.5; `others_busy_cores`), polling
    every `poll` seconds for at most `max_wait` seconds; returns what was seen (with the 1-minute load average, for
    the record), the seconds waited and whether the run starts on busy cores (`busy`: other processes were still
    above the threshold when the wait ended)."""
    threshold = 0.5 if threshold is None else threshold
    before = others()
    waited, load = 0.0, before
    while load > threshold and waited < max_wait:
        if waited == 0:
            write(f"  other processes keep {load:.2f} cores busy (> {threshold:.1f} of {cores()}): waiting up to "
                  f"{max_wait:.0f} s for them to finish")
        step = min(poll, max_wait - waited)
        sleep(step)
        waited += step
        load = others()
    if load > threshold and max_wait > 0:
        write(f"  other processes still keep {load:.2f} cores busy after {waited:.0f} s: running anyway (recorded "
              "as busy)")
    return {"threshold": threshold, "others_before": round(before, 2), "others_start": round(load, 2),
            "loadavg": [round(x, 2) for x in os.getloadavg()], "waited_seconds": round(waited, 1),
            "busy": load > threshold}


def task_seed(seed: int, task: str, phase: str) -> int:
    """A TuneContext seed per (seed, task, phase), so tasks and phases draw different random streams."""
    return (seed * 1_000_003 + zlib.crc32(f"{task}/{phase}".encode())) % (2**31 - 1)


def tuning_seconds(folder: Path) -> list[float | None]:
    """Each record's median run time in measurement order (None: failed)."""
    return [median_seconds(secs) for secs in TuningDatabase(folder).run_seconds()]


def _tune(mod: tvm.IRModule, name: str, target: tvm.target.Target, folder: Path, strategy: ms.SearchStrategy,
          cost_model: ms.CostModel, rand_state: int, trials: int, per_iter: int, runner: ms.Runner,
          builder: ms.Builder, prefix: str) -> None:
    """`trials` more measurements of `mod` into `folder`'s database with `strategy`."""
    prepare_metaschedule_logging()  # MetaSchedule's set-up of the previous call may have lowered the level
    logger = ms.logging.get_loggers_from_work_dir(str(folder / "ms_logs"), [name])[0]
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", search_strategy=strategy,
                             task_name=name, logger=logger, rand_state=rand_state, num_threads="physical").clone()
    ms.tune_tasks(tasks=[context], task_weights=[1.0], work_dir=str(folder / "ms_logs"), max_trials_global=trials,
                  max_trials_per_task=trials, num_trials_per_iter=min(per_iter, trials),
                  database=TuningDatabase(folder).open(), builder=builder, runner=runner, cost_model=cost_model,
                  measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"),
                                     ProgressLine(prefix, [name])])


def shared_first_batch(mod: tvm.IRModule, name: str, seed: int, size: int, target: tvm.target.Target,
                       folder: Path, runner: ms.Runner, builder: ms.Builder) -> dict[str, Any]:
    """`size` random schedules (ReplayTrace) of `mod` measured into `folder`, once: a folder that holds a whole
    batch is reused; one cut short by a kill is measured again from scratch. Returns {records, seconds, ...}."""
    mark = folder / SHARED_MARK
    if mark.is_file():
        return json.loads(mark.read_text())
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    start = time.perf_counter()
    _tune(mod, name, target, folder, ms.search_strategy.ReplayTrace(), ms.cost_model.RandomModel(seed=seed),
          task_seed(seed, name, "shared"), size, size, runner, builder, f"  [{name} shared batch, seed {seed}] ")
    seconds = tuning_seconds(folder)
    valid = [s for s in seconds if s is not None]
    info = {"records": len(seconds), "valid": len(valid), "best_us": min(valid) * 1e6 if valid else None,
            "seconds": round(time.perf_counter() - start, 1)}
    mark.write_text(json.dumps(info))
    return info


def _warm(model: ms.CostModel, mod: tvm.IRModule, name: str, target: tvm.target.Target, folder: Path) -> None:
    """Train `model` on the records in `folder`, as a knob-space strategy trains its model when it resumes."""
    warm(model, ms.TuneContext(mod=mod, target=target, task_name=name), list(TuningDatabase(folder).records()))


def run_arm(mod: tvm.IRModule, task: str, arm: str, strategy: ms.SearchStrategy, cost_model: ms.CostModel,
            resumes: bool, seed: int, trials: int, per_iter: int, target: tvm.target.Target, work_dir: Path,
            shared_dir: Path | None, runner: ms.Runner, builder: ms.Builder) -> dict[str, Any]:
    """One run: a fresh `work_dir` holding a copy of the shared first batch, then `trials` minus that batch
    measured with `strategy`. A strategy that `resumes` (the knob-space ones) reads the batch from the database
    and trains the model on it itself; any other is wrapped in `SkipMeasured` (and `StopWhenExhausted`) and its
    model is trained on the batch first, so every arm starts from the same knowledge. With `shared_dir` None the
    run starts from an empty database and measures all `trials` itself. Returns the run record."""
    if work_dir.exists():  # a folder left by a killed run: its records must not count towards this one
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)
    if shared_dir is not None:
        for name in (WORKLOADS, RECORDS):
            shutil.copyfile(shared_dir / name, work_dir / name)
    shared = TuningDatabase(work_dir).record_count()
    skipped = [0]
    if not resumes:
        if shared:
            _warm(cost_model, mod, task, target, work_dir)
        strategy = skip_measured_until_exhausted(strategy, skipped=skipped)
    start = time.perf_counter()
    if trials > shared:
        _tune(mod, task, target, work_dir, strategy, cost_model, task_seed(seed, task, "run"), trials - shared,
              per_iter, runner, builder, f"  [{task} {arm} seed {seed}] ")
    wall = time.perf_counter() - start
    seconds = tuning_seconds(work_dir)
    log = getattr(strategy, "log", None) or []
    return {"task": task, "arm": arm, "seed": seed, "budget": trials, "trials": len(seconds), "shared": shared,
            "tuning_seconds": seconds, "improvers": improvers(seconds), "wall_seconds": round(wall, 2),
            "search_seconds": round(sum(r["search_seconds"] for r in log), 2) if log else None,
            "rounds": len(log) if log else None, "duplicates_skipped": skipped[0],
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "work_dir": str(work_dir)}


def _record_module(mod: tvm.IRModule, folder: Path, index: int, archive: Archive | None = None) -> tvm.IRModule:
    """The scheduled module of record `index` (measurement order) in `folder`'s database, or in `archive` when
    the folder is gone."""
    path = TuningDatabase(folder).records_path
    if path.is_file():
        with open(path) as f:
            found = next((json.loads(line)[1] for i, line in enumerate(f) if i == index), None)
        if found is None:
            raise IndexError(f"{path} has no record {index}; the run's folder does not match its JSON entry")
    else:
        found = archive.record(str(folder), index) if archive is not None else None
        if found is None:
            raise FileNotFoundError(f"{path} is gone and the benchmark's archive does not hold record {index}: "
                                    "re-timing rebuilds each improver from its run's database, so restore the "
                                    "folder, or remove that run from the JSON to tune it again")
    record = ms.database.TuningRecord.from_json(found, ms.database.Workload(mod))
    sch = Schedule(mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod


def retime_task(mod: tvm.IRModule, runs: Sequence[dict[str, Any]], target: tvm.target.Target,
                measuring: Measuring, passes: int = 5, write: Write = print,
                archive: Archive | None = None) -> dict[str, Any]:
    """Re-time every improver of `runs` (one task's), setting each run's `retimed` (aligned with `improvers`).

    Each distinct schedule is built once (the shared batch's best is the same schedule in every arm). Each pass
    times every schedule once with `measuring`'s settings, in round-robin order over the runs (first improvers
    of every run, then second ones, ...), so arms and seeds interleave; a schedule's value is the median over the
    passes of each pass's median. A schedule that fails to build gets None. A run whose database is gone is
    rebuilt from `archive` (`archive`)."""
    start = time.perf_counter()
    depth = max((len(r["improvers"]) for r in runs), default=0)
    order = [(i, k) for k in range(depth) for i, r in enumerate(runs) if k < len(r["improvers"])]
    key_of: dict[tuple[int, int], int] = {}
    libs: dict[int, Any] = {}
    for i, k in order:
        scheduled = _record_module(mod, Path(runs[i]["work_dir"]), runs[i]["improvers"][k], archive)
        key = int(tvm_ffi.structural_hash(scheduled))
        key_of[(i, k)] = key
        if key not in libs:
            try:
                libs[key] = tvm.compile(scheduled, target=target).jit()
            except Exception as err:  # a schedule that measured fine but does not build here is reported, not fatal
                write(f"  re-timing: a schedule of {runs[i]['arm']} seed {runs[i]['seed']} does not build "
                      f"({type(err).__name__}); left out")
                libs[key] = None
    device = device_for(target)
    args = random_args(mod["main"], device, np.random.default_rng(0))
    preproc = "cache_flush_cpu_non_first_arg" if measuring.flushes(target) else ""
    samples: dict[int, list[float]] = {key: [] for key in libs}
    for _ in range(passes):
        for key, lib in libs.items():
            if lib is not None:
                timer = lib.time_evaluator("main", device, number=measuring.number, repeat=measuring.repeat,
                                           min_repeat_ms=measuring.min_repeat_ms, f_preproc=preproc)
                samples[key].append(float(np.median(timer(*args).results)))
    value = {key: float(np.median(s)) if s else None for key, s in samples.items()}
    for i, run in enumerate(runs):
        run["retimed"] = [value[key_of[(i, k)]] for k in range(len(run["improvers"]))]
    return {"schedules": len(libs), "failed": sum(lib is None for lib in libs.values()), "passes": passes,
            "seconds": round(time.perf_counter() - start, 1)}


def best_tuning_us(run: dict[str, Any]) -> float:
    """The run's best tuning-time latency in microseconds (inf: nothing valid)."""
    valid = [s for s in run["tuning_seconds"] if s is not None]
    return min(valid) * 1e6 if valid else math.inf


__all__ = ["Measuring", "SkipMeasured", "best_tuning_us", "cores", "retime_task", "run_arm",
           "others_busy_cores", "shared_first_batch", "task_seed", "tuning_seconds", "wait_for_cores"]
