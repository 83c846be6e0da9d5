"""A two-stage run's build with and without its last stage: the same database cut after its first N records.

    python -m benchmarks.stage_ablation --model resnet18 --size full --first 96 --repeat 30 \
        --work-dir tvm_rl_work/bench/tuner_budget_packed/llvm/full/resnet18/budget-ours-droplet_n128_s0

A budget arm that ends with another stage (Droplet) spends its first N measurements as the first stage does and the
rest in the last stage; its records are in measurement order, so the first N are what the first stage alone left.
This builds the model from those N and from all the records, checks both against the model's reference outputs
and times them interleaved (`tvm_rl.measure.time_interleaved`): what the last stage bought, with no second tuning
run to differ by chance. Prints the table and writes --out.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tvm_rl import measure, models
from tvm_rl.database import RECORDS, WORKLOADS, TuningDatabase


def first_records(folder: Path, n: int, out: Path) -> TuningDatabase:
    """A copy of `folder`'s database holding its first `n` records (in the order they were measured)."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(folder / WORKLOADS, out / WORKLOADS)
    with open(folder / RECORDS, "rb") as src, open(out / RECORDS, "wb") as dst:
        for i, line in enumerate(src):
            if i >= n:
                break
            dst.write(line)
    return TuningDatabase(out)


def time_builds(model: models.Model, target, databases: dict[str, Any], repeat: int) -> dict[str, measure.Timing]:
    """`model` built with each database (a folder or an opened one), each checked against the model's reference
    outputs, then timed in `repeat` interleaved rounds."""
    runners = {name: measure.Runner(measure.build(model.mod, target, db), target) for name, db in databases.items()}
    reference = model.reference_outputs()
    for runner in runners.values():
        measure.assert_close(runner(model.inputs), reference, rtol=1e-3, atol=1e-3)
    return measure.time_interleaved(runners, model.inputs, repeat=repeat)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", default="full")
    parser.add_argument("--first", type=int, required=True, help="records the first stage measured")
    parser.add_argument("--work-dir", type=Path, required=True, help="the two-stage run's tuning folder")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--out", type=Path, default=Path("logs/stage_ablation.json"))
    args = parser.parse_args(argv)
    target = measure.parse_target(args.target)
    model = models.load(args.model, size=args.size)
    with tempfile.TemporaryDirectory() as scratch:
        first = first_records(args.work_dir, args.first, Path(scratch) / "first")
        whole = TuningDatabase(args.work_dir)
        counts = {"first stage": first.record_count(), "both stages": whole.record_count()}
        timings = time_builds(model, target, {"first stage": first.open(), "both stages": whole.open()}, args.repeat)
    rows = {name: {"records": counts[name], "median_ms": round(t.median_ms, 3)} for name, t in timings.items()}
    ratio = rows["first stage"]["median_ms"] / rows["both stages"]["median_ms"]
    first_ms = rows["first stage"]["median_ms"]
    print(f"{args.model} ({args.size}): first {counts['first stage']} records {first_ms:.2f} ms, "
          f"all {counts['both stages']} records {rows['both stages']['median_ms']:.2f} ms: the last stage "
          f"{ratio:.2f}x ({args.repeat} interleaved rounds)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "python -m benchmarks.stage_ablation " + " ".join(argv or []),
                                    "model": args.model, "size": args.size, "work_dir": str(args.work_dir),
                                    "rows": rows, "last_stage_speedup": round(ratio, 3)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
