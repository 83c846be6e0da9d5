"""How far the graph-cost estimates are from end-to-end latency, per zoo model.

`python benchmarks/graph_cost.py [--size tiny|full] [--models bert vit] [--database WORK_DIR]`; prints a table and
writes logs/graph_cost_<target>_<size>.json. Columns: the measured end-to-end median (harness), the cached
per-kernel sum, and the roofline proxy over lowered kernels and over Relax bindings, first with the nominal
hardware figures (`roofline.default_hardware`), then calibrated leave-one-model-out: the roofline for model M is
fitted on the measured kernels of the *other* models only, one roofline for all kernels (`roofline.calibrate`) and
one per kernel kind (`roofline.calibrate_by_kind`: conv, matmul, pool, reduce, element-wise). Kernels are untuned unless
a MetaSchedule work dir is given (on CPU untuned kernels are naive loops: see docs/limits.md).
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.support.heldout_models  # noqa: E402, F401  (registers the held-out models for --models)
from tvm_rl import measure, models  # noqa: E402
from tvm_rl.database import as_database  # noqa: E402
from tvm_rl.graph import cost, profiles, roofline  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=models.SIZES)
    ap.add_argument("--models", nargs="*", default=models.names())
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--database", default=None, help="MetaSchedule work dir with tuned kernels (default: none)")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    target = measure.parse_target(args.target)
    database = as_database(args.database or None)
    cache = cost.KernelCostCache(target, database)
    nominal = roofline.default_hardware(target)
    rows, kernels, mods = {}, {}, {}
    for name in args.models:
        start = time.perf_counter()
        model = models.load(name, args.size)
        cmp = cost.compare_costs(model.mod, target, model.inputs, cache, nominal, repeat=args.repeat)
        ks = cache.kernel_costs(model.mod)  # all cached by now
        kernels[name] = [(k.profile.flops, k.profile.nbytes, k.latency_ms, k.profile.calls,
                          k.profile.kind) for k in ks]
        mods[name] = model.mod
        rows[name] = cmp.as_dict()
        rows[name]["seconds"] = round(time.perf_counter() - start, 1)
        print(f"{name}: {cmp.end_to_end_ms:.3f} ms end-to-end ({rows[name]['seconds']} s)", flush=True)
    for name in args.models:  # leave-one-model-out calibration
        train = [k for other in args.models if other != name for k in kernels[other]] or kernels[name]
        e2e = rows[name]["end_to_end_ms"]
        one = roofline.calibrate(*zip(*[k[:3] for k in train]), source="calibrated on the other models' kernels")
        by_kind = roofline.calibrate_by_kind([k[4] for k in train], *zip(*[k[:3] for k in train]))
        for key, hw in (("calibrated", one), ("calibrated_by_kind", by_kind)):
            kr = sum(c * hw.time_ms(f, b, kind) for f, b, _, c, kind in kernels[name])
            gr = profiles.graph_roofline_ms(mods[name], hw)
            rows[name][key] = {"hardware": hw.as_dict(), "kernel_roofline_ms": kr, "graph_roofline_ms": gr,
                               "rel_error": {"kernel_roofline": (kr - e2e) / e2e, "graph_roofline": (gr - e2e) / e2e}}
    print(f"\n{'model':<14}{'e2e ms':>9}{'kernels':>9}{'err':>7}{'roofK':>9}{'err':>7}{'roofG':>9}{'err':>7}"
          f"{'calK err':>10}{'calG err':>10}{'kindK err':>10}{'kindG err':>10}")
    for name, r in rows.items():
        e, c, d = r["rel_error"], r["calibrated"]["rel_error"], r["calibrated_by_kind"]["rel_error"]
        print(f"{name:<14}{r['end_to_end_ms']:>9.3f}{r['kernel_sum_ms']:>9.3f}{e['kernel_sum']:>7.0%}"
              f"{r['kernel_roofline_ms']:>9.3f}{e['kernel_roofline']:>7.0%}{r['graph_roofline_ms']:>9.3f}"
              f"{e['graph_roofline']:>7.0%}{c['kernel_roofline']:>10.0%}{c['graph_roofline']:>10.0%}"
              f"{d['kernel_roofline']:>10.0%}{d['graph_roofline']:>10.0%}")
    mean = {k: sum(abs(r["rel_error"][k]) for r in rows.values()) / len(rows)
            for k in rows[args.models[0]]["rel_error"]}
    for cal in ("calibrated", "calibrated_by_kind"):
        mean.update({f"{cal}_{k}": sum(abs(r[cal]["rel_error"][k]) for r in rows.values()) / len(rows)
                     for k in ("kernel_roofline", "graph_roofline")})
    print("mean |relative error|: " + ", ".join(f"{k} {v:.0%}" for k, v in mean.items()))
    print(f"kernel cache: {cache.hits} hits, {cache.misses} measured ({cache.path})")
    out = Path(__file__).resolve().parents[1] / "logs" / f"graph_cost_{target.kind.name}_{args.size}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"target": str(target), "size": args.size, "database": cost.database_tag(database),
                               "repeat": args.repeat, "models": rows, "mean_abs_rel_error": mean}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
