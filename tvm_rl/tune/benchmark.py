"""The tuner benchmark: best latency against measured trials for each search strategy on fixed TopHub tasks.

For every (task, strategy, seed) one `tune_tir` run with its own database; the curve (best-so-far latency after
each measured trial) is read back from the database, which MetaSchedule appends in measurement order. All
strategies get the same cost model (TVM's XGBModel, warm-up 0 so every one of them uses its predictions from
the first measured batch), the same builder and runner, the same trial budget and batch size. At the end, the
best schedule of every run is built and timed again in one pass (interleaved across strategies), so the table's
"best latency" comes from one machine state rather than from tuning runs hours apart.

Reported per strategy: (a) trials needed to reach the latency EvolutionarySearch reaches with the full budget,
(b) best latency at equal trials (geomean ratio against EvolutionarySearch), (c) wall-clock time including the
search's own overhead. Results are appended to the JSON as each run finishes; a rerun skips finished runs.
"""
from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from ..database import TuningDatabase
from ..measure import device_for, host_cpu_target, parse_target, random_args
from .agent import PPOConfig
from .cost_model import create as create_cost_model
from .intrin import preload_tensor_intrinsics
from .measure_callback.progress import ProgressLine
from .search_strategy.annealing import SimulatedAnnealing
from .search_strategy.ppo import PPOSearch
from .tasks import prepare_metaschedule_logging, shared_builder
from .tophub import TophubTask, load_tasks, tophub_dir

# Two of each kind, mid-sized so a small CPU tunes them in minutes: a 1x1 and a strided 3x3 convolution, two
# depthwise layers, a tall-skinny and a small batch matmul (all from TVM's TopHub CUDA log).
TASKS = ["conv2d_n1_c256_h28_w28_o256_k1_s1_p0", "conv2d_n1_c256_h7_w7_o512_k3_s2_p1",
         "depthwise_conv2d_n1_c144_h56_w56_o144_k3_s1_p1", "depthwise_conv2d_n1_c24_h112_w112_o24_k3_s2_p1",
         "batch_matmul_b1_m9216_n64_k64", "batch_matmul_b1_m128_n128_k20"]
QUICK_TASKS = [TASKS[0], TASKS[2], TASKS[4]]
BASELINE = "evolutionary"


def strategies(walks: int, evaluations: int) -> dict[str, Callable[[int], ms.SearchStrategy]]:
    """Strategy name -> factory(seed). PPO and annealing rate the same number of points per round."""
    return {
        "ppo": lambda seed: PPOSearch(config=PPOConfig(walks=walks, max_evaluations=evaluations, seed=seed),
                                      seed=seed),
        "ppo-topk": lambda seed: PPOSearch(config=PPOConfig(walks=walks, max_evaluations=evaluations, seed=seed),
                                           adaptive=False, seed=seed),
        "evolutionary": lambda seed: ms.search_strategy.EvolutionarySearch(),
        "annealing": lambda seed: SimulatedAnnealing(max_evaluations=evaluations, seed=seed),
        "random": lambda seed: ms.search_strategy.ReplayTrace(),
    }


def read_curve(work_dir: Path) -> list[float]:
    """Best-so-far latency (seconds) after each measured trial, from a run's database (inf until one works)."""
    best, out = math.inf, []
    for secs in TuningDatabase(work_dir).run_seconds():
        if secs:
            value = float(np.mean(secs))
            if value < 1e9:  # MetaSchedule records failed candidates with 1e10 s
                best = min(best, value)
        out.append(best)
    return out


def trials_to_reach(curve: list[float], latency: float) -> int | None:
    """First trial count at which the curve is at or below `latency` (None if never)."""
    for i, value in enumerate(curve):
        if value <= latency * (1 + 1e-9):
            return i + 1
    return None


def run_one(task: TophubTask, name: str, factory: Callable[[int], ms.SearchStrategy], seed: int, trials: int,
            per_iter: int, target, work_dir: Path) -> dict:
    """One tuning run; returns its curve, wall time and the strategy's own search time when it reports it."""
    strategy = factory(seed)
    prepare_metaschedule_logging()
    progress = ProgressLine(f"  [{name} seed {seed}] ", [task.name])
    start = time.perf_counter()
    ms.tune_tir(task.mod(), target, str(work_dir), max_trials_global=trials, num_trials_per_iter=per_iter,
                strategy=strategy, cost_model=create_cost_model("xgb"), seed=seed,
                builder=shared_builder(), runner="local",
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), progress])
    wall = time.perf_counter() - start
    log = getattr(getattr(strategy, "_inst", strategy), "log", None) or []
    return {"task": task.name, "strategy": name, "seed": seed, "curve": read_curve(work_dir), "wall_seconds": wall,
            "search_seconds": sum(r["search_seconds"] for r in log) if log else None,
            "rounds": len(log) if log else None, "work_dir": str(work_dir)}


def remeasure(task: TophubTask, work_dir: Path, target, repeat: int = 7) -> float | None:
    """Build the run's best schedule and time it again (median seconds), or None if it has none."""
    sch = ms.tir_integration.compile_tir(TuningDatabase(work_dir).open(), task.mod(), target)
    if sch is None:
        return None
    device = device_for(target)
    lib = tvm.compile(sch.mod, target=target).jit()
    args = random_args(sch.mod["main"], device, np.random.default_rng(0))
    evaluator = lib.time_evaluator("main", device, number=5, repeat=repeat, min_repeat_ms=20)
    return float(np.median(evaluator(*args).results))


def geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values)))) if values else math.nan


def summarise(runs: list[dict], trials: int) -> list[dict]:
    """One row per strategy: (a) trials to reach evolutionary's best at N, (b) best-latency ratio, (c) wall."""
    by = {(r["task"], r["strategy"], r["seed"]): r for r in runs}
    names = sorted({r["strategy"] for r in runs}, key=lambda n: (n != "ppo", n))
    tasks = sorted({r["task"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    rows = []
    for name in names:
        reach, ratios, walls, search, rates, hits, total = [], [], [], [], [], 0, 0
        for task in tasks:
            for seed in seeds:
                mine, base = by.get((task, name, seed)), by.get((task, BASELINE, seed))
                if mine is None or base is None or not base["curve"] or not mine["curve"]:
                    continue
                total += 1
                target = base["curve"][min(trials, len(base["curve"])) - 1]
                hit = trials_to_reach(mine["curve"], target)
                if hit is not None:
                    hits += 1
                    reach.append(hit)
                a, b = mine.get("remeasured"), base.get("remeasured")
                if a and b:
                    ratios.append(b / a)
                walls.append(mine["wall_seconds"])
                rates.append(60 * len(mine["curve"]) / mine["wall_seconds"])
                if mine.get("search_seconds") is not None:
                    search.append(mine["search_seconds"])
        rows.append({"strategy": name, "runs": total, "reached": hits,
                     "median_trials_to_reach": float(np.median(reach)) if reach else None,
                     "speedup_vs_evolutionary": geomean(ratios),
                     "median_wall_seconds": float(np.median(walls)) if walls else None,
                     "trials_per_minute": float(np.median(rates)) if rates else None,
                     "median_search_seconds": float(np.median(search)) if search else None})
    return rows


def format_table(rows: list[dict], trials: int) -> str:
    lines = [f"| strategy | runs | reached evolutionary's best at {trials} | median trials to reach | "
             "best-latency speedup vs evolutionary (geomean) | median wall s | median search s | trials/min |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def fmt(v, spec):
            return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)
        lines.append(f"| {r['strategy']} | {r['runs']} | {r['reached']}/{r['runs']} | "
                     f"{fmt(r['median_trials_to_reach'], '.0f')} | {fmt(r['speedup_vs_evolutionary'], '.3f')}x | "
                     f"{fmt(r['median_wall_seconds'], '.0f')} | {fmt(r['median_search_seconds'], '.0f')} | "
                     f"{fmt(r.get('trials_per_minute'), '.1f')} |")
    return "\n".join(lines)


def reach_fractions(runs: list[dict], trials: int) -> dict[str, list[float]]:
    """Measurements-to-target curves: per strategy, after each trial count t = 1..`trials`, the fraction of its
    (task, seed) runs whose best so far is already at or below evolutionary search's best after all `trials`."""
    by = {(r["task"], r["strategy"], r["seed"]): r for r in runs}
    out = {}
    for name in sorted({r["strategy"] for r in runs}):
        pairs = []
        for (task, strategy, seed), mine in by.items():
            base = by.get((task, BASELINE, seed))
            if strategy == name and base and base["curve"] and mine["curve"]:
                pairs.append((mine["curve"], base["curve"][min(trials, len(base["curve"])) - 1]))
        if pairs:
            out[name] = [sum(c[min(t, len(c)) - 1] <= goal * (1 + 1e-9) for c, goal in pairs) / len(pairs)
                         for t in range(1, trials + 1)]
    return out


def plot_reach(runs: list[dict], trials: int, path: Path) -> None:
    """The measurements-to-target curves of `reach_fractions`, one line per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for name, frac in reach_fractions(runs, trials).items():
        ax.step(np.arange(1, trials + 1), frac, where="post", label=name, lw=2 if name.startswith("ppo") else 1)
    ax.set_xlabel("measured trials")
    ax.set_ylabel(f"runs at evolutionary's best@{trials}")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(runs: list[dict], path: Path) -> None:
    """Best latency vs trials, median over seeds, one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({r["task"] for r in runs})
    names = sorted({r["strategy"] for r in runs})
    cols = min(3, len(tasks))
    rows_n = math.ceil(len(tasks) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(5 * cols, 3.6 * rows_n), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        for name in names:
            curves = [r["curve"] for r in runs if r["task"] == task and r["strategy"] == name and r["curve"]]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            med = np.median(np.array([c[:n] for c in curves]), axis=0) * 1e6
            ax.plot(np.arange(1, n + 1), np.where(np.isfinite(med), med, np.nan), label=name)
        ax.set_title(task, fontsize=8)
        ax.set_xlabel("measured trials")
        ax.set_ylabel("best latency (us)")
        ax.set_yscale("log")
    for ax in axes.flat[len(tasks):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def project_tophub() -> str | None:
    """The project's shared TopHub logs (../shared/tophub beside the checkout), when the environment names none."""
    import os

    shared = Path(__file__).resolve().parents[3] / "shared" / "tophub"
    return str(shared) if shared.is_dir() and not os.environ.get("TVM_RL_TOPHUB_DIR") else None


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--target", default=None, help="llvm (this CPU, the default), cuda, or a target JSON")
    parser.add_argument("--trials", type=int, default=48, help="measured trials per run (N)")
    parser.add_argument("--per-iter", type=int, default=8, help="candidates measured per round")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--walks", type=int, default=64, help="PPO walks per round")
    parser.add_argument("--evaluations", type=int, default=256,
                        help="points the cost model rates per round, for PPO and annealing alike")
    parser.add_argument("--strategies", nargs="*", default=None)
    parser.add_argument("--tasks", nargs="*", default=None, help="TopHub task names (default: the fixed six)")
    parser.add_argument("--report", action="store_true",
                        help="only summarise the JSON written so far (re-timing runs not yet re-timed)")
    parser.add_argument("--quick", action="store_true", help="3 tasks, 1 seed, 16 trials: a check, not a result")
    parser.add_argument("--tophub-dir", default=None)
    parser.add_argument("--out", default=None, help="JSON path (default logs/tuner_<target>[_quick].json)")
    parser.add_argument("--work-dir", default=None, help="where the runs' databases go (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.seeds = min(args.trials, 16), 1
        args.tasks = args.tasks or QUICK_TASKS
    target = host_cpu_target() if args.target in (None, "llvm") else parse_target(args.target)
    kind = target.kind.name
    out = Path(args.out or f"logs/tuner_{kind}{'_quick' if args.quick else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    work_root = Path(args.work_dir or tempfile.mkdtemp(prefix="tvm_rl_tuner_"))
    preload_tensor_intrinsics()

    wanted = args.tasks or TASKS
    all_tasks = {t.name: t for t in load_tasks(tophub_dir(args.tophub_dir or project_tophub()))}
    missing = [n for n in wanted if n not in all_tasks]
    if missing:
        raise SystemExit(f"unknown TopHub task(s) {missing}; names look like {next(iter(all_tasks))}")
    factories = strategies(args.walks, args.evaluations)
    names = args.strategies or list(factories)
    settings = {"target": str(target), "trials": args.trials, "per_iter": args.per_iter, "seeds": args.seeds,
                "walks": args.walks, "evaluations": args.evaluations, "tasks": wanted, "strategies": names,
                "cost_model": "XGBModel(num_warmup_samples=0) for every strategy", "runner": "LocalRunner defaults"}
    state = json.loads(out.read_text()) if out.exists() else {}
    runs = [r for r in state.get("runs", []) if state.get("settings", {}).get("trials") == args.trials]
    done = {(r["task"], r["strategy"], r["seed"]) for r in runs}
    started = time.perf_counter()
    for seed in range(0 if args.report else args.seeds):
        for task_name in wanted:
            for name in names:
                if (task_name, name, seed) in done:
                    continue
                work_dir = work_root / f"{task_name}_{name}_{seed}"
                print(f"[{task_name}] {name} seed {seed} ...", flush=True)
                runs.append(run_one(all_tasks[task_name], name, factories[name], seed, args.trials, args.per_iter,
                                    target, work_dir))
                out.write_text(json.dumps({"settings": settings, "runs": runs}, indent=1))
    # Re-time each run's best schedule in one pass, strategies interleaved.
    for r in runs:
        if "remeasured" not in r and Path(r["work_dir"]).exists():
            r["remeasured"] = remeasure(all_tasks[r["task"]], Path(r["work_dir"]), target)
    rows = summarise(runs, args.trials)
    table = format_table(rows, args.trials)
    print(table)
    state = {"settings": settings, "runs": runs, "summary": rows,
             "benchmark_seconds": time.perf_counter() - started + state.get("benchmark_seconds", 0.0)}
    out.write_text(json.dumps(state, indent=1))
    plot(runs, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


__all__ = ["TASKS", "main", "plot_reach", "project_tophub", "reach_fractions", "read_curve", "summarise",
           "trials_to_reach"]
