"""How far each paired measure of the tuner benchmark moves between re-timing sittings of the same runs.

`python benchmarks/tuner_pair_stability.py --json logs/tuner_llvm_rocketlake.json --revisions 399277e 9303b38 ...`
Every sitting of `benchmarks/tuner.py` re-times every run, and each committed revision of its JSON holds one
sitting's re-timed latencies. For the runs present in every revision given (so new seeds cannot move anything),
this prints, per ablation pair and revision, the four paired ratios `benchmarks.tuning.stats` computes: best latency
at N, trials to the global target, trials to the pair's common level, and the best-so-far speedup averaged over 1..N,
with how far each one's point estimate spread across the revisions; and the median trials to the paired baseline
run's best at N. Writes --out (default logs/tuner_pair_stability_<json stem>.json). Reads only git and the JSON:
no measuring.
"""
import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tuning import stats as bench_stats  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MEASURES = [("ratio", "best latency"), ("trials_saving", "trials to target"),
            ("common_level_saving", "trials to common level"), ("curve_speedup", "mean speedup along 1..N")]


def _load(path: str, revision: str) -> dict:
    shown = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        raise SystemExit(f"{path} at revision {revision}: {shown.stderr.strip() or 'git show failed'}")
    return json.loads(shown.stdout)


def _key(run: dict) -> tuple:
    return run["task"], run["arm"], run["seed"]


def stability(states: dict[str, dict], trials: int, n_boot: int = 2000) -> dict:
    """Per ablation pair and sitting (`states`: revision -> the benchmark's JSON then), the paired measures over the
    runs re-timed in every sitting, and per measure the spread of its point estimates (largest / smallest; NaN with
    one sitting). Raises ValueError when no run is re-timed in all of them."""
    retimed = {rev: {_key(r): r for r in s["runs"] if r.get("retimed") is not None} for rev, s in states.items()}
    common = set.intersection(*(set(runs) for runs in retimed.values()))
    if not common:
        raise ValueError(f"no run is re-timed in every one of {', '.join(states)}")
    pairs: dict[str, dict] = {}
    for rev in states:
        runs = [retimed[rev][k] for k in sorted(common)]
        for pair in bench_stats.ablation_pairs(runs, trials, n_boot=n_boot):
            entry = pairs.setdefault(f"{pair['arm']} vs {pair['baseline']}", {})
            # The best-latency ratio sits at the pair's top level; the others are nested under their key.
            entry[rev] = {key: {k: (pair if key == "ratio" else pair[key])[k] for k in ("ratio", "ci_low", "ci_high",
                                                                                         "pairs")}
                          for key, _ in MEASURES}
            entry[rev]["to_baseline_best"] = pair["to_baseline_best"]
    for by_rev in pairs.values():
        by_rev["spread"] = {}
        for key, _ in MEASURES:
            points = [by_rev[rev][key]["ratio"] for rev in states if not math.isnan(by_rev[rev][key]["ratio"])]
            by_rev["spread"][key] = max(points) / min(points) if len(points) > 1 else math.nan
    return {"revisions": list(states), "trials": trials, "runs": len(common), "pairs": pairs}


def format_stability(result: dict) -> str:
    """`stability`'s result as one markdown table: a row per pair and measure, a column per sitting."""
    revs, n = result["revisions"], result["trials"]
    lines = [f"{result['runs']} runs re-timed in all {len(revs)} revisions; ratios at N = {n}, geomean [95% CI]; "
             "spread: the largest point estimate over the smallest", "",
             "| pair | measure | " + " | ".join(revs) + " | spread |", "|---|---|" + "---|" * (len(revs) + 1)]
    for name, by_rev in result["pairs"].items():
        for key, label in MEASURES:
            cells = [by_rev[r][key] for r in revs]
            text = [f"{c['ratio']:.2f}x [{c['ci_low']:.2f}, {c['ci_high']:.2f}]" for c in cells]
            spread = by_rev["spread"][key]
            spread_text = "-" if math.isnan(spread) else f"{spread:.2f}"
            lines.append(f"| {name} | {label} | " + " | ".join(text) + f" | {spread_text} |")
        reach = [by_rev[rev]["to_baseline_best"] for rev in revs]
        text = [f"{f'> {n}' if r['median'] is None else format(r['median'], 'g')} ({r['baseline_median']:g}), "
                f"{r['reached']}/{r['pairs']} there ({r['within_fifth']} within N/5)" for r in reach]
        lines.append(f"| {name} | median trials to the baseline run's best, arm (baseline) | " + " | ".join(text)
                     + " | |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="the benchmark JSON's path in the repository")
    ap.add_argument("--revisions", nargs="+", required=True, help="git revisions, each a re-timing sitting")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--out", default="", help="default: logs/tuner_pair_stability_<json stem>.json")
    args = ap.parse_args()
    try:
        result = stability({rev: _load(args.json, rev) for rev in args.revisions}, args.trials, args.n_boot)
    except ValueError as err:
        sys.exit(f"{args.json}: {err}")
    print(f"{args.json}: " + format_stability(result))
    out = Path(args.out) if args.out else ROOT / "logs" / f"tuner_pair_stability_{Path(args.json).stem}.json"
    out.write_text(json.dumps({"json": args.json, **result}, indent=1) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
