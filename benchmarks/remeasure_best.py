"""Re-measure a tuning database's best records now, beside the times recorded when they were tuned.

A record's time is what one measurement said while tuning; the best of a kernel's records is the minimum over
many such measurements, and a whole model built from them runs its kernels as fast as the machine is now. This
builds each kernel's best schedule again and measures it with MetaSchedule's own runner (its LocalRunner's
defaults, as tuning does) `--repeats` times, interleaved over the kernels, and prints recorded against now.

    python -m benchmarks.remeasure_best --min-ms 5 \
        --work-dir tvm_rl_work/bench/tuner_hf/llvm/full/hf-llama-block/budget-ours_n128_s0
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from tvm_rl import measure
from tvm_rl.database import TuningDatabase, record_seconds
from tvm_rl.graph.profiles import arg_shapes
from tvm_rl.tune.tasks import shared_builder


def best_records(database: ms.Database, min_ms: float) -> list[ms.database.TuningRecord]:
    """Each workload's best record, for the workloads whose best took at least `min_ms`."""
    workloads = {}
    for record in database.get_all_tuning_records():
        workloads.setdefault(tvm_ffi.structural_hash(record.workload.mod), record.workload)
    best = []
    for workload in workloads.values():
        top = database.get_top_k(workload, 1)
        seconds = record_seconds(top[0].run_secs) if top else None
        if seconds is not None and seconds * 1e3 >= min_ms:
            best.append(top[0])
    return best


def runner_inputs(records, target) -> list[ms.runner.RunnerInput]:
    """Each record's schedule built again, as a runner input."""
    builder, inputs = shared_builder(), []
    for record in records:
        sch = tvm.s_tir.Schedule(record.workload.mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        built = builder.build([ms.builder.BuilderInput(sch.mod, target)])[0]
        if built.error_msg:
            raise SystemExit(f"building a best record again failed: {built.error_msg}")
        device_type = "cpu" if target.kind.name == "llvm" else target.kind.name  # as measure.device_for does
        inputs.append(ms.runner.RunnerInput(built.artifact_path, device_type,
                                            ms.arg_info.ArgInfo.from_entry_func(sch.mod)))
    return inputs


def remeasure(records, target, repeats: int,
              runners: dict[str, ms.Runner] | None = None) -> dict[str, list[list[float]]]:
    """Seconds of each record's schedule, measured `repeats` times by each of `runners` (default: MetaSchedule's
    LocalRunner as "local"), interleaved over the records and the runners: {runner name: [times per record]}."""
    runners = runners or {"local": ms.runner.LocalRunner()}
    inputs = runner_inputs(records, target)
    times: dict[str, list[list[float]]] = {name: [[] for _ in records] for name in runners}
    for _ in range(repeats):
        for i, inp in enumerate(inputs):
            for name, runner in runners.items():
                result = runner.run([inp])[0].result()
                times[name][i].append(record_seconds(result.run_secs) if result.error_msg is None else float("nan"))
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work-dir", required=True, help="a tuning folder (its database_*.json)")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--min-ms", type=float, default=1.0, help="only kernels whose best record took this long")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="JSON path (default: print only)")
    args = ap.parse_args(argv)
    target = measure.parse_target(args.target)
    records = best_records(TuningDatabase(args.work_dir).open(), args.min_ms)
    times = remeasure(records, target, args.repeats)["local"]
    rows = []
    print(f"{'kernel arguments':<52}{'recorded ms':>12}{'now ms (median)':>17}{'now / recorded':>16}")
    for record, seconds in zip(records, times):
        shapes = arg_shapes(next(iter(record.workload.mod.functions.values())))
        recorded, now = record_seconds(record.run_secs) * 1e3, statistics.median(seconds) * 1e3
        rows.append({"args": shapes, "recorded_ms": recorded, "now_ms": [s * 1e3 for s in seconds]})
        print(f"{str(shapes):<52}{recorded:>12.2f}{now:>17.2f}{now / recorded:>15.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps({"work_dir": args.work_dir, "target": str(target),
                                              "command": " ".join(sys.argv), "kernels": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
