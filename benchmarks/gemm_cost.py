"""GEMM efficiency by shape against tuned latency: how well `gemm_cost.GemmModel` predicts the tuned matmuls of a
database, in sample and out of sample, beside the matmul roofline it replaces.

    python benchmarks/gemm_cost.py --tune 64      # tune up to 64 GEMMs of the shape grid first (resumable)
    python benchmarks/gemm_cost.py                # fit and report on what the database holds

`--tune N` tunes standalone `x @ W + b` kernels of a grid of transformer shapes (the zoo's full-size linears,
their merged Q/K/V and padded variants, odd row counts such as ViT's 65 tokens) into the database, N at most,
in a seeded order so that a partial run still spreads over the grid; kernels already there are skipped.
Reported: median |predicted / measured - 1| over the database's matmuls for the per-kind roofline and for the
GEMM model fitted on all of them (in sample), leaving each kernel out, and leaving each (K, N) class out (a
weight shape never seen). Writes logs/gemm_cost_<target>.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tvm_rl.graph import calibration, gemm_cost, roofline  # noqa: E402

ROWS = (64, 65, 80, 128)
WEIGHTS = ((1024, 1024), (1024, 3072), (1024, 4096), (4096, 1024), (768, 768), (768, 2304), (768, 3072),
           (3072, 768), (512, 512), (512, 1536), (512, 2048), (2048, 512), (768, 1000), (768, 1008),
           (512, 8192), (80, 512))


def grid(seed: int = 0) -> list[tuple[int, int, int]]:
    """(M, K, N) of the shape grid in a seeded order."""
    shapes = [(m, k, n) for m in ROWS for k, n in WEIGHTS]
    order = np.random.default_rng(seed).permutation(len(shapes))
    return [shapes[i] for i in order]


def linear_module(m: int, k: int, n: int):
    from tvm import relax

    from tests.support import graph_examples as T

    rng = np.random.default_rng(0)
    return T.module(lambda e, x: e(relax.op.add(e(relax.op.matmul(x, T.rand(rng, k, n))), T.rand(rng, n))),
                    [(m, k)])


def tune_grid(database: str, limit: int, trials: int, target: str) -> None:
    from tvm_rl.tune import tune_model

    for i, (m, k, n) in enumerate(grid()[:limit]):
        start = time.time()
        _, report = tune_model(linear_module(m, k, n), target, database, trials_per_kernel=trials)
        print(f"[{i + 1}/{limit}] GEMM M={m} K={k} N={n}: {time.time() - start:.0f} s", flush=True)


def evaluate(database: str) -> dict:
    kernels = calibration.tuned_kernels(database)
    gemms = calibration.tuned_gemms(kernels)
    if len(gemms) < gemm_cost.MIN_KERNELS:
        raise SystemExit(f"{database} holds {len(gemms)} tuned GEMMs; the model needs {gemm_cost.MIN_KERNELS} "
                         "(run with --tune N first)")
    shapes, measured = [s for s, _ in gemms], [k.best_ms for _, k in gemms]
    by_kind = calibration.fit(kernels)
    matmul_roofline = roofline.RooflineModel(by_kind.default, by_kind.per_kind)  # the same fit without the GEMM model
    model = gemm_cost.fit(shapes, measured)
    rows = []
    loo = gemm_cost.leave_one_out(shapes, measured)
    lco = gemm_cost.leave_one_out(shapes, measured, groups=[f"{s.k}x{s.n}" for s in shapes])
    for (s, k), ms, e_loo, e_lco in zip(gemms, measured, loo, lco):
        rows.append({"batch": s.batch, "m": s.m, "n": s.n, "k": s.k, "measured_ms": ms,
                     "gflops": s.flops / (ms * 1e-3) / 1e9,
                     "roofline_ms": matmul_roofline.time_ms(k.flops, k.nbytes, "matmul"),
                     "gemm_ms": model.time_ms(s, k.flops), "loo_err": e_loo, "leave_class_out_err": e_lco})

    def med(values):
        values = [v for v in values if np.isfinite(v)]
        return float(np.median(values)) if values else float("nan")

    summary = {"kernels": len(rows),
               "roofline_err": med([abs(r["roofline_ms"] / r["measured_ms"] - 1) for r in rows]),
               "gemm_in_sample_err": med([abs(r["gemm_ms"] / r["measured_ms"] - 1) for r in rows]),
               "gemm_leave_one_out_err": med(loo), "gemm_leave_class_out_err": med(lco),
               "kept_by_the_fitted_proxy": by_kind.gemm is not None}
    return {"database": database, "summary": summary, "model": model.as_dict(), "rows": rows}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--database", default="logs/tuning/llvm")
    p.add_argument("--target", default="llvm")
    p.add_argument("--tune", type=int, default=0, metavar="N", help="tune up to N GEMMs of the grid first")
    p.add_argument("--trials", type=int, default=16, help="trials per GEMM when tuning (default 16)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.tune:
        tune_grid(args.database, args.tune, args.trials, args.target)
    result = evaluate(args.database)
    print(f"{'batch':>5} {'M':>5} {'N':>5} {'K':>5} {'GFLOP/s':>8} {'measured':>9} {'roofline':>9} {'gemm':>9} "
          f"{'loo err':>8} {'class-out':>9}")
    for r in sorted(result["rows"], key=lambda r: (r["k"], r["n"], r["m"])):
        print(f"{r['batch']:>5} {r['m']:>5} {r['n']:>5} {r['k']:>5} {r['gflops']:>8.1f} {r['measured_ms']:>9.3f} "
              f"{r['roofline_ms']:>9.3f} {r['gemm_ms']:>9.3f} {r['loo_err']:>8.0%} {r['leave_class_out_err']:>9.0%}")
    s = result["summary"]
    print(f"median |error| over {s['kernels']} tuned GEMMs: matmul roofline {s['roofline_err']:.0%}, GEMM model "
          f"in sample {s['gemm_in_sample_err']:.0%}, leave one out {s['gemm_leave_one_out_err']:.0%}, "
          f"leave (K, N) class out {s['gemm_leave_class_out_err']:.0%}; the fitted proxy "
          + ("prices matmuls by shape" if s["kept_by_the_fitted_proxy"] else
             "keeps one matmul rate (the GEMM model does not predict better out of sample)"))
    out = Path(args.json or f"logs/gemm_cost_{args.target.split()[0]}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
