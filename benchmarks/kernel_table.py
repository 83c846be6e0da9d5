"""Per-kernel rates of a tuned model beside ONNX Runtime's and the machine's (issue 68 item 6's kernel table).

Builds a zoo model (or the graph a `budget-optimize` run tuned, `--graph`) with a tuning database, times every
kernel in the Relax VM (`kernel_times`), counts each kernel's FLOPs (TVM's estimate of its TIR), and prints each
kernel's GFLOP/s and its share of the machine's GEMM rate (numpy float32 2048^3, measured in the same run). ONNX
Runtime is profiled on the same model (its per-node times, summed by op type), and both sides are summed by family
(convolutions, matmuls, the rest): its fused Conv nodes carry what our conv kernels and their epilogues do.

    python -m benchmarks.kernel_table --model mobilenet_v2 --graph RUN/graph.json --database RUN --out logs/x.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import tvm

from benchmarks.e2e.hf import load_model
from benchmarks.kernel_ceiling import machine_gflops
from benchmarks.kernel_times import kernel_times
from tvm_rl import measure, models
from tvm_rl.database import TuningDatabase

FAMILIES = (("conv", ("conv2d", "Conv")), ("matmul", ("matmul", "dense", "MatMul", "Gemm")))


def family(name: str) -> str:
    """A kernel's or an ONNX op type's family: conv, matmul or other."""
    return next((f for f, marks in FAMILIES if any(m in name for m in marks)), "other")


def kernel_flops(mod: tvm.IRModule, target, database=None) -> dict[str, float]:
    """FLOPs per call of each kernel the VM calls when `mod` is built with `database`, by the name it calls it by
    (TVM's estimate of each PrimFunc of the kernel stage, tuned kernels as tuned)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    out = {}
    for gvar, func in measure.kernel_stage(mod, target, database).functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            try:
                out[gvar.name_hint] = float(estimate_tir_flops(tvm.IRModule({"main": func})))
            except Exception:  # noqa: BLE001  (an op TVM cannot count: no rate for it)
                out[gvar.name_hint] = 0.0
    return out


def ort_op_times(model: models.Model, scratch: Path, threads: int, runs: int = 20) -> dict[str, float]:
    """ONNX Runtime's milliseconds per run by op type, from its profiler over `runs` runs after a warm-up."""
    import onnxruntime as ort
    import torch

    path = models.export_onnx(model.torch_module, [torch.from_numpy(x) for x in model.inputs],
                              scratch / f"{model.name}.onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = dict(zip([i.name for i in session.get_inputs()], model.inputs))
    for _ in range(3):
        session.run(None, feed)
    options.enable_profiling = True
    options.profile_file_prefix = str(scratch / "ort_profile")  # not the working directory
    profiled = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    path.unlink(missing_ok=True)  # both sessions hold the model now
    for _ in range(3 + runs):  # the first runs of a session are slower: dropped below
        profiled.run(None, feed)
    profile = Path(profiled.end_profiling())
    events = json.loads(profile.read_text())
    profile.unlink()
    by_op: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            by_op[event["args"]["op_name"]].append((event["ts"], event["dur"] / 1e3))
    out = {}
    for op, timed in by_op.items():
        timed.sort()
        per_run = len(timed) // (3 + runs)  # nodes of this type per run
        out[op] = sum(ms for _, ms in timed[3 * per_run:]) / runs  # the last `runs` runs
    return out


def table(model: str, kernels: dict[str, dict[str, float]], flops: dict[str, float], machine: float,
          ort: dict[str, float] | None) -> dict[str, Any]:
    """Rows per kernel (ms per run, calls, GFLOP/s, % of the machine rate) and per family (ours and ORT's)."""
    rows = []
    for name, t in kernels.items():
        if name not in flops:
            continue  # the VM's own builtins (allocation, reshape views)
        gflops = flops[name] * t["calls"] / (t["ms"] * 1e6) if t["ms"] > 0 and flops[name] else None
        rows.append({"kernel": name, "family": family(name), "ms": t["ms"], "calls": t["calls"],
                     "gflops": gflops, "of_machine": gflops / machine if gflops else None})
    rows.sort(key=lambda r: -r["ms"])
    families = {}
    for fam in ("conv", "matmul", "other"):
        mine = [r for r in rows if r["family"] == fam]
        if not mine and not (ort and any(family(op) == fam for op in ort)):
            continue
        ms = sum(r["ms"] for r in mine)
        work = sum(flops[r["kernel"]] * r["calls"] for r in mine)
        theirs = sum(v for op, v in (ort or {}).items() if family(op) == fam) if ort else None
        families[fam] = {"ms": ms, "gflops": work / (ms * 1e6) if ms and work else None, "ort_ms": theirs,
                         "ort_gflops": work / (theirs * 1e6) if theirs and work else None,
                         "median_of_machine": statistics.median([r["of_machine"] for r in mine if r["of_machine"]])
                         if any(r["of_machine"] for r in mine) else None}
    return {"model": model, "machine_gflops": machine, "kernels": rows, "families": families, "ort_ops": ort}


def format_table(result: dict[str, Any], top: int) -> str:
    machine = result["machine_gflops"]
    lines = [f"{result['model']}: machine GEMM {machine:.0f} GFLOP/s (numpy float32 2048^3)", "",
             f"{'family':<8}{'ours ms':>9}{'GFLOP/s':>9}{'ORT ms':>8}{'GFLOP/s':>9}{'vs ORT':>9}"
             f"{'median kernel % machine':>25}"]
    for fam, f in result["families"].items():
        ratio = f"{f['ort_ms'] / f['ms']:.2f}x" if f["ort_ms"] and f["ms"] else "-"
        lines.append(f"{fam:<8}{f['ms']:>9.2f}{_num(f['gflops']):>9}{_num(f['ort_ms'], 2):>8}"
                     f"{_num(f['ort_gflops']):>9}{ratio:>9}{_pct(f['median_of_machine']):>25}")
    lines += ["", f"{'ms per run':>11}{'calls':>6}{'GFLOP/s':>9}{'% machine':>10}  kernel"]
    for r in result["kernels"][:top]:
        lines.append(f"{r['ms']:>11.3f}{r['calls']:>6.0f}{_num(r['gflops']):>9}{_pct(r['of_machine']):>10}  "
                     f"{r['kernel']}")
    return "\n".join(lines)


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a zoo model or one of benchmarks/e2e/hf.py's")
    ap.add_argument("--size", default="full")
    ap.add_argument("--graph", default=None, help="a module JSON to build instead of the model as imported "
                    "(a budget-optimize run's graph.json)")
    ap.add_argument("--database", default=None, help="the tuning folder whose records the build applies")
    ap.add_argument("--runs", type=int, default=10, help="instrumented model runs")
    ap.add_argument("--threads", type=int, default=2, help="threads for the machine GEMM and ONNX Runtime")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--scratch", default="tvm_rl_work/kernel_table")
    ap.add_argument("--out", default=None, help="JSON path (default: print only)")
    args = ap.parse_args(argv)
    target = measure.parse_target("llvm")
    model = load_model(args.model, args.size)
    mod = tvm.ir.load_json(Path(args.graph).read_text()) if args.graph else model.mod
    database = TuningDatabase(args.database).open() if args.database else None
    machine = machine_gflops(args.threads)
    kernels = kernel_times(mod, model.inputs, target, database, args.runs)
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    ort = None if args.no_ort else ort_op_times(model, scratch, args.threads)
    result = table(args.model, kernels, kernel_flops(mod, target, database), machine, ort)
    command = ["python -m benchmarks.kernel_table", *(argv if argv is not None else sys.argv[1:])]
    result.update(graph=args.graph, database=args.database, runs=args.runs, threads=args.threads,
                  command=" ".join(command))
    print(format_table(result, args.top))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
