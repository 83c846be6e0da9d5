"""Fast math, measured: each model built exactly and with `fast_math.FastMath()`, both tuned into one database
(the kernels without a transcendental are the same workloads, so they get the same schedules and only the
changed kernels differ), outputs checked against the source model, timed in interleaved rounds, PyTorch eager
beside. Resumable (a finished model is skipped on a rerun with the same settings; tuning resumes from the
database). Writes logs/fast_math_<target>.json and a bar plot.

    python benchmarks/fast_math.py                                # the held-out models with GELU / SiLU / sigmoid
    python benchmarks/fast_math.py --models bert vit --tune-trials 16
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from . import measure, models
from .fast_math import fast_math, uses_transcendentals

MODELS = ["convnext_stage", "gpt2_stack", "mobilevit_block", "mbconv_se", "bert", "vit"]


def _parser(prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS[:4], help=f"zoo or held-out models (default: {MODELS[:4]})")
    ap.add_argument("--size", default="full", choices=models.SIZES)
    ap.add_argument("--target", default="llvm", help="llvm (this CPU), cuda, or a target JSON")
    ap.add_argument("--tune-trials", type=int, default=16, help="trials per kernel for both builds")
    ap.add_argument("--seed", type=int, default=0, help="tuning seed")
    ap.add_argument("--repeat", type=int, default=30, help="interleaved timing rounds (medians reported)")
    ap.add_argument("--database", default=None, help="tuning folder (default logs/tuning/fast_math_<target>)")
    ap.add_argument("--out", default=None, help="JSON path (default logs/fast_math_<target>.json)")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch eager")
    ap.add_argument("--force", action="store_true", help="re-measure models the JSON already has")
    return ap


def measure_model(name: str, size: str, target, database_dir: Path, trials: int, seed: int, repeat: int,
                  with_torch: bool) -> dict:
    """One model's row: both builds tuned, checked and timed together."""
    from .tune import tune_model
    from .tune.cost_model import from_spec

    model = models.load(name, size)
    reference = model.reference_outputs()
    scale = measure.output_scale(reference)
    variants = {"exact": model.mod, "fast": fast_math(model.mod)}
    row: dict = {"transcendentals": uses_transcendentals(model.mod), "tuning": {}, "max_abs_err": {}}
    runners = {}
    for key, mod in variants.items():
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
    timings = measure.time_interleaved(runners, model.inputs, repeat=repeat)
    row["ms"] = {k: t.median_ms for k, t in timings.items()}
    row["timing"] = {k: t.as_dict() for k, t in timings.items()}
    row["speedup"] = row["ms"]["exact"] / row["ms"]["fast"]
    if with_torch and model.torch_module is not None:
        from .bench import time_torch

        row["torch_ms"] = time_torch(model, "cuda" if measure.is_gpu(target) else "cpu", os.cpu_count() or 1)["ms"]
    return row


def print_table(rows: dict, settings: dict) -> None:
    print(f"\nfast math on {settings['target']} ({settings['size']} size, {settings['tune_trials']} trials per kernel, "
          f"medians of {settings['repeat']} interleaved rounds)")
    print("| model | exact build (ms) | fast math (ms) | speedup | max abs err exact / fast | PyTorch eager (ms) |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        torch_ms = f"{r['torch_ms']:.2f}" if r.get("torch_ms") else "-"
        print(f"| {name} | {r['ms']['exact']:.2f} | {r['ms']['fast']:.2f} | {r['speedup']:.3f}x | "
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
