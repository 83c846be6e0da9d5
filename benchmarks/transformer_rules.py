"""What the transformer rule families are worth on tuned builds, and which kernels say why.

    python benchmarks/transformer_rules.py --size full --database logs/tuning/llvm --tune-trials 16

Per transformer of the zoo: the original; the original re-tuned (every add commuted, so each kernel is a new
workload of the same computation and is tuned afresh: the control arm for tuning luck); each transformer family
applied at every match alone (forced, not chosen by a search: what the rewrite itself measures); all of them
together (each family's every match, in `FAMILIES` order); and greedy search over every rule family priced by the
proxy fitted to --database (with its GEMM-by-shape model where that predicts better), confirmed by measurement.
Every variant's kernels are tuned to --tune-trials first, all variants are timed in interleaved rounds, and the
original's and the best variant's kernels are each timed alone and summed per kind (`measure.time_kernels`): the
per-kernel account of what changed. Resumable per model;
writes logs/transformer_rules_<target>_<size>.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graph_search import (  # noqa: E402
    add_tuning_args,
    check_tuning_args,
    confirmed,
    lowering,
    measure_variants,
    open_database_arg,
    proxy_hardware,
)

import tests.support.heldout_models  # noqa: E402, F401  (registers the held-out models for --models)
from benchmarks.graphs import tuned_cost  # noqa: E402
from tvm_rl import measure, models  # noqa: E402
from tvm_rl.graph import cost, roofline, search  # noqa: E402
from tvm_rl.graph.rules import get_rule  # noqa: E402

TRANSFORMERS = ("bert", "vit", "dalle", "transducer")
# The original re-tuned: every kernel a new workload of the same computation. Tuned with few trials, one shape's
# rate moves several-fold between two searches (docs/results/gemm_cost.md); a variant is credited only with what
# it gains beyond this arm.
CONTROL = "original_retuned"
# The families for transformer graphs, in the order "all" applies them: merges first (they see the exported
# linears), then the operand, normalisation and padding rewrites of what is left.
FAMILIES = ("merge_sibling_linear", "merge_shared_weight_matmul", "split_fused_matmul", "fold_layernorm_affine",
            "transpose_into_matmul", "matmul_associate", "matmul_distribute", "fold_binary_into_weight",
            "combine_const_adds", "pad_gemm")


def commuted_adds(mod):
    """`mod` with every add's operands swapped: the same computation in kernels of new structural hashes, so
    tuning them afresh measures what tuning luck alone moves (the control arm)."""
    from tvm import relax

    from tvm_rl.graph.rules.ir import Edit, Graph

    g = Graph(mod)
    edit = Edit(g)
    for name, call in g.calls("relax.add"):
        edit.set_value(name, relax.op.add(call.args[1], call.args[0]))
    return edit.commit("commute every add")


# Left out of "all": it splits what merge_sibling_linear merged, so together they would undo each other.
NOT_IN_ALL = ("split_fused_matmul",)


def forced_variants(mod) -> dict[str, tuple]:
    """family -> (its every match applied, seconds, matches) for each family that matches; plus "all" (every
    family but `NOT_IN_ALL`, in `FAMILIES` order)."""
    out, together, applied_all, start_all = {}, mod, [], time.perf_counter()
    for name in FAMILIES:
        rule = get_rule(name)
        start = time.perf_counter()
        new, applied = rule.apply_all(mod)
        if applied:
            out[name] = (new, time.perf_counter() - start, [str(m) for m in applied])
        if name not in NOT_IN_ALL:
            together, more = rule.apply_all(together)
            applied_all += [str(m) for m in more]
    if applied_all and len(out) > 1:
        out["all"] = (together, time.perf_counter() - start_all, applied_all)
    return out


def kernel_account(mod, target, database, repeat: int) -> dict[str, dict]:
    """Per kernel kind: kernels, calls and the summed median latency (ms) of each kernel timed alone."""
    from tvm import tirx

    lowered = measure.kernel_stage(mod, target, database)
    kinds = {g.name_hint: roofline.tir_kind(f) for g, f in lowered.functions.items() if isinstance(f, tirx.PrimFunc)}
    acc: dict[str, dict] = defaultdict(lambda: {"kernels": 0, "calls": 0, "ms": 0.0})
    for k in measure.time_kernels(mod, target, database, repeat=repeat):
        row = acc[kinds.get(k.name, roofline.op_kind(k.name))]
        row["kernels"] += 1
        row["calls"] += k.calls
        row["ms"] += k.calls * k.timing.median_ms
    return dict(acc)


def print_account(name: str, before: dict, after: dict, best: str) -> None:
    print(f"\n{name}: kernels timed alone, summed per kind (original -> {best})")
    print(f"{'kind':<14}{'kernels':>9}{'calls':>7}{'ms':>10}   ->{'kernels':>9}{'calls':>7}{'ms':>10}{'ratio':>8}")
    for kind in sorted(set(before) | set(after), key=lambda k: -before.get(k, {"ms": 0})["ms"]):
        b, a = before.get(kind, {"kernels": 0, "calls": 0, "ms": 0.0}), after.get(kind, {"kernels": 0, "calls": 0,
                                                                                           "ms": 0.0})
        ratio = f"{b['ms'] / a['ms']:.2f}x" if a["ms"] and b["ms"] else "-"
        print(f"{kind:<14}{b['kernels']:>9}{b['calls']:>7}{b['ms']:>10.3f}   ->{a['kernels']:>9}{a['calls']:>7}"
              f"{a['ms']:>10.3f}{ratio:>8}")


def json_path(target_kind: str, size: str, seed: int) -> Path:
    return Path(__file__).resolve().parents[1] / "logs" / \
        f"transformer_rules_{target_kind}_{size}{f'_seed{seed}' if seed else ''}.json"


def summarize(target_kind: str, size: str) -> None:
    """Per model and variant over every seed's JSON: the speedup over the original and over the re-tuned
    original (the control), mean and range; a variant is worth something only beyond the control's spread."""
    runs = [json.loads(p.read_text()) for p in sorted(json_path(target_kind, size, 0).parent.glob(
        f"transformer_rules_{target_kind}_{size}*.json"))]
    print(f"\n{len(runs)} tuning seeds: speedup over the original (min-max), and over the re-tuned original")
    print(f"{'model':<12}{'variant':<26}{'vs original':>22}{'vs control':>22}")
    for name in dict.fromkeys(n for r in runs for n in r["models"]):
        rows = [r["models"][name]["variants"] for r in runs if name in r["models"]]
        for key in rows[0]:
            s = [r[key]["speedup"] for r in rows if key in r]
            c = [r[CONTROL]["latency_ms"] / r[key]["latency_ms"] for r in rows if key in r]
            print(f"{name:<12}{key:<26}{sum(s) / len(s):>8.2f} ({min(s):.2f}-{max(s):.2f})"
                  f"{sum(c) / len(c):>10.2f} ({min(c):.2f}-{max(c):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=models.SIZES)
    ap.add_argument("--models", nargs="*", default=list(TRANSFORMERS))
    ap.add_argument("--target", default="llvm")
    add_tuning_args(ap, tune_seed=False)  # its --seed seeds the tuner too
    ap.add_argument("--cap", type=int, default=64, help="candidates per greedy step")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--kernel-repeat", type=int, default=10, help="timings per kernel in the per-kind account")
    ap.add_argument("--force", action="store_true", help="re-run models already in the JSON")
    ap.add_argument("--seed", type=int, default=0, help="tuning seed; give each seed its own --database so that "
                    "every kernel is tuned afresh (an independent sample of tuning luck)")
    ap.add_argument("--proxy-database", default=None, help="the tuning database the search's proxy is fitted to "
                    "(default --database; a fresh seed's database is empty when the search runs)")
    ap.add_argument("--summary", action="store_true", help="print the summary over every seed's JSON and exit")
    args = ap.parse_args()
    if args.summary:
        summarize(measure.parse_target(args.target).kind.name, args.size)
        return
    check_tuning_args(ap, args)
    target = measure.parse_target(args.target)
    database = open_database_arg(args.database)
    out = json_path(target.kind.name, args.size, args.seed)
    tuner = tuned_cost.database_tuner(target, args.database, args.tune_trials, seed=args.seed) \
        if args.tune_trials else None
    results = json.loads(out.read_text())["models"] if out.exists() else {}
    hardware = proxy_hardware(target, args.proxy_database or args.database)
    fn = cost.roofline_cost(hardware)
    for name in args.models:
        if name in results and not args.force:
            print(f"{name}: already in {out.name} (--force to re-run)")
            continue
        start = time.perf_counter()
        model = models.load(name, args.size)
        variants = {"original": (model.mod, 0.0, []), CONTROL: (commuted_adds(model.mod), 0.0, []),
                    **forced_variants(model.mod)}
        r = search.greedy(model.mod, fn, cap=args.cap)
        pair = tuned_cost.tuned_pair_measure(target, model.inputs, args.database, args.tune_trials, args.repeat,
                                             seed=args.seed) if args.tune_trials else \
            cost.pair_measure(target, model.inputs, database, repeat=args.repeat)
        variants["greedy"] = confirmed(r, model.mod, pair, not args.no_confirm)
        rows = measure_variants(model, variants, target, database, args.repeat, fn, tuner, lowering(args))
        best = max((k for k in rows if k not in ("original", CONTROL)), key=lambda k: rows[k]["speedup"])
        db = tuner(variants[best][0]) if tuner is not None else database
        account = {"original": kernel_account(model.mod, target, db, args.kernel_repeat),
                   best: kernel_account(variants[best][0], target, db, args.kernel_repeat)}
        results[name] = {"variants": rows, "best": best, "kernels_by_kind": account,
                         "seconds": round(time.perf_counter() - start, 1)}
        print(f"{name}: " + ", ".join(f"{k} {v['latency_ms']:.3f} ms ({v['speedup']:.2f}x)" for k, v in rows.items())
              + f" [{results[name]['seconds']:.0f} s]", flush=True)
        print_account(name, account["original"], account[best], best)
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({"target": str(target), "size": args.size, "seed": args.seed,
                                   "proxy": hardware.as_dict(),
                                   "database": cost.database_tag(database), "tune_trials": args.tune_trials,
                                   "repeat": args.repeat, "models": results}, indent=1))
    print(f"\n{'model':<12}{'variant':<28}{'ms':>10}{'speedup':>9}{'rewrites':>9}  ok")
    for name, res in results.items():
        for key, row in res["variants"].items():
            print(f"{name:<12}{key:<28}{row['latency_ms']:>10.3f}{row['speedup']:>8.2f}x{row['rewrites']:>9}  "
                  + ("yes" if row["matches_original"] else "NO"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
