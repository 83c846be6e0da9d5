"""The tuner benchmark's report: its summary and per-task tables (and a provisional look at a running one), its cost
line, the trials-to-target plot and the paired best-so-far speedup plot."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .stats import (
    ABLATION_PAIRS,
    BASELINE,
    TARGET_SLACK,
    paired_speedup_curve,
    reach_fractions,
    retimed_curve,
    summarise,
    task_targets,
    value_at,
)


def _fmt(value: Any, spec: str, none: str = "-") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return none
    return format(value, spec)


def _ci(entry: dict[str, float] | None) -> str:
    if not entry or math.isnan(entry["ratio"]):
        return "-"
    return f"{entry['ratio']:.2f}x [{entry['ci_low']:.2f}, {entry['ci_high']:.2f}] ({entry['pairs']})"


def format_table(rows: list[dict], trials: int | list[int] | None = None, timing: str = "re-timed") -> str:
    """The summary rows (`stats.summarise`) as one markdown table per budget N; `timing` says which
    latencies they were computed from."""
    if not rows:
        return f"(no {timing} runs of this benchmark version in this file)"
    out = []
    for n in dict.fromkeys(r["trials"] for r in rows):
        out += [f"N = {n}: target = best {timing} latency over all arms x {TARGET_SLACK}; ratios against "
                f"{BASELINE} on the same task and seed, geomean [95% CI, task-clustered bootstrap] (pairs)", "",
                f"| arm | runs | at target within {n} | median trials to target | trials to target, saving vs "
                f"{BASELINE} | best latency at {n}, speedup vs {BASELINE} | best / target | median wall s per run "
                "| arm wall h |", "|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["trials"] == n):
            median = r["median_trials_to_target"]
            median_text = f"> {n}" if median is None else _fmt(median, ".0f")
            out.append(f"| {r['arm']} | {r['runs']} | {r['reached']}/{r['runs']} ({_fmt(r['reach_share'], '.0%')}) | "
                       f"{median_text} | {_ci(r.get('trials_saving_vs_baseline'))} | "
                       f"{_ci(r.get('speedup_vs_baseline'))} | {_fmt(r['best_over_target'], '.3f')} | "
                       f"{_fmt(r['median_wall_seconds'], '.0f')} | {r['wall_seconds'] / 3600:.2f} |")
        paired = [r for r in rows if r["trials"] == n and "to_baseline_best_vs_baseline" in r]
        if paired:
            out += ["", f"N = {n}, against {BASELINE}'s run on the same task and seed, no global target:", "",
                    _threshold_free_header(n, "arm")]
            out += [f"| {r['arm']} | {_threshold_free_cells(r, n, '_vs_baseline')} |" for r in paired]
        out.append("")
    return "\n".join(out).rstrip()


def _threshold_free_header(n: int, first: str) -> str:
    return (f"| {first} | trials to the baseline run's best at {n}: median, arm (baseline) | runs there (within "
            f"{n / 5:g}) | trials to the pair's common level, saving | best-so-far speedup, mean over 1..{n} |\n"
            "|---|---|---|---|---|")


def _threshold_free_cells(entry: dict, n: int, suffix: str = "") -> str:
    """`stats.threshold_free`'s measures as table cells (keys with `suffix` in a summary row)."""
    reach = entry[f"to_baseline_best{suffix}"]
    median = "-" if reach["pairs"] == 0 else f"> {n}" if reach["median"] is None else f"{reach['median']:g}"
    return (f"{median} ({_fmt(reach['baseline_median'], 'g')}) | {reach['reached']}/{reach['pairs']} "
            f"({reach['within_fifth']}) | "
            f"{_ci(entry[f'common_level_saving{suffix}'])} | {_ci(entry[f'curve_speedup{suffix}'])}")


def format_pairs(pairs: list[dict]) -> str:
    """The ablation pairs (`stats.ablation_pairs`) as two markdown tables, each row naming the share its pair
    measures: against the global target, then without one."""
    if not pairs:
        return "(no ablation pair has both its arms in this file)"
    n = pairs[0]["trials"]
    lines = [f"| share | arm vs baseline | best latency at {n}, speedup [95% CI] (pairs) | trials to target within "
             f"{n}, saving [95% CI] |", "|---|---|---|---|"]
    lines += [f"| {p['share']} | {p['arm']} vs {p['baseline']} | {_ci(p)} | {_ci(p.get('trials_saving'))} |"
              for p in pairs]
    lines += ["", _threshold_free_header(n, "arm vs baseline")]
    lines += [f"| {p['arm']} vs {p['baseline']} | {_threshold_free_cells(p, n)} |" for p in pairs]
    return "\n".join(lines)


def format_tasks(runs: list[dict], trials: int) -> str:
    """Per task: its target and each arm's median (over seeds) re-timed best latency at `trials`, in us."""
    targets = task_targets(runs)
    arms = list(dict.fromkeys(r["arm"] for r in runs if r.get("retimed") is not None))
    lines = [f"| task | target us | {' | '.join(arms)} |", "|---|---|" + "---|" * len(arms)]
    for task, target in targets.items():
        cells = []
        for arm in arms:
            best = [value_at(retimed_curve(r), trials) for r in runs
                    if r["task"] == task and r["arm"] == arm and r.get("retimed") is not None]
            cells.append(_fmt(float(np.median(best)) * 1e6, ".1f") if best else "-")
        lines.append(f"| {task} | {target * 1e6:.1f} | {' | '.join(cells)} |")
    return "\n".join(lines)


def plot_reach(runs: list[dict], trials: int, path: Path, marks: list[int] | None = None,
               shared: int | None = None) -> None:
    """Trials-to-target curves: per arm, the share of runs at their task's target after each trial count
    (dotted lines at `marks`, the first `shared` trials, the shared first batch, shaded)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, share in reach_fractions(runs, trials).items():
        ax.step(np.arange(1, trials + 1), share, where="post", label=name, lw=2 if name.startswith("ppo") else 1)
    if shared:
        ax.axvspan(0.5, shared + 0.5, color="grey", alpha=0.15, lw=0, label="shared first batch")
    for n in marks or []:
        ax.axvline(n, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("measured trials (shared first batch included)")
    ax.set_ylabel(f"runs at target (best x {TARGET_SLACK})")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_paired(runs: list[dict], trials: int, path: Path, baseline: str = BASELINE, shared: int | None = None
                ) -> bool:
    """Run against run, after each trial: left, every arm's best-so-far speedup over `baseline`'s run on the same
    task and seed; right, each ablation pair's (`stats.paired_speedup_curve`). Nothing drawn is censored.
    A panel with nothing to pair is left out; with neither, nothing is written (False). The first `shared`
    trials, the shared first batch of all but the -own-first arms, are shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in runs if r.get("retimed") is not None]
    present = list(dict.fromkeys(r["arm"] for r in runs))
    x = np.arange(1, trials + 1)
    # A panel only for what the runs hold: a benchmark of two PPOSearch arms has no baseline run to pair with.
    against = [a for a in present if a != baseline] if baseline in present else []
    pairs = [(a, b) for a, b, _ in ABLATION_PAIRS if a in present and b in present]
    panels = [(f"against {baseline}", [(arm, baseline, arm) for arm in against])] if against else []
    panels += [("ablation pairs", [(a, b, f"{a} vs {b}") for a, b in pairs])] if pairs else []
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8), sharey=True, squeeze=False)
    for ax, (title, lines) in zip(axes[0], panels):
        ax.set_prop_cycle(color=[plt.get_cmap("tab20")(i) for i in range(20)])  # more lines than 10 colours
        if shared:
            ax.axvspan(0.5, shared + 0.5, color="grey", alpha=0.12, lw=0)
        for arm, base, label in lines:
            ax.plot(x, paired_speedup_curve(runs, arm, base, trials), label=label,
                    lw=2 if base == baseline and arm.startswith("ppo") else 1)
        ax.axhline(1.0, color="grey", lw=0.6)
        ax.set_xlabel("measured trials")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("best-so-far speedup, geomean over paired runs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def format_cost(cost: dict[str, float], by_arm: dict[str, float]) -> str:
    """One line of what the benchmark cost in hours: each arm's runs, the shared batches, re-timing, waiting for
    the cores, and the total (0 where nothing was charged yet)."""
    def hours(key: str) -> str:
        return f"{cost.get(key, 0.0) / 3600:.2f} h"

    return ("cost: " + ", ".join(f"{a} {s / 3600:.2f} h" for a, s in by_arm.items())
            + f"; shared batches {hours('shared_seconds')}, re-timing {hours('retime_seconds')}, waiting for the "
            f"cores {hours('load_wait_seconds')}; total {hours('total_seconds')}")


def provisional_runs(runs: list[dict], arms: list[str]) -> tuple[list[dict], int]:
    """Runs whose every improver's "retimed" latency is its tuning-time one, for a look at a benchmark still
    running; only (task, seed) pairs that every arm of `arms` has finished, so each arm is compared on the same
    ones. Returns them and the number of such pairs."""
    groups: dict[tuple[str, int], dict[str, dict]] = {}
    for r in runs:
        if "tuning_seconds" in r:
            groups.setdefault((r["task"], r["seed"]), {})[r["arm"]] = r
    complete = [g for g in groups.values() if all(a in g for a in arms)]
    out = [{**r, "retimed": [r["tuning_seconds"][i] for i in r["improvers"]]}
           for g in complete for a, r in g.items() if a in arms]
    return out, len(complete)


def format_peek(state: dict[str, Any]) -> str:
    """The summary table of a benchmark's JSON as it stands, from tuning-time latencies (nothing re-timed, nothing
    written): a provisional look at a long run, not its result."""
    settings = state["settings"]
    budgets = list(settings["trials"])
    runs, pairs = provisional_runs(state["runs"], list(settings["arms"]))
    head = (f"PROVISIONAL: {pairs} (task, seed) pairs finished by all {len(settings['arms'])} arms, of "
            f"{len(settings['tasks']) * settings['seeds']}; latencies at tuning time, not re-timed: the result is "
            "the table printed once the run ends.")
    return head + "\n\n" + format_table(summarise(runs, budgets), budgets, timing="tuning-time")


__all__ = ["format_cost", "format_pairs", "format_peek", "format_table", "format_tasks", "plot_paired", "plot_reach",
           "provisional_runs"]
