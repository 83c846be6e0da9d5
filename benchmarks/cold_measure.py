"""Which measurement predicts a kernel's time inside the model: warm (MetaSchedule's default) or cold caches?

    python -m benchmarks.cold_measure --model resnet18 --graph RUN/graph.json --database RUN --repeats 3 \
        --runs 20 --out logs/cold_measure_resnet18_llvm.json

For each kernel of the graph with a record in the tuning folder, its best record is built again and measured
`--repeats` times by MetaSchedule's LocalRunner with its defaults (calls repeated for 100 ms, so the weights stay
cached: how `tvm-rl optimize` measured until now) and by `tvm_rl.tune.runner.cold_runner` (single calls, every
argument but the first flushed from the cache before each), interleaved; then the model is built from the folder
and each kernel timed where it runs, inside the model (`kernel_times`, `--runs` instrumented runs). Prints per kernel
its constant bytes, the three times and the model's over each measurement; writes the JSON.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import tvm
from tvm.s_tir import meta_schedule as ms

from benchmarks.e2e.hf import load_model
from benchmarks.kernel_times import kernel_times
from benchmarks.remeasure_best import remeasure
from tvm_rl import measure
from tvm_rl.database import TuningDatabase
from tvm_rl.tune import extract_tasks
from tvm_rl.tune.runner import cold_runner


def argument_bytes(mod: tvm.IRModule) -> int:
    """Bytes of a kernel's arguments other than its first (its input activation) and last (its output)."""
    func = next(iter(mod.functions.values()))
    infos = list(ms.arg_info.ArgInfo.from_prim_func(func))[1:-1]
    return sum(math.prod(int(d) for d in info.shape) * tvm.runtime.DataType(info.dtype).bits // 8 for info in infos)


def in_model(times: dict[str, dict[str, float]], name: str) -> float | None:
    """Milliseconds per call of kernel `name` in `kernel_times`' result (its prepacked variant where the build
    split one off), or None if the model never called it."""
    for symbol in (name, f"{name}_prepacked"):
        if symbol in times and times[symbol]["calls"]:
            return times[symbol]["ms"] / times[symbol]["calls"]
    return None


def rows_for(tasks, times: dict[str, list[list[float]]], model: dict[str, dict[str, float]]) -> list[dict]:
    """One row per kernel: its bytes, calls, warm / cold / in-model milliseconds (medians) and the ratios."""
    rows = []
    for i, (task, _) in enumerate(tasks):
        warm = statistics.median(times["warm"][i]) * 1e3
        cold = statistics.median(times["cold"][i]) * 1e3
        ms_in_model = in_model(model, task.task_name)
        rows.append({"kernel": task.task_name, "calls": int(task.weight),
                     "const_mb": argument_bytes(task.dispatched[0]) / 2**20,
                     "warm_ms": warm, "cold_ms": cold, "model_ms": ms_in_model,
                     "model_over_warm": ms_in_model / warm if ms_in_model else None,
                     "model_over_cold": ms_in_model / cold if ms_in_model else None})
    return rows


def summary(rows: list[dict]) -> dict[str, float]:
    """Whole-model sums (time x calls) of each measurement, and the median absolute log error of each as a
    predictor of the in-model time."""
    timed = [r for r in rows if r["model_ms"]]
    out = {f"{k}_total_ms": sum(r[f"{k}_ms"] * r["calls"] for r in timed) for k in ("warm", "cold", "model")}
    for k in ("warm", "cold"):
        out[f"{k}_median_abs_log_error"] = statistics.median(abs(math.log(r["model_ms"] / r[f"{k}_ms"])) for r in timed)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a zoo model or one of benchmarks/e2e/hf.py's")
    ap.add_argument("--size", default="full")
    ap.add_argument("--graph", default=None, help="the module the folder was tuned for (a budget run's graph.json)")
    ap.add_argument("--database", required=True, help="the tuning folder")
    ap.add_argument("--repeats", type=int, default=3, help="measurements per kernel and runner, interleaved")
    ap.add_argument("--runs", type=int, default=20, help="instrumented model runs")
    ap.add_argument("--out", default=None, help="JSON path (default: print only)")
    args = ap.parse_args(argv)
    target = measure.parse_target("llvm")
    model = load_model(args.model, args.size)
    mod = tvm.ir.load_json(Path(args.graph).read_text()) if args.graph else model.mod
    database = TuningDatabase(args.database).open()
    tasks = []
    for task in extract_tasks(mod, target):
        top = database.get_top_k(database.commit_workload(task.dispatched[0]), 1)
        if top:
            tasks.append((task, top[0]))
    if not tasks:
        raise SystemExit(f"{args.database} holds no record of the graph's kernels")
    runners: dict[str, ms.Runner] = {"warm": ms.runner.LocalRunner(), "cold": cold_runner(target)}
    times = remeasure([record for _, record in tasks], target, args.repeats, runners)
    model_times = kernel_times(mod, model.inputs, target, database, args.runs)
    rows = sorted(rows_for(tasks, times, model_times), key=lambda r: -(r["model_ms"] or 0) * r["calls"])
    print(f"{'kernel':44s}{'calls':>6s}{'const MB':>9s}{'warm ms':>9s}{'cold ms':>9s}{'model ms':>10s}"
          f"{'model/warm':>11s}{'model/cold':>11s}")
    for r in rows:
        model_ms = f"{r['model_ms']:10.3f}" if r["model_ms"] else f"{'-':>10s}"
        ratios = (f"{r['model_over_warm']:10.2f}x{r['model_over_cold']:10.2f}x" if r["model_ms"] else "")
        print(f"{r['kernel'][:43]:44s}{r['calls']:6d}{r['const_mb']:9.2f}{r['warm_ms']:9.3f}{r['cold_ms']:9.3f}"
              f"{model_ms}{ratios}")
    total = summary(rows)
    print(f"whole model (time x calls): warm {total['warm_total_ms']:.2f} ms, cold {total['cold_total_ms']:.2f} ms, "
          f"in the model {total['model_total_ms']:.2f} ms; median |log(model / measured)|: warm "
          f"{total['warm_median_abs_log_error']:.3f}, cold {total['cold_median_abs_log_error']:.3f}")
    if args.out:
        command = ["python -m benchmarks.cold_measure", *(argv if argv is not None else sys.argv[1:])]
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"model": args.model, "graph": args.graph, "database": args.database,
                                              "target": str(target), "repeats": args.repeats, "runs": args.runs,
                                              "command": " ".join(command), "summary": total, "kernels": rows},
                                             indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
