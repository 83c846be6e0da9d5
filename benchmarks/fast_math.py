"""Fast math, measured: each model built exactly and with `fast_math.FastMath()`, both tuned into one database
(the kernels without a transcendental are the same workloads, so they get the same schedules and only the
changed kernels differ), outputs checked against the source model, timed in interleaved rounds, PyTorch eager
beside. Resumable (a finished model is skipped on a rerun with the same settings; tuning resumes from the
database). Writes logs/fast_math_<target>.json and a bar plot.

    python benchmarks/fast_math.py                                # the held-out models with GELU / SiLU / sigmoid
    python benchmarks/fast_math.py --models bert vit --tune-trials 16
    python benchmarks/fast_math.py --functions                    # each function alone: ns per element, error
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: the repository root on sys.path, for the held-out models
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.support.heldout_models  # noqa: E402, F401  (registers the held-out models, the default --models)
from tvm_rl import measure, models  # noqa: E402
from tvm_rl.fast_math import fast_math, uses_transcendentals  # noqa: E402

MODELS = ["convnext_stage", "gpt2_stack", "mobilevit_block", "mbconv_se", "bert", "vit"]


def _parser(prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS[:4], help=f"zoo or held-out models (default: {MODELS[:4]})")
    ap.add_argument("--size", default="full", choices=models.SIZES)
    ap.add_argument("--target", default="llvm", help="llvm (this CPU), cuda, or a target JSON")
    ap.add_argument("--tune-trials", type=int, default=16, help="trials per kernel for both builds (0: untuned)")
    ap.add_argument("--seed", type=int, default=0, help="tuning seed")
    ap.add_argument("--repeat", type=int, default=30, help="interleaved timing rounds (medians reported; each row "
                    "records its own)")
    ap.add_argument("--database", default=None, help="tuning folder (default logs/tuning/fast_math_<target>)")
    ap.add_argument("--out", default=None, help="JSON path (default logs/fast_math_<target>.json)")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch eager")
    ap.add_argument("--force", action="store_true", help="re-measure models the JSON already has")
    ap.add_argument("--functions", action="store_true",
                    help="instead: each function alone on one core, exact and fast (ns per element, worst error)")
    return ap


def _functions(points: int) -> dict:
    """name -> (TVM's lowering, the fast version, float64 reference, error kind, grid of `points`)."""
    import math

    from tvm import topi

    wide = np.linspace(-100.0, 100.0, points, dtype=np.float32)
    return {
        "erf": (topi.erf, topi.fast_erf, np.vectorize(math.erf), "absolute",
                np.linspace(-10, 10, points, dtype=np.float32)),
        "tanh": (topi.tanh, topi.fast_tanh, np.tanh, "relative", wide),
        "exp": (topi.exp, topi.fast_exp, np.exp, "relative", wide[np.abs(wide) <= 80]),
        "sigmoid": (topi.sigmoid, lambda x: 1.0 / (1.0 + topi.fast_exp(-x)), lambda v: 1 / (1 + np.exp(-v)),
                    "relative", wide),
    }


def time_functions(target, repeat: int, points: int = 2_000_001) -> dict:
    """Each transcendental alone (TVM's lowering against the fast version): ns per element on one core of
    `target`'s CPU, untuned loops, and the fast version's worst error against a float64 reference."""
    import tvm
    from tvm import te

    if measure.is_gpu(target):
        raise SystemExit("--functions times the CPU's math-library calls against the fast versions: use an llvm "
                         "--target")
    one_core = tvm.target.Target({**target.export(), "num-cores": 1})
    device = measure.device_for(one_core)
    rows = {}
    for name, (exact, fast, ref, kind, grid) in _functions(points).items():
        truth = ref(grid.astype(np.float64))
        row: dict = {"elements": int(grid.size), "error_kind": kind}
        for key, fn in (("exact", exact), ("fast", fast)):
            x = te.placeholder(grid.shape, "float32", name="x")
            lib = tvm.compile(tvm.IRModule({"main": te.create_prim_func([x, fn(x)])}), target=one_core).jit()
            a, b = tvm.runtime.tensor(grid, device), tvm.runtime.tensor(np.zeros_like(grid), device)
            seconds = lib.time_evaluator("main", device, number=3, repeat=repeat)(a, b).median
            err = np.abs(b.numpy().astype(np.float64) - truth)
            err = err / np.maximum(np.abs(truth), 1e-30) if kind == "relative" else err
            row[key] = {"ns_per_element": seconds / grid.size * 1e9, "max_error": float(err.max())}
        rows[name] = row
        print(f"| {name} | {row['exact']['ns_per_element']:.2f} ns | {row['fast']['ns_per_element']:.2f} ns | "
              f"{row['exact']['ns_per_element'] / row['fast']['ns_per_element']:.1f}x | "
              f"{row['exact']['max_error']:.2g} / {row['fast']['max_error']:.2g} {kind} |", flush=True)
    return rows


def measure_model(name: str, size: str, target, database_dir: Path, trials: int, seed: int, repeat: int,
                  with_torch: bool) -> dict:
    """One model's row: both builds tuned, checked and timed together."""
    from tvm_rl.tune import tune_model
    from tvm_rl.tune.cost_model import from_spec

    model = models.load(name, size)
    reference = model.reference_outputs()
    scale = measure.output_scale(reference)
    variants = {"exact": model.mod, "fast": fast_math(model.mod)}
    row: dict = {"transcendentals": uses_transcendentals(model.mod), "tuning": {}, "max_abs_err": {}}
    runners = {}
    for key, mod in variants.items():
        database = None  # --tune-trials 0: TVM's default schedules (naive loops on CPU, dlight's on GPU)
        if trials:
            print(f"[{name}] {key}: tuning {trials} trials per kernel into {database_dir}", flush=True)
            database, report = tune_model(mod, target, database_dir, trials_per_kernel=trials,
                                          trials_per_iter=min(8, trials), seed=seed,
                                          cost_model=from_spec(None, seed, target.kind.name))
            row["tuning"][key] = {"kernels": report.tasks, "tuned_now": len(report.tuned), "trials": report.trials,
                                  "seconds": round(report.seconds, 1)}
        runner = measure.Runner(measure.build(mod, target, database), target)
        check = measure.compare(runner(model.inputs), reference, rtol=1e-3, atol=1e-3 * scale)
        row["max_abs_err"][key] = check.max_abs_err
        if not check.ok:
            raise SystemExit(f"{name}: the {key} build's output {check.worst_output} differs from the source "
                             f"model's by {check.max_abs_err:.3g}")
        runners[key] = runner
    samples: dict[str, list[float]] = {}
    timings = measure.time_interleaved(runners, model.inputs, repeat=repeat, samples_out=samples)
    row["repeat"] = repeat
    row["speedup_ci95"] = ratio_ci(samples["exact"], samples["fast"])
    row["ms"] = {k: t.median_ms for k, t in timings.items()}
    row["timing"] = {k: t.as_dict() for k, t in timings.items()}
    row["speedup"] = row["ms"]["exact"] / row["ms"]["fast"]
    if with_torch and model.torch_module is not None:
        from benchmarks.baseline import time_torch

        row["torch_ms"] = time_torch(model, "cuda" if measure.is_gpu(target) else "cpu", os.cpu_count() or 1)["ms"]
    return row


def ratio_ci(slow: list[float], fast: list[float], level: float = 0.95, draws: int = 2000,
             seed: int = 0) -> list[float]:
    """Bootstrap interval of median(slow) / median(fast), resampling the timing rounds as pairs (both builds ran
    in each round, so load that lands on a round lands on both)."""
    a, b = np.asarray(slow), np.asarray(fast)
    picks = np.random.default_rng(seed).integers(0, len(a), size=(draws, len(a)))
    ratios = np.median(a[picks], axis=1) / np.median(b[picks], axis=1)
    return [float(np.quantile(ratios, (1 - level) / 2)), float(np.quantile(ratios, (1 + level) / 2))]


def print_table(rows: dict, settings: dict) -> None:
    print(f"\nfast math on {settings['target']} ({settings['size']} size, {settings['tune_trials']} trials per kernel, "
          "medians of each row's interleaved rounds)")
    print("| model | rounds | exact build (ms) | fast math (ms) | speedup [95% CI] | IQR exact / fast (ms) | "
          "max abs err exact / fast | PyTorch eager (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        torch_ms = f"{r['torch_ms']:.2f}" if r.get("torch_ms") else "-"
        iqr = " / ".join(f"{r['timing'][k]['iqr_ms']:.2f}" for k in ("exact", "fast"))
        ci = "[{:.2f}, {:.2f}]".format(*r["speedup_ci95"]) if r.get("speedup_ci95") else "(no CI)"
        print(f"| {name} | {r.get('repeat', settings['repeat'])} | {r['ms']['exact']:.2f} | {r['ms']['fast']:.2f} | "
              f"{r['speedup']:.3f}x {ci} | {iqr} | "
              f"{r['max_abs_err']['exact']:.2g} / {r['max_abs_err']['fast']:.2g} | {torch_ms} |")


def plot(rows: dict, settings: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rows)
    fig, ax = plt.subplots(figsize=(1.2 * len(names) + 2, 3.5))
    ax.bar(names, [rows[n]["speedup"] for n in names], color="tab:blue")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_ylabel("exact / fast-math latency")
    ax.set_title(f"fast math, tuned builds ({settings['target_kind']}, {settings['tune_trials']} trials per kernel)")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None, prog: str = "benchmarks/fast_math.py") -> dict:
    """Run the benchmark with command-line arguments `argv`; returns the rows."""
    args = _parser(prog).parse_args(argv)
    target = measure.parse_target(args.target)
    kind = target.kind.name
    if args.functions:
        print(f"each function alone, one core of {target}, untuned loops, medians of {args.repeat}")
        print("| function | TVM's lowering | fast | speedup | worst error, exact / fast |\n|---|---|---|---|---|")
        rows = time_functions(target, args.repeat)
        out = Path(args.out or f"logs/fast_math_functions_{kind}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"target": str(target), "repeat": args.repeat, "date":
                                   datetime.now(timezone.utc).isoformat(), "functions": rows}, indent=1))
        print(f"wrote {out}")
        return rows
    out = Path(args.out or f"logs/fast_math_{kind}.json")
    database = Path(args.database or f"logs/tuning/fast_math_{kind}")
    settings = {"target": str(target), "target_kind": kind, "size": args.size, "tune_trials": args.tune_trials,
                "seed": args.seed, "repeat": args.repeat,
                "command": f"python {prog} " + " ".join(argv if argv is not None else sys.argv[1:])}
    saved = json.loads(out.read_text()) if out.exists() else {}
    keys = ("target", "size", "tune_trials", "seed")
    rows = saved.get("models", {}) if all(saved.get("settings", {}).get(k) == settings[k] for k in keys) else {}
    for name in args.models:
        if name in rows and not args.force:
            print(f"[{name}] already measured with these settings; skipping (--force to redo)")
            continue
        start = time.perf_counter()
        row = measure_model(name, args.size, target, database, args.tune_trials, args.seed, args.repeat,
                            not args.no_torch)
        row["wall_s"] = round(time.perf_counter() - start, 1)
        rows[name] = row
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"settings": settings, "date": datetime.now(timezone.utc).isoformat(),
                                   "models": rows}, indent=1))
        print(f"[{name}] exact {row['ms']['exact']:.2f} ms, fast {row['ms']['fast']:.2f} ms: "
              f"{row['speedup']:.3f}x ({row['wall_s']:.0f} s)", flush=True)
    if rows:
        print_table(rows, settings)
        plot(rows, settings, out.with_suffix(".png"))
        print(f"\nwrote {out} and {out.with_suffix('.png')}")
    return rows


__all__ = ["MODELS", "main", "measure_model"]

if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
