"""`tvm-rl corpus`: build a corpus of measured schedules for this device, train a cost model on it, evaluate it.

    tvm-rl corpus build --tophub --zoo                  # -> tvm_rl_work/corpus/llvm (the work dir); rerun to resume
    tvm-rl corpus train --corpus tvm_rl_work/corpus/llvm          # -> tvm_rl_work/corpus/llvm/cost_model.npz
    tvm-rl corpus evaluate --corpus tvm_rl_work/corpus/llvm       # -> tvm_rl_work/pretrained_eval_llvm.json
    tvm-rl corpus train-policy --corpus tvm_rl_work/corpus/llvm   # -> tvm_rl_work/corpus/llvm/policy.pt
    tvm-rl corpus compare-policy --corpus tvm_rl_work/corpus/llvm --heldout NAME ...  # policy vs untrained walks
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ... import paths

EXAMPLES = """examples:
  tvm-rl corpus build --tophub --models vit dalle transducer resnext50 squeezenet1_1 vgg16 mobilenet_v2
                                     # this CPU: TopHub's llvm log + those models' kernels, 151 workloads
  tvm-rl corpus build --target cuda --tophub --max-tasks 100 --models vit mobilenet_v2   # on a GPU machine
  tvm-rl corpus train --corpus tvm_rl_work/corpus/llvm
  tvm-rl corpus evaluate --corpus tvm_rl_work/corpus/llvm --ks 8 16 32
  tvm-rl corpus evaluate --corpus tvm_rl_work/corpus/llvm --model shipped   # your corpus's models vs the shipped one
  tvm-rl tune --model resnet18 --strategy evolutionary --cost-model tvm_rl_work/corpus/llvm/cost_model.npz
  tvm-rl corpus train-policy --corpus tvm_rl_work/corpus/llvm --exclude 'mobilenet_v2-*'
"""


def main(argv: list[str] | None = None, prog: str = "tvm-rl corpus") -> int:
    ap = argparse.ArgumentParser(prog=prog, description="A corpus of measured schedules and a cost model "
                                 "pre-trained on it (docs/tuner_corpus.md).", epilog=EXAMPLES,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="action", required=True)

    build = sub.add_parser("build", help="measure schedules of a suite of workloads (rerun to resume)",
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES)
    what = build.add_argument_group("workloads (TopHub first, then the zoo; identical kernels are measured once)")
    what.add_argument("--tophub", action="store_true", help="TopHub's workloads (see --tophub-logs)")
    what.add_argument("--tophub-dir", default=None, help="folder of TopHub logs (default $TVM_RL_TOPHUB_DIR or "
                                                         "~/.tvm/tophub)")
    what.add_argument("--tophub-logs", default="target", choices=["target", "all"],
                      help="the target kind's logs (llvm_*.log, cuda_*.log; default) or every log")
    what.add_argument("--ops", nargs="*", help="TopHub op kinds to keep, e.g. conv2d depthwise_conv2d")
    what.add_argument("--max-tasks", type=int, default=None,
                      help="at most this many TopHub workloads, spread evenly over op kinds and shapes")
    what.add_argument("--zoo", action="store_true", help="every zoo model's kernels (see --models, --size)")
    what.add_argument("--models", nargs="*", help="these zoo models' kernels (implies --zoo)")
    what.add_argument("--size", default="full", help="zoo model size: tiny or full (default full)")
    what.add_argument("--kernels", default="compute", choices=["compute", "all"],
                      help="zoo kernels with a reduction (default) or every kernel")
    what.add_argument("--limit", type=int, default=None, help="at most this many workloads")
    build.add_argument("--target", default="llvm", help="llvm (this CPU), cuda, cuda:sm_80, or a target JSON")
    build.add_argument("--out", default=None, help="corpus folder (default "
                       f"{paths.WORK_DIR_HELP}, then corpus/<target kind>)")
    build.add_argument("--trials", type=int, default=64, help="measured schedules per workload (default 64)")
    build.add_argument("--random-fraction", type=float, default=0.5,
                       help="share of them sampled at random, the rest evolved (default 0.5)")
    build.add_argument("--per-iter", type=int, default=16, help="schedules measured per batch (default 16)")
    build.add_argument("--seed", type=int, default=0)
    remote = build.add_argument_group("remote measurement (see `tvm-rl tune --help` and docs/remote.md)")
    remote.add_argument("--rpc-tracker", metavar="HOST:PORT")
    remote.add_argument("--rpc-key", metavar="KEY")
    remote.add_argument("--rpc-timeout", metavar="S", type=float, default=60.0)

    train = sub.add_parser("train", help="train the pre-trained cost model on a corpus")
    train.add_argument("--corpus", required=True, help="a corpus folder `tvm-rl corpus build` wrote")
    train.add_argument("--out", default=None, help="model file (default <corpus>/cost_model.npz)")
    train.add_argument("--exclude", nargs="*", default=[], metavar="PATTERN",
                       help="leave out workloads whose names match these shell patterns, e.g. 'bert-*' "
                            "(to keep a benchmark's tasks unseen)")
    train.add_argument("--max-rounds", type=int, default=None, help="cap on boosting rounds (default 2000)")
    train.add_argument("--no-cache", action="store_true", help="extract features again, ignoring <corpus>/features")

    evaluate = sub.add_parser("evaluate", help="leave-one-workload-out evaluation against cold starts")
    evaluate.add_argument("--corpus", required=True, help="a corpus folder `tvm-rl corpus build` wrote")
    evaluate.add_argument("--out", default=None, help="JSON file (default the work dir's "
                          "pretrained_eval_<target kind>.json)")
    evaluate.add_argument("--ks", type=int, nargs="+", default=[8, 16, 32],
                          help="a cold start's own records: the first k of each workload (default 8 16 32)")
    evaluate.add_argument("--top", type=int, default=8, help="top-k recall's k (default 8)")
    evaluate.add_argument("--folds", type=int, default=None,
                          help="hold out one of this many groups of workloads at a time instead of one workload "
                               "(fewer trainings on a large corpus)")
    evaluate.add_argument("--heldout", nargs="*", default=None, help="hold out only these workloads")
    evaluate.add_argument("--exclude", nargs="*", default=[], metavar="PATTERN",
                          help="leave these workloads out altogether (shell patterns)")
    evaluate.add_argument("--max-rounds", type=int, default=None, help="cap on boosting rounds (default 2000)")
    evaluate.add_argument("--refine-rounds", type=int, default=None,
                          help="trees the online refinement fits on a workload's own records (default 20; 0: none)")
    evaluate.add_argument("--refine-eta", type=float, default=None, help="their learning rate (default 0.1)")
    evaluate.add_argument("--refine-calibrated", action="store_true",
                          help="fit the refinement's trees to the workload's scores mapped onto the model's own "
                               "scale for it, not to the raw normalised scores (docs/tuner_corpus.md)")
    evaluate.add_argument("--no-cache", action="store_true", help="extract features again")
    evaluate.add_argument("--model", default=None, metavar="FILE|shipped",
                          help="also rate with this model file (`shipped`: the one tvm-rl ships for the corpus's "
                               "target kind), alone and refined on each workload's first k records: does a corpus "
                               "of your own beat the model you were given?")

    policy = sub.add_parser("train-policy", help="pre-train the tuner's agent offline: walks on the corpus's "
                            "workloads rated by the pre-trained cost model, no measurement")
    policy.add_argument("--corpus", required=True, help="a corpus folder `tvm-rl corpus build` wrote")
    policy.add_argument("--model", default=None, help="pre-trained cost model (default <corpus>/cost_model.npz)")
    policy.add_argument("--out", default=None, help="policy file (default <corpus>/policy.pt)")
    policy.add_argument("--rounds", type=int, default=2, help="walk rounds per workload and epoch (default 2)")
    policy.add_argument("--epochs", type=int, default=1, help="passes over the workloads (default 1)")
    policy.add_argument("--batch", type=int, default=16, help="batch size the rounds pick finalists for (16)")
    policy.add_argument("--exclude", nargs="*", default=[], metavar="PATTERN", help="leave out these workloads")
    policy.add_argument("--seed", type=int, default=0)
    policy.add_argument("--reward", default="improvement", choices=["improvement", "delta"],
                        help="the walks' reward: a walk's new best only (improvement, default) or the rating's "
                             "change (delta, CHAMELEON's; it drove the policy to keep every knob: tuner_corpus.md)")

    compare = sub.add_parser("compare-policy", help="offline: a policy's walks against an untrained agent's on "
                             "held-out workloads, by the pre-trained cost model's ratings of their finalists")
    compare.add_argument("--corpus", required=True, help="a corpus folder `tvm-rl corpus build` wrote")
    compare.add_argument("--model", default=None, help="pre-trained cost model (default <corpus>/cost_model.npz)")
    compare.add_argument("--policy", default=None, help="policy file (default <corpus>/policy.pt)")
    compare.add_argument("--heldout", nargs="+", required=True, help="workloads to compare on")
    compare.add_argument("--seeds", type=int, default=3, help="seeds per workload (default 3)")
    compare.add_argument("--batch", type=int, default=16)
    compare.add_argument("--out", default=None, help="JSON file (default the work dir's "
                         "policy_compare_<target kind>.json)")

    args = ap.parse_args(argv)
    if args.action == "build":
        return _build(args, build)
    if args.action == "train":
        return _train(args)
    if args.action == "train-policy":
        return _train_policy(args)
    if args.action == "compare-policy":
        return _compare_policy(args)
    return _evaluate(args)


def _config(args: argparse.Namespace):
    from ..cost_model.pretrained import TrainConfig

    given = {"max_rounds": args.max_rounds, "refine_rounds": getattr(args, "refine_rounds", None),
             "refine_eta": getattr(args, "refine_eta", None),
             "refine_calibrate": True if getattr(args, "refine_calibrated", False) else None}
    return TrainConfig(**{k: v for k, v in given.items() if v is not None})


def _names(corpus: str, exclude: list[str]) -> list[str] | None:
    """The corpus's workloads but those matching `exclude` (None: all of them)."""
    if not exclude:
        return None
    from fnmatch import fnmatch

    from .build import Corpus
    from .sources import CorpusError

    names = Corpus(corpus).names()
    kept = [n for n in names if not any(fnmatch(n, p) for p in exclude)]
    if len(kept) == len(names):
        raise CorpusError(f"--exclude {' '.join(exclude)} matches no workload of {corpus}")
    print(f"leaving out {len(names) - len(kept)} of {len(names)} workloads (--exclude)", flush=True)
    return kept


def _build(args: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    from ...measure import host_cpu_target, parse_target
    from ..tasks import check_local_device
    from .build import build_corpus
    from .sources import distinct, tophub_workloads, zoo_workloads

    if not (args.tophub or args.zoo or args.models):
        ap.error("choose the workloads: --tophub and/or --zoo (or --models NAME ...)")
    if args.limit is not None and args.limit < 1:
        ap.error("--limit must be at least 1")
    target = host_cpu_target() if args.target == "llvm" else parse_target(args.target)
    out = Path(args.out) if args.out else paths.work_dir() / "corpus" / target.kind.name
    runner = "local"
    if args.rpc_tracker or args.rpc_key:
        from ..command import _remote_runner

        runner = _remote_runner(args, ap)
        if runner is None:
            return 2
    check_local_device(target, runner)  # before any model is built: a missing GPU is said at once
    workloads = []
    if args.tophub:
        workloads += tophub_workloads(target, args.tophub_dir, args.ops, args.tophub_logs, args.max_tasks)
    if args.zoo or args.models:
        from ... import models

        names = args.models if args.models else models.names()
        workloads += zoo_workloads(target, names, args.size, args.kernels)
    workloads = distinct(workloads)[: args.limit]
    print(f"{len(workloads)} workloads x {args.trials} schedules ({round(args.trials * args.random_fraction)} "
          f"random, the rest evolved) for {target.kind.name} -> {out}", flush=True)
    settings = {"sources": {"tophub": args.tophub and args.tophub_logs, "ops": args.ops, "max_tasks": args.max_tasks,
                            "zoo": (args.models or "all") if (args.zoo or args.models) else None,
                            "size": args.size, "kernels": args.kernels, "limit": args.limit}}
    report = build_corpus(workloads, target, out, args.trials, args.random_fraction, args.per_iter, args.seed,
                          runner=runner, settings=settings)
    per = f", {report.seconds / report.measured:.2f} s per schedule" if report.measured else ""
    if report.failed:
        print(f"{len(report.failed)} workload(s) failed to search (why: the manifest's \"error\"): "
              f"{', '.join(report.failed)}")
    print(f"{report.workloads} workloads: {len(report.measured_workloads)} measured, {len(report.skipped)} already "
          f"done; {report.measured} schedules measured in {report.seconds:.0f} s{per}. Manifest: {report.manifest}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from .train import train_on_corpus

    out = Path(args.out) if args.out else Path(args.corpus) / "cost_model.npz"
    path, meta = train_on_corpus(args.corpus, out, _config(args), _names(args.corpus, args.exclude),
                                 cache=not args.no_cache, write=lambda line: print(line, flush=True))
    print(f"trained on {len(meta['workloads'])} workloads, {meta['records']} schedules ({meta['rounds']} rounds; "
          f"features {meta['features_seconds']:.0f} s, training {meta['train_seconds']:.0f} s) -> {path}")
    print(f"use it: tvm-rl tune ... --cost-model {path}   (Python: cost_model.create('xgb-pretrained', path=...))")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from .pretrained_eval import evaluate_corpus, format_table

    result, path = evaluate_corpus(args.corpus, args.out, args.ks, args.top, _config(args), args.folds,
                                   args.heldout, _names(args.corpus, args.exclude), cache=not args.no_cache,
                                   write=lambda line: print(line, flush=True), given=_given_model(args))
    print()
    print(format_table(result))
    print(f"\n{result['workloads']} workloads, {result['records']} schedules; {result['seconds']:.0f} s. -> {path}")
    return 0


def _given_model(args: argparse.Namespace) -> Path | None:
    """`--model`'s file; `shipped` is the package's model for the corpus's target kind."""
    if args.model != "shipped":
        return Path(args.model) if args.model else None
    from ..cost_model import shipped_model
    from .build import Corpus
    from .sources import CorpusError

    kind = Corpus(args.corpus).target().kind.name
    path = shipped_model(kind)
    if path is None:
        raise CorpusError(f"tvm-rl ships no cost model for target kind {kind!r}: pass a model file to --model")
    return path


def _train_policy(args: argparse.Namespace) -> int:
    from ..agent import PPOConfig
    from .policy_pretrain import pretrain_policy

    model = Path(args.model) if args.model else Path(args.corpus) / "cost_model.npz"
    out = Path(args.out) if args.out else Path(args.corpus) / "policy.pt"
    result = pretrain_policy(args.corpus, model, out, args.rounds, args.epochs, args.batch, args.exclude, args.seed,
                             PPOConfig(seed=args.seed, reward=args.reward), write=lambda line: print(line, flush=True))
    log = out.with_suffix(".json")
    log.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['updates']} PPO updates on {len(result['workloads'])} workloads in {result['seconds']:.0f} s "
          f"-> {out} (log: {log})")
    print(f"use it: PPOSearch(agent=PPOAgent.load('{out}')), or benchmarks/tuner.py --policy {out}")
    return 0


def _compare_policy(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..agent import PPOAgent
    from .build import Corpus
    from .policy_pretrain import compare_summary, compare_walkers, select_workloads

    corpus = Corpus(args.corpus)
    model = Path(args.model) if args.model else corpus.path / "cost_model.npz"
    policy = Path(args.policy) if args.policy else corpus.path / "policy.pt"
    names = select_workloads(corpus, only=args.heldout)
    trained = PPOAgent.load(str(policy))
    walkers = {"policy": trained, "untrained": PPOAgent(replace(trained.config))}
    rows = compare_walkers(corpus, model, walkers, names, args.batch, range(args.seeds),
                           write=lambda line: print(line, flush=True))
    for key, label in (("best", "best rating"), ("top_mean", f"top-{args.batch} mean rating")):
        d = compare_summary(rows, key)
        print(f"policy's {label} above the untrained agent's in {d['wins']} of {d['runs']} runs, mean difference "
              f"{d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}] (95%, workloads resampled; by the cost model: "
              "not a measurement)")
    out = Path(args.out) if args.out else paths.work_dir() / f"policy_compare_{corpus.target().kind.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"policy": str(policy), "model": str(model), "rows": rows}, indent=1) + "\n")
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
