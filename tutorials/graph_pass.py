"""# Tutorial (a): the RL graph pass on BERT and ResNeXt

X-RLflow's comparison, on our zoo: how much faster does a model run after the graph rewrite pass, against
TVM's default build (the exported graph as it is), TVM's own built-in Relax rewrites, and TASO-style greedy
search over the same rewrite rules? The pass is an ordinary `tvm.transform` module pass, so it goes into a
`Sequential` before `tvm.compile`, like any other.

Every variant is built with the same kernel schedules and checked against the original's outputs. On CPU,
untuned kernels are naive loops (see docs/limits.md), so the full run tunes every kernel of every variant with
MetaSchedule's evolutionary search to the same 16 trials into one shared database (`logs/tuning/llvm`, the
baseline's): a kernel that only a rewrite creates gets the same tuning as the original's. Greedy search and the
pass are steered by the roofline proxy and confirmed by that measurement, so neither returns a slower graph.

- **Quick** (`--quick`, ~2 min, run in CI): tiny models, untuned kernels.
- **Full** (default, ~30 min with the kernels already tuned by `benchmarks/graph_rl.py`): the zoo's full-size BERT and
  ResNeXt-50 with tuned kernels, the settings of `benchmarks/graph_rl.py --size full --tune-trials 16`, whose
  table in docs/results/graph_rl.md covers every zoo model.
"""
import argparse
import json
import time
from pathlib import Path

import tvm

from tvm_rl import measure, models
from tvm_rl.graph import RLRewritePass, cost, roofline, search
from tvm_rl.tune import tune_model

ap = argparse.ArgumentParser(description="Tutorial (a): the RL graph pass on BERT and ResNeXt")
ap.add_argument("--quick", action="store_true", help="tiny models, untuned kernels (~2 min)")
ap.add_argument("--out", default="logs/tutorial_graph_pass", help="where the JSON and the plot go")
ap.add_argument("--database", default="logs/tuning/llvm", help="full run: the shared tuning work dir")
args = ap.parse_args()
size, trials = ("tiny", 0) if args.quick else ("full", 16)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
target = measure.parse_target("llvm")
proxy = cost.roofline_cost(roofline.default_hardware(target))  # steers the searches: ~ms per graph

results = {}
for name in ("bert", "resnext50"):
    model = models.load(name, size)

    def runner_for(mod: tvm.IRModule) -> measure.Runner:
        """The built graph; in the full run its kernels are tuned first (those already tuned are skipped)."""
        database = tune_model(mod, target, args.database, trials_per_kernel=trials)[0] if trials else None
        return measure.Runner(measure.build(mod, target, database), target)

    # What confirms the searches' graphs: input and result built alike and timed side by side, as the table is.
    measure_pair = cost.pair_measure(target, model.inputs, repeat=20, tune=(
        lambda mod: tune_model(mod, target, args.database, trials_per_kernel=trials)[0]) if trials else None)

    variants, seconds = {"TVM default": model.mod}, {"TVM default": 0.0}
    t = time.perf_counter()
    variants["TVM built-ins"] = search.tvm_builtin(model.mod)
    seconds["TVM built-ins"] = time.perf_counter() - t

    greedy = search.greedy(model.mod, proxy, cap=64)
    greedy = search.confirm(greedy, model.mod, measure_pair)  # never slower than its input, by measurement
    variants["greedy"], seconds["greedy"] = greedy.mod, greedy.seconds

    # The pass as a user inserts it: one more module pass in the pipeline before tvm.compile. This tutorial
    # runs the learned policy; the pass's default is cheapest-first, a rule that matched or beat it.
    rl = RLRewritePass(target, policy="trained", max_steps=10 if args.quick else 20, episodes=2 if args.quick else 4,
                       time_budget_s=15 if args.quick else 60, cap=64, cost=proxy,
                       measure_pair=measure_pair)
    variants["RL pass"] = tvm.transform.Sequential([rl])(model.mod)
    seconds["RL pass"] = rl.last_report.seconds
    print(f"{name}: greedy applied {len(greedy.applied)} rewrites; RL pass: {rl.last_report.reason}")

    # The table: every variant built with the same schedules, checked against PyTorch, and timed in rounds
    # (each round runs every variant once), so load from other processes falls on all of them alike.
    reference = model.reference_outputs()
    runners, rows = {label: runner_for(mod) for label, mod in variants.items()}, {}
    timings = measure.time_interleaved(runners, model.inputs, repeat=20)
    for label, runner in runners.items():
        check = measure.compare(runner(model.inputs), reference, rtol=1e-3,
                                atol=1e-3 * measure.output_scale(reference))
        rows[label] = {"ms": timings[label].median_ms, "search_s": round(seconds[label], 1),
                       "outputs_match": check.ok}
    base, greedy_ms = rows["TVM default"]["ms"], rows["greedy"]["ms"]
    for row in rows.values():
        row["vs_default"], row["vs_greedy"] = base / row["ms"], greedy_ms / row["ms"]
    results[name] = rows

print(f"\n{size} models, LLVM on this CPU, " + ("kernels tuned to 16 trials each" if trials else "untuned kernels"))
print(f"{'model':<11}{'variant':<15}{'ms':>10}{'vs default':>12}{'vs greedy':>11}{'search s':>10}  outputs")
for name, rows in results.items():
    for label, r in rows.items():
        print(f"{name:<11}{label:<15}{r['ms']:>10.3f}{r['vs_default']:>11.2f}x{r['vs_greedy']:>10.2f}x"
              f"{r['search_s']:>10.1f}  {'match' if r['outputs_match'] else 'DIFFER'}")
stem = f"graph_pass_{size}"
(out / f"{stem}.json").write_text(json.dumps(results, indent=1))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(6, 3.2))
labels = list(next(iter(results.values())))
for i, label in enumerate(labels):
    ax.bar([j + 0.2 * (i - 1.5) for j in range(len(results))], [results[n][label]["vs_default"] for n in results],
           0.2, label=label)
ax.axhline(1.0, color="grey", lw=0.8)
ax.set_xticks(range(len(results)), list(results))
ax.set_ylabel("speedup over TVM default")
ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(out / f"{stem}.png", dpi=110)
print(f"figure: {out / f'{stem}.png'}")
