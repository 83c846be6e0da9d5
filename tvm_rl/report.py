"""`tvm-rl report`: what a work dir holds, as Markdown tables and plots.

Every tvm-rl command writes under one `--work-dir` (default `paths.work_dir()`): `optimize_<model>.json` reports,
MetaSchedule tuning databases and graph-policy training runs (`train.csv`). This reads whichever of them are there
and prints one section per kind; nothing is measured again. (The benchmarks' JSON has its own reader in the
repository, `python -m benchmarks.report`.)
"""
from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path
from typing import Sequence

from . import paths
from .database import TuningDatabase
from .errors import TvmRlError


def _table(head: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _ms(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _num(text) -> str:
    try:
        return f"{float(text):.3f}"
    except (TypeError, ValueError):
        return "-"


def _load(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # a half-written or foreign file: not ours to report
    return data if isinstance(data, dict) else None


def optimize_section(work_dir: Path, plots: bool) -> str:
    """`optimize_*.json`: default vs optimized latency per model, and where the time went."""
    reports = [(p, r) for p in sorted(work_dir.glob("optimize_*.json")) if (r := _load(p)) and "default_ms" in r]
    if not reports:
        return ""
    rows = [(r["model"], r["target"].split()[0], _ms(r["default_ms"]), _ms(r["optimized_ms"]),
             f"{r['default_ms'] / r['optimized_ms']:.2f}x" if r.get("optimized_ms") else "-",
             len(r.get("graph_rewrites", [])), r.get("kernels_tuned", 0), r.get("trials_measured", 0),
             f"{sum(r.get('seconds', {}).values()):.0f}") for _, r in reports]
    text = "## Optimized models (`tvm-rl optimize`)\n\n" + _table(
        ["model", "target", "TVM default ms", "optimized ms", "speedup", "graph rewrites", "kernels tuned",
         "trials", "seconds"], rows)
    if plots:
        path = work_dir / "report_speedups.png"
        _bar_plot([r["model"] for _, r in reports],
                  [r["default_ms"] / r["optimized_ms"] if r.get("optimized_ms") else math.nan for _, r in reports],
                  "speedup over TVM's default build", path)
        text += f"\n\n![speedups]({path.name})"
    return text


MAX_ROWS = 20  # a benchmark's work dir holds one database per run: list the first ones


def databases_section(work_dir: Path) -> str:
    """Every MetaSchedule database under the work dir: kernels, measured records, failures."""
    rows = []
    for db in TuningDatabase.find_under(work_dir):
        rows.append((str(db.path.relative_to(work_dir)) or ".", db.workload_count(), db.record_count(),
                     db.failure_count()))
    if not rows:
        return ""
    more = len(rows) - MAX_ROWS
    rows = rows[:MAX_ROWS] + ([(f"... and {more} more", "", "", "")] if more > 0 else [])
    return ("## Tuning databases\n\nResume or extend any of them with the command that made it; "
            "`measure.build(mod, target, tvm_rl.tune.open_database(DIR))` builds with their kernels.\n\n"
            + _table(["database", "kernels", "measured records", "failed candidates"], rows))


def training_section(work_dir: Path) -> str:
    """Graph-policy training runs (`train.csv`): iterations, and the last iteration's return and speedup."""
    rows = []
    for path in sorted(work_dir.rglob("train.csv")):
        with open(path) as f:
            history = list(csv.DictReader(f))
        if not history:
            continue
        last = history[-1]
        plot = path.with_name("train.png")
        rows.append((str(path.parent.relative_to(work_dir)), len(history), _num(last.get("mean_return")),
                     _num(last.get("mean_speedup")),
                     f"![curve]({plot.relative_to(work_dir)})" if plot.is_file() else "-"))
    if not rows:
        return ""
    return "## Graph policy training (`tvm-rl train`)\n\n" + _table(
        ["run", "iterations", "last mean return", "last mean speedup", "curve"], rows)


def _bar_plot(labels: Sequence[str], values: Sequence[float], ylabel: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4, 0.9 * len(labels) + 2), 3.2))
    ax.bar(range(len(labels)), values, color="tab:blue")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(work_dir: str | Path | None = None, plots: bool = True) -> str:
    """The Markdown report of everything under `work_dir` (TvmRlError if the directory does not exist)."""
    work_dir = Path(work_dir) if work_dir is not None else paths.work_dir()
    if not work_dir.is_dir():
        raise TvmRlError(f"no work dir {work_dir}: pass the --work-dir your tvm-rl commands wrote to")
    sections = [s for s in (optimize_section(work_dir, plots), databases_section(work_dir),
                            training_section(work_dir)) if s]
    if not sections:
        return (f"# tvm-rl report: {work_dir}\n\nNothing to report: no optimize reports, tuning databases, "
                "training runs here yet.\n")
    return f"# tvm-rl report: {work_dir}\n\n" + "\n\n".join(sections) + "\n"


def main(argv: Sequence[str] | None = None, prog: str = "tvm-rl report") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=(
        "Summarise a work dir: optimize reports, tuning databases and graph training runs, "
        "as Markdown (printed, and written to WORK_DIR/report.md) with plots beside it."))
    ap.add_argument("--work-dir", default=None, help="the --work-dir your commands wrote to (default "
                    f"{paths.WORK_DIR_HELP})")
    ap.add_argument("--no-plots", action="store_true", help="tables only")
    args = ap.parse_args(argv)
    work_dir = Path(args.work_dir) if args.work_dir else paths.work_dir()
    text = report(work_dir, plots=not args.no_plots)
    print(text)
    (work_dir / "report.md").write_text(text)
    return 0
