"""Which of a run's kernels read a weight larger than a core's L2, and whether their measured schedules split it
across the cores or stream it again per output row (`tvm_rl.tune.weight_split`). Reads records only: no build, no
measurement.

    python -m benchmarks.weight_split_audit --runs RUN_A RUN_B --out logs/weight_split_audit.json

Each RUN is a tuning folder holding the graph it was tuned for (a budget run's graph.json). Per kernel and run: the
best record's time as tuned, whether it replicates the weight, and the best time among the records that do and among
those that do not.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import tvm
from tvm.s_tir import Schedule

from tvm_rl import measure
from tvm_rl.database import TuningDatabase, record_seconds
from tvm_rl.tune import extract_tasks
from tvm_rl.tune.weight_split import l2_bytes, large_weight, replicates_weight


def audit_run(folder: Path, target: tvm.target.Target, l2: int) -> list[dict]:
    """One row per kernel of `folder`'s graph whose weight exceeds `l2` bytes."""
    graph = tvm.ir.load_json((folder / "graph.json").read_text())
    database = TuningDatabase(folder).open()
    rows = []
    for task in extract_tasks(graph, target):
        mod = task.dispatched[0]
        guard = large_weight(mod, l2)
        if guard is None or not database.has_workload(mod):
            continue
        best: dict[bool, float] = {}
        counts = {True: 0, False: 0}
        top_split = None
        for i, record in enumerate(database.get_top_k(database.commit_workload(mod), 10_000)):
            seconds = record_seconds(record.run_secs)
            if seconds is None:
                continue
            sch = Schedule(mod)
            record.trace.apply_to_schedule(sch, remove_postproc=False)
            split = not replicates_weight(sch.mod["main"], guard)
            counts[split] += 1
            best[split] = min(best.get(split, float("inf")), seconds)
            if i == 0:
                top_split = split
        rows.append({"run": str(folder), "kernel": task.task_name, "weight_mb": guard.weight_bytes / 2**20,
                     "best_ms": min(best.values()) * 1e3 if best else None, "best_splits": top_split,
                     "split_records": counts[True], "replicating_records": counts[False],
                     "best_split_ms": best[True] * 1e3 if True in best else None,
                     "best_replicating_ms": best[False] * 1e3 if False in best else None})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", required=True, help="tuning folders, each with its graph.json")
    ap.add_argument("--l2", type=int, default=None, help="bytes of L2 per core (default: this machine's)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    l2 = args.l2 or l2_bytes()
    if l2 is None:
        raise SystemExit("this machine does not report its L2 size: give --l2")
    target = measure.parse_target("llvm")
    rows = [row for run in args.runs for row in audit_run(Path(run), target, l2)]

    def ms(x):
        return "-" if x is None else f"{x:.3f}"

    print(f"{'run':40s} {'kernel':36s} {'MB':>5s} {'best ms':>8s} {'splits':>6s} {'split n/best':>14s}"
          f" {'replicating n/best':>19s}")
    for r in rows:
        print(f"{Path(r['run']).name[-40:]:40s} {r['kernel'][:36]:36s} {r['weight_mb']:5.1f} {ms(r['best_ms']):>8s}"
              f" {str(r['best_splits']):>6s} {r['split_records']:>5d}/{ms(r['best_split_ms']):>8s}"
              f" {r['replicating_records']:>9d}/{ms(r['best_replicating_ms']):>9s}")
    if args.out:
        Path(args.out).write_text(json.dumps({"l2_bytes": l2, "rows": rows,
                                              "command": "python -m benchmarks.weight_split_audit " +
                                              " ".join(sys.argv[1:] if argv is None else argv)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
