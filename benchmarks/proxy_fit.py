"""How far the graph proxy is from tuned builds' measured latency, per full-size zoo model.

`python benchmarks/proxy_fit.py [--database logs/tuning/llvm] [--measured logs/baseline_llvm_full.json]`
The proxy (`profiles.graph_roofline_ms` over the kernels `graph.fusion` predicts) is evaluated twice: with the
nominal hardware figures and with rooflines fitted to the database's tuned kernels (`graph.calibration`).
The truth is each model's tuned end-to-end median from the baseline benchmark (`benchmarks/baseline.py`,
whose JSON records the command and the database it tuned into; pass that same database here). The fit is
in-sample: the database holds the zoo's own kernels. For an out-of-sample check (calibrated on the other
models' kernels only) see `benchmarks/graph_cost.py`. Prints a table and writes
logs/proxy_fit_<target>_full.json. Needs no builds: seconds per model.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.support.heldout_models  # noqa: E402, F401  (registers the held-out models for --models)
from tvm_rl import models  # noqa: E402
from tvm_rl.graph import calibration, profiles, roofline  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--database", default=str(ROOT / "logs" / "tuning" / "llvm"))
    ap.add_argument("--measured", default=str(ROOT / "logs" / "baseline_llvm_full.json"),
                    help="baseline benchmark JSON with each model's tuned end-to-end latency")
    ap.add_argument("--models", nargs="*", default=None)
    args = ap.parse_args()
    measured_path = Path(args.measured)
    if not measured_path.exists():
        sys.exit(f"{measured_path} not found: run `python benchmarks/baseline.py --trials-per-kernel 16` first")
    baseline = json.loads(measured_path.read_text())
    target = baseline["settings"]["target_name"]
    kernels = calibration.tuned_kernels(args.database)
    fitted = calibration.tuned_roofline(args.database, target)
    nominal = roofline.default_hardware(target)
    kernel_err = calibration.fit_error(fitted, kernels)
    rows = {}
    print(f"{'model':<14}{'tuned ms':>10}{'proxy fit':>11}{'err':>7}{'nominal':>10}{'err':>7}")
    for name in args.models or [n for n in models.names() if n in baseline["models"]]:
        truth = baseline["models"][name]["tvm_tuned"]["ms"]
        mod = models.load(name, "full").mod
        fit_ms, nom_ms = profiles.graph_roofline_ms(mod, fitted), profiles.graph_roofline_ms(mod, nominal)
        rows[name] = {"tuned_ms": truth, "proxy_fit_ms": fit_ms, "proxy_nominal_ms": nom_ms,
                      "rel_error_fit": fit_ms / truth - 1, "rel_error_nominal": nom_ms / truth - 1}
        print(f"{name:<14}{truth:>10.1f}{fit_ms:>11.1f}{fit_ms / truth - 1:>7.0%}{nom_ms:>10.1f}"
              f"{nom_ms / truth - 1:>7.0%}", flush=True)
    mean = {k: sum(abs(r[k]) for r in rows.values()) / len(rows) for k in ("rel_error_fit", "rel_error_nominal")}
    print(f"mean |error|: fitted {mean['rel_error_fit']:.0%}, nominal {mean['rel_error_nominal']:.0%}; "
          f"kernel-level median |error| of the fit over {len(kernels)} tuned kernels: "
          + ", ".join(f"{k} {v:.0%}" for k, v in kernel_err.items()))
    out = ROOT / "logs" / f"proxy_fit_{target}_full.json"
    out.write_text(json.dumps({"database": str(args.database), "measured": str(measured_path),
                               "baseline_command": baseline["settings"].get("command"), "kernels": len(kernels),
                               "fitted": fitted.as_dict(), "kernel_fit_error": kernel_err,
                               "models": rows, "mean_abs_rel_error": mean}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
