"""Build a model from each kernel's best record by re-measured median instead of by its one tuning-time measurement.

    python -m benchmarks.retime_top --model resnet18 --size full --top 4 --repeats 5 --min-ms 0.5 \
        --work-dir tvm_rl_work/bench/tuner_budget_packed/llvm/full/resnet18/budget-ours_n128_s0

Tuning keeps the minimum of many single measurements, so a kernel's "best" record may be the one measured while the
machine was briefly fast. For each kernel whose best record took at least --min-ms, this measures its --top records
again --repeats times, interleaved over all of them (MetaSchedule's LocalRunner, as tuning measures), and writes a
database where those records carry their new times (lighter kernels keep their best record as it was). It builds
the model from the tuning folder and from that database, checks both against the model's reference outputs and
times them interleaved: what choosing by re-measured median buys, and what its measurements cost.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from benchmarks.remeasure_best import remeasure
from benchmarks.stage_ablation import time_builds
from tvm_rl import measure, models
from tvm_rl.database import TuningDatabase, record_seconds


def retimed_database(source: ms.Database, out: Path, top: int, repeats: int, min_ms: float, target) -> dict:
    """Write `out`: each heavy workload's `top` records with re-measured times, every other workload's best as it
    was. Returns what was measured (per workload: recorded and re-measured milliseconds)."""
    workloads = {}
    for record in source.get_all_tuning_records():
        workloads.setdefault(tvm_ffi.structural_hash(record.workload.mod), record.workload)
    keep, heavy = [], []
    for workload in workloads.values():
        best = source.get_top_k(workload, top)
        if not best:
            continue
        if record_seconds(best[0].run_secs) * 1e3 >= min_ms:
            heavy.extend(best)
        else:
            keep.append(best[0])
    start = time.monotonic()
    times = remeasure(heavy, target, repeats)["local"]
    seconds = time.monotonic() - start
    database = TuningDatabase(out).open()
    report: dict[str, list] = {}
    for record in keep:
        database.commit_tuning_record(ms.database.TuningRecord(
            record.trace, database.commit_workload(record.workload.mod), record.run_secs, record.target,
            record.args_info))
    for record, measured in zip(heavy, times):
        ok = [t for t in measured if t == t]  # a re-measurement that failed is NaN
        if not ok:
            continue
        database.commit_tuning_record(ms.database.TuningRecord(
            record.trace, database.commit_workload(record.workload.mod),
            [statistics.median(ok)] * len(ok), record.target, record.args_info))
        key = str(tvm_ffi.structural_hash(record.workload.mod))
        report.setdefault(key, []).append({"recorded_ms": record_seconds(record.run_secs) * 1e3,
                                           "median_ms": statistics.median(ok) * 1e3})
    return {"kernels": report, "measurements": len(heavy) * repeats, "seconds": round(seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", default="full")
    parser.add_argument("--work-dir", type=Path, required=True, help="a tuning folder")
    parser.add_argument("--top", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-ms", type=float, default=0.5)
    parser.add_argument("--repeat", type=int, default=30, help="interleaved rounds of the whole-model timing")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--out", type=Path, default=Path("logs/retime_top.json"))
    args = parser.parse_args(argv)
    target = measure.parse_target(args.target)
    model = models.load(args.model, size=args.size)
    tuned = TuningDatabase(args.work_dir).open()
    with tempfile.TemporaryDirectory() as scratch:
        retimed = retimed_database(tuned, Path(scratch) / "retimed", args.top, args.repeats, args.min_ms, target)
        for key, rows in retimed["kernels"].items():
            chosen = min(rows, key=lambda r: r["median_ms"])
            print(f"kernel {key}: recorded best {rows[0]['recorded_ms']:.3f} ms, re-measured "
                  + ", ".join(f"{r['median_ms']:.3f}" for r in rows)
                  + f" -> record {rows.index(chosen) + 1} of {len(rows)}")
        timings = time_builds(model, target, {"as tuned": tuned, "re-measured": TuningDatabase(
            Path(scratch) / "retimed").open()}, args.repeat)
    rows = {name: round(t.median_ms, 3) for name, t in timings.items()}
    ratio = rows["as tuned"] / rows["re-measured"]
    print(f"{args.model} ({args.size}): as tuned {rows['as tuned']:.2f} ms, by re-measured median "
          f"{rows['re-measured']:.2f} ms: {ratio:.2f}x, for {retimed['measurements']} measurements "
          f"({retimed['seconds']:.0f} s; {args.repeat} interleaved rounds)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "python -m benchmarks.retime_top " + " ".join(argv or []),
                                    "model": args.model, "size": args.size, "work_dir": str(args.work_dir),
                                    "median_ms": rows, "speedup": round(ratio, 3), **retimed}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
