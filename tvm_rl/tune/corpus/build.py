"""A corpus of measured schedules on one device, for pre-training a cost model across tasks: the corpus folder
(`Corpus`, read and written here) and the measuring that fills it (`build_corpus`). The workloads come from
`corpus.sources` (TopHub tasks, zoo models' kernels).

For each workload of a suite (TopHub tasks, zoo models' kernels, or any one-PrimFunc modules) the corpus holds
`trials` measured schedules: first `random` samples of the design space (MetaSchedule's ReplayTrace), then
evolved ones (MetaSchedule's evolutionary search, guided by an XGBModel warmed with the workload's own earlier
records). Both are built and timed with the builder and runner `tune_workloads` uses (the process-wide
PersistentBuilder and the local runner, or an RPC runner).

Layout of a corpus folder (`Corpus`):

    manifest.json          target, host CPU (and GPU), settings, every workload with its counts, seconds spent
    workloads/<name>/      one `TuningDatabase` per workload: records appended in measurement order (the first
                           `random` of them are the random samples), failures.jsonl, exhausted.json, ms_logs/
    features/<name>.npz    the records' PerStoreFeature features, cached by `corpus.features` (safe to delete)

One database per workload makes resumption exact (a folder's record count is that workload's) and
leave-one-workload-out evaluation a matter of leaving one folder out. A rerun skips workloads that have their
`trials` records (or whose design space ran out), and gives a partial one only the remainder: what a killed
run measured is kept, nothing is measured twice.
"""
from __future__ import annotations

import json
import math
import os
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from ...database import FAILED_SECONDS, TuningDatabase, record_seconds
from ...interrupt import interrupt_pending, interruptible
from ...measure import parse_target
from .. import search_strategy
from ..cost_model import create as create_cost_model
from ..intrin import preload_tensor_intrinsics
from ..measure_callback import StopOnInterrupt
from ..runner import FailureLog
from ..search_strategy.exhaustion import StopWhenExhausted
from ..tasks import check_local_device, prepare_metaschedule_logging, shared_builder
from .sources import CorpusError, Workload, distinct, host_info

FORMAT = "tvm-rl corpus"
VERSION = 1
MANIFEST = "manifest.json"
WORKLOADS = "workloads"
FEATURES = "features"


# ------------------------------------------------------------------------------------------------ the folder


@dataclass
class WorkloadRecords:
    """A corpus workload's measured schedules in measurement order: TVM tuning records and their run seconds
    (`database.record_seconds`; `FAILED_SECONDS` for a failed candidate)."""

    name: str
    mod: tvm.IRModule
    records: list[ms.database.TuningRecord]
    seconds: list[float]

    @property
    def valid(self) -> list[int]:
        return [i for i, s in enumerate(self.seconds) if s < FAILED_SECONDS]


class Corpus:
    """A corpus folder (see the module docstring): its manifest and one tuning database per workload."""

    def __init__(self, path: str | os.PathLike):
        if not str(path):
            raise CorpusError("an empty path names no corpus folder")
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise CorpusError(f"{self.path} is a file, not a corpus folder")

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def database(self, name: str) -> TuningDatabase:
        """The tuning database folder of workload `name`."""
        return TuningDatabase(self.path / WORKLOADS / name)

    def features_path(self, name: str) -> Path:
        return self.path / FEATURES / f"{name}.npz"

    def read_manifest(self) -> dict[str, Any]:
        """The manifest ({} when the corpus is new); CorpusError if it is not one this version wrote."""
        if not self.manifest_path.is_file():
            return {}
        try:
            data = json.loads(self.manifest_path.read_text())
        except ValueError as err:
            raise CorpusError(f"{self.manifest_path} is not JSON ({err}); it is rewritten from the workload "
                              "folders if you delete it and rerun the same command") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CorpusError(f"{self.manifest_path} is not a tvm-rl corpus manifest; choose another folder")
        if data.get("version", 0) > VERSION:
            raise CorpusError(f"{self.manifest_path} has version {data.get('version')}, newer than this tvm-rl "
                              f"reads ({VERSION}); upgrade tvm-rl")
        return data

    def write_manifest(self, data: dict[str, Any]) -> None:
        """Replace the manifest in one step (a killed run leaves the old one, never half a new one)."""
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.manifest_path.with_name(MANIFEST + ".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(self.manifest_path)

    def target(self) -> tvm.target.Target:
        """The target the corpus was measured for (from its manifest)."""
        manifest = self.read_manifest()
        if not manifest:
            raise CorpusError(f"{self.path} has no {MANIFEST}: not a corpus (build one with `tvm-rl corpus build`)")
        return tvm.target.Target(manifest["target"])

    def names(self) -> list[str]:
        """Workload names, in the manifest's order (then any other workload folder, by name)."""
        listed = [w["name"] for w in self.read_manifest().get("workloads", [])]
        folder = self.path / WORKLOADS
        others = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        def holds_one(name: str) -> bool:
            path = self.database(name).workloads_path
            return path.is_file() and path.stat().st_size > 0

        return [n for n in listed if holds_one(n)] + [n for n in others if n not in listed and holds_one(n)]

    def load(self, name: str) -> WorkloadRecords:
        """Workload `name`'s records in measurement order (TVM's reader sorts them by latency instead)."""
        folder = self.database(name)
        folder.check()
        workloads = [ms.database.Workload.from_json(json.loads(line))
                     for line in folder.workloads_path.read_text().splitlines() if line.strip()]
        if len(workloads) != 1:
            raise CorpusError(f"{folder.path} holds {len(workloads)} workloads; a corpus folder holds one")
        records, seconds = [], []
        if folder.records_path.is_file():
            for line in folder.records_path.read_text().splitlines():
                if not line.strip():
                    continue
                index, entry = json.loads(line)
                records.append(ms.database.TuningRecord.from_json(entry, workloads[index]))
                secs = record_seconds(entry[1])
                seconds.append(FAILED_SECONDS if secs is None else secs)
        return WorkloadRecords(name, workloads[0].mod, records, seconds)


# ------------------------------------------------------------------------------------------------- measuring


@derived_object
class CorpusProgress(PyMeasureCallback):
    """One line per measured batch: `[i/n] workload phase: measured/trials, best x us (batch: k ok, f failed)`."""

    def __init__(self, prefix: str, phase: str, have: int, trials: int, best: float,
                 write: Callable[[str], None]) -> None:
        self.prefix, self.phase, self.have, self.trials, self.best = prefix, phase, have, trials, best
        self.write = write
        self.start = time.perf_counter()

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        seconds = [record_seconds(r.run_secs) if r.error_msg is None else None for r in runner_results]
        ok = [s for s in seconds if s is not None]
        self.have += len(runner_results)
        if ok:
            self.best = min(self.best, min(ok))
        best = f"best {self.best * 1e6:.1f} us" if math.isfinite(self.best) else "no valid schedule yet"
        self.write(f"{self.prefix} {self.phase}: {self.have}/{self.trials} measured, {best} "
                   f"(batch: {len(ok)} ok, {len(runner_results) - len(ok)} failed) "
                   f"[{time.perf_counter() - self.start:.0f} s]")


@dataclass
class CorpusReport:
    """What a `build_corpus` call did."""

    workloads: int = 0
    measured_workloads: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # workloads whose search raised (see the manifest's "error")
    measured: int = 0
    seconds: float = 0.0
    manifest: Path | None = None


def _seed(seed: int, name: str, have: int, phase: str) -> int:
    """A task seed that differs per workload, phase and record count, so a resumed random phase draws new
    samples instead of the ones it measured before the interruption."""
    return (seed * 1_000_003 + zlib.crc32(f"{name}/{phase}/{have}".encode())) % (2**31 - 1)


def _warm_xgb(records: WorkloadRecords, target: tvm.target.Target) -> ms.CostModel:
    """MetaSchedule's XGBModel (no warm-up), trained on the workload's records so far, so the evolved phase
    starts from what the random phase measured (as a tuning run's later rounds would)."""
    model = create_cost_model("xgb-no-warmup")
    if records.records:
        context = ms.TuneContext(mod=records.mod, target=target, task_name=records.name)
        candidates = [r.as_measure_candidate() for r in records.records]
        results = [ms.runner.RunnerResult([s] if s < FAILED_SECONDS else None,
                                          None if s < FAILED_SECONDS else "failed") for s in records.seconds]
        model.update(context, candidates, results)
    return model


def _measure(workload: Workload, folder: TuningDatabase, target: tvm.target.Target, phase: str, budget: int,
             per_iter: int, seed: int, runner: ms.Runner | str, builder: ms.Builder, prefix: str,
             write: Callable[[str], None], have: int, trials: int, best: float, warm: WorkloadRecords) -> None:
    """Measure `budget` more schedules of `workload` into `folder` with the phase's strategy."""
    database = folder.open()
    prepare_metaschedule_logging()  # MetaSchedule's set-up of the previous call may have lowered the level
    strategy: ms.SearchStrategy
    if phase == "random":
        strategy, model = ms.search_strategy.ReplayTrace(), ms.cost_model.RandomModel(seed=seed)
    else:
        strategy, model = StopWhenExhausted(search_strategy.evolutionary(seed)), _warm_xgb(warm, target)
    logger = ms.logging.get_loggers_from_work_dir(str(folder.path / "ms_logs"), [workload.name])[0]
    context = ms.TuneContext(mod=workload.mod, target=target, space_generator="post-order-apply",
                             search_strategy=strategy, task_name=workload.name, logger=logger,
                             rand_state=_seed(seed, workload.name, have, phase), num_threads="physical").clone()
    callbacks = [StopOnInterrupt(), *ms.measure_callback.MeasureCallback.create("default"),
                 CorpusProgress(prefix, phase, have, trials, best, write),
                 FailureLog(folder.failures_path, [workload.name])]
    ms.tune_tasks(tasks=[context], task_weights=[1.0], work_dir=str(folder.path / "ms_logs"),
                  max_trials_global=budget, max_trials_per_task=budget, num_trials_per_iter=min(per_iter, budget),
                  database=database, builder=builder, runner=runner, cost_model=model, measure_callbacks=callbacks)


def _load(corpus: Corpus, workload: Workload, name: str) -> WorkloadRecords:
    """The records of `workload` in folder `name`, none if the folder holds no workload yet."""
    folder = corpus.database(name)
    if not folder.workloads_path.is_file() or not folder.workloads_path.read_text().strip():
        return WorkloadRecords(name, workload.mod, [], [])
    return corpus.load(name)


def _summary(records: WorkloadRecords) -> dict[str, Any]:
    valid = [records.seconds[i] for i in records.valid]
    return {"records": len(records.seconds), "valid": len(valid),
            "best_us": round(min(valid) * 1e6, 3) if valid else None}


def build_corpus(workloads: Sequence[Workload], target: tvm.target.Target | str, out: str | Path,
                 trials: int = 64, random_fraction: float = 0.5, per_iter: int = 16, seed: int = 0,
                 runner: ms.Runner | str = "local", builder: ms.Builder | None = None,
                 settings: dict[str, Any] | None = None, write: Callable[[str], None] | None = None
                 ) -> CorpusReport:
    """Measure `trials` schedules of each workload (`random_fraction` of them random, the rest evolved) into the
    corpus folder `out`, resuming what is there; the manifest is rewritten after each workload.

    `settings` (the command line's choices, say) are kept in the manifest beside the measuring settings.
    Ctrl-C raises TuningInterrupted saying how to resume; the same call resumes.
    """
    if trials < 1:
        raise CorpusError(f"trials must be at least 1, got {trials}")
    if not 0.0 <= random_fraction <= 1.0:
        raise CorpusError(f"random fraction must be within [0, 1], got {random_fraction}")
    if per_iter < 1:
        raise CorpusError(f"per_iter must be at least 1, got {per_iter}")
    target = parse_target(target)
    check_local_device(target, runner)
    write = write or (lambda line: print(line, flush=True))
    corpus = Corpus(out)
    manifest = corpus.read_manifest()
    if manifest and manifest.get("target") != _target_json(target):
        raise CorpusError(f"{corpus.path} was measured for target {json.dumps(manifest.get('target'))}, not "
                          f"{json.dumps(_target_json(target))}; give another output folder")
    workloads = distinct(workloads)
    if not workloads:
        raise CorpusError("no workloads to measure: choose --tophub and/or --zoo/--models")
    n_random = int(round(trials * random_fraction))
    entries: dict[str, dict[str, Any]] = {w["name"]: w for w in manifest.get("workloads", [])}
    by_key = {str(w.get("structural_hash")): name for name, w in entries.items()}
    run = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "trials": trials, "random": n_random,
           "per_iter": per_iter, "seed": seed, "workloads": len(workloads), "measured": 0, "seconds": 0.0,
           "host": host_info(target), **(settings or {})}
    manifest = {
        "format": FORMAT, "version": VERSION, "target": _target_json(target), "target_kind": target.kind.name,
        "host": host_info(target), "tvm": tvm.__version__,
        "settings": {"trials": trials, "random": n_random, "evolved": trials - n_random, "per_iter": per_iter,
                     "seed": seed, "random_strategy": "ReplayTrace",
                     "evolved_strategy": "EvolutionarySearch (tune.search_strategy.evolutionary), ended when "
                                         "its space runs out",
                     "evolved_cost_model": "XGBModel(num_warmup_samples=0) trained on the workload's earlier "
                                           "records",
                     "builder": type(builder).__name__ if builder is not None else "PersistentBuilder",
                     "runner": runner if isinstance(runner, str) else type(runner).__name__,
                     **(settings or {})},
        "workloads": list(entries.values()), "runs": [*manifest.get("runs", []), run],
        "measurements": manifest.get("measurements", 0), "seconds": manifest.get("seconds", 0.0),
    }
    report = CorpusReport(workloads=len(workloads), manifest=corpus.manifest_path)
    start = time.perf_counter()
    prepared = False
    current: list[tuple[dict[str, Any], TuningDatabase]] = []  # the workload being measured, for an interrupt

    def save() -> None:
        manifest["workloads"] = list(entries.values())
        run["seconds"] = round(time.perf_counter() - start, 1)
        manifest["seconds"] = round(sum(r.get("seconds", 0.0) for r in manifest["runs"]), 1)
        manifest["measurements"] = sum(w.get("records", 0) for w in entries.values())
        corpus.write_manifest(manifest)

    def resume_hint() -> str:
        for entry, folder in current:  # what the interrupted workload holds now (its summary is not done)
            entry["records"] = folder.record_count()
        save()
        return (f"interrupted; every schedule measured so far is kept in {corpus.path}. Run the same command "
                "again to resume: each workload gets what is left of its trials, nothing is measured twice.")

    with interruptible(resume_hint):
        for i, workload in enumerate(workloads):
            name = by_key.get(str(workload.key), workload.name)  # a workload the corpus holds under another name
            folder = corpus.database(name)
            records = _load(corpus, workload, name)
            if records.records and int(tvm_ffi.structural_hash(records.mod)) != workload.key:
                raise CorpusError(f"{folder.path} holds another workload than {workload.name} (structural hash "
                                  f"{tvm_ffi.structural_hash(records.mod)}, not {workload.key}); move it aside")
            have = len(records.seconds)
            entry = entries.setdefault(name, {"name": name, "source": workload.source,
                                              "structural_hash": str(workload.key), "folder": f"{WORKLOADS}/{name}",
                                              "records": have, "random": min(have, n_random), "seconds": 0.0})
            exhausted = folder.read_exhausted().get(str(workload.key)) == have and have > 0
            prefix = f"[{i + 1}/{len(workloads)}] {name}"
            if have >= trials or exhausted:
                report.skipped.append(name)
                entry.update(_summary(records), exhausted=exhausted)
                continue
            if not prepared:
                preload_tensor_intrinsics()
                builder = builder or shared_builder()
                prepared = True
            assert builder is not None
            began = time.perf_counter()
            before = have
            current[:] = [(entry, folder)]
            for phase, goal in (("random", n_random), ("evolved", trials)):
                if have >= goal:
                    continue
                best = min((s for s in records.seconds), default=math.inf)
                try:
                    _measure(workload, folder, target, phase, goal - have, per_iter, seed, runner, builder,
                             prefix, write, have, trials, best, records)
                except Exception as err:  # one workload TVM cannot search must not end a run of hours
                    if interrupt_pending():
                        raise
                    last = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
                    write(f"{prefix} {phase}: failed ({type(err).__name__}: {last[:300]}); going on with the "
                          "next workload (a rerun tries it again)")
                    entry["error"] = f"{phase}: {type(err).__name__}: {last[:300]}"
                    report.failed.append(name)
                    break
                entry.pop("error", None)
                records = _load(corpus, workload, name)
                after = len(records.seconds)
                if phase == "random":
                    entry["random"] = after
                elif after < goal:  # the search found nothing new to measure: the space is exhausted
                    folder.write_exhausted({**folder.read_exhausted(), str(workload.key): after})
                    entry["exhausted"] = True
                have = after
            records = _load(corpus, workload, name)
            entry["evolved"] = len(records.seconds) - entry.get("random", 0)
            entry.update(_summary(records))
            entry["seconds"] = round(entry.get("seconds", 0.0) + time.perf_counter() - began, 1)
            report.measured_workloads.append(name)
            report.measured += len(records.seconds) - before
            run["measured"] = report.measured
            current.clear()
            save()
    report.seconds = time.perf_counter() - start
    save()
    return report


def _target_json(target: tvm.target.Target) -> Any:
    """The target as JSON data (what the manifest keeps and compares)."""
    return json.loads(str(target))


__all__ = ["Corpus", "CorpusReport", "WorkloadRecords", "build_corpus"]
