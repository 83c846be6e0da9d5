"""`tvm-rl optimize`: `tvm_rl.optimize` from the command line."""
from __future__ import annotations

import argparse

from . import paths
from .graph import defaults
from .tune import search_strategy
from .tune.command import add_budget_arguments, add_library_argument, add_measure_argument


def _shape(text: str) -> tuple[str, list[int]]:
    name, _, dims = text.partition("=")
    try:
        return name, [int(d) for d in dims.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--shape wants NAME=D1,D2,... (e.g. input=1,3,224,224), got {text!r}") from None


def main(argv: list[str] | None = None, prog: str = "tvm-rl optimize") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=(
        "Optimize a model end to end: graph pass (RLRewritePass; --policy), kernel tuning (--strategy) into one "
        "database, build, output check against the source model, timing. Example: "
        "tvm-rl optimize --onnx model.onnx --trials 16 --export model.so"))
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="a zoo model name, tiny size (see tvm_rl.models.names())")
    what.add_argument("--onnx", help="an ONNX file")
    what.add_argument("--hf", metavar="DIR", help="a Hugging Face model folder (what save_pretrained writes; needs "
                      "transformers): its main input made from its config, --shape to change it; decoders without "
                      "a KV cache")
    ap.add_argument("--shape", type=_shape, action="append", default=[], metavar="NAME=D1,D2,...",
                    help="static shape for an ONNX input with symbolic dimensions (repeatable)")
    ap.add_argument("--target", default="llvm", help="llvm (this CPU), cuda, cuda:sm_80, or a target JSON")
    ap.add_argument("--trials", type=int, default=16, help="measured trials per kernel (default 16)")
    add_budget_arguments(ap)
    add_library_argument(ap)
    add_measure_argument(ap)
    ap.add_argument("--strategy", default=None,
                    help=f"search strategy: {', '.join(search_strategy.names())} (default {search_strategy.DEFAULT})")
    ap.add_argument("--cost-model", default=None, metavar="MODEL",
                    help="tuner's cost model: xgb (MetaSchedule's XGBModel), xgb-pretrained (the model shipped for "
                         "the target kind), or a model file from `tvm-rl corpus train`; default: the shipped model, "
                         "refined on the run's records, where one is shipped, else xgb")
    ap.add_argument("--no-rewrite", action="store_true", help="skip the graph pass")
    ap.add_argument("--policy", default=None, help="graph pass: what chooses the rewrites, as in tvm-rl rewrite "
                    "(cheapest-first, uniform, cost-softmax, cheapest-then-softmax, cheapest-then-trained, untrained, "
                    "trained, a policy checkpoint, or a search: greedy, backtracking[-N], which need a longer "
                    "--rewrite-seconds; default cheapest-first, a rule without learning: the learned policy did not "
                    "beat it)")
    ap.add_argument("--rewrite-steps", type=int, default=defaults.MAX_STEPS,
                    help=f"graph pass: rewrites per episode at most (default {defaults.MAX_STEPS})")
    ap.add_argument("--rewrite-seconds", type=float, default=defaults.TIME_BUDGET_S,
                    help=f"graph pass: seconds at most (default {defaults.TIME_BUDGET_S:g})")
    ap.add_argument("--graph-rounds", type=int, default=1, metavar="N",
                    help="rewrite and tune N times, each graph pass priced by the kernels tuned so far; keeps the "
                         "round that measures fastest (default 1)")
    ap.add_argument("--fast-math", action=argparse.BooleanOptionalAction, default=None,
                    help="build erf / exp / tanh (GELU, SiLU, sigmoid, softmax) with TVM's vectorisable "
                         "approximations, a few ulp off (default: on for CPU targets, off for GPUs)")
    ap.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None,
                    help="after the graph pass, run the convolutions in NHWC with the transposes between them "
                         "cancelled (default: on for CPU targets, off for GPUs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", default=None, help=f"database, report (default {paths.WORK_DIR_HELP})")
    ap.add_argument("--export", default=None, metavar="FILE.so", help="write the compiled library here")
    args = ap.parse_args(argv)

    from .flow import optimize

    model = args.onnx or args.hf or args.model
    out = optimize(model, args.target, shapes=dict(args.shape) or None, work_dir=args.work_dir,
                   rewrite=not args.no_rewrite, policy=args.policy, rewrite_steps=args.rewrite_steps,
                   rewrite_seconds=args.rewrite_seconds, trials_per_kernel=args.trials, strategy=args.strategy,
                   seed=args.seed, cost_model=args.cost_model, graph_rounds=args.graph_rounds,
                   fast_math=args.fast_math, budget=args.budget, minutes=args.minutes,
                   library=args.library, channels_last=args.channels_last, measurement=args.measure)
    print(out.report.summary())
    if args.export:
        print(f"exported {out.export(args.export)} (tvm.runtime.load_module + relax.VirtualMachine)")
    return 0
