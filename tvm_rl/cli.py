"""`tvm-rl`: the command line. `tvm-rl demo` runs the main job on the built-in default model."""
from __future__ import annotations

import argparse
import sys

DEMO_ARGS = ["--models", "resnet18", "--size", "tiny", "--trials-per-kernel", "8", "--out", "logs/demo.json",
             "--db-dir", "logs/tuning/demo"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="tvm-rl", description="RL graph rewriting and schedule tuning for TVM.")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="tune and benchmark the default model (ResNet-18, tiny) against PyTorch and ORT")
    sub.add_parser("bench", help="baseline benchmark of zoo models (see `tvm-rl bench --help`)", add_help=False)
    sub.add_parser("tune", help="tune TopHub tasks or a model's kernels (see `tvm-rl tune --help`)", add_help=False)
    sub.add_parser("bench-tuner", help="compare search strategies on TopHub tasks (`tvm-rl bench-tuner --help`)",
                   add_help=False)
    args, rest = ap.parse_known_args(argv)
    if args.command == "tune":
        from .tune.command import main as tune_main

        return tune_main(rest)
    if args.command == "bench-tuner":
        from .tune.benchmark import main as tuner_bench

        return tuner_bench(rest, prog="tvm-rl bench-tuner")
    from . import bench

    if args.command == "demo":
        bench.main(DEMO_ARGS + rest, prog="tvm-rl demo")
    else:
        bench.main(rest, prog="tvm-rl bench")
    return 0


if __name__ == "__main__":
    sys.exit(main())
