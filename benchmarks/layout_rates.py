"""What a conv's layout costs once tuned: the same convolutions tuned in NCHW and in NHWC, side by side.

`python benchmarks/layout_rates.py [--database logs/tuning/llvm_s16]`
Reads the database's best measurement of every workload (`graph.calibration.tuned_kernels`), pairs the convs
that are one convolution in two layouts (`calibration.layout_pairs`: same kind family, FLOPs and buffer
dimensions up to order), and prints each pair's NCHW and NHWC latency with the ratio, and the median ratio per
family. NHWC kernels are in a database only where a searched graph used them (the graph benchmarks tune every
variant they build). Writes logs/layout_rates_<database name>.json. Needs no builds.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tvm_rl.graph import calibration  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--database", default=str(ROOT / "logs" / "tuning" / "llvm_s16"))
    args = ap.parse_args()
    pairs = calibration.layout_pairs(calibration.tuned_kernels(args.database))
    if not pairs:
        sys.exit(f"no conv tuned in both NCHW and NHWC in {args.database}")
    rows = [{"kind": a.kind, "mflop": a.flops / 1e6, "nchw_ms": a.best_ms, "nhwc_ms": b.best_ms,
             "nhwc_speedup": a.best_ms / b.best_ms, "shapes_nchw": a.shapes, "shapes_nhwc": b.shapes}
            for a, b in sorted(pairs, key=lambda p: (p[0].kind, p[0].flops))]
    print(f"{'kind':<12}{'MFLOP':>9}{'NCHW ms':>10}{'NHWC ms':>10}{'NHWC speedup':>14}")
    for r in rows:
        print(f"{r['kind']:<12}{r['mflop']:>9.1f}{r['nchw_ms']:>10.4f}{r['nhwc_ms']:>10.4f}{r['nhwc_speedup']:>13.2f}x")
    summary = {}
    for kind in sorted({r["kind"] for r in rows}):
        ratios = [r["nhwc_speedup"] for r in rows if r["kind"] == kind]
        summary[kind] = {"pairs": len(ratios), "median_nhwc_speedup": float(np.median(ratios)),
                         "nhwc_faster": sum(x > 1 for x in ratios)}
        print(f"{kind}: {len(ratios)} pairs, NHWC faster on {summary[kind]['nhwc_faster']}, median "
              f"{summary[kind]['median_nhwc_speedup']:.2f}x")
    out = ROOT / "logs" / f"layout_rates_{Path(args.database).name}.json"
    out.write_text(json.dumps({"database": str(args.database), "summary": summary, "pairs": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
