"""How many of a model's kernels a schedule library covers, as imported and after the graph pass.

`tvm-rl optimize` tunes the graph pass's module (batch norms folded into the convolutions, whose kernels then carry
a bias and an activation), while `tvm-rl tune` and the benchmark's kernel-only arms tune the model as imported.
For each model this counts the kernels of both modules whose exact workload the library holds for `--target`
(applied with no measurement) and those of a kind it holds (seeded with moved schedules).

    python -m benchmarks.library_coverage --models resnet18 resnet50 mobilenet_v2 --out logs/library_coverage_llvm.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.e2e.hf import load_model
from tvm_rl import measure
from tvm_rl.flow import graph_stage
from tvm_rl.tune.library import ScheduleLibrary, kind_of, shipped_library
from tvm_rl.tune.tasks import model_workloads

# The CPU the shipped library was measured on (its exact kernels apply only there).
LIBRARY_TARGET = '{"kind": "llvm", "mcpu": "emeraldrapids", "num-cores": 2}'


def coverage(library: ScheduleLibrary, mod, target) -> dict[str, Any]:
    """The module's kernels, and how many the library holds exactly (on `target`) or by kind."""
    kinds = {entry.kind for entry in library.entries}
    workloads = model_workloads(mod, target)
    return {"kernels": len(workloads),
            "exact": sum(library.best(w, target) is not None for _, w, _ in workloads),
            "kind": sum(kind_of(w) in kinds for _, w, _ in workloads),
            "conv_kinds": sorted({"+".join(kind_of(w)) for _, w, _ in workloads if "conv2d_nchw" in kind_of(w)})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "mobilenet_v2"])
    ap.add_argument("--library", default=None, help="a library file (default: the one shipped for LLVM)")
    ap.add_argument("--target", default=LIBRARY_TARGET)
    ap.add_argument("--rewrite-seconds", type=float, default=60.0,
                    help="the graph pass's time budget (`optimize` gives it 10 s; more, so that a busy machine "
                         "does not stop it before its steps are done)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    library = ScheduleLibrary(args.library or shipped_library("llvm"))
    target = measure.parse_target(args.target)
    rows = {}
    print(f"{'model':<14}{'module':<12}{'kernels':>8}{'exact':>7}{'kind':>6}")
    for name in args.models:
        model = load_model(name, "full")
        rewritten, _ = graph_stage(model.mod, target, rewrite_seconds=args.rewrite_seconds)
        rows[name] = {"imported": coverage(library, model.mod, target), "graph pass": coverage(library, rewritten,
                                                                                              target)}
        for label, row in rows[name].items():
            print(f"{name:<14}{label:<12}{row['kernels']:>8}{row['exact']:>7}{row['kind']:>6}")
    if args.out:
        command = ["python -m benchmarks.library_coverage", *(argv if argv is not None else sys.argv[1:])]
        Path(args.out).write_text(json.dumps({"library": str(library.path), "target": str(target), "models": rows,
                                              "command": " ".join(command)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
