"""The end-to-end tuner benchmark's tables and plot, read from its JSON: each tuned build's latency beside TVM's
default build, MetaSchedule's evolutionary search at the same budget and seed, PyTorch and ONNX Runtime."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

DEFAULT, TORCH, INDUCTOR, ORT = "TVM default", "PyTorch", "Inductor", "ORT"
BASELINE_ARM = "evolutionary"  # MetaSchedule's own search and cost model: what every other arm is held against
# MetaSchedule as its users run it, at the same whole-model budget: what the budget-* arms are held against
BUDGET_BASELINE_ARM = "budget-metaschedule"


def baseline_of(arm: str) -> str:
    """The arm that `arm` is compared with at the same N and seed."""
    return BUDGET_BASELINE_ARM if arm.startswith("budget-") else BASELINE_ARM


def variant_key(arm: str, trials: int, seed: int) -> str:
    """The JSON key of one tuned build."""
    return f"{arm}/N{trials}/s{seed}"


def ratio(num: float | None, den: float | None) -> float | None:
    """num / den, or None when either is missing."""
    return num / den if num and den else None


def table_rows(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """One model's rows: TVM default, each tuned variant, PyTorch (eager, then Inductor where timed), ORT, with
    speedups over TVM default, over MetaSchedule's evolutionary search at the same N and seed (`vs_evolutionary`,
    the comparison the benchmark is for), and the tuned build's speed relative to PyTorch, Inductor and ORT (> 1:
    faster than they are)."""
    timed = entry.get("timing", {}).get("variants", {})
    base, ref_torch, ref_ort = (timed.get(k, {}).get("ms") for k in (DEFAULT, TORCH, ORT))
    rows = []
    references = [TORCH, *([INDUCTOR] if INDUCTOR in timed else []), ORT]
    for key in [DEFAULT, *entry.get("runs", {}), *references]:
        run, t = entry.get("runs", {}).get(key, {}), timed.get(key, {})
        ms = t.get("ms")
        base_arm = baseline_of(run.get("arm", ""))
        evo = (timed.get(variant_key(base_arm, run["trials"], run["seed"]), {}).get("ms")
               if run and run.get("arm") != base_arm else None)
        rows.append({"variant": run.get("label", key), "trials": run.get("trials"), "ms": ms,
                     "speedup": ratio(base, ms), "vs_evolutionary": ratio(evo, ms), "tuning_s": run.get("tuning_s"),
                     "measurements": run.get("measurements"), "correct": t.get("correct"),
                     "interrupted": bool(run.get("interrupted")),
                     "vs_torch": ratio(ref_torch, ms) if key not in references else None,
                     "vs_inductor": ratio(timed.get(INDUCTOR, {}).get("ms"), ms) if key not in references else None,
                     "vs_ort": ratio(ref_ort, ms) if key not in references else None})
    return rows


def format_table(name: str, entry: dict[str, Any], settings: dict[str, Any]) -> str:
    """One model's table, with what it cost underneath."""
    def f(v, spec=".2f", suffix=""):
        return "-" if v is None else f"{v:{spec}}{suffix}"

    inductor = INDUCTOR in entry.get("timing", {}).get("variants", {})
    head = (f"{'variant':<26}{'N':>4}{'latency ms':>12}{'vs default':>12}{'vs evo':>8}{'tuning s':>10}"
            f"{'measured':>10}{'vs PyTorch':>12}{'vs Inductor' if inductor else '':>12}{'vs ORT':>9}")
    lines = [f"\n{name} ({settings['size']}, {settings['target_name']}): median ms over "
             f"{entry.get('timing', {}).get('passes', '-')} interleaved passes; 'vs' columns are speedups "
             "(> 1: this build is faster; 'vs evo': over MetaSchedule's evolutionary search at the same N and seed, "
             "for budget-* arms over budget-metaschedule)",
             head, "-" * len(head)]
    for r in table_rows(entry):
        flag = (" WRONG OUTPUT" if r["correct"] is False else "") + (" PART-TUNED" if r["interrupted"] else "")
        lines.append(f"{r['variant']:<26}{f(r['trials'], 'd'):>4}{f(r['ms'], '.3f'):>12}"
                     f"{f(r['speedup'], '.2f', 'x'):>12}{f(r['vs_evolutionary'], '.2f', 'x'):>8}"
                     f"{f(r['tuning_s'], '.0f'):>10}{f(r['measurements'], 'd'):>10}"
                     f"{f(r['vs_torch'], '.2f', 'x'):>12}"
                     f"{f(r['vs_inductor'], '.2f', 'x') if inductor else '':>12}{f(r['vs_ort'], '.2f', 'x'):>9}{flag}")
    tuning = sum(r.get("tuning_s", 0.0) for r in entry.get("runs", {}).values())
    lines.append(f"cost: tuning {tuning:.0f} s, timing {entry.get('timing', {}).get('seconds', 0.0):.0f} s")
    return "\n".join(lines)


def bar_label(run: dict[str, Any], minutes: float | None) -> str:
    """A tuned build's name in the plot: its arm and its budget (the minutes of a time-budget run, whose N only caps
    the measurements)."""
    return f"{run['arm']} {minutes:g} min" if minutes else f"{run['arm']} N={run['trials']}"


def plot(state: dict[str, Any], path: Path) -> None:
    """Bars: latency per variant (tuned runs as their median over seeds) per model, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(state["models"])
    minutes = state.get("settings", {}).get("minutes")
    per_model: dict[str, dict[str, float]] = {}
    for name in names:
        entry = state["models"][name]
        groups: dict[str, list[float]] = {}
        for key, t in entry.get("timing", {}).get("variants", {}).items():
            run = entry.get("runs", {}).get(key)
            label = bar_label(run, minutes) if run else key
            if t.get("ms"):
                groups.setdefault(label, []).append(t["ms"])
        per_model[name] = {k: statistics.median(v) for k, v in groups.items()}
    labels = list(dict.fromkeys(k for m in per_model.values() for k in m))
    fig, ax = plt.subplots(figsize=(max(7, 0.25 * len(names) * len(labels) + 3), 4))
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        vals = [per_model[n].get(label, np.nan) for n in names]
        ax.bar(np.arange(len(names)) + (i - (len(labels) - 1) / 2) * width, vals, width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(names)), names)
    ax.set_ylabel("median latency (ms, log)")
    ax.set_title(f"End to end, {state['settings']['target_name']} ({state['settings']['size']})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["BASELINE_ARM", "DEFAULT", "INDUCTOR", "ORT", "TORCH", "bar_label", "format_table", "plot", "ratio",
           "table_rows", "variant_key"]
