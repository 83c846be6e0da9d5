"""Graph search benchmark: original, TVM's built-in Relax rewrites, greedy and backtracking, per zoo model.

`python benchmarks/graph_search.py [--size tiny|full] [--models ...] [--cost roofline|kernels] [--database DIR]
[--tune-trials N]`
Each variant is built with the same kernel schedules (untuned, or the given MetaSchedule work dir's), checked
against the original's outputs and timed end to end (median). With --tune-trials every variant's kernels are
first tuned to N trials each into that work dir (kernels already there are skipped), so kernels that only a
rewrite creates get the same tuning as the original's. Greedy's and backtracking's graphs are confirmed by the
same measurement and replaced by the original if no faster (--no-confirm shows the searches' raw picks).
Resumable: models already in logs/graph_search_<target>_<size>.json are skipped unless --force; the file is
rewritten after every model. The roofline proxy is fitted to --database's tuned kernels when one is given
(`graph.calibration`), else nominal. Quick by default (tiny models, roofline cost, 10 backtracking expansions). On CPU,
untuned kernels are naive loops (docs/limits.md): untuned speedups are not what a user of tuned builds gets.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tvm  # noqa: E402

import tests.support.heldout_models  # noqa: E402, F401  (registers the held-out models for --models)
from benchmarks.graphs import tuned_cost  # noqa: E402
from tvm_rl import measure, models  # noqa: E402
from tvm_rl.database import DatabaseLike, as_database  # noqa: E402
from tvm_rl.graph import cost, roofline, search  # noqa: E402
from tvm_rl.graph.fingerprint import same_graph  # noqa: E402


def open_database_arg(work_dir: str | None) -> "tvm.s_tir.meta_schedule.Database | None":
    """The MetaSchedule database of --database, or None (untuned kernels)."""
    return as_database(work_dir or None)


def proxy_hardware(target, work_dir: str | None) -> roofline.Roofline:
    """The roofline the searches minimise: fitted to --database's tuned kernels when given, else nominal."""
    from tvm_rl.graph.calibration import proxy_roofline

    return proxy_roofline(target, work_dir)


def add_tuning_args(ap: argparse.ArgumentParser, tune_seed: bool = True) -> None:
    """--database, --tune-trials, --no-confirm and (unless the benchmark has a --seed of its own) --tune-seed,
    shared by the graph benchmarks."""
    ap.add_argument("--database", default=None, help="MetaSchedule work dir with tuned kernels (default: none)")
    ap.add_argument("--tune-trials", type=int, default=0,
                    help="tune every variant's kernels to this many trials each into --database first (default 0)")
    if tune_seed:
        ap.add_argument("--tune-seed", type=int, default=0,
                        help="the tuner's seed: another seed into a fresh --database re-tunes the same kernels, to "
                             "see how much of a measured difference is tuning noise")
        ap.add_argument("--tune-seeds", type=int, nargs="+", default=None, metavar="SEED",
                        help="tune every kernel once per seed, each into --database/seed<SEED>, and build every "
                             "graph with the best record of them per kernel (--database becomes their merge): "
                             "at 16 trials a single tuning moves a rewritten graph by more than graphs differ")
    ap.add_argument("--no-confirm", action="store_true",
                    help="keep the searches' graphs even when they measure slower than the original")
    ap.add_argument("--fast-math", action="store_true",
                    help="build every measured graph with tvm_rl.fast_math.FastMath(), as tvm-rl optimize does on CPU "
                         "(the searches and the proxy still see the graph without it)")


def check_tuning_args(ap: argparse.ArgumentParser, args) -> None:
    if args.tune_trials and not args.database:
        ap.error("--tune-trials needs --database WORK_DIR, the work dir the new kernels are tuned into")
    if getattr(args, "tune_seeds", None):
        if not args.tune_trials:
            ap.error("--tune-seeds needs --tune-trials N (the trials per kernel each seed tunes)")
        if args.tune_seed != 0:
            ap.error("give --tune-seed or --tune-seeds, not both")
        if len(set(args.tune_seeds)) != len(args.tune_seeds):
            ap.error(f"--tune-seeds {' '.join(map(str, args.tune_seeds))}: each seed once")


def tune_options(args) -> dict:
    """The JSON's record of how kernels were tuned: trials, and the seed or the seeds whose best record built."""
    seeds = getattr(args, "tune_seeds", None)
    return {"tune_trials": args.tune_trials, "tune_seed": args.tune_seed, **({"tune_seeds": seeds} if seeds else {})}


def variant_measure(model, target, args) -> cost.PairMeasure:
    """(original, graph) -> both measured side by side on the model's inputs, as the table measures them (their
    kernels tuned first with --tune-trials)."""
    if args.tune_trials:
        return cost.pair_measure(target, model.inputs, repeat=args.repeat, tune=tuner(target, args))
    return cost.pair_measure(target, model.inputs, open_database_arg(args.database), repeat=args.repeat)


def tuner(target, args):
    """With --tune-trials: mod -> the database after tuning mod's kernels into --database (with --tune-seeds, the
    seeds' merge). Else None."""
    if not args.tune_trials:
        return None
    if getattr(args, "tune_seeds", None):
        return tuned_cost.best_of_seeds_tuner(target, args.database, args.tune_trials, args.tune_seeds)
    return tuned_cost.database_tuner(target, args.database, args.tune_trials, seed=args.tune_seed)


def lowering(args):
    """With --fast-math: what every measured graph is built as (`fast_math.fast_math`). Else None."""
    if not getattr(args, "fast_math", False):
        return None
    from tvm_rl.fast_math import fast_math

    return fast_math


def confirmed(r: search.SearchResult, original: tvm.IRModule, measure_pair, enabled: bool) -> tuple:
    """(graph, search seconds, rewrites, guard note) of a search result, after the measured guard if enabled."""
    if enabled:
        r = search.confirm(r, original, measure_pair)
    note = None if r.measured_ms is None else {"measured_before_ms": r.measured_ms[0],
                                                "measured_after_ms": r.measured_ms[1], "kept": r.kept}
    if r.rejected is not None:  # what the search had found, for reading why the proxy liked it
        note.update(rejected_rewrites=r.rejected[0], rejected_search_cost_ms=r.rejected[1])
    return r.mod, r.seconds, r.applied, note


def measure_variants(model, variants: dict, target, database: DatabaseLike, repeat: int, fn,
                     tune=None, lower=None) -> dict[str, dict]:
    """Build every variant with the same kernel schedules, check it against the first one's outputs, and time
    them all in interleaved rounds (`measure.time_interleaved`).

    `tune(mod) -> database`, when given, tunes a variant's kernels first and returns the database to build with;
    `lower(mod) -> mod`, when given, is what gets tuned and built (`--fast-math`), the proxy pricing `mod` itself.
    A variant whose graph is one built before (a guard that returned the input, a search that found nothing) is
    that build, timed once: two builds of one BERT graph measured 111 and 120 ms in the same rounds."""
    rows, runners, reference, built = {}, {}, None, {}
    for key, (mod, seconds, applied, *guard) in variants.items():
        same = next((k for k, m in built.items() if same_graph(m, mod)), None)
        # The built-in passes leave call_tir kernels and repeated names, which the Relax cost model cannot read.
        rows[key] = {"search_cost_ms": None if key == "relax_builtin" else fn(mod),
                     "optimisation_s": round(seconds, 2), "rewrites": len(applied), "applied": applied}
        if guard and guard[0]:
            rows[key]["guard"] = guard[0]
        if same is not None:
            rows[key].update(same_graph_as=same, matches_original=rows[same]["matches_original"],
                             max_abs_err=rows[same]["max_abs_err"])
            continue
        built[key] = mod
        if lower is not None:
            mod = lower(mod)
        if tune is not None:
            database = tune(mod)
        runners[key] = runner = measure.Runner(measure.build(mod, target, database), target)
        outputs = runner(model.inputs)
        if reference is None:
            reference = outputs
        scale = measure.output_scale(reference)
        check = measure.compare(outputs, reference, rtol=1e-3, atol=1e-3 * scale)
        rows[key].update(matches_original=check.ok, max_abs_err=check.max_abs_err)
    # All variants timed in rounds, so load from other processes falls on each alike.
    for key, timing in measure.time_interleaved(runners, model.inputs, repeat=repeat).items():
        rows[key].update(latency_ms=timing.median_ms, iqr_ms=timing.iqr_ms)
    for row in rows.values():
        if "same_graph_as" in row:
            twin = rows[row["same_graph_as"]]
            row.update(latency_ms=twin["latency_ms"], iqr_ms=twin["iqr_ms"])
    first = next(iter(rows.values()))["latency_ms"]
    for row in rows.values():
        row["speedup"] = first / row["latency_ms"]
    return rows


def print_table(results: dict[str, dict], keys) -> None:
    """Latency (speedup over the original) per variant, the last variant's rewrites and time, and correctness."""
    last = keys[-1]
    print(f"\n{'model':<14}" + "".join(f"{k + ' ms':>17}" for k in keys) + f"{last[:6] + ' rw':>11}{'s':>7}  ok")
    for name, rows in results.items():
        print(f"{name:<14}" + "".join(f"{rows[k]['latency_ms']:>9.3f} ({rows[k]['speedup']:.2f}x)" for k in keys)
              + f"{rows[last]['rewrites']:>11}{rows[last]['optimisation_s']:>7.1f}  "
              + ("n/a" if any(r.get("proxy_only") for r in rows.values())  # nothing was built to check
                 else "yes" if all(r["matches_original"] for r in rows.values()) else "NO"))


def plot_speedups(results: dict[str, dict], keys, path: Path, title: str) -> Path:
    """Speedup over the original per model and variant, beside each variant's optimisation time (log scale): a
    rewrite's worth is both what it gains and what it costs to find."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names, keys = list(results), [k for k in keys if k != "original"]
    x, width = np.arange(len(names)), 0.8 / max(1, len(keys))
    fig, (ax, at) = plt.subplots(1, 2, figsize=(max(9, 1.5 * len(names) + 4), 4.2),
                                 gridspec_kw={"width_ratios": [3, 2]})
    for i, key in enumerate(keys):
        at_x = x + (i - (len(keys) - 1) / 2) * width
        ax.bar(at_x, [results[n][key]["speedup"] for n in names], width, label=key)
        at.bar(at_x, [max(results[n][key]["optimisation_s"], 1e-2) for n in names], width, label=key)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("speedup over the original (x)")
    ax.set_ylim(bottom=min(0.9, min(results[n][k]["speedup"] for n in names for k in keys) - 0.05))
    at.set_yscale("log")
    at.set_ylabel("optimisation time (s, log)")
    for axis in (ax, at):
        axis.set_xticks(x, names, rotation=30, ha="right")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=models.SIZES)
    ap.add_argument("--models", nargs="*", default=models.names())
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--cost", default="roofline", choices=("roofline", "kernels"),
                    help="what the searches minimise: the Relax roofline proxy or the cached per-kernel sum")
    add_tuning_args(ap)
    ap.add_argument("--budget", type=int, default=10, help="backtracking expansions")
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--cap", type=int, default=64, help="candidates per expansion")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--force", action="store_true", help="re-run models already in the JSON")
    args = ap.parse_args()
    check_tuning_args(ap, args)
    target = measure.parse_target(args.target)
    database = open_database_arg(args.database)
    out = Path(__file__).resolve().parents[1] / "logs" / f"graph_search_{target.kind.name}_{args.size}.json"
    results = json.loads(out.read_text())["models"] if out.exists() else {}
    hardware = proxy_hardware(target, args.database)
    cache = cost.KernelCostCache(target, database) if args.cost == "kernels" else None
    for name in args.models:
        if name in results and not args.force:
            print(f"{name}: already in {out.name} (--force to re-run)")
            continue
        model = models.load(name, args.size)
        fn = cost.kernel_sum_cost(cache) if cache else cost.roofline_cost(hardware)
        variants, rows = {"original": (model.mod, 0.0, [])}, {}
        start = time.perf_counter()
        variants["relax_builtin"] = (search.tvm_builtin(model.mod), time.perf_counter() - start,
                                     list(search.TVM_BUILTIN_PASSES))
        measure_pair = variant_measure(model, target, args)
        r = search.greedy(model.mod, fn, cap=args.cap)
        variants["greedy"] = confirmed(r, model.mod, measure_pair, not args.no_confirm)
        r = search.backtracking(model.mod, fn, alpha=args.alpha, budget=args.budget, cap=args.cap)
        variants["backtracking"] = confirmed(r, model.mod, measure_pair, not args.no_confirm)
        rows = measure_variants(model, variants, target, database, args.repeat, fn, tuner(target, args),
                                lowering(args))
        results[name] = rows
        print(f"{name}: " + ", ".join(f"{k} {v['latency_ms']:.3f} ms ({v['speedup']:.2f}x)" for k, v in rows.items()),
              flush=True)
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({"target": str(target), "size": args.size, "search_cost": args.cost,
                                   "proxy": hardware.as_dict(),
                                   "database": cost.database_tag(database), **tune_options(args),
                                   "confirmed": not args.no_confirm, "budget": args.budget,
                                   "alpha": args.alpha, "cap": args.cap, "repeat": args.repeat,
                                   "models": results}, indent=1))
    keys = ("original", "relax_builtin", "greedy", "backtracking")
    print_table(results, keys)
    if results:
        title = f"Graph search, {target.kind.name} ({args.size})"
        print(f"wrote {plot_speedups(results, keys, out.with_suffix('.png'), title)}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
