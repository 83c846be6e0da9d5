"""# Tutorial (b): tuning TopHub kernels with PPOSearch

CHAMELEON's comparison, on TVM 0.27: an actor-critic PPO agent walks each kernel's knob space, an XGBoost cost
model rates where it lands, and the best-rated points get measured (CHAMELEON's clustering-based adaptive sampling,
`strategy="ppo-adaptive"`, did not beat that top-k pick in the benchmark, so it is not the default). How many hardware
measurements does it need to reach the schedule MetaSchedule's evolutionary search finds, and how does it
compare with simulated annealing?

1. Load the TopHub tasks: the AutoTVM-era workloads, rebuilt as TensorIR kernels.
2. Tune one of them with `PPOSearch` into a MetaSchedule database: `strategy="ppo"` anywhere tvm-rl tunes, or a
   `PPOSearch()` object passed to MetaSchedule's own `tune_tir` / `tune_relax`.
3. Compare the strategies (best latency vs measured trials; measurements-to-target curves): this is
   `benchmarks/tuner.py`, run from here.

- **Quick** (`--quick`, ~2 min, run in CI): one small task, 8 trials, one seed: a check, not a result.
- **Full** (default): step 2 tunes one conv2d task for 32 trials (a few minutes); step 3 reads back the committed
  benchmark (`logs/tuner_llvm.json`: 8 tasks x 8 seeds x 5 arms, N = 64, about 2.7 h on 2 cores) with `--report`,
  without new runs. Its result: evolutionary search with the pre-trained cost model, the tuner's default, beats stock
  evolutionary search (1.12x faster kernels); PPOSearch does not (docs/results/tuner.md).
"""
import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the benchmark lives beside tvm_rl

from benchmarks.tuning import benchmark  # noqa: E402
from tvm_rl import measure  # noqa: E402
from tvm_rl.tune import tune_workloads  # noqa: E402
from tvm_rl.tune.tophub import load_tasks, tophub_dir  # noqa: E402

ap = argparse.ArgumentParser(description="Tutorial (b): tuning TopHub kernels with PPOSearch")
ap.add_argument("--quick", action="store_true", help="one small task, 8 trials, one seed (~2 min)")
ap.add_argument("--out", default="logs/tutorial_tuner",
                help="where the demo database, plots (and the quick run's JSON) go")
args = ap.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
target = measure.host_cpu_target()

# 1. TopHub: every distinct workload of TVM's pre-tuned logs, with the best latency recorded per device.
tasks = {t.name: t for t in load_tasks(tophub_dir())}  # $TVM_RL_TOPHUB_DIR, else ~/.tvm/tophub
kinds = collections.Counter(name.split("_n1")[0].split("_b1")[0] for name in tasks)
print(f"{len(tasks)} TopHub tasks: " + ", ".join(f"{n} {k}" for k, n in kinds.most_common(6)) + ", ...")

# 2. One task, tuned with PPOSearch into a database (kernels already there would be skipped: runs resume).
name = "batch_matmul_b1_m128_n128_k20" if args.quick else "conv2d_n1_c256_h28_w28_o256_k1_s1_p0"
trials = 8 if args.quick else 32
database, report = tune_workloads([(name, tasks[name].mod(), 1.0)], target, out / "tuning_demo",
                                  trials_per_kernel=trials, trials_per_iter=8, strategy="ppo")
best = min(float(sum(r.run_secs) / len(r.run_secs)) for r in database.get_all_tuning_records()
           if r.run_secs and float(r.run_secs[0]) < 1e9)
print(f"{name}: {report.measured} measurements in {report.seconds:.0f} s, best {best * 1e6:.1f} us")

# 3. The strategies side by side: the benchmark, quick or at full size (resumed from its JSON).
if args.quick:
    bench_args = ["--quick", "--tasks", name, "--trials", "8", "--per-iter", "4", "--seeds", "1",
                  "--strategies", "ppo", "evolutionary", "annealing",
                  "--out", str(out / "tuner_quick.json"), "--work-dir", str(out / "tuner_runs")]
else:
    # The committed benchmark of record, read back without new runs (`--report`): rerunning it is
    # `python benchmarks/tuner.py` with these settings and without `--report` (docs/results/tuner.md).
    bench_args = ["--report", "--trials", "64", "--per-iter", "16", "--out", "logs/tuner_llvm.json"]
benchmark.main(bench_args, prog="benchmarks/tuner.py")
result = Path(bench_args[bench_args.index("--out") + 1])
import json  # noqa: E402

runs = json.loads(result.read_text())["runs"]
n = int(bench_args[bench_args.index("--trials") + 1])
print("\nfraction of runs at their task's target (best re-timed latency of any arm x 1.05), by measured trials:")
for strategy, frac in benchmark.reach_fractions(runs, n).items():
    marks = [t for t in (n // 4, n // 2, n) if t]
    print(f"  {strategy:<13}" + "  ".join(f"@{t}: {frac[t - 1]:.2f}" for t in marks))
benchmark.plot_reach(runs, n, out / f"tuner_reach{'_quick' if args.quick else ''}.png")
print(f"figure: {result.with_suffix('.png')}")
print(f"figure: {out / ('tuner_reach' + ('_quick' if args.quick else '') + '.png')}")
