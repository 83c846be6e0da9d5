"""Graph RL ablation: the pass's arms (learned and not) and the search baselines per model, over seeds.

`python benchmarks/graph_rl.py [--size tiny|full] [--models ...] [--arms ...] [--seeds 0 1 2] [--no-measure]
[--proxy-from JSON | --database DIR] [--price-records DB] [--policy PATH] [--audit] [--tune-trials N
[--tune-seeds 0 1 2]] [--save-graphs DIR]`
Arms (`tvm_rl.graph.arms`, `benchmarks.graphs.ablation`): uniform, cheapest-first, cost-softmax, cheapest-then-softmax,
untrained, trained and cheapest-then-trained (--policy: the checkpoint of the last two) run in `RLRewritePass`'s own
loop (shortlist, every-match actions, --episodes, --time-budget), once per seed; greedy, greedy-never-stop,
backtracking-100 and backtracking-1000 are deterministic searches, run once.
All are steered and first judged by the roofline proxy: fitted to --database's tuned kernels, or rebuilt from
the "proxy" a previous run recorded in its JSON (--proxy-from), else nominal; with --price-records DB, every kernel
DB has tuned is priced by its record instead (`graph.record_cost`). Per model and arm: the proxy's
speedup, mean ± 95% t-interval over the seeds (n = 3 by default: a wide interval), seconds and steps, and
which arms differ from the best non-learned arm by more than 1%. Without --no-measure, a model on which any
two arms differ by more than 1% by the proxy has every arm's graphs built with the same kernel schedules
(--database's; with --tune-trials tuned first, with --tune-seeds once per seed and built with the best record of
them), checked against the original and timed in interleaved
rounds (with --measure-all, also where they are within 1%); unless --no-confirm, a graph measured no faster
than the original counts as the original (what the pass's and the searches' confirmation return).
Resumable: logs/graph_ablation_<target>_<size>[_proxy].json is rewritten after every run, and runs already
there are kept unless --force (by the proxy: per run; measured: per model). With --audit, every measured
graph's kernels are also timed alone and set beside the proxy's price of them, per kernel kind: where the
proxy and the measurement disagree. On CPU, untuned kernels are naive loops (docs/limits.md).
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from graph_search import (  # noqa: E402
    add_tuning_args,
    check_tuning_args,
    lowering,
    measure_variants,
    open_database_arg,
    proxy_hardware,
    tune_options,
    tuner,
)

import tests.support.heldout_models  # noqa: E402, F401  (registers the held-out models for --models)
from benchmarks.graphs import ablation, proxy_audit  # noqa: E402
from tvm_rl import measure, models  # noqa: E402
from tvm_rl.graph import cost  # noqa: E402
from tvm_rl.graph.calibration import recorded_proxy  # noqa: E402


def add_arm_args(ap: argparse.ArgumentParser, default_arms: tuple[str, ...] = ablation.ALL) -> None:
    """--arms, --seeds, --proxy-from and the pass's loop settings, shared with compare_policies.py."""
    ap.add_argument("--arms", nargs="+", default=list(default_arms), type=ablation.check_arm,
                    help=f"arms to run (default: {' '.join(default_arms)}; backtracking-N for any budget N)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="seeds of the pass's arms")
    ap.add_argument("--proxy-from", default=None, help="a benchmark JSON whose recorded \"proxy\" (a fitted "
                    "roofline) prices the graphs, when its --database is not at hand")
    ap.add_argument("--price-records", default=None, metavar="DB", help="a tuning database folder whose records "
                    "price every kernel it has tuned (at its best time), the proxy pricing only the others "
                    "(tvm_rl.graph.record_cost)")
    # Defaults from ablation.Settings, whose pass settings are RLRewritePass's own (graph/defaults.py).
    s = ablation.Settings()
    ap.add_argument("--cap", type=int, default=s.cap, help=f"candidates per step (searches and the pass; default "
                    f"{s.cap}, as RLRewritePass; 0: every candidate)")
    ap.add_argument("--steps", type=int, default=s.max_steps, help="pass: steps per episode (the time budget "
                    "usually ends it first); greedy-never-stop: steps")
    ap.add_argument("--episodes", type=int, default=s.episodes, help="pass: episodes")
    ap.add_argument("--time-budget", type=float, default=s.time_budget_s, help="pass: search seconds per model and "
                    "run (0: none, the steps alone bound it)")
    ap.add_argument("--shortlist", type=int, default=s.shortlist, help="pass: candidates shown per step")
    ap.add_argument("--no-all-matches", action="store_true", help="pass: one match per step only")
    ap.add_argument("--alpha", type=float, default=s.alpha, help="backtracking's alpha")
    ap.add_argument("--greedy-steps", type=int, default=s.greedy_steps, help="greedy: rewrites at most")


def proxy_of(target, args):
    """The roofline the arms are priced with (see --proxy-from), and where it came from."""
    if args.proxy_from:
        return recorded_proxy(args.proxy_from), args.proxy_from
    return proxy_hardware(target, args.database), args.database or "nominal"


def pricing_of(hardware, args) -> tuple:
    """(a factory of fresh memoised cost functions, what prices) for the arms: the proxy alone, or with
    --price-records the database's records where it has the kernel. The records are read once."""
    if not getattr(args, "price_records", None):
        return (lambda: cost.roofline_cost(hardware)), "proxy"
    from tvm_rl.graph.record_cost import RecordCost, RecordIndex

    index = RecordIndex.of(args.price_records)
    return (lambda: cost.Memo(RecordCost(index, hardware))), f"records of {args.price_records}, else the proxy"


def settings_of(target, args) -> ablation.Settings:
    """The arms' settings from the shared arguments; --time-budget 0 bounds the pass by steps alone."""
    budget = args.time_budget if args.time_budget is not None and args.time_budget > 0 else None
    return ablation.Settings(target, args.episodes, args.steps, budget, args.cap or None, args.shortlist,
                             not args.no_all_matches, args.alpha, args.greedy_steps, args.policy,
                             getattr(args, "fast_math", False))


def summaries(runs: dict[str, list[dict]], key: str = "speedup") -> dict[str, dict]:
    return {arm: ablation.summarise(rows, key) for arm, rows in runs.items() if rows}


def table(results: dict[str, dict], arms: list[str], part: str = "summary",
          learned: tuple[str, ...] = ablation.arms.LEARNED) -> list[str]:
    """Markdown rows: per model each arm's mean speedup ± 95% CI ("*": more than 1% from the best non-learned
    arm, which is in bold; `learned`: the learned arms), then the geometric mean over the models that ran every
    arm."""
    lines = ["| model | " + " | ".join(arms) + " |", "|---" * (len(arms) + 1) + "|"]
    full = {n: r[part] for n, r in results.items() if isinstance(r.get(part), dict) and all(a in r[part] for a in arms)}
    for name, summ in full.items():
        cmp = ablation.compare({a: summ[a] for a in arms}, learned=learned)
        cells = [(f"**{ablation.cell(summ[a])}**" if a == cmp["best_non_learned"] else ablation.cell(summ[a]))
                 + (" *" if a in cmp["differ"] else "") for a in arms]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if full:
        geo = {a: ablation.geomean(s[a]["mean"] for s in full.values()) for a in arms}
        lines.append("| geomean | " + " | ".join(f"{geo[a]:.3f}" for a in arms) + " |")
    return lines


def effort_table(results: dict[str, dict], arms: list[str]) -> list[str]:
    """Markdown rows: per model each arm's mean seconds and steps (expansions for the searches)."""
    lines = ["| model | " + " | ".join(arms) + " |", "|---" * (len(arms) + 1) + "|"]
    for name, r in results.items():
        s = r.get("summary", {})
        if all(a in s for a in arms):
            lines.append(f"| {name} | " + " | ".join(f"{s[a]['seconds']:.1f} s, {s[a]['steps']:.0f}" for a in arms)
                         + " |")
    return lines


def missing(runs: dict[str, list[dict]], arms: list[str], seeds: list[int]) -> list[tuple[str, int | None]]:
    """The (arm, seed) runs not in `runs` (a baseline's one run has seed None)."""
    return [(a, s) for a in arms for s in (seeds if ablation.is_seeded(a) else [None])
            if not any(r["seed"] == s for r in runs.get(a, []))]


def save_graph(folder: Path, key: str, mod) -> None:
    """`mod` as `folder/<key>.relax.json` (`--save-graphs`)."""
    import tvm

    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.relax.json").write_text(tvm.ir.save_json(mod))


def load_graph(folder: Path, key: str):
    """The graph `save_graph` wrote as `folder/<key>.relax.json`; SystemExit naming the file when it is not there."""
    import tvm

    path = folder / f"{key}.relax.json"
    if not path.is_file():
        raise SystemExit(f"--graphs-from: no {path} (graph_rl.py --save-graphs {folder.parent} writes one per run)")
    return tvm.ir.load_json(path.read_text())


def measure_arms(model, graphs: dict, runs: dict, target, database, args, hardware, price) -> dict:
    """Build and time every arm's distinct graph beside the original; per arm the measured speedup over seeds
    (a graph no faster than the original counts as it, unless --no-confirm)."""
    variants = {"original": (model.mod, 0.0, [])}
    for (arm, seed), mod in graphs.items():
        row = next(r for r in runs[arm] if r["seed"] == seed)
        variants[f"{arm}@{seed}"] = (mod, row["seconds"], row["applied"])
    rows = measure_variants(model, variants, target, database, args.repeat, price(),
                            tuner(target, args), lowering(args))
    base = rows["original"]["latency_ms"]
    measured: dict[str, list[dict]] = {}
    for (arm, seed) in graphs:
        r, proxy_row = rows[f"{arm}@{seed}"], next(x for x in runs[arm] if x["seed"] == seed)
        speedup = r["speedup"] if args.no_confirm or r["latency_ms"] < base else 1.0
        measured.setdefault(arm, []).append({"seed": seed, "speedup": speedup, "raw_speedup": r["speedup"],
                                             "latency_ms": r["latency_ms"], "matches_original": r["matches_original"],
                                             "seconds": proxy_row["seconds"], "steps": proxy_row["steps"]})
    summ = summaries(measured)
    out = {"original_ms": base, "runs": measured, "summary": summ, "compare": ablation.compare(summ),
           "all_match_original": all(r["matches_original"] for r in rows.values())}
    if args.audit:
        out["audit"] = audit_variants(variants, rows, target, database, args, hardware)
    return out


def audit_variants(variants: dict, rows: dict, target, database, args, hardware) -> dict[str, dict]:
    """`proxy_audit.audit_graph` of every distinct measured graph with the schedules it was built with."""
    # With --tune-trials, --database holds every variant's kernels by now: opened again, it reads them all.
    if args.tune_trials:
        database = open_database_arg(args.database)
    audits = {}
    for key, (mod, *_) in variants.items():
        if "same_graph_as" in rows[key]:
            continue
        print(f"  auditing {key}'s kernels", flush=True)
        audits[key] = proxy_audit.audit_graph(mod, target, hardware, database)
        audits[key]["latency_ms"] = rows[key]["latency_ms"]
    return audits


def plot(results: dict[str, dict], arms: list[str], path: Path, title: str) -> Path:
    """Mean speedup per model and arm with its 95% interval: by the proxy, and beside it measured where the arms'
    graphs were built and timed (the proxy has ranked graphs the other way round, so both are drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = [("proxy", {n: r["summary"] for n, r in results.items()})]
    measured = {n: r["measured"]["summary"] for n, r in results.items()
                if isinstance(r.get("measured"), dict) and "summary" in r["measured"]}
    if measured:
        panels.append(("measured", measured))
    fig, axes = plt.subplots(1, len(panels), figsize=(len(panels) * max(9, 1.3 * len(results) + 4), 4.5),
                             squeeze=False)
    for ax, (kind, summaries) in zip(axes[0], panels):
        names = [n for n, summ in summaries.items() if all(a in summ for a in arms)]
        x, width = np.arange(len(names)), 0.8 / max(1, len(arms))
        for i, arm in enumerate(arms):
            s = [summaries[n][arm] for n in names]
            ax.bar(x + (i - (len(arms) - 1) / 2) * width, [v["mean"] for v in s], width, label=arm,
                   yerr=[v["ci95"] or 0.0 for v in s], capsize=2)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylim(bottom=0.9)
        ax.set_ylabel(f"{kind} speedup over the original (x)")
        ax.set_xticks(x, names, rotation=30, ha="right")
        ax.set_title(f"{title}, {kind}" if len(panels) > 1 else f"{title}, by the proxy")
        ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=models.SIZES)
    ap.add_argument("--models", nargs="*", default=models.names())
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--policy", default=None, help="the learned arms' checkpoint (default: the shipped one)")
    add_arm_args(ap)
    add_tuning_args(ap)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-measure", action="store_true", help="compare by the proxy only (no builds: for "
                    "full-size models on CPU, whose untuned builds take minutes per run)")
    ap.add_argument("--measure-all", action="store_true", help="build and time the arms' graphs also where they "
                    "are within 1%% of each other by the proxy (the proxy can be 10%% off on a graph)")
    ap.add_argument("--audit", action="store_true", help="measured: also time every graph's kernels alone and "
                    "set them beside the proxy's price, per kind (benchmarks.graphs.proxy_audit)")
    ap.add_argument("--save-graphs", default=None, metavar="DIR", help="write every run's graph (and the original) "
                    "to DIR/<model>/<arm>@<seed>.relax.json (tvm.ir.load_json reads them): to price them again "
                    "with another cost without searching again")
    ap.add_argument("--graphs-from", default=None, metavar="DIR", help="measure the runs already in the JSON "
                    "(e.g. of a --no-measure run, copied to --out) with their graphs read from DIR, as --save-graphs "
                    "wrote them, instead of searching again")
    ap.add_argument("--force", action="store_true", help="re-run the runs already in the JSON")
    ap.add_argument("--table-only", action="store_true", help="print the JSON's table and run nothing")
    ap.add_argument("--out", default=None, help="JSON path (default logs/graph_ablation_<target>_<size>"
                    "[_proxy].json): runs with other settings go to another file, not mixed into that one")
    args = ap.parse_args()
    check_tuning_args(ap, args)
    target = measure.parse_target(args.target)
    database = open_database_arg(args.database)
    hardware, proxy_source = proxy_of(target, args)
    price, priced_by = pricing_of(hardware, args)
    settings = settings_of(target, args)
    suffix = "_proxy" if args.no_measure else ""
    out = Path(args.out) if args.out else (Path(__file__).resolve().parents[1] / "logs"
                                          / f"graph_ablation_{target.kind.name}_{args.size}{suffix}.json")
    saved = json.loads(out.read_text()) if out.exists() else {}
    results = saved.get("models", {})
    command = "python " + " ".join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]])

    def save() -> None:
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({"target": str(target), "size": args.size, "proxy": hardware.as_dict(),
                                   "proxy_source": proxy_source, "priced_by": priced_by,
                                   "database": cost.database_tag(database),
                                   "measured": not args.no_measure, **tune_options(args),
                                   "confirmed": not args.no_confirm, "seeds": args.seeds, "arms": args.arms,
                                   "settings": settings.as_dict(), "repeat": args.repeat, "command": command,
                                   "models": results}, indent=1))

    for name in [] if args.table_only else args.models:
        entry = results.get(name, {})
        # Measured results need every graph in this process: a model not yet measured runs all its arms again.
        # With --graphs-from, runs searched before (--no-measure) are kept: their graphs are read, not searched for.
        keep = entry.get("runs", {}) if not args.force and (args.no_measure or "measured" in entry
                                                            or args.graphs_from) else {}
        if not missing(keep, args.arms, args.seeds) and (args.no_measure or "measured" in entry):
            print(f"{name}: already in {out.name} (--force to re-run)")
            continue
        model = models.load(name, args.size)
        if args.save_graphs:
            save_graph(Path(args.save_graphs) / name, "original", model.mod)
        entry = results[name] = {"runs": dict(keep), "run": {"date": time.strftime("%Y-%m-%d"),
                                                              "settings": settings.as_dict(), "proxy": proxy_source}}
        graphs = {} if not args.graphs_from else {
            (arm, row["seed"]): load_graph(Path(args.graphs_from) / name, f"{arm}@{row['seed']}")
            for arm, rows in keep.items() if arm in args.arms for row in rows}

        def on_run(arm: str, r: ablation.Run) -> None:
            graphs[(arm, r.seed)] = r.mod
            if args.save_graphs:
                save_graph(Path(args.save_graphs) / name, f"{arm}@{r.seed}", r.mod)
            print(f"  {name} {arm} seed {r.seed}: {r.speedup:.3f}x, {r.seconds:.1f} s, {r.steps} steps", flush=True)
            entry["runs"][arm] = entry["runs"].get(arm, []) + [r.row()]
            entry["summary"] = summaries(entry["runs"])
            save()

        ablation.evaluate(model.mod, args.arms, args.seeds, price, settings,
                          done=keep, on_run=on_run)
        entry["summary"] = summaries(entry["runs"])
        entry["compare"] = ablation.compare({a: entry["summary"][a] for a in args.arms})
        if not args.no_measure:
            entry["measured"] = (measure_arms(model, graphs, entry["runs"], target, database, args, hardware, price)
                                 if entry["compare"]["any_differ"] or args.measure_all
                                 else {"skipped": "no two arms differ by more than 1% by the proxy"})
        save()
        cmp = entry["compare"]
        print(f"{name}: best non-learned {cmp['best_non_learned']}; " + ", ".join(
            f"{a} {ablation.cell(entry['summary'][a])} ({cmp['vs_best'][a]:+.1%})" for a in args.arms), flush=True)
    if not results:
        print(f"nothing in {out}")
        return
    print(f"\nproxy speedup, mean ± 95% t-interval over seeds {args.seeds} (n = {len(args.seeds)}; baselines: one run)")
    print("\n".join(table(results, args.arms)))
    print("\nseconds, steps (searches: expansions)")
    print("\n".join(effort_table(results, args.arms)))
    if any(isinstance(r.get("measured"), dict) and "summary" in r["measured"] for r in results.values()):
        print("\nmeasured speedup (models where arms differ by the proxy)")
        print("\n".join(table({n: r["measured"] for n, r in results.items()
                               if isinstance(r.get("measured"), dict)}, args.arms)))
    for name, r in results.items():
        if isinstance(r.get("measured"), dict) and r["measured"].get("audit"):
            print(f"\n{name}: the proxy's price against the kernels timed alone, per kind")
            print("\n".join(proxy_audit.audit_table(r["measured"]["audit"])))
    title = f"Graph arms, {target.kind.name} ({args.size})"
    png = plot(results, args.arms, out.with_suffix(".png"), title)
    print(f"{'read' if args.table_only else 'wrote'} {out}; plot {png}")


if __name__ == "__main__":
    main()
