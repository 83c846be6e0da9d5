"""End to end: every kernel of a zoo model tuned by each search arm at N trials per kernel, then the whole model
built with that arm's database and timed beside TVM's default build, PyTorch eager and ONNX Runtime.

Each (model, arm, N, seed) tunes into its own database folder (`tune_model`, batches of 8 as `tvm-rl optimize`
tunes; the graph pass is left out, so the arms differ in kernel tuning alone). A rerun reuses those folders:
kernels already tuned are skipped, and a run's entry in the JSON, written after every tuning run, adds up the
tuning seconds of all its sittings. At the end of each model all its builds are checked against the PyTorch
reference and timed round-robin (every variant once per pass, several passes, median over passes), so that they
share one machine state.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from benchmarks import baseline as bench
from benchmarks.common import jsonfile
from benchmarks.tuning import runs as bench_runs
from tvm_rl import measure, models
from tvm_rl.database import RECORDS, TuningDatabase
from tvm_rl.errors import TargetError, TvmRlError, exit_code
from tvm_rl.tune.cost_model import from_spec
from tvm_rl.tune.tasks import check_local_device, records_per_workload, tune_model

from . import archive as e2e_archive
from .budget import BUDGET_ARMS, arm_module, tune_budget
from .hf import HF_MODELS, load_model
from .seeds import format_seed_table, seed_summary
from .table import BASELINE_ARM, DEFAULT, INDUCTOR, ORT, TORCH, format_table, plot, table_rows, variant_key

MODELS = ["resnet18", "mobilenet_v2", "bert"]
# arm -> (search strategy, whether it takes the pre-trained cost model of --cost-model)
ARMS = {"ppo": ("ppo", False), "evolutionary": ("evolutionary", False),
        "evolutionary-pretrained": ("evolutionary", True), "ppo-pretrained-model": ("ppo", True)}
TRIALS_PER_ITER = 8  # as `tvm-rl optimize` tunes


def resolve_arms(wanted: list[str] | None, cost_model: str | None) -> list[str]:
    """The arms to run: `wanted`, or by default ppo and evolutionary (and their pre-trained-model variants when a
    cost model is given); SystemExit naming an unknown arm, or a pre-trained arm without `--cost-model`."""
    if wanted is None:
        return [a for a, (_, pre) in ARMS.items() if cost_model or not pre]
    unknown = [a for a in wanted if a not in ARMS and a not in BUDGET_ARMS]
    if unknown:
        raise SystemExit(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join([*ARMS, *BUDGET_ARMS])}")
    needs = [a for a in wanted if {**ARMS, **BUDGET_ARMS}[a][1]]
    if needs and not cost_model:
        raise SystemExit(f"arm(s) {', '.join(needs)} use a pre-trained cost model: give --cost-model FILE "
                         "or --cost-model xgb-pretrained")
    return list(dict.fromkeys(wanted))


def run_dir(work_dir: Path, target_name: str, size: str, model: str, arm: str, trials: int, seed: int) -> Path:
    """The database folder of one (model, arm, N, seed) run: its own, so arms and budgets never share records."""
    return Path(work_dir) / target_name / size / model / f"{arm}_n{trials}_s{seed}"


def default_out(target_name: str, size: str) -> Path:
    """logs/tuner_e2e_<target>.json at full size; a smaller size gets its own file (`_<size>`), so a check run
    never mixes with the real one."""
    return Path("logs") / f"tuner_e2e_{target_name}{'' if size == 'full' else '_' + size}.json"


def interleave(timers: dict[str, Callable[[], float | None]], passes: int) -> dict[str, dict[str, Any]]:
    """Round-robin timing: each pass calls every timer once, in turn (a timer returns a median in ms, or None
    when it cannot time, and is then dropped); a variant's latency is the median over its passes."""
    samples: dict[str, list[float]] = {k: [] for k in timers}
    live = dict(timers)
    for _ in range(passes):
        for key, timer in list(live.items()):
            ms = timer()
            if ms is None:
                del live[key]
            else:
                samples[key].append(float(ms))
    return {k: {"ms": statistics.median(v) if v else None, "passes_ms": [round(x, 4) for x in v]}
            for k, v in samples.items()}


def timing_plan(first_s: float, per_pass_s: float) -> tuple[int, int]:
    """(repeat, warmup) per pass for a build whose first run took `first_s`. One that takes longer than a pass's
    budget (the naive loops of a large model run for seconds to minutes) is timed by one run per pass with no
    warm-up (the check's run was one); the median over passes still applies."""
    return (1, 0) if first_s > per_pass_s else (bench.repeats_for(first_s, per_pass_s), 1)


def _tvm_variant(mod, target, inputs, reference, database, passes: int, budget_s: float) -> tuple[dict, Callable]:
    """Build, check against `reference` (`measure.tolerance`) and return the record and a per-pass timer."""
    start = time.perf_counter()
    try:
        runner = measure.Runner(measure.build(mod, target, database=database), target)
    except TvmRlError as err:
        return {"ms": None, "error": str(err)}, lambda: None
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    check = measure.compare(runner(inputs), reference, rtol=1e-3, atol=measure.tolerance(reference))
    repeat, warmup = timing_plan(time.perf_counter() - start, budget_s / passes)
    return ({"build_s": round(build_s, 2), "correct": check.ok, "max_abs_err": check.max_abs_err, "repeat": repeat},
            lambda: runner.time(inputs, warmup=warmup, repeat=repeat).median_ms)


def time_model(model: models.Model, target, databases: dict[str, Any], args, scratch: Path,
               modules: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build every variant of one model (`modules[key]` where a run tuned another module than the model's, e.g.
    the graph pass's), check the tuned ones, and time all of them (PyTorch and ORT with benchmarks/baseline.py's
    own functions) in interleaved passes."""
    modules = modules or {}
    start = time.perf_counter()
    gpu = measure.is_gpu(target)
    reference = model.reference_outputs()
    records, timers = {}, {}
    for key, database in {DEFAULT: None, **databases}.items():
        print(f"[{model.name}] building and checking {key} ...", flush=True)
        records[key], timers[key] = _tvm_variant(modules.get(key, model.mod), target, model.inputs, reference,
                                                 database, args.passes, args.budget_s)
        if records[key].get("correct") is False:
            print(f"[{model.name}] WARNING: {key}'s outputs differ from the reference "
                  f"(max abs error {records[key]['max_abs_err']:.3g})", flush=True)
    device = "cuda" if gpu and torch.cuda.is_available() else "cpu"
    timers[TORCH] = lambda: bench.time_torch(model, device, args.threads)["ms"]
    if args.inductor:
        inductor = bench.InductorTimer(model, device, args.threads)
        timers[INDUCTOR] = inductor
    timers[ORT] = bench.OrtTimer(model, scratch, gpu, args.threads)
    print(f"[{model.name}] timing {len(timers)} variants round-robin, {args.passes} passes ...", flush=True)
    timed = interleave(timers, args.passes)
    for key, rec in timed.items():
        records.setdefault(key, {}).update(rec)
    records[TORCH]["device"] = device
    if args.inductor:
        records[INDUCTOR].update(device=device, compile_s=inductor.compile_s)
    return {"variants": records, "passes": args.passes, "seconds": round(time.perf_counter() - start, 1)}


def _parser(prog: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    p.add_argument("--target", default="llvm", help="llvm (this CPU), cuda, cuda:sm_80, or a JSON target")
    p.add_argument("--models", nargs="+", default=MODELS,
                   help=f"zoo models, or {' '.join(HF_MODELS)} (benchmarks/e2e/hf.py) (default: {' '.join(MODELS)})")
    p.add_argument("--size", default="full", choices=models.SIZES)
    p.add_argument("--trials", type=int, nargs="+", default=[32, 64],
                   help="N: trials per kernel, or for the budget-* arms measurements per model (default 32 64)")
    p.add_argument("--minutes", type=float, default=None,
                   help="budget-* arms: also stop each run after this many minutes of tuning (all its sittings), "
                        "whichever of N and the minutes comes first; give a large N for a time budget alone")
    p.add_argument("--arms", nargs="+", default=None,
                   help=f"search arms (default: ppo evolutionary, and the *-pretrained ones with --cost-model; "
                        f"known: {' '.join(ARMS)}; whole-model budgets: {' '.join(BUDGET_ARMS)})")
    p.add_argument("--seeds", type=int, default=1, help="seeds per (model, arm, N): 0 .. seeds-1")
    p.add_argument("--cost-model", default=None, help="pre-trained cost model for the *-pretrained arms: a file, "
                   "or xgb-pretrained (the one shipped for the target)")
    p.add_argument("--library", default=None, metavar="FILE",
                   help="the schedule library budget-ours-library starts from (`tvm-rl library build`)")
    p.add_argument("--gain-model", default="shipped", metavar="FILE",
                   help="the learned allocator's gain model the -learned arm ranks kernels by (default: shipped; "
                        "`python -m benchmarks.batch_gain --model-out`)")
    p.add_argument("--op-filter", default=None, help="tune only kernels whose task name contains this (a check)")
    p.add_argument("--passes", type=int, default=5, help="interleaved timing passes over all variants")
    p.add_argument("--budget-s", type=float, default=20.0, help="seconds of TVM timing per variant, all passes")
    p.add_argument("--inductor", action="store_true",
                   help="also time torch.compile (Inductor) beside eager; its compile seconds are recorded")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for PyTorch and ORT")
    p.add_argument("--retime", action="store_true", help="time again even when nothing new was tuned")
    p.add_argument("--discard", nargs="+", default=[], metavar="KEY",
                   help="runs of --models to throw away before tuning, by key (e.g. evolutionary/N64/s0): "
                        "dropped from the JSON and the archive, their folder kept aside as <folder>.discarded-<time>; "
                        "those this invocation selects are tuned again from the start")
    p.add_argument("--load-wait", type=float, default=600.0, help="seconds to wait, before each tuning run with "
                   "kernels left to tune and before the timing, for other processes to leave the cores (default 600; "
                   "the load seen is recorded)")
    p.add_argument("--max-load", type=float, default=None,
                   help="cores other processes may keep busy before a run starts (default 0.5)")
    p.add_argument("--work-dir", default="logs/scratch/tuner_e2e", help="the runs' databases")
    p.add_argument("--out", default=None, help="JSON path (default logs/tuner_e2e_<target>[_<size>].json)")
    return p


def load_state(out: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The JSON so far, or a fresh state; SystemExit when it was made with settings that must not be mixed."""
    if not jsonfile.exists(out):
        return {"settings": settings, "models": {}, "cost": {}}
    state = jsonfile.read_json(out)
    fixed = ("target", "size", "op_filter", "trials_per_iter", "cost_model", "minutes")
    differ = [k for k in fixed if state.get("settings", {}).get(k) != settings.get(k)]
    if differ:
        raise SystemExit(f"{out} holds results made with other settings ({', '.join(differ)}: "
                         f"{[state.get('settings', {}).get(k) for k in differ]}, "
                         f"now {[settings.get(k) for k in differ]}); "
                         "rerun with the same ones or give another --out")
    state["settings"].update(settings)
    return state


def _save(out: Path, state: dict[str, Any]) -> None:
    entries = state["models"].values()
    tuning = sum(r.get("tuning_s", 0.0) for e in entries for r in e.get("runs", {}).values())
    state["cost"] = {"tuning_s": round(tuning, 1),
                     "timing_s": round(sum(e.get("timing", {}).get("seconds", 0.0) for e in entries), 1)}
    state["date"] = datetime.now(timezone.utc).isoformat()
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(out)


def record_counts(folder: Path) -> tuple[int, int]:
    """(records the run measured, records a schedule library gave it unmeasured) in its database."""
    tuning = TuningDatabase(folder)
    from_library = sum(tuning.read_from_library().values())
    return tuning.record_count() - from_library, from_library


def run_label(arm: str, seed: int, seeds: int) -> str:
    """A run's name in the tables: its arm, and its seed when the invocation runs several."""
    return arm if seeds == 1 else f"{arm} s{seed}"


def tune_run(model: models.Model, target, folder: Path, arm: str, trials: int, seed: int, args,
             previous: dict[str, Any] | None, after_batch: Callable[[], object] | None = None,
             on_interrupt: Callable[[dict[str, Any]], None] | None = None) -> tuple[Any, dict[str, Any], bool]:
    """Tune one (model, arm, N, seed) into `folder`, resuming; returns its database, its JSON entry (sittings
    added up, and the load seen when it waited for quiet cores before tuning) and whether anything was tuned now.
    A run whose kernels are all tuned already neither waits nor tunes. `after_batch` is called after every
    measured batch (the benchmark archives the batch's records there). When Ctrl-C, SIGTERM or an error stops it
    part-way, `on_interrupt` gets the entry with this sitting's seconds added (and an error's line under "crashed")
    before the exception is raised on."""
    load: dict[str, Any] = {}
    started: list[float] = []

    def wait_for_quiet_cores() -> None:  # shared cores skew measurements
        load.update(bench_runs.wait_for_cores(args.load_wait, args.max_load))
        started.append(time.perf_counter())

    strategy, pretrained = {**ARMS, **BUDGET_ARMS}[arm][:2]
    # The plain arms tune with MetaSchedule's own XGBModel, whatever model tvm-rl ships, so that the pre-trained
    # arms (what `tvm-rl optimize` runs by default where a model is shipped) are compared with it.
    cost_model = from_spec(args.cost_model, seed, target.kind.name) if pretrained else "xgb"
    entry = dict(previous or {"arm": arm, "trials": trials, "seed": seed, "work_dir": str(folder), "tuning_s": 0.0,
                              "sittings": 0, "failures": 0})
    entry["label"] = run_label(arm, seed, args.seeds)

    def add_sitting(seconds: float) -> None:
        entry.update(load=load, tuning_s=round(entry["tuning_s"] + seconds, 1), sittings=entry["sittings"] + 1,
                     measurements=record_counts(folder)[0])

    minutes = None
    if arm in BUDGET_ARMS and args.minutes is not None:  # what the earlier sittings left of the time budget
        minutes = args.minutes - entry["tuning_s"] / 60
        if minutes <= 0:
            return TuningDatabase(folder).open(), entry, False
    try:
        if arm in BUDGET_ARMS:  # N is the whole model's measurements
            mod = arm_module(arm, model.mod, target, folder, seed)
            database, report = tune_budget(arm, mod, target, folder, trials, seed, TRIALS_PER_ITER, cost_model,
                                           args.op_filter, wait_for_quiet_cores, after_batch, args.library,
                                           args.gain_model, minutes)
        else:
            database, report = tune_model(model.mod, target, folder, trials_per_kernel=trials,
                                          trials_per_iter=TRIALS_PER_ITER, strategy=strategy, seed=seed,
                                          op_filter=args.op_filter, cost_model=cost_model,
                                          before_tuning=wait_for_quiet_cores, after_batch=after_batch)
    except BaseException as err:
        # A sitting cut short (Ctrl-C, a kill, or a crash) still spent its seconds: without them a run that took
        # several sittings would look cheaper than it was.
        if started and on_interrupt is not None:
            add_sitting(time.perf_counter() - started[0])
            entry["interrupted"] = True
            if not isinstance(err, KeyboardInterrupt):
                entry["crashed"] = f"{type(err).__name__}: {err}"[:300]
            on_interrupt(entry)
        raise
    entry.pop("interrupted", None)
    entry.pop("crashed", None)
    # Kernels with measured records, from the database: a budget run's report names every kernel it could have
    # tuned, and a resumed run with nothing left to tune names none.
    entry.update(kernels=report.tasks, tuned_kernels=len(records_per_workload(database)))
    if report.tuned:
        add_sitting(report.seconds)
        entry["failures"] += sum(report.failures.values())
    entry["measurements"], library_records = record_counts(folder)
    if library_records:
        entry["from_library"] = library_records
    if report.search_errors:  # kernels whose search failed and ended early (kept over sittings)
        entry["search_errors"] = {**entry.get("search_errors", {}), **report.search_errors}
    return database, entry, bool(report.tuned)


def parse_key(key: str) -> tuple[str, int, int]:
    """A run's key (`variant_key`) as (arm, trials, seed); SystemExit naming a malformed key or an unknown arm."""
    match = re.fullmatch(r"(.+)/N(\d+)/s(\d+)", key)
    if not match or match.group(1) not in {**ARMS, **BUDGET_ARMS}:
        raise SystemExit(f"--discard {key}: not a run key; a key is ARM/N<trials>/s<seed>, e.g. "
                         f"{variant_key(BASELINE_ARM, 64, 0)}, with ARM one of {', '.join({**ARMS, **BUDGET_ARMS})}")
    return match.group(1), int(match.group(2)), int(match.group(3))


def discard_runs(state: dict[str, Any], archive: Path, names: list[str], keys: list[str], work_dir: Path,
                 target_name: str, size: str) -> None:
    """Throw away runs `keys` of models `names`: out of the JSON (their timing too) and the archive, their folders
    moved aside, so that they are tuned again from the start (`e2e_archive.discard`)."""
    parsed = {key: parse_key(key) for key in keys}
    for name in names:
        entry = state["models"].get(name, {})
        for key, (arm, trials, seed) in parsed.items():
            run = entry.get("runs", {}).pop(key, None)
            entry.get("timing", {}).get("variants", {}).pop(key, None)
            folder = Path(run["work_dir"]) if run else run_dir(work_dir, target_name, size, name, arm, trials, seed)
            aside = e2e_archive.discard(archive, name, key, folder)
            print(f"[{name}] {key}: discarded" + (f"; its records moved to {aside}" if aside else "")
                  + ("" if run or aside else " (nothing was recorded for it)"), flush=True)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Tune, build, check and time every (model, arm, N, seed); print the tables, write the JSON and the PNG."""
    args = _parser(prog).parse_args(argv)
    arms = resolve_arms(args.arms, args.cost_model)
    if min(args.trials) < 1 or args.seeds < 1 or args.passes < 1:
        raise SystemExit("--trials, --seeds and --passes must be at least 1")
    unknown = [n for n in args.models if n not in HF_MODELS and n not in models.names()]
    if unknown:
        raise SystemExit(f"--models: unknown {', '.join(unknown)}; known: {' '.join([*models.names(), *HF_MODELS])}")
    try:
        target = measure.parse_target(args.target)
        check_local_device(target, "local")  # every candidate is measured here: say so before any set-up
    except TargetError as err:
        raise SystemExit(str(err)) from None
    name_of_target = target.kind.name
    out = Path(args.out) if args.out else default_out(name_of_target, args.size)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(args.work_dir) / "onnx"
    scratch.mkdir(parents=True, exist_ok=True)
    settings = {"target": str(target), "target_name": name_of_target, "size": args.size, "op_filter": args.op_filter,
                "trials_per_iter": TRIALS_PER_ITER, "cost_model": args.cost_model, "minutes": args.minutes,
                "threads": args.threads,
                "library": args.library, "gain_model": args.gain_model,
                "passes": args.passes, "machine": f"{platform.machine()} {os.cpu_count()} cores",
                "torch": torch.__version__,
                "command": " ".join([prog or "tuner_e2e", *(argv if argv is not None else sys.argv[1:])])}
    state = load_state(out, settings)
    archive = e2e_archive.archive_path(out)
    if args.discard:
        discard_runs(state, archive, args.models, args.discard, Path(args.work_dir), name_of_target, args.size)
        _save(out, state)
    try:
        return _tune_and_time(args, arms, target, out, state, archive, scratch, settings)
    except KeyboardInterrupt as err:  # Ctrl-C or kill: the records are archived, the JSON holds the seconds
        print(f"\ntuner_e2e: {str(err) or 'interrupted'}\nThe same command resumes from what is archived in "
              f"{archive}.", file=sys.stderr)
        return exit_code(err)


def _tune_and_time(args, arms: list[str], target, out: Path, state: dict[str, Any], archive: Path, scratch: Path,
                   settings: dict[str, Any]) -> int:
    name_of_target = target.kind.name
    for name in args.models:
        model = load_model(name, args.size)
        entry = state["models"].setdefault(name, {"runs": {}})
        databases, tuned_now = {}, False
        for trials in sorted(set(args.trials)):
            for arm in arms:
                for seed in range(args.seeds):
                    key = variant_key(arm, trials, seed)
                    folder = run_dir(Path(args.work_dir), name_of_target, args.size, name, arm, trials, seed)
                    if not (folder / RECORDS).is_file():
                        # Its folder is gone (another machine, a fresh clone): where the archive holds every record
                        # of the run, it is restored and resumed where it stopped (or, finished, only built).
                        restored = e2e_archive.restore_all(archive, name, key, folder)
                        if restored:
                            print(f"[{name}] {key}: its folder was gone; {restored} records restored from {archive}",
                                  flush=True)
                        elif key in entry["runs"]:
                            # Archived before every record was kept: built from its best records below, with the
                            # earlier invocations' runs, never tuned again under the same key, which would add a
                            # second run's seconds and records to the first's.
                            entry["runs"][key]["label"] = run_label(arm, seed, args.seeds)
                            print(f"[{name}] {key}: its folder is gone; built from its archived best records in "
                                  f"{archive}", flush=True)
                            continue
                    print(f"[{name}] tuning {key} into {folder} ...", flush=True)
                    records = e2e_archive.RunRecords(archive, name, key, folder)

                    def keep_sitting(run: dict[str, Any], key: str = key, runs: dict = entry["runs"]) -> None:
                        runs[key] = run
                        _save(out, state)

                    databases[key], entry["runs"][key], tuned = tune_run(model, target, folder, arm, trials, seed,
                                                                         args, entry["runs"].get(key), records.flush,
                                                                         keep_sitting)
                    tuned_now |= tuned
                    records.flush()
                    e2e_archive.add(archive, name, key, folder)
                    _save(out, state)
        # Runs of earlier invocations (other N or arms), and runs of this one whose folder is gone, are built from
        # their folders, or from the archive where a folder is gone, and timed with these.
        modules = {}
        for key, run in entry["runs"].items():
            modules[key] = arm_module(run["arm"], model.mod, target, Path(run["work_dir"]), run["seed"])
            if key not in databases:
                # Either may have been made before the archive kept it.
                e2e_archive.RunRecords(archive, name, key, Path(run["work_dir"])).flush()
                e2e_archive.add(archive, name, key, Path(run["work_dir"]))
                databases[key] = str(e2e_archive.database_for(archive, name, key, Path(run["work_dir"])))
        saved = entry.get("timing", {}).get("variants", {})
        if tuned_now or args.retime or set(saved) != {DEFAULT, TORCH, ORT, *([INDUCTOR] if args.inductor else []),
                                                      *databases}:
            load = bench_runs.wait_for_cores(args.load_wait, args.max_load)
            entry["timing"] = time_model(model, target, databases, args, scratch, modules)
            entry["timing"]["load"] = load
            _save(out, state)
        else:
            print(f"[{name}] nothing new tuned: timing kept from {out} (--retime to time again)")
        print(format_table(name, entry, settings), flush=True)
        entry["over_seeds"] = seed_summary(entry)
        if entry["over_seeds"]:
            print(format_seed_table(name, entry["over_seeds"]), flush=True)
            _save(out, state)
    plot(state, out.with_suffix(".png"))
    cost = state["cost"]
    print(f"\ncost so far: tuning {cost['tuning_s']:.0f} s, timing {cost['timing_s']:.0f} s; "
          f"wrote {out} and {out.with_suffix('.png')}")
    return 0


__all__ = ["ARMS", "MODELS", "default_out", "format_table", "interleave", "load_state", "main", "resolve_arms",
           "discard_runs", "parse_key", "run_dir", "table_rows", "tune_run", "variant_key"]
