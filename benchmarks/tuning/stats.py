"""The tuner benchmark's statistics: pure functions over run records (the task-clustered bootstrap is the
package's `tvm_rl.tune.corpus.bootstrap`, which `tvm-rl corpus compare-policy` reports with too).

A run record (one per task x arm x seed, as `runs.run_arm` writes it and `runs.retime` completes it)
holds `tuning_seconds` (each measured record's median run time, in measurement order; None for a failed one),
`improvers` (the indices at which the tuning-time best so far improved) and `retimed` (each improver's latency
re-timed at the end, aligned with `improvers`; None where it could not be built). Everything here reads curves
of re-timed latencies: at trial t, the best re-timed latency among the improvers measured by then.

Trials-to-target is censored: a run that never reaches its task's target within N trials counts as "> N". Ratios
against the baseline arm pair runs of the same task and seed (they start from the same measured first batch) and
come with 95% intervals from a task-clustered bootstrap: tasks resampled with replacement, then seeds within each
drawn task, so a CI reflects how much the answer depends on which tasks and seeds were picked.

Three paired measures do not hang on the global target, whose few percent of slack sits inside the drift between
re-timing sittings: trials to the pair's common level (the worse of the two runs' best latencies at N, which both
reach by N, so nothing is censored), the best-so-far speedup averaged over trials 1..N (the area between the two
curves on a log scale), and the median trials an arm takes to reach its paired baseline run's best at N.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tvm_rl.database import record_seconds
from tvm_rl.tune.corpus.bootstrap import cluster_bootstrap, mean_of_means

# A pooled reading (`pool`) names a task measured on one CPU "task@cpu": its target and pairs stay within that
# CPU, while the bootstrap clusters by the task, since a kernel measured on two CPUs is one task drawn, not two.
BLOCK_SEP = "@"
TARGET_SLACK = 1.05  # a task's target: best re-timed latency over every arm and seed x this
BASELINE = "evolutionary"

Run = dict[str, Any]


def median_seconds(secs: Sequence[float] | None) -> float | None:
    """The median of a record's run times (the benchmark times each candidate `repeat` times), or None for a
    failed candidate (`tvm_rl.database.record_seconds`)."""
    if record_seconds(secs) is None:
        return None
    return float(np.median([float(s) for s in secs or ()]))


def improvers(seconds: Sequence[float | None]) -> list[int]:
    """Indices at which the best so far strictly improves (failed records, None, never do)."""
    best, out = math.inf, []
    for i, value in enumerate(seconds):
        if value is not None and value < best:
            best = value
            out.append(i)
    return out


def best_so_far(seconds: Sequence[float | None]) -> list[float]:
    """The running minimum (inf until the first valid value)."""
    best, out = math.inf, []
    for value in seconds:
        if value is not None:
            best = min(best, value)
        out.append(best)
    return out


def retimed_curve(run: Run, length: int | None = None) -> list[float]:
    """Best re-timed latency among the run's improvers measured by each trial (inf before the first one).

    `length` defaults to the run's measured trials; a run that ended early (its space ran out) keeps its last
    value beyond its end. Empty when the run has not been re-timed."""
    retimed = run.get("retimed")
    if retimed is None:
        return []
    n = len(run["tuning_seconds"]) if length is None else length
    at = {i: t for i, t in zip(run["improvers"], retimed) if t is not None}
    best, out = math.inf, []
    for i in range(n):
        if i in at:
            best = min(best, at[i])
        out.append(best)
    return out


def value_at(curve: Sequence[float], trials: int) -> float:
    """The curve after `trials` trials (its last value when it is shorter; inf when it is empty)."""
    if not curve or trials < 1:
        return math.inf
    return curve[min(trials, len(curve)) - 1]


def trials_to_target(curve: Sequence[float], target: float, limit: int | None = None) -> int | None:
    """The first trial count at which the curve is at or below `target`, within `limit` trials (None: never)."""
    end = len(curve) if limit is None else min(limit, len(curve))
    for i in range(end):
        if curve[i] <= target * (1 + 1e-9):
            return i + 1
    return None


def capped_trials_to_target(curve: Sequence[float], target: float, limit: int) -> float:
    """Trials to `target` within `limit`, with a run that never gets there counted as `limit` + 1: what the paired
    savings compare (which understates a saving when the baseline never gets there)."""
    hit = trials_to_target(curve, target, limit)
    return float(limit + 1 if hit is None else hit)


def task_targets(runs: Iterable[Run], slack: float = TARGET_SLACK) -> dict[str, float]:
    """Per task, the best re-timed latency any run of any arm reached, x `slack` (tasks without one left out)."""
    best: dict[str, float] = {}
    for run in runs:
        curve = retimed_curve(run)
        if curve and math.isfinite(curve[-1]):
            best[run["task"]] = min(best.get(run["task"], math.inf), curve[-1])
    return {task: value * slack for task, value in best.items()}


def censored_median(values: Sequence[int | None]) -> float | None:
    """Median of trial counts where None means "not within the budget" (larger than any count); None when the
    median itself is such a run (more than half never got there), NaN when there are no values."""
    if not values:
        return math.nan
    ordered = sorted(math.inf if v is None else float(v) for v in values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return median if math.isfinite(median) else None


def reach_shares(hits: Sequence[int | None], trials: int) -> list[float]:
    """After each trial count t = 1..`trials`, the share of runs whose trials-to-target is at most t."""
    if not hits:
        return [math.nan] * trials
    counts = np.zeros(trials + 2)
    for h in hits:
        counts[min(h, trials + 1) if h is not None else trials + 1] += 1
    return list(np.cumsum(counts)[1:trials + 1] / len(hits))


def task_cluster(task: str) -> str:
    """The bootstrap cluster of a (possibly CPU-labelled) task name: the task itself."""
    return task.split(BLOCK_SEP, 1)[0]


def geomean_ratio(groups: Sequence[Sequence[float]], n_boot: int = 2000, seed: int = 0) -> dict[str, float]:
    """Geometric-mean ratio with a task-clustered 95% CI, from per-task lists of log ratios."""
    point, lo, hi = cluster_bootstrap(groups, n_boot, seed)
    return {"ratio": math.exp(point), "ci_low": math.exp(lo), "ci_high": math.exp(hi),
            "pairs": int(sum(len(g) for g in groups))}


def _by_key(runs: Iterable[Run]) -> dict[tuple[str, str, int], Run]:
    return {(r["task"], r["arm"], r["seed"]): r for r in runs}


def _pairs(runs: Iterable[Run], arm: str, baseline: str) -> list[tuple[str, Run, Run]]:
    """(task, arm's run, baseline's run) for each (task, seed) both arms ran, in (task, seed) order."""
    by = _by_key(runs)
    return [(task, run, by[(task, baseline, seed)]) for (task, name, seed), run in sorted(by.items())
            if name == arm and (task, baseline, seed) in by]


RunValue = Callable[[Run], float | None]
# (arm's run, baseline's run) -> a log ratio, above 0 when the arm is ahead; None when the pair has none.
PairValue = Callable[[Run, Run], float | None]


def paired_values(runs: Sequence[Run], arm: str, baseline: str, log_ratio: PairValue) -> list[list[float]]:
    """Per task (sorted; a pooled task's CPUs together), `log_ratio(arm run, baseline run)` over the seeds both arms
    ran where it is finite."""
    out: dict[str, list[float]] = {}
    for task, run, base in _pairs(runs, arm, baseline):
        value = log_ratio(run, base)
        if value is not None and math.isfinite(value):
            out.setdefault(task_cluster(task), []).append(value)
    return [out[t] for t in sorted(out)]


def paired_log_ratios(runs: Sequence[Run], arm: str, baseline: str, value: RunValue) -> list[list[float]]:
    """Per task (sorted), log(value(baseline run) / value(arm run)) over the seeds both arms have a value for:
    above 0 when the arm's value is smaller (faster, or fewer trials)."""
    def log_ratio(run: Run, base: Run) -> float | None:
        a, b = value(run), value(base)
        if a is None or b is None or not (0 < a < math.inf and 0 < b < math.inf):
            return None
        return math.log(b / a)

    return paired_values(runs, arm, baseline, log_ratio)


def common_level_trials(arm_curve: Sequence[float], base_curve: Sequence[float], trials: int
                        ) -> tuple[int, int] | None:
    """The trials each of two runs took to reach the worse of their best latencies at `trials`, the level both
    reached within the budget (so neither is censored); None when either has no valid latency by then."""
    level = max(value_at(arm_curve, trials), value_at(base_curve, trials))
    if not math.isfinite(level):
        return None
    arm_hit, base_hit = trials_to_target(arm_curve, level, trials), trials_to_target(base_curve, level, trials)
    assert arm_hit is not None and base_hit is not None  # each curve is at or below the level by `trials`
    return arm_hit, base_hit


def mean_curve_log_ratio(arm_curve: Sequence[float], base_curve: Sequence[float], trials: int) -> float | None:
    """The mean over trials 1..`trials` at which both runs have a valid latency of log(baseline's best so far /
    arm's): the log of the speedup the arm held on average along the budget. None when no trial has both."""
    logs = [math.log(value_at(base_curve, t) / value_at(arm_curve, t)) for t in range(1, trials + 1)
            if math.isfinite(value_at(arm_curve, t)) and math.isfinite(value_at(base_curve, t))]
    return float(np.mean(logs)) if logs else None


def _run_values(curve: Callable[[Run], Sequence[float]], targets: dict[str, float], n: int
                ) -> tuple[RunValue, RunValue]:
    """The two values paired runs are compared by at budget `n`, from a run's re-timed curve: its best latency
    (None when nothing valid was measured) and its trials to the task's target, a run not there counting n + 1
    (None when the task has no target)."""
    def best(run: Run) -> float | None:
        v = value_at(curve(run), n)
        return v if math.isfinite(v) else None

    def capped(run: Run) -> float | None:
        if run["task"] not in targets:
            return None
        return capped_trials_to_target(curve(run), targets[run["task"]], n)

    return best, capped


def reach_baseline_best(runs: Sequence[Run], arm: str, baseline: str, curve: Callable[[Run], Sequence[float]],
                        trials: int) -> dict[str, Any]:
    """Over the (task, seed) pairs both arms ran: the censored median trials the arm took to reach its paired
    baseline run's best latency at `trials` (None: the median run did not within `trials`), how many runs did (and
    how many within `trials` / 5, the issue's bar), and the baseline's own median trials to that best (never
    censored)."""
    hits, base_hits = [], []
    for _, run, base in _pairs(runs, arm, baseline):
        if not math.isfinite(level := value_at(curve(base), trials)):
            continue
        hits.append(trials_to_target(curve(run), level, trials))
        base_hits.append(trials_to_target(curve(base), level, trials))
    return {"median": censored_median(hits), "reached": sum(h is not None for h in hits),
            "within_fifth": sum(h is not None and h <= trials / 5 for h in hits), "pairs": len(hits),
            "baseline_median": censored_median(base_hits)}


def paired_speedup_curve(runs: Sequence[Run], arm: str, baseline: str, trials: int,
                         curve: Callable[[Run], Sequence[float]] = retimed_curve) -> list[float]:
    """After each trial t = 1..`trials`: the arm's best-so-far speedup over its paired baseline run, the geomean
    over the (task, seed) pairs with a valid latency in both by then, each task weighing the same (NaN where no
    pair has both). Its mean log over t is `threshold_free`'s "curve_speedup"."""
    pairs = [(task, curve(run), curve(base)) for task, run, base in _pairs(runs, arm, baseline)]
    out = []
    for t in range(1, trials + 1):
        logs: dict[str, list[float]] = {}
        for task, mine, base in pairs:
            a, b = value_at(mine, t), value_at(base, t)
            if math.isfinite(a) and math.isfinite(b):
                logs.setdefault(task_cluster(task), []).append(math.log(b / a))
        out.append(math.exp(mean_of_means(list(logs.values()))) if logs else math.nan)
    return out


def threshold_free(runs: Sequence[Run], arm: str, baseline: str, curve: Callable[[Run], Sequence[float]],
                   trials: int, n_boot: int = 2000) -> dict[str, Any]:
    """The paired measures that need no global target (see the module's docstring), at budget `trials`: the
    geomean saving in trials to the pair's common level and the geomean best-so-far speedup averaged over trials
    1..`trials`, each with its task-clustered 95% CI, and `reach_baseline_best`."""
    def common(run: Run, base: Run) -> float | None:
        hits = common_level_trials(curve(run), curve(base), trials)
        return None if hits is None else math.log(hits[1] / hits[0])

    def along(run: Run, base: Run) -> float | None:
        return mean_curve_log_ratio(curve(run), curve(base), trials)

    return {"common_level_saving": geomean_ratio(paired_values(runs, arm, baseline, common), n_boot),
            "curve_speedup": geomean_ratio(paired_values(runs, arm, baseline, along), n_boot),
            "to_baseline_best": reach_baseline_best(runs, arm, baseline, curve, trials)}


def summarise(runs: Sequence[Run], trials: int | Sequence[int], slack: float = TARGET_SLACK,
              baseline: str = BASELINE, n_boot: int = 2000) -> list[dict[str, Any]]:
    """One row per (budget N, arm) over the re-timed runs (others are left out): share of runs at the task's target
    within N, censored median trials to it, geomean best latency / target at N, and against `baseline` (same task
    and seed) the geomean speedup of the best latency at N and the geomean saving in trials to target (a run
    not there by N counts as N + 1, so a saving is understated when the baseline never gets there), each with a
    task-clustered 95% CI, and `threshold_free`'s measures (keys ending in "_vs_baseline"); wall seconds per run
    and in all."""
    budgets = [trials] if isinstance(trials, int) else list(trials)
    runs = [r for r in runs if "tuning_seconds" in r and r.get("retimed") is not None]
    targets = task_targets(runs, slack)
    curves = {(r["task"], r["arm"], r["seed"]): retimed_curve(r) for r in runs}
    arms = list(dict.fromkeys(r["arm"] for r in runs))
    rows = []
    for n in budgets:
        def hit(run: Run, n: int = n) -> int | None:
            target = targets.get(run["task"])
            curve = curves[(run["task"], run["arm"], run["seed"])]
            return None if target is None else trials_to_target(curve, target, n)

        def curve(run: Run) -> list[float]:
            return curves[(run["task"], run["arm"], run["seed"])]

        best, capped = _run_values(curve, targets, n)
        for arm in arms:
            mine = [r for r in runs if r["arm"] == arm]
            hits = [hit(r) for r in mine if r["task"] in targets]
            gap: dict[str, list[float]] = {}
            for r in mine:
                b = best(r)
                if b is not None and r["task"] in targets:
                    gap.setdefault(task_cluster(r["task"]), []).append(math.log(b / targets[r["task"]]))
            walls = [r["wall_seconds"] for r in mine if r.get("wall_seconds") is not None]
            row: dict[str, Any] = {
                "trials": n, "arm": arm, "runs": len(mine), "tasks": len({task_cluster(r["task"]) for r in mine}),
                "reached": sum(h is not None for h in hits), "reach_share": (sum(h is not None for h in hits) /
                                                                            len(hits)) if hits else math.nan,
                "median_trials_to_target": censored_median(hits),
                "best_over_target": math.exp(mean_of_means(list(gap.values()))) if gap else math.nan,
                "median_wall_seconds": float(np.median(walls)) if walls else None,
                "wall_seconds": float(sum(walls)),
            }
            if arm != baseline:
                row["speedup_vs_baseline"] = geomean_ratio(paired_log_ratios(runs, arm, baseline, best), n_boot)
                row["trials_saving_vs_baseline"] = geomean_ratio(
                    paired_log_ratios(runs, arm, baseline, capped), n_boot)
                row.update({f"{key}_vs_baseline": value
                            for key, value in threshold_free(runs, arm, baseline, curve, n, n_boot).items()})
            rows.append(row)
    return rows


# Paired arms that split a learned tuner's gain into its parts (arm, its baseline, the share it measures); a pair is
# reported only when a file holds both arms.
ABLATION_PAIRS = [
    ("evolutionary-pretrained", "evolutionary", "the pre-trained model's share (same search)"),
    ("ppo", "random-walk", "learning's share (PPO updates against the same walks without them)"),
    ("ppo", "ppo-topk", "adaptive sampling's share (PPOSearch's clustered pick against its model's top k)"),
    ("ppo-pretrained-model", "ppo", "the pre-trained model's share inside PPOSearch (untrained agent)"),
    ("ppo-pretrained", "ppo-pretrained-model", "the pre-trained agent's share (same model)"),
    ("ppo-pretrained", "evolutionary-pretrained", "the agent against evolutionary search (same model)"),
    ("ppo-pretrained", "random-walk", "PPOSearch with both shipped parts against untrained walks"),
    ("evolutionary-pretrained", "evolutionary-pretrained-frozen", "online refinement's share (same model and search)"),
    ("evolutionary-pretrained-calibrated", "evolutionary-pretrained",
     "refinement on the model's own scale against the default's refinement"),
    ("evolutionary-pretrained-own-first", "evolutionary-own-first",
     "the pre-trained model's, picking the first batch too (both arms as `tvm-rl tune` runs them)"),
    ("evolutionary-pretrained-own-first", "evolutionary-pretrained",
     "the model picking the first batch, against the shared random one (same model and search)"),
    ("evolutionary-own-first", "evolutionary",
     "MetaSchedule's own first batch against the shared random one (untrained model: expect none)"),
]


def ablation_pairs(runs: Sequence[Run], trials: int, n_boot: int = 2000, slack: float = TARGET_SLACK
                   ) -> list[dict[str, Any]]:
    """For each of `ABLATION_PAIRS` whose two arms both have re-timed runs: the geomean speedup of the arm's best
    re-timed latency at `trials` over its baseline's on the same task and seed, with its task-clustered 95% CI,
    under `trials_saving` the same for trials to the task's target (a run not there by `trials` counts as
    `trials` + 1, as in `summarise`), and `threshold_free`'s measures."""
    runs = [r for r in runs if "tuning_seconds" in r and r.get("retimed") is not None]
    present = {r["arm"] for r in runs}
    targets = task_targets(runs, slack)

    best, capped = _run_values(retimed_curve, targets, trials)
    return [{"trials": trials, "arm": arm, "baseline": base, "share": share,
             **geomean_ratio(paired_log_ratios(runs, arm, base, best), n_boot),
             "trials_saving": geomean_ratio(paired_log_ratios(runs, arm, base, capped), n_boot),
             **threshold_free(runs, arm, base, retimed_curve, trials, n_boot)}
            for arm, base, share in ABLATION_PAIRS if arm in present and base in present]


def reach_fractions(runs: Sequence[Run], trials: int, slack: float = TARGET_SLACK) -> dict[str, list[float]]:
    """Trials-to-target curves: per arm, after each trial count t = 1..`trials`, the share of its re-timed runs
    at or below their task's fixed target (best re-timed latency over every arm x `slack`)."""
    runs = [r for r in runs if "tuning_seconds" in r and r.get("retimed") is not None]
    targets = task_targets(runs, slack)
    out = {}
    for arm in dict.fromkeys(r["arm"] for r in runs):
        hits = [trials_to_target(retimed_curve(r), targets[r["task"]], trials)
                for r in runs if r["arm"] == arm and r["task"] in targets]
        if hits:
            out[arm] = reach_shares(hits, trials)
    return out


__all__ = ["ABLATION_PAIRS", "BASELINE", "BLOCK_SEP", "TARGET_SLACK", "ablation_pairs",
           "best_so_far", "capped_trials_to_target", "censored_median", "cluster_bootstrap", "common_level_trials",
           "geomean_ratio", "improvers", "mean_curve_log_ratio", "median_seconds", "paired_log_ratios",
           "paired_speedup_curve", "paired_values", "reach_baseline_best", "reach_fractions", "reach_shares",
           "retimed_curve", "summarise", "task_cluster", "task_targets", "threshold_free", "trials_to_target",
           "value_at"]
