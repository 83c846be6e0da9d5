"""Kernels tuned in MetaSchedule's CPU design space against ours, which computes element-wise epilogues in the tile
(and against ours with convolutions tiled like packed GEMMs).

    python -m benchmarks.epilogue_space --model mobilenet_v2 --graph RUN/graph.json --kernels 4 --trials 16 \
        --cost-models xgb-pretrained random --out logs/epilogue_space_llvm.json

The kernels are those of the graph `tvm-rl optimize` tunes on CPU (`tvm_rl.flow.graph_stage`, channels-last), or of
`--graph` (a `benchmarks.tuner_e2e` run's graph.json); its `--kernels` convolution or matmul kernels with an
epilogue that take the most FLOPs x calls, or those `--names` lists, are each tuned `--trials`
measurements (`tune_workloads`: evolutionary search, batches of 8) per (space, cost model, seed), every tuning in a
folder of its own under `--work-dir` (a rerun resumes). "stock" is MetaSchedule's space (its MultiLevelTiling also
offers the epilogue as a separate loop nest over the whole output), "fused" is `design_space.space_generator`'s
default (`FusedEpilogueTiling`), "ssrs" is "fused" with a 1x1 convolution's multi-level tiling as a packed GEMM's
(`design_space.CONV_SSRS`: outer spatial tiles, the whole reduction, the register tile). `--spaces` picks them;
prints each kernel's best measured time per space and the first space's over each other's; writes the JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import tvm

from benchmarks.e2e.hf import load_model
from tvm_rl import measure
from tvm_rl.database import record_seconds
from tvm_rl.flow import graph_stage
from tvm_rl.tune import design_space, extract_tasks, open_database, tune_workloads
from tvm_rl.tune.cost_model import from_spec

SPACES = ("stock", "fused", "ssrs")


def epilogue_kernels(mod, target, count: int, names: list[str] | None = None) -> list[tuple[str, object, int]]:
    """(name, TIR module, calls) of `mod`'s kernels called `names`, or else its `count` conv/matmul kernels with an
    epilogue, most FLOPs x calls first."""
    from tvm.s_tir.analysis import estimate_tir_flops

    tasks = extract_tasks(mod, target)
    if names:
        missing = sorted(set(names) - {t.task_name for t in tasks})
        if missing:
            raise SystemExit(f"no kernel named {', '.join(missing)} in the graph")
        return [(t.task_name, t.dispatched[0], int(t.weight)) for n in names for t in tasks if t.task_name == n]
    tasks = [t for t in tasks if any(k in t.task_name for k in ("conv2d", "matmul", "dense")) and "_add" in t.task_name]
    tasks.sort(key=lambda t: -estimate_tir_flops(t.dispatched[0]) * t.weight)
    return [(t.task_name, t.dispatched[0], int(t.weight)) for t in tasks[:count]]


def tuned_best(name: str, kernel, target, folder: Path, trials: int, cost_model: str, seed: int,
               space: str) -> tuple[float, int, int]:
    """(best measured seconds, records with the epilogue moved into the tile, records) of `kernel` after `trials`
    measurements in `space` (tuned into `folder` if short). A record counts as fused when its trace moves a block
    into the tile (`reverse_compute_at`), which in these kernels' spaces is the epilogue."""
    with design_space.epilogue_fusion(space != "stock"), design_space.conv_tiling(space == "ssrs"):
        tune_workloads([(name, kernel, 1.0)], target, folder, trials_per_kernel=trials, trials_per_iter=8,
                       seed=seed, cost_model=from_spec(cost_model, seed, target.kind.name))
    db = open_database(folder)
    records = db.get_top_k(db.commit_workload(kernel), 10**6)
    fused = sum("reverse_compute_at" in str(r.trace) for r in records)
    return record_seconds(records[0].run_secs), fused, len(records)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mobilenet_v2")
    p.add_argument("--size", default="full")
    p.add_argument("--target", default="llvm")
    p.add_argument("--graph", default=None, help="a saved Relax module (graph.json) to take the kernels from")
    p.add_argument("--kernels", type=int, default=4, help="how many kernels (most FLOPs x calls first)")
    p.add_argument("--names", nargs="+", default=None, help="these kernels instead (task names)")
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--cost-models", nargs="+", default=["xgb-pretrained", "random"])
    p.add_argument("--spaces", nargs="+", choices=SPACES, default=["stock", "fused"],
                   help="design spaces, the first the baseline of the ratios")
    p.add_argument("--work-dir", default="tvm_rl_work/epilogue_space")
    p.add_argument("--out", default="logs/epilogue_space_llvm.json")
    args = p.parse_args(argv)
    target = measure.parse_target(args.target)
    if args.graph:
        graph = tvm.ir.load_json(Path(args.graph).read_text())
    else:
        graph = graph_stage(load_model(args.model, args.size).mod, target, channels_last=True)[0]
    kernels = epilogue_kernels(graph, target, args.kernels, args.names)
    spaces, rows = args.spaces, []
    first = spaces[0]
    for name, kernel, calls in kernels:
        for cost_model in args.cost_models:
            times: dict[str, list[float]] = {s: [] for s in spaces}
            fused: dict[str, list[str]] = {s: [] for s in spaces}
            for seed in range(args.seeds):
                for space in spaces:
                    folder = Path(args.work_dir) / args.model / f"{name}_{space}_{cost_model}_s{seed}_n{args.trials}"
                    t0 = time.time()
                    best, in_tile, records = tuned_best(name, kernel, target, folder, args.trials, cost_model,
                                                        seed, space)
                    times[space].append(best)
                    fused[space].append(f"{in_tile}/{records}")
                    print(f"{name} {space} {cost_model} s{seed}: {best * 1e3:.4f} ms, epilogue in the tile in "
                          f"{in_tile} of {records} records [{time.time() - t0:.0f} s]", flush=True)
            row = {"kernel": name, "calls": calls, "cost_model": cost_model}
            for space in spaces:
                row[f"{space}_ms"] = [t * 1e3 for t in times[space]]
                row[f"{space}_in_tile"] = fused[space]
            for space in spaces[1:]:
                row[f"{first}_over_{space}"] = statistics.median(times[first]) / statistics.median(times[space])
            rows.append(row)
    print(f"\n{args.model}, channels-last, {args.trials} trials per kernel, {args.seeds} seed(s), medians")
    print(f"{'kernel':36s} {'calls':>5s} {'cost model':15s} " + " ".join(f"{s + ' ms':>9s}" for s in spaces) + " "
          + " ".join(f"{first + '/' + s:>11s}" for s in spaces[1:]) + f" {first} records in the tile")
    for r in rows:
        print(f"{r['kernel']:36s} {r['calls']:5d} {r['cost_model']:15s} "
              + " ".join(f"{statistics.median(r[s + '_ms']):9.4f}" for s in spaces) + " "
              + " ".join(f"{r[first + '_over_' + s]:10.2f}x" for s in spaces[1:]) + " "
              + " ".join(r[f"{first}_in_tile"]))
    out = {"command": "python -m benchmarks.epilogue_space " + " ".join(argv or sys.argv[1:]),
           "model": args.model, "graph": args.graph, "size": args.size, "target": str(target), "trials": args.trials,
           "seeds": args.seeds, "spaces": spaces, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
