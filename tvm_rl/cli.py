"""`tvm-rl`: the command line. `tvm-rl demo` runs the main job on the built-in default model."""
from __future__ import annotations

import argparse
import sys

from .errors import TvmRlError, exit_code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="tvm-rl", description="RL graph rewriting and schedule tuning for TVM.")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="tvm_rl.optimize on a built-in CNN block beside TVM's default build, MetaSchedule, "
                   "PyTorch and ONNX Runtime (see `tvm-rl demo --help`)", add_help=False)
    sub.add_parser("tune", help="tune TopHub tasks or a model's kernels (see `tvm-rl tune --help`)", add_help=False)
    sub.add_parser("corpus", help="measure a corpus of schedules, pre-train a cost model on it, evaluate it "
                   "(see `tvm-rl corpus --help`)", add_help=False)
    sub.add_parser("library", help="build a schedule library from tuning databases, or show one "
                   "(see `tvm-rl library --help`)", add_help=False)
    sub.add_parser("optimize", help="graph pass + kernel tuning + build + check, end to end "
                   "(see `tvm-rl optimize --help`)", add_help=False)
    sub.add_parser("rewrite", help="rewrite a model's graph with the graph pass, RLRewritePass "
                   "(see `tvm-rl rewrite --help`)", add_help=False)
    sub.add_parser("train", help="train the graph rewrite policy with PPO (see `tvm-rl train --help`)",
                   add_help=False)
    sub.add_parser("report", help="summarise a work dir's reports, databases and training runs "
                   "(see `tvm-rl report --help`)", add_help=False)
    args, rest = ap.parse_known_args(argv)
    try:
        return _run(args.command, rest)
    except TvmRlError as err:  # bad input, named by whoever found it: one line, no traceback
        print(f"tvm-rl: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # TuningInterrupted says where the measurements are and how to resume
        print(f"\ntvm-rl: {str(err) or 'interrupted'}", file=sys.stderr)
        return exit_code(err)


def _run(command: str, rest: list[str]) -> int:
    if command == "optimize":
        from .flow_command import main as optimize_main

        return optimize_main(rest)
    if command == "report":
        from .report import main as report_main

        return report_main(rest)
    if command == "rewrite":
        from .graph.command import main as rewrite_main

        return rewrite_main(rest)
    if command == "train":
        from .graph.train import main as train_main

        train_main(rest, prog="tvm-rl train")
        return 0
    if command == "tune":
        from .tune.command import main as tune_main

        return tune_main(rest)
    if command == "library":
        from .tune.library_command import main as library_main

        return library_main(rest)
    if command == "corpus":
        from .tune.corpus.command import main as corpus_main

        return corpus_main(rest)
    from .demo import main as demo_main

    return demo_main(rest)


if __name__ == "__main__":
    sys.exit(main())
