"""`tvm-rl tune`: tune TopHub tasks or a model's kernels into a MetaSchedule database, with any strategy."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import paths
from ..measure import host_cpu_target, parse_target
from . import cost_model, search_strategy
from .runner.cold import MEASURES, runner_for
from .tasks import tune_model, tune_workloads


def main(argv: list[str] | None = None, prog: str = "tvm-rl tune") -> int:
    ap = argparse.ArgumentParser(
        prog=prog, description="Tune kernels into a resumable MetaSchedule database (rerun to resume).",
        epilog="examples:\n  tvm-rl tune --model resnet18 --size tiny --trials 16\n"
               "  tvm-rl tune --tophub --ops depthwise_conv2d --max-tasks 4 --strategy ppo\n"
               "  tvm-rl tune --onnx model.onnx --target cuda --strategy ppo\n"
               "  tvm-rl tune --model resnet18 --target cuda:sm_86 --rpc-tracker 10.0.0.5:9190 --rpc-key rtx3090",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="a zoo model name (see tvm_rl.models.names())")
    what.add_argument("--onnx", help="an ONNX file (static shapes)")
    what.add_argument("--tophub", action="store_true", help="TopHub tasks (see --ops, --max-tasks, --tophub-dir)")
    ap.add_argument("--size", default="tiny", choices=["tiny", "full"], help="zoo model size (default tiny)")
    ap.add_argument("--ops", nargs="*", help="TopHub ops to keep, e.g. conv2d depthwise_conv2d batch_matmul")
    ap.add_argument("--max-tasks", type=int, default=None, help="at most this many TopHub tasks")
    ap.add_argument("--tophub-dir", default=None, help="folder of TopHub logs (default $TVM_RL_TOPHUB_DIR or "
                                                       "~/.tvm/tophub)")
    ap.add_argument("--target", default="llvm", help="llvm (this CPU), cuda, cuda:sm_80, or a target JSON")
    ap.add_argument("--strategy", default=search_strategy.DEFAULT, choices=search_strategy.names(),
                    help=f"search strategy (default {search_strategy.DEFAULT})")
    ap.add_argument("--trials", type=int, default=32, help="measured trials per kernel (default 32)")
    add_budget_arguments(ap, "the whole model (or task list)")
    add_library_argument(ap)
    add_measure_argument(ap)
    ap.add_argument("--per-iter", type=int, default=8, help="candidates measured per round (default 8)")
    ap.add_argument("--op-filter", default=None, help="only kernels whose name contains this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--walks", type=int, default=None,
                    help="ppo: walks per round (default 64), annealing: chains (default 128)")
    ap.add_argument("--evaluations", type=int, default=None,
                    help="per round: ppo's draft-model ratings per design space (default 20000), annealing's "
                         "cost-model ratings (default 512)")
    ap.add_argument("--cost-model", default=None, metavar="MODEL",
                    help="xgb (MetaSchedule's XGBModel), random, xgb-pretrained (the model shipped for the target "
                         "kind), or a pre-trained model file (`tvm-rl corpus train`; docs/tuner_corpus.md); default: "
                         "the shipped model, refined on the run's records, where one is shipped, else xgb")
    ap.add_argument("--check-results", action="store_true",
                    help="run each candidate once against the unscheduled kernel first; a wrong one is a failure")
    ap.add_argument("--work-dir", default=None, help="database folder (default "
                    f"{paths.WORK_DIR_HELP}, then tuning/<target kind>)")
    remote = ap.add_argument_group(
        "remote measurement", "Build candidates here and time them on devices registered with a TVM RPC tracker.\n"
        "On a machine the devices can reach:   python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190\n"
        "On each device (same TVM version):    python -m tvm.exec.rpc_server --tracker HOST:9190 --key KEY\n"
        "Check they registered:                python -m tvm.exec.query_rpc_tracker --host HOST --port 9190\n"
        "Then add --rpc-tracker HOST:9190 --rpc-key KEY and a --target for the devices, not this host:\n"
        "cuda:sm_86 for x86 machines with an RTX 30xx; for ARM boards a JSON target with their mtriple\n"
        "(a CUDA target's \"host\" too, e.g. on a Jetson). See docs/remote.md.")
    remote.add_argument("--rpc-tracker", metavar="HOST:PORT", help="the RPC tracker's address (port default 9190)")
    remote.add_argument("--rpc-key", metavar="KEY", help="the --key the devices' rpc_server registered with")
    remote.add_argument("--rpc-timeout", metavar="S", type=float, default=60.0,
                        help="seconds one candidate may hold a device: upload, link there, run (default 60)")
    args = ap.parse_args(argv)

    target = host_cpu_target() if args.target == "llvm" else parse_target(args.target)
    work_dir = Path(args.work_dir) if args.work_dir else paths.work_dir() / "tuning" / target.kind.name
    runner = runner_for(target, args.measure)
    if args.rpc_tracker or args.rpc_key:
        if args.measure != "warm":
            ap.error("--measure cold flushes this machine's caches: it does not reach devices behind an RPC tracker")
        runner = _remote_runner(args, ap)
        if runner is None:
            return 2
    strategy = args.strategy  # a name: built only if there is something to tune (PPO imports torch)
    if args.walks is not None or args.evaluations is not None:
        strategy = search_strategy.create(args.strategy, args.seed, args.walks, args.evaluations)
    common = dict(trials_per_kernel=args.trials, trials_per_iter=args.per_iter, strategy=strategy,
                  seed=args.seed, op_filter=args.op_filter, runner=runner, check_results=args.check_results,
                  cost_model=cost_model.from_spec(args.cost_model, args.seed, target.kind.name),
                  budget=args.budget, minutes=args.minutes, library=args.library)
    if args.tophub:
        from .tophub import load_tasks

        tasks = load_tasks(args.tophub_dir, ops=args.ops, max_tasks=args.max_tasks)
        print(f"{len(tasks)} TopHub tasks -> {work_dir}", flush=True)
        _, report = tune_workloads([(t.name, t.mod(), 1.0) for t in tasks], target, work_dir, **common)
    else:
        from .. import models

        model = models.load(args.model, args.size) if args.model else models.from_onnx(args.onnx)
        print(f"{args.model or args.onnx} -> {work_dir}", flush=True)
        _, report = tune_model(model.mod, target, work_dir, **common)
    if report.from_library:
        print(f"{len(report.from_library)} kernels took the library's record, unmeasured")
    for name, error in report.search_errors.items():
        print(f"{name}: its search failed and it ended early ({error})")
    if args.budget is not None or args.minutes is not None:
        print(f"{report.tasks} kernels: {report.measured} measurements in {report.seconds:.0f} s, spent where the "
              f"model's latency is. Database: {work_dir}")
    else:
        print(f"{report.tasks} kernels: {len(report.tuned)} tuned, {len(report.skipped)} already had {args.trials} "
              f"trials; {report.measured} of {report.trials} trials measured (a small space can run out) in "
              f"{report.seconds:.0f} s. Database: {work_dir}")
    if report.failures:
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(report.failures.items()))
        print(f"{sum(report.failures.values())} candidates failed ({kinds}); reasons in {report.failure_log}")
    return 0


def add_budget_arguments(ap: argparse.ArgumentParser, what: str = "the whole model") -> None:
    """--budget and --minutes (`tune_workloads(budget=, minutes=)`), for a command that tunes `what`."""
    ap.add_argument("--budget", type=int, default=None, metavar="N",
                    help=f"instead of --trials: N measurements for {what}, spent on the kernels where its latency is "
                         "(a rerun resumes: earlier records of its kernels count)")
    ap.add_argument("--minutes", type=float, default=None, metavar="M",
                    help="instead of --trials: tune for M minutes, spent the same way (with --budget: whichever "
                         "comes first)")


def add_library_argument(ap: argparse.ArgumentParser) -> None:
    """--library (`tune_workloads(library=)`), for a command that tunes."""
    ap.add_argument("--library", default="default", metavar="FILE",
                    help="the schedule library tuning starts from: kernels it measured on this target get its record "
                         "unmeasured, the others its schedules of their kind among their first candidates; a file "
                         "(`tvm-rl library build`), `shipped`, or `none` (default: the one shipped for the target "
                         "kind where one ships: CPUs)")


def add_measure_argument(ap: argparse.ArgumentParser) -> None:
    """--measure (`runner.runner_for`), for a command that tunes on this machine."""
    ap.add_argument("--measure", default="warm", choices=MEASURES,
                    help="how candidates are timed: warm (MetaSchedule's default: calls repeated, weights cached) or "
                         "cold (CPU only: single calls, the weights flushed from the cache before each, as inside a "
                         "model; the library's warm-timed records then seed the search instead of being applied "
                         "unmeasured; default warm)")


def _remote_runner(args: argparse.Namespace, ap: argparse.ArgumentParser):
    """The RPC runner the arguments ask for, after asking the tracker; None (reason printed) if it cannot serve."""
    if not (args.rpc_tracker and args.rpc_key):
        ap.error("--rpc-tracker and --rpc-key go together: the tracker's HOST:PORT and the devices' key")
    from .runner.rpc import RPCError, check_tracker, rpc_runner

    try:
        # Ask before any model is loaded, so a wrong address or key is reported in seconds.
        found = check_tracker(args.rpc_tracker, args.rpc_key)
        runner = rpc_runner(args.rpc_tracker, args.rpc_key, args.rpc_timeout, max_workers=found.free, check=False)
    except RPCError as err:
        print(f"{ap.prog}: error: {err}", file=sys.stderr)
        return None
    print(f"measuring on {found.free} device(s) with key {args.rpc_key!r} at {args.rpc_tracker}", flush=True)
    if args.target == "llvm":
        print("note: --target llvm is this host's CPU; give the devices' own target if their CPU differs",
              flush=True)
    return runner
