"""The benchmarks' JSON as Markdown tables: one section per file whose name a benchmark writes.

    python -m benchmarks.report                 # logs/ (where the benchmarks write)
    python -m benchmarks.report --dir some/dir
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Sequence

from benchmarks.common import jsonfile
from tvm_rl.report import _ms, _table


def _load(path: Path) -> dict | None:
    """`path`'s JSON (stored plain or gzip'd), or None for a half-written or foreign file: not ours to report."""
    try:
        data = jsonfile.read_json(path)
    except (OSError, ValueError, EOFError):
        return None
    return data if isinstance(data, dict) else None


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
    from benchmarks.tuning.benchmark import format_table, summarise

    trials = data.get("settings", {}).get("trials", 0)
    return format_table(summarise(data.get("runs", []), trials), trials)


def _tuner_e2e_bench(data: dict) -> str:
    from benchmarks.e2e.run import format_table

    settings = data.get("settings", {})
    tables = [format_table(name, entry, settings).strip("\n") for name, entry in data.get("models", {}).items()
              if isinstance(entry, dict) and entry.get("timing")]
    return "```\n" + "\n\n".join(tables) + "\n```" if tables else "(no model timed yet in this file)"


# A file is reported by the longest prefix its name starts with (tuner_e2e_llvm.json is not a tuner_ benchmark).
BENCHMARKS: dict[str, tuple[str, Callable[[dict], str]] | None] = {
    "baseline_": ("Baseline (`benchmarks/baseline.py`)", _baseline_bench),
    "graph_search_": ("Graph search (`benchmarks/graph_search.py`)", _graph_bench),
    "graph_rl_": ("Graph RL pass (`benchmarks/graph_rl.py`)", _graph_bench),
    "tuner_": ("Schedule tuner (`benchmarks/tuner.py`)", _tuner_bench),
    "tuner_e2e_": ("Whole models tuned end to end (`benchmarks/tuner_e2e.py`)", _tuner_e2e_bench),
    "tuner_pair_stability_": None,  # a reading of several tuner JSONs (benchmarks/tuner_pair_stability.py), no table
}


def benchmarks_section(work_dir: Path) -> str:
    """The benchmark JSONs in the work dir, each as its table."""
    parts = []
    # The plain names of the JSON there, whether stored plain or gzip'd (logs/ keeps its largest gzip'd).
    names = sorted({p.name.removesuffix(".gz") for p in [*work_dir.glob("*.json"), *work_dir.glob("*.json.gz")]})
    for path in (work_dir / name for name in names):
        prefix = max((p for p in BENCHMARKS if path.name.startswith(p)), key=len, default=None)
        entry = BENCHMARKS[prefix] if prefix is not None else None
        if entry is not None and (data := _load(path)) is not None:
            title, fmt = entry
            parts.append(f"### {title}: `{path.name}`\n\n{fmt(data)}")
    return "## Benchmarks\n\n" + "\n\n".join(parts) if parts else ""


def report(directory: str | Path = "logs") -> str:
    """Every benchmark JSON directly under `directory`, as Markdown."""
    return benchmarks_section(Path(directory)) or f"No benchmark JSON under {directory}.\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="logs", help="where the benchmark JSON is (default logs/)")
    print(report(ap.parse_args(argv).dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
