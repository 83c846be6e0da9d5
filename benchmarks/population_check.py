"""Does evolutionary search need its full population when a batch measures only a few candidates?

    python -m benchmarks.population_check                       # 3 shapes x 3 seeds x populations 512, 128
    python -m benchmarks.population_check --populations 512 256 --per-iter 4

Evolutionary search samples, mutates and rates `population` schedules each round, whatever the batch: at 2
measurements a batch that is most of a tuning call's time on a 2-core CPU. For each shape (`benchmarks.kernels.
workloads`), seed and population this tunes the one kernel with `tvm_rl.tune.tune_workloads` (the shipped
pre-trained cost model, `--trials` measurements in batches of `--per-iter`, a fresh database each) and keeps the
best GFLOP/s after every batch (the records' own times) and the call's seconds. The populations of one shape and
seed run back to back, so the machine's drift touches them alike. Resumable: finished runs are kept in --out
and skipped.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.kernels.workloads import parse_shape, relax_module
from tvm_rl.database import TuningDatabase, record_seconds
from tvm_rl.tune import extract_tasks, tune_workloads
from tvm_rl.tune.search_strategy import evolutionary

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ("conv:56x56x64x64", "conv:14x14x256x256", "gemm:128x768x768")


def running_best_gflops(work: str, flops: float) -> list[float]:
    """Best GFLOP/s after each record, in the order the records were measured (failed ones count, at 0)."""
    best, out = 0.0, []
    for secs in TuningDatabase(work).run_seconds():
        seconds = record_seconds(secs)
        if seconds is not None:
            best = max(best, flops / seconds / 1e9)
        out.append(best)
    return out


def run_one(shape_text: str, seed: int, population: int, trials: int, per_iter: int, target: str) -> dict:
    """Tune one shape's kernel from scratch; its curve and seconds."""
    shape = parse_shape(shape_text)
    tasks = extract_tasks(relax_module(shape), target)
    workloads = [(t.task_name, t.dispatched[0], float(t.weight)) for t in tasks]
    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        tune_workloads(workloads, target, work, trials_per_kernel=trials, trials_per_iter=per_iter,
                                     strategy=evolutionary(seed, population=population), seed=seed)
        seconds = time.perf_counter() - start
        curve = running_best_gflops(work, shape.flops)
    return {"shape": shape_text, "seed": seed, "population": population, "trials": trials, "per_iter": per_iter,
            "seconds": round(seconds, 1), "best_gflops": [round(v, 2) for v in curve]}


def table(runs: list[dict]) -> str:
    """Per shape and population: median best GFLOP/s over seeds at the end, each seed's, and median seconds."""
    lines = ["| shape | population | best GFLOP/s (median) | per seed | seconds (median) |", "|---|---|---|---|---|"]
    keys = sorted({(r["shape"], r["population"]) for r in runs}, key=lambda k: (k[0], -k[1]))
    for shape, population in keys:
        mine = sorted((r for r in runs if r["shape"] == shape and r["population"] == population),
                      key=lambda r: r["seed"])
        ends = [r["best_gflops"][-1] if r["best_gflops"] else 0.0 for r in mine]
        lines.append(f"| {shape} | {population} | {statistics.median(ends):.1f} | "
                     f"{' / '.join(f'{v:.1f}' for v in ends)} | "
                     f"{statistics.median(r['seconds'] for r in mine):.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--populations", type=int, nargs="+", default=[512, 128])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--per-iter", type=int, default=2)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "population_check.json")
    args = parser.parse_args(argv)
    runs = json.loads(args.out.read_text())["runs"] if args.out.exists() else []
    done = {(r["shape"], r["seed"], r["population"], r["trials"], r["per_iter"]) for r in runs}
    for seed in args.seeds:  # seed-major: a shortened run still covers every shape
        for shape in args.shapes:
            for population in args.populations:
                if (shape, seed, population, args.trials, args.per_iter) in done:
                    continue
                run = run_one(shape, seed, population, args.trials, args.per_iter, args.target)
                runs.append(run)
                print(json.dumps(run), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({"command": "python -m benchmarks.population_check",
                                                "runs": runs}, indent=1) + "\n")
    print(table([r for r in runs if r["trials"] == args.trials and r["per_iter"] == args.per_iter]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
