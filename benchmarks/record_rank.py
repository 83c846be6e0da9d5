"""Do the graph prices rank graphs as their builds ran? The proxy against pricing by tuning records.

`python benchmarks/record_rank.py --graphs DIR --measured JSON [JSON ...] --database DB [DB ...]
[--proxy-from JSON] [--out JSON]`
--graphs: the graphs `benchmarks/graph_rl.py --save-graphs` wrote (DIR/<arm>@<seed>.relax.json, original).
--measured: graph_rl.py JSONs whose measured runs timed those graphs, each paired with the --database its builds
used (same order). Per measured run: every graph's measured ms, the proxy's price (recorded in --proxy-from, else
the measured JSON's own "proxy") and two prices by that database's records (`graph.record_cost`: a kernel's best
record where the database has it, the roofline elsewhere): `RecordCost`, kernels matched by their tensors' shapes
without lowering, and `LoweredRecordCost`, the graph lowered as its build was and each kernel looked up exactly;
with the share of kernels each priced by a record; then, per price, the share of distinct graphs' pairs it orders
as measured (pairs measured within 1% are left out) and Kendall's tau.
"""
import argparse
import json
import sys
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tvm  # noqa: E402
from scipy.stats import kendalltau  # noqa: E402

from tvm_rl.graph.calibration import recorded_proxy  # noqa: E402
from tvm_rl.graph.fingerprint import same_graph  # noqa: E402
from tvm_rl.graph.profiles import graph_roofline_ms  # noqa: E402
from tvm_rl.graph.record_cost import LoweredRecordCost, RecordCost, RecordIndex, coverage  # noqa: E402

PRICES = ("proxy_ms", "record_ms", "exact_ms")


def measured_graphs(entry: dict) -> dict[str, float]:
    """{graph key: measured ms} of one model's entry in a graph_rl.py JSON, from its measured run (the original
    included)."""
    measured = entry["measured"]
    out = {"original": measured["original_ms"]}
    for arm, rows in measured["runs"].items():
        for row in rows:
            out[f"{arm}@{row['seed']}"] = row["latency_ms"]
    return out


def pair_agreement(rows: list[dict], price: str, tie: float = 0.01) -> tuple[int, int]:
    """(pairs `price` orders as measured, pairs compared): graphs measured within `tie` of each other skipped."""
    agree = total = 0
    for a, b in combinations(rows, 2):
        if abs(a["measured_ms"] / b["measured_ms"] - 1) <= tie:
            continue
        total += 1
        agree += (a["measured_ms"] < b["measured_ms"]) == (a[price] < b[price])
    return agree, total


def rank_rows(graphs: dict[str, tvm.IRModule], measured: dict[str, float], proxy, database: str,
              target: str) -> list[dict]:
    """One row per distinct graph that was measured: its measured ms, its prices by the proxy, by the records
    matched by shapes and exactly (`target`: what the builds were lowered for), each record price's coverage, and
    the runs that found the same graph (one build of it was timed for all)."""
    cost = RecordCost(RecordIndex.of(database), proxy)
    exact = LoweredRecordCost(database, proxy, target)
    rows: list[dict] = []
    for key, ms in measured.items():
        if key not in graphs:
            continue
        twin = next((r for r in rows if same_graph(graphs[r["graph"]], graphs[key])), None)
        if twin is not None:
            twin["same_graph"].append(key)
            continue
        priced, lowered = cost.price(graphs[key]), exact.price(graphs[key])
        rows.append({"graph": key, "same_graph": [], "measured_ms": ms,
                     "proxy_ms": graph_roofline_ms(graphs[key], proxy),
                     "record_ms": sum(k.ms for k in priced), "coverage": coverage(priced),
                     "exact_ms": sum(k.ms for k in lowered), "exact_coverage": coverage(lowered)})
    return rows


def summary(rows: list[dict]) -> dict:
    out = {}
    for price in PRICES:
        agree, total = pair_agreement(rows, price)
        measured, priced = [r["measured_ms"] for r in rows], [r[price] for r in rows]
        tau = kendalltau(measured, priced).statistic if len(rows) > 1 else None
        out[price] = {"pairs_agree": agree, "pairs": total, "kendall_tau": None if tau != tau else tau}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", required=True, help="a folder of graph_rl.py --save-graphs graphs (one model)")
    ap.add_argument("--measured", nargs="+", required=True, help="graph_rl.py JSONs that measured those graphs")
    ap.add_argument("--database", nargs="+", required=True, help="the database each --measured JSON built with")
    ap.add_argument("--model", default=None, help="the model's name in the JSONs (default: --graphs' folder name)")
    ap.add_argument("--proxy-from", default=None, help="the proxy (default: each measured JSON's own)")
    ap.add_argument("--out", default=None, help="JSON path (default: logs/record_rank_<model>.json)")
    args = ap.parse_args()
    if len(args.measured) != len(args.database):
        ap.error(f"{len(args.measured)} --measured JSONs but {len(args.database)} --database folders: pair them")
    folder = Path(args.graphs)
    model = args.model or folder.name
    files = sorted(folder.glob("*.relax.json"))
    if not files:
        ap.error(f"no *.relax.json graphs in {folder} (benchmarks/graph_rl.py --save-graphs writes them)")
    graphs = {p.name.removesuffix(".relax.json"): tvm.ir.load_json(p.read_text()) for p in files}
    result = {"command": "python " + " ".join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
              "model": model, "runs": {}}
    for measured_path, database in zip(args.measured, args.database):
        proxy = recorded_proxy(args.proxy_from or measured_path)
        entry = json.loads(Path(measured_path).read_text())["models"][model]
        rows = rank_rows(graphs, measured_graphs(entry), proxy, database, entry["run"]["settings"]["target"])
        result["runs"][measured_path] = {"database": database, "rows": rows, "summary": summary(rows)}
        print(f"\n{measured_path} (built with {database})")
        print("| graph | measured ms | proxy ms | records ms (by shapes) | kernels priced by a record | records ms "
              "(exact) | kernels priced by a record |\n|---|---|---|---|---|---|---|")
        for r in sorted(rows, key=lambda r: r["measured_ms"]):
            names = " = ".join([r["graph"], *r["same_graph"]])
            print(f"| {names} | {r['measured_ms']:.2f} | {r['proxy_ms']:.2f} | {r['record_ms']:.2f} | "
                  f"{r['coverage']:.0%} | {r['exact_ms']:.2f} | {r['exact_coverage']:.0%} |")
        for price, s in result["runs"][measured_path]["summary"].items():
            tau = "n/a" if s["kendall_tau"] is None else f"{s['kendall_tau']:.2f}"
            print(f"{price}: orders {s['pairs_agree']} of {s['pairs']} pairs as measured; Kendall tau {tau}")
    out = Path(args.out or Path(__file__).resolve().parents[1] / "logs" / f"record_rank_{model}.json")
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
