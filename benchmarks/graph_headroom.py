"""How much room the graph pass leaves a learned policy: per model, the best graph any arm or search found (in any
of the given ablation JSONs, priced by one proxy) against the pass's default arm in its own settings.

`python benchmarks/graph_headroom.py logs/graph_ablation_llvm_full_proxy.json [more JSONs ...] [--out JSON]`
Reads the JSONs only (seconds, no TVM work). Issue 20 asks a learned default for >= 1.05x over the best
non-learned arm on >= 3 models; the last line says on how many models any run found that much over the default.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.graphs import headroom  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsons", nargs="+", help="ablation JSONs of benchmarks/graph_rl.py --no-measure, one proxy")
    ap.add_argument("--target", type=float, default=headroom.TARGET, help="the speedup over the default a policy "
                    f"would have to find (default {headroom.TARGET})")
    ap.add_argument("--out", default=None, help="write the table's rows and the verdict to this JSON")
    args = ap.parse_args(argv)
    try:
        docs = headroom.load(args.jsons)
        rows = headroom.headroom(docs)
    except headroom.HeadroomError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    v = headroom.verdict(rows, args.target)
    print("\n".join(headroom.table(rows)))
    print(f"\nmodels where some run is >= {args.target:g}x the default: {len(v['models_with_room'])} of {len(rows)} "
          f"({', '.join(v['models_with_room']) or 'none'}); geomean headroom {v['geomean_headroom']:.3f}x")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"command": "python benchmarks/graph_headroom.py " + " ".join(
            argv if argv is not None else sys.argv[1:]), "sources": args.jsons, "verdict": v,
            "models": headroom.as_json(rows)}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
