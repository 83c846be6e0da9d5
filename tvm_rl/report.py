"""`tvm-rl report`: what a work dir holds, as Markdown tables and plots.

Every tvm-rl command writes under one `--work-dir` (default `logs/`): `optimize_<model>.json` reports,
MetaSchedule tuning databases, graph-policy training runs (`train.csv`), and the benchmarks' JSON. This reads
whichever of them are there and prints one section per kind; nothing is measured again.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path
from typing import Callable, Sequence

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


def _graph_bench(data: dict) -> str:
    """A graph benchmark's JSON (graph_search / graph_rl): latency and speedup per variant and model."""
    models = {n: r for n, r in data.get("models", {}).items() if isinstance(r, dict)}
    keys = [k for k in ("original", "relax_builtin", "greedy", "backtracking", "rl")
            if any(k in r for r in models.values())]
    rows = [[name] + [f"{_ms(r[k]['latency_ms'])} ({r[k]['speedup']:.2f}x)" if k in r else "-" for k in keys]
            for name, r in models.items()]
    unit = "ms" if data.get("measured", True) else "proxy ms"
    return _table(["model"] + [f"{k} {unit}" for k in keys], rows)


def _baseline_bench(data: dict) -> str:
    rows = []
    for name, r in data.get("models", {}).items():
        get = lambda k: (r.get(k) or {}).get("ms")  # noqa: E731
        rows.append((name, _ms(get("tvm_default")), _ms(get("tvm_tuned")), _ms(get("torch")),
                     _ms(get("onnxruntime"))))
    return _table(["model", "TVM default ms", "TVM tuned ms", "PyTorch ms", "ONNX Runtime ms"], rows)


def _tuner_bench(data: dict) -> str:
    from .tune.benchmark import format_table, summarise

    trials = data.get("settings", {}).get("trials", 0)
    return format_table(summarise(data.get("runs", []), trials), trials)


def _tuner_e2e_bench(data: dict) -> str:
    from .tuner_e2e import format_table

    settings = data.get("settings", {})
    tables = [format_table(name, entry, settings).strip("\n") for name, entry in data.get("models", {}).items()
              if isinstance(entry, dict) and entry.get("timing")]
    return "```\n" + "\n\n".join(tables) + "\n```" if tables else "(no model timed yet in this file)"


# A file is reported by the longest prefix its name starts with (tuner_e2e_llvm.json is not a tuner_ benchmark).
BENCHMARKS: dict[str, tuple[str, Callable[[dict], str]]] = {
    "baseline_": ("Baseline (`benchmarks/baseline.py`)", _baseline_bench),
    "graph_search_": ("Graph search (`benchmarks/graph_search.py`)", _graph_bench),
    "graph_rl_": ("Graph RL pass (`benchmarks/graph_rl.py`)", _graph_bench),
    "tuner_": ("Schedule tuner (`benchmarks/tuner.py`)", _tuner_bench),
    "tuner_e2e_": ("Whole models tuned end to end (`benchmarks/tuner_e2e.py`)", _tuner_e2e_bench),
}


def benchmarks_section(work_dir: Path) -> str:
    """The benchmark JSONs in the work dir, each as its table."""
    parts = []
    for path in sorted(work_dir.glob("*.json")):
        prefix = max((p for p in BENCHMARKS if path.name.startswith(p)), key=len, default=None)
        if prefix is not None and (data := _load(path)) is not None:
            title, fmt = BENCHMARKS[prefix]
            parts.append(f"### {title}: `{path.name}`\n\n{fmt(data)}")
    return "## Benchmarks\n\n" + "\n\n".join(parts) if parts else ""


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


def report(work_dir: str | Path = "logs", plots: bool = True) -> str:
    """The Markdown report of everything under `work_dir` (TvmRlError if the directory does not exist)."""
    work_dir = Path(work_dir)
    if not work_dir.is_dir():
        raise TvmRlError(f"no work dir {work_dir}: pass the --work-dir your tvm-rl commands wrote to")
    sections = [s for s in (optimize_section(work_dir, plots), databases_section(work_dir),
                            training_section(work_dir), benchmarks_section(work_dir)) if s]
    if not sections:
        return (f"# tvm-rl report: {work_dir}\n\nNothing to report: no optimize reports, tuning databases, "
                "training runs or benchmark JSON here yet.\n")
    return f"# tvm-rl report: {work_dir}\n\n" + "\n\n".join(sections) + "\n"


def main(argv: Sequence[str] | None = None, prog: str = "tvm-rl report") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=(
        "Summarise a work dir: optimize reports, tuning databases, graph training runs and benchmark results, "
        "as Markdown (printed, and written to WORK_DIR/report.md) with plots beside it."))
    ap.add_argument("--work-dir", default="logs", help="the --work-dir your commands wrote to (default logs/)")
    ap.add_argument("--no-plots", action="store_true", help="tables only")
    args = ap.parse_args(argv)
    text = report(args.work_dir, plots=not args.no_plots)
    print(text)
    (Path(args.work_dir) / "report.md").write_text(text)
    return 0
