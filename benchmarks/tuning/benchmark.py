"""The tuner benchmark: trials to a fixed target and best re-timed latency, per search arm, on fixed tasks.

Per (task, seed), a first batch of random schedules is measured once and copied into every arm's database, so
every arm starts from the same measurements (and counts them in its trials). Each (task, arm, seed) is then one
tuning run of N trials with the LLVM runner timing every candidate `repeat` times with the cache flushed (the
curves take the median). At the end, every best-so-far improver of every run is built and timed again,
round-robin over the runs in several passes (`runs.retime_task`), and the curves are of those re-timed
latencies. A task's target is the best re-timed latency over all arms and seeds x 1.05; trials-to-target is
censored at N. Against evolutionary search (same task and seed) the table gives geomean ratios with
task-clustered bootstrap CIs (`stats`). Before each run the load is checked (and recorded); results are
appended to the JSON after each run, and a rerun skips finished runs and reuses the shared batches.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.common import jsonfile
from tvm_rl.errors import exit_code
from tvm_rl.interrupt import interruptible
from tvm_rl.measure import host_cpu_target, parse_target
from tvm_rl.tune.intrin import preload_tensor_intrinsics
from tvm_rl.tune.tophub import TophubTask

from . import pool as bench_pool
from . import runs as bench_runs
from .archive import Archive, archive_path
from .arms import (
    ARMS,
    EXTRA_ARMS,
    QUICK_TASKS,
    TASKS,
    Arm,
    default_arm,
    make_arms,
    pretraining_overlap,
    resolve_tasks,
    transformer_tasks,
)
from .report import format_cost, format_pairs, format_peek, format_table, format_tasks, plot_paired, plot_reach
from .stats import TARGET_SLACK, ablation_pairs, reach_fractions, summarise, task_targets

T = TypeVar("T")

FORMAT, VERSION = "tvm-rl tuner benchmark", 2


def _parser(prog: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    p.add_argument("--target", default=None, help="llvm (this CPU, the default), or a target JSON")
    p.add_argument("--trials", type=int, nargs="+", default=None,
                   help="budgets N (default 64 128; each run measures the largest, the shared first batch counts)")
    p.add_argument("--per-iter", type=int, default=8, help="candidates measured per round, and the shared batch")
    p.add_argument("--seeds", type=int, default=9, help="seeds per task and arm")
    p.add_argument("--first-seed", type=int, default=0,
                   help="the first of the seeds (a block on another CPU given seeds no other block ran starts its "
                        "runs from other shared first batches)")
    p.add_argument("--arms", "--strategies", dest="arms", nargs="*", default=None,
                   help=f"arms to run (default: {' '.join(ARMS)}; also {' '.join(EXTRA_ARMS)})")
    p.add_argument("--tasks", nargs="*", default=None, help="task names (default: the eight of TASKS)")
    p.add_argument("--cost-model-file", default=None,
                   help="pre-trained cost model for the *-pretrained arms (default: the one shipped for the target)")
    p.add_argument("--policy", default=None,
                   help="saved PPOAgent for the ppo-pretrained arm (default: the one shipped for the target)")
    p.add_argument("--walks", type=int, default=None, help="PPO walks per round (default: PPOConfig's)")
    p.add_argument("--evaluations", type=int, default=None,
                   help="per round: PPO's draft-model ratings per space, annealing's cost-model ratings")
    p.add_argument("--repeat", type=int, default=7, help="timings per candidate (the median is used)")
    p.add_argument("--number", type=int, default=1, help="calls per timing")
    p.add_argument("--no-cache-flush", action="store_true", help="time with warm caches")
    p.add_argument("--retime-passes", type=int, default=5, help="re-timing passes over every improver")
    p.add_argument("--max-load", type=float, default=None,
                   help="cores other processes may keep busy before a run starts (default 0.5)")
    p.add_argument("--load-wait", type=float, default=None,
                   help="seconds to wait for it at most, per run (default 600; 0 with --quick: a check only records "
                        "the load)")
    p.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                   help="start no new run after this many seconds (then re-time and report; the same command "
                        "resumes the rest): for a GPU lease or a session with an end")
    p.add_argument("--report", action="store_true", help="no new runs: re-time what needs it, print the tables")
    p.add_argument("--peek", action="store_true",
                   help="only print a provisional table of the --out JSON as it stands, from tuning-time latencies "
                        "(reads it, times and writes nothing: safe beside a running benchmark)")
    p.add_argument("--pool", nargs="+", metavar="JSON", default=None,
                   help="no new runs: one reading pooled over several benchmark JSONs, each measured on its own CPU "
                        "(pairs and targets stay within a file; writes --out, default logs/tuner_pooled.json)")
    p.add_argument("--quick", action="store_true", help="3 small tasks, 2 seeds, N = 16: a check, not a result")
    p.add_argument("--tophub-dir", default=None)
    p.add_argument("--out", default=None, help="JSON path (default logs/tuner_<target>[_quick].json)")
    p.add_argument("--work-dir", default=None, help="runs' databases (default <out dir>/scratch/<out name>_runs)")
    return p


def planned_runs(seeds: Iterable[int], tasks: list[str], arms: list[Arm], finished: list[dict[str, Any]]
                 ) -> list[tuple[int, str, Arm]]:
    """The (seed, task, arm) runs still to make, seed by seed (so a stopped sitting leaves whole seeds behind it)."""
    done = {(r["task"], r["arm"], r["seed"]) for r in finished}
    return [(seed, task, arm) for seed in seeds for task in tasks for arm in arms if (task, arm.name, seed) not in done]


def until_deadline(todo: list[T], seconds: float | None, clock: Callable[[], float] = time.monotonic) -> Iterator[T]:
    """The items of `todo` while fewer than `seconds` have passed since the first was asked for (all when None).
    Checked before each item: a run already begun is finished, so a stop loses no measured work."""
    start = clock()
    for i, item in enumerate(todo):
        if seconds is not None and clock() - start >= seconds:
            print(f"--stop-after {seconds:g}: {len(todo) - i} of {len(todo)} runs left for the same command to "
                  "resume; re-timing the finished ones", flush=True)
            return
        yield item


def _load_state(out: Path, settings: dict[str, Any], update: bool = True) -> dict[str, Any]:
    """The JSON so far (a fresh state when there is none); SystemExit when it holds another format or runs made
    with other measuring settings, which must not be mixed. `update` records this invocation's other settings
    (arms, seeds, ...); a report (`update=False`) leaves the ones of the runs as they are, and reads runs made on
    another CPU when all of them are re-timed (it has nothing left to measure)."""
    if not jsonfile.exists(out):
        return {"format": FORMAT, "version": VERSION, "settings": settings, "shared": {}, "runs": [],
                "retime": {}, "cost": {}}
    state = jsonfile.read_json(out)
    if state.get("format") != FORMAT:
        raise SystemExit(f"{out} holds results of the old tuner benchmark (or another file); move it aside (e.g. "
                         f"to {out.with_name(out.stem + '_v1.json')}) or give another --out")
    fixed = ("target", "run_trials", "per_iter", "measuring")
    differ = [k for k in fixed if state["settings"].get(k) != settings[k]]
    unretimed = sum(r.get("retimed") is None for r in state["runs"])
    if differ == ["target"] and not update and not unretimed:
        return state  # a report of runs all re-timed measures nothing, so any machine can read it
    if differ:
        why = (f"; {unretimed} of its runs are not re-timed yet, which only its own CPU can do"
               if differ == ["target"] and not update else "")
        raise SystemExit(f"{out} holds runs made with other settings ({', '.join(differ)}: "
                         f"{[state['settings'].get(k) for k in differ]}, now {[settings[k] for k in differ]}){why}; "
                         "rerun with the same ones or give another --out")
    if update:
        state["settings"].update({k: v for k, v in settings.items() if k not in fixed})
    return state


def _save(out: Path, state: dict[str, Any]) -> None:
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(out)


def _path_or_none(path: Path | None) -> str | None:
    return str(path) if path is not None else None


def _tune_and_retime(args: argparse.Namespace, todo: list[tuple[int, str, Arm]], tasks: dict[str, TophubTask],
                     budgets: list[int], target: Any, measuring: bench_runs.Measuring, state: dict[str, Any],
                     archive: Archive, work_root: Path, save: Callable[[], None]) -> None:
    """Every run in `todo`, then re-timing of every task with an unre-timed run; `save()` after each."""
    cost = state["cost"]
    runner = builder = None
    for i, (seed, task, arm) in enumerate(until_deadline(todo, args.stop_after)):
        if runner is None:
            from tvm_rl.tune.tasks import shared_builder

            runner, builder = measuring.runner(target), shared_builder()
        key = f"{task}|{seed}"
        # An arm that picks its own first batch starts from an empty database: no shared batch to find or make.
        shared_dir = None if arm.own_first_batch else work_root / "shared" / f"{task}_s{seed}"
        if shared_dir is not None and key not in state["shared"]:
            bench_runs.wait_for_cores(args.load_wait, args.max_load)
            state["shared"][key] = bench_runs.shared_first_batch(tasks[task].mod(), task, seed, args.per_iter,
                                                                 target, shared_dir, runner, builder)
            cost["shared_seconds"] = cost.get("shared_seconds", 0.0) + state["shared"][key]["seconds"]
            archive.add_shared(key, shared_dir, bench_runs.SHARED_MARK)
        elif (shared_dir is not None and not (shared_dir / bench_runs.SHARED_MARK).is_file()
                and not archive.restore_shared(key, shared_dir)):
            raise SystemExit(f"the shared first batch of {task} seed {seed} is gone from {shared_dir}, and finished "
                             "runs started from it: restore the work dir (--work-dir) or start a new --out")
        load = bench_runs.wait_for_cores(args.load_wait, args.max_load)
        run = bench_runs.run_arm(tasks[task].mod(), task, arm.name, arm.strategy(seed), arm.cost_model(),
                                 arm.resumes, seed, budgets[-1], args.per_iter, target,
                                 work_root / "runs" / task / f"{arm.name}_s{seed}", shared_dir, runner, builder)
        run["load"] = {**load, "end": [round(x, 2) for x in os.getloadavg()]}
        state["runs"].append(run)
        archive.add_run(run)
        cost["load_wait_seconds"] = cost.get("load_wait_seconds", 0.0) + load["waited_seconds"]
        save()
        print(f"[{i + 1}/{len(todo)}] {task} {arm.name} seed {seed}: {run['trials']} trials ({run['shared']} shared), "
              f"best {bench_runs.best_tuning_us(run):.1f} us at tuning time, {run['wall_seconds']:.0f} s, other "
              f"processes {load['others_start']:.1f} cores{' (busy)' if load['busy'] else ''}", flush=True)
    for task in tasks:
        mine = [r for r in state["runs"] if r["task"] == task]
        if mine and any(r.get("retimed") is None for r in mine):
            bench_runs.wait_for_cores(args.load_wait, args.max_load)
            print(f"re-timing {task}: every improver of {len(mine)} runs, {args.retime_passes} passes", flush=True)
            info = bench_runs.retime_task(tasks[task].mod(), mine, target, measuring, args.retime_passes,
                                          archive=archive)
            state["retime"][task] = info
            cost["retime_seconds"] = cost.get("retime_seconds", 0.0) + info["seconds"]
            save()


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run (or resume) the benchmark, re-time, print the tables, write the JSON and the PNG."""
    args = _parser(prog).parse_args(argv)
    if args.load_wait is None:
        args.load_wait = 0.0 if args.quick else 600.0
    if args.quick:
        args.trials = args.trials or [16]
        args.seeds = min(args.seeds, 2)
        args.tasks = args.tasks or QUICK_TASKS
    budgets = sorted(set(args.trials or [64, 128]))
    if args.first_seed < 0:
        raise SystemExit(f"--first-seed {args.first_seed} must be 0 or more")
    if args.per_iter > budgets[0] or args.per_iter < 1:
        raise SystemExit(f"--per-iter {args.per_iter} (also the shared first batch) must be between 1 and the "
                         f"smallest budget, {budgets[0]}")
    if args.pool:
        try:
            print(bench_pool.report(args.pool, Path(args.out or "logs/tuner_pooled.json"), args.trials))
        except ValueError as err:
            raise SystemExit(f"--pool: {err}") from None
        return 0
    target = host_cpu_target() if args.target in (None, "llvm") else parse_target(args.target)
    from tvm_rl.tune.agent import shipped_policy
    from tvm_rl.tune.cost_model import shipped_model

    args.cost_model_file = args.cost_model_file or _path_or_none(shipped_model(target.kind.name))
    args.policy = args.policy or _path_or_none(shipped_policy(target.kind.name))
    out = Path(args.out or f"logs/tuner_{target.kind.name}{'_quick' if args.quick else ''}.json")
    if args.peek:
        if not jsonfile.exists(out):
            raise SystemExit(f"--peek: no benchmark results at {out} (give the run's --out)")
        print(format_peek(jsonfile.read_json(out)))
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    work_root = Path(args.work_dir or out.parent / "scratch" / f"{out.stem}_runs")
    measuring = bench_runs.Measuring(repeat=args.repeat, number=args.number, cache_flush=not args.no_cache_flush)
    tasks = resolve_tasks(args.tasks or TASKS, args.tophub_dir)
    available, skipped = make_arms(args)
    wanted = args.arms or ARMS
    unknown = [a for a in wanted if a not in available and a not in skipped]
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; choose from {', '.join(ARMS + EXTRA_ARMS)}")
    for name in wanted:
        if name in skipped:
            print(f"arm {name} skipped: {skipped[name]}")
    arms = [available[a] for a in wanted if a in available]
    seen = pretraining_overlap(args.cost_model_file, tasks) if args.cost_model_file else []
    if seen:
        print(f"note: the pre-trained model was trained on {', '.join(seen)}: those tasks are not unseen")
    settings = {"target": str(target), "run_trials": budgets[-1], "trials": budgets, "per_iter": args.per_iter,
                "measuring": measuring.as_dict(), "seeds": args.seeds, "first_seed": args.first_seed,
                "tasks": list(tasks),
                "arms": [a.name for a in arms], "skipped_arms": {a: skipped[a] for a in wanted if a in skipped},
                "cost_model_file": args.cost_model_file, "policy": args.policy, "walks": args.walks,
                "evaluations": args.evaluations, "seen_in_pretraining": seen, "retime_passes": args.retime_passes,
                "target_slack": TARGET_SLACK, "cost_model": "XGBModel(num_warmup_samples=0), or the pre-trained "
                "model for *-pretrained arms; MetaSchedule strategies' model is first trained on the shared batch"}
    state = _load_state(out, settings, update=not args.report)
    cost = state.setdefault("cost", {})
    clock = [time.perf_counter()]

    def charge() -> None:
        # Charged before every save, so a run stopped part-way (Ctrl-C, a kill, a lease's end) keeps what it spent.
        now = time.perf_counter()
        cost["total_seconds"] = round(cost.get("total_seconds", 0.0) + now - clock[0], 1)
        clock[0] = now

    def save() -> None:
        charge()
        _save(out, state)

    preload_tensor_intrinsics()
    archive = Archive.open(archive_path(out))
    if not args.report:  # results made before the archive existed, while their work dir is still here
        archive.backfill(state, work_root / "shared", bench_runs.SHARED_MARK)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    todo = planned_runs(seeds, list(tasks), arms, state["runs"]) if not args.report else []
    try:
        with interruptible(lambda: "stopped"):
            _tune_and_retime(args, todo, tasks, budgets, target, measuring, state, archive, work_root, save)
    except KeyboardInterrupt as err:
        # Ctrl-C or kill: the cut run's seconds were spent too. Its folder is cleared when the same command resumes.
        cost["interruptions"] = cost.get("interruptions", 0) + 1
        save()
        print(f"\ntuner benchmark: {str(err) or 'interrupted'}; {len(state['runs'])} finished runs are kept in {out}, "
              "and the same command resumes after them.", file=sys.stderr, flush=True)
        return exit_code(err)
    runs = [r for r in state["runs"] if r["task"] in tasks]
    rows = summarise(runs, budgets)
    by_arm: dict[str, float] = {}
    for r in state["runs"]:
        by_arm[r["arm"]] = by_arm.get(r["arm"], 0.0) + r["wall_seconds"]
    cost["run_seconds_by_arm"] = {a: round(s, 1) for a, s in by_arm.items()}
    if not args.report:  # a report's reading costs nothing worth counting; its re-timing was charged above
        charge()
    pairs = [p for n in budgets for p in ablation_pairs(runs, n)]
    state.update(summary=rows, targets=task_targets(runs), pairs=pairs)
    _save(out, state)
    print(format_table(rows, budgets))
    for n in budgets:
        print(f"\nablation pairs at N = {n}, same task and seed:\n"
              + format_pairs([p for p in pairs if p["trials"] == n]))
    print(f"\nmedian re-timed best latency at N = {budgets[-1]} (us):\n" + format_tasks(runs, budgets[-1]))
    print("\n" + format_cost(cost, by_arm))
    png = out.with_suffix(".png")
    plot_reach(runs, budgets[-1], png, marks=budgets + [max(1, b // 5) for b in budgets], shared=args.per_iter)
    paired_png = out.with_name(out.stem + "_paired.png")
    paired = plot_paired(runs, budgets[-1], paired_png, shared=args.per_iter)
    print(f"wrote {out}, {png}" + (f" and {paired_png}" if paired else " (no arms to pair, so no paired plot)"))
    return 0


__all__ = ["ARMS", "EXTRA_ARMS", "QUICK_TASKS", "TASKS", "Arm", "default_arm", "format_cost", "format_table",
           "format_tasks", "main", "make_arms", "planned_runs", "plot_reach", "pretraining_overlap", "reach_fractions",
           "resolve_tasks", "summarise", "transformer_tasks", "until_deadline"]
