"""Where a built model's time goes: each kernel's time per model run, from the Relax VM's own calls.

Builds a zoo model or one of `benchmarks/e2e/hf.py`'s (optionally with a tuning database), runs it once to warm
up, then `--runs` times with the VM's instrument timing every call, and prints each kernel's milliseconds per
run, calls and share, largest first.

    python -m benchmarks.kernel_times --model hf-llama-block \
        --database tvm_rl_work/bench/tuner_hf/llvm/full/hf-llama-block/budget-ours_n128_s0
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import tvm

from benchmarks.e2e.hf import load_model
from tvm_rl import measure
from tvm_rl.database import TuningDatabase


def kernel_times(mod: tvm.IRModule, inputs, target, database=None, runs: int = 3) -> dict[str, dict[str, float]]:
    """{kernel or VM builtin: {"ms": per model run, "calls": per model run}} over `runs` instrumented runs."""
    runner = measure.Runner(measure.build(mod, target, database=database), target)
    args = runner.device_tensors(inputs)
    runner.vm["main"](*args)
    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    started: dict[str, float] = {}

    def instrument(func, symbol, before_run, ret_value, *call_args) -> int:
        if before_run:
            started[symbol] = time.perf_counter()
        else:
            runner.device.sync()
            spent[symbol][0] += time.perf_counter() - started[symbol]
            spent[symbol][1] += 1
        return 0  # VMInstrumentReturnKind.NO_OP: run the call as usual

    runner.vm.set_instrument(instrument)
    for _ in range(runs):
        runner.vm["main"](*args)
    return {name: {"ms": total * 1e3 / runs, "calls": calls / runs} for name, (total, calls) in spent.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a zoo model or hf-bert-base / hf-llama-block")
    ap.add_argument("--size", default="full")
    ap.add_argument("--database", default=None, help="a tuning folder whose records the build applies")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--out", default=None, help="JSON path (default: print only)")
    args = ap.parse_args(argv)
    target = measure.parse_target(args.target)
    model = load_model(args.model, args.size)
    database = TuningDatabase(args.database).open() if args.database else None
    times = kernel_times(model.mod, model.inputs, target, database, args.runs)
    total = sum(t["ms"] for t in times.values())
    print(f"{args.model} ({args.size}): {total:.2f} ms per run in VM calls, {args.runs} instrumented runs")
    print(f"{'ms per run':>11}{'calls':>7}{'share':>8}  kernel")
    for name, t in sorted(times.items(), key=lambda kv: -kv[1]["ms"])[: args.top]:
        print(f"{t['ms']:>11.2f}{t['calls']:>7.0f}{100 * t['ms'] / total:>7.1f}%  {name}")
    if args.out:
        Path(args.out).write_text(json.dumps({"model": args.model, "size": args.size, "database": args.database,
                                              "target": str(target), "runs": args.runs, "kernels": times}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
