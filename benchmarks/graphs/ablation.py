"""The ablation of issue 20: every arm of `arms` and the search baselines on one model, over seeds.

An arm is one of `arms.ARMS`, run as `RLRewritePass` runs it (the same shortlist, every-match actions, episodes
and time budget; no confirmation: it is priced by the cost function), or a search baseline: "greedy" (stops at
the first step with no cheaper candidate), "greedy-never-stop" (`search.greedy_never_stop`: cheapest-first's
episode 0 alone, no time limit) and "backtracking-N" (TASO's search, N expansions; TASO's default is 1000).
Each run gets a fresh memoised cost function (`cost_fn()`), so no arm is timed on another's cached prices.
`summarise` gives the mean over seeds with a 95% t-interval; `compare` which arms differ from the best
non-learned arm by more than `THRESHOLD`. A rule wins unless the learned arm beats it by more than that.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import tvm

from tvm_rl.graph import arms, defaults, search
from tvm_rl.graph.agent import GraphActorCritic
from tvm_rl.graph.cost import CostFn
from tvm_rl.graph.rules import AllMatches, all_rules

BASELINES = ("greedy", "greedy-never-stop", "backtracking-100", "backtracking-1000")
ALL = arms.ARMS + BASELINES
THRESHOLD = 0.01  # a relative difference in mean speedup below this is noise-level: the arms tie


def is_seeded(arm: str) -> bool:
    """Whether `arm`'s result depends on the seed (the search baselines are deterministic: one run each)."""
    return arm in arms.ARMS


def is_learned(arm: str) -> bool:
    return arm in arms.LEARNED


def check_arm(name: str) -> str:
    """`name` if it is an arm or a baseline ("backtracking-N" for any N >= 1), else ValueError."""
    if name in arms.ARMS or name in ("greedy", "greedy-never-stop"):
        return name
    if search.backtracking_budget(name) is not None:  # SearchNameError (a ValueError) for a bad budget
        return name
    raise ValueError(f"unknown arm {name!r}: one of {', '.join(ALL)} (backtracking-N for any budget N)")


@dataclass
class Settings:
    """What every arm runs with: the pass's loop (episodes, steps, time budget, cap, shortlist, every-match
    actions) and the searches' bounds. `policy`: the "trained" arm's network or checkpoint (None: shipped)."""

    target: tvm.target.Target | str = "llvm"
    episodes: int = defaults.EPISODES
    max_steps: int = defaults.MAX_STEPS
    time_budget_s: float | None = defaults.TIME_BUDGET_S
    cap: int | None = defaults.CAP
    shortlist: int | None = defaults.SHORTLIST
    all_matches: bool = True
    alpha: float = 1.05
    greedy_steps: int = 500
    policy: GraphActorCritic | str | Path | None = None
    fast_math: bool = False  # the graphs are built with `tvm_rl.fast_math`: rules offer what pays only then

    def as_dict(self) -> dict:
        policy = self.policy
        name = (str(getattr(policy, "path", None) or "(given object)") if isinstance(policy, GraphActorCritic)
                else policy)
        return {"target": str(self.target), "episodes": self.episodes, "max_steps": self.max_steps,
                "time_budget_s": self.time_budget_s, "cap": self.cap, "shortlist": self.shortlist,
                "all_matches": self.all_matches, "alpha": self.alpha, "greedy_steps": self.greedy_steps,
                "policy": str(name) if name is not None else "shipped",
                **({"fast_math": True} if self.fast_math else {})}


@dataclass
class Run:
    """One run of one arm: its graph (not saved), costs by the cost function, effort, and rewrites."""

    arm: str
    seed: int | None
    mod: tvm.IRModule = field(repr=False)
    initial_cost: float
    cost: float
    seconds: float
    steps: int
    applied: list[str]
    best_episode: int | None = None

    @property
    def speedup(self) -> float:
        return self.initial_cost / self.cost if self.cost > 0 else 1.0

    def row(self) -> dict:
        return {"seed": self.seed, "speedup": self.speedup, "initial_cost_ms": self.initial_cost,
                "cost_ms": self.cost, "seconds": round(self.seconds, 2), "steps": self.steps,
                "rewrites": len(self.applied), "best_episode": self.best_episode, "applied": self.applied}


def run(mod: tvm.IRModule, arm: str, cost_fn: Callable[[], CostFn], settings: Settings, seed: int = 0) -> Run:
    """One run of `arm` on `mod`, priced by a fresh `cost_fn()`; `seed` seeds the pass's arms."""
    from tvm_rl.graph.rewrite_pass import RLRewritePass

    arm, fn, s = check_arm(arm), cost_fn(), settings
    rules = all_rules(s.fast_math)
    if arm in arms.ARMS:
        policy: arms.Arm | str = arms.learned(arm, s.policy) if arm in arms.LEARNED and s.policy is not None else arm
        rewrite = RLRewritePass(s.target, policy, max_steps=s.max_steps, time_budget_s=s.time_budget_s,
                                episodes=s.episodes, confirm=False, cost=fn, cap=s.cap, shortlist=s.shortlist,
                                seed=seed, all_matches=s.all_matches, rules=rules)
        out = rewrite(mod)  # type: ignore[operator]  # module_pass makes the class a callable Pass; mypy cannot see it
        r = rewrite.last_report
        assert r is not None
        return Run(arm, seed, out, r.initial_cost, r.cost, r.seconds, r.steps, list(r.applied), r.best_episode)
    start = time.perf_counter()
    if arm == "greedy":
        res = search.greedy(mod, fn, rules, cap=s.cap, max_steps=s.greedy_steps)
    elif arm == "greedy-never-stop":
        res = search.greedy_never_stop(mod, fn, rules, cap=s.cap, max_steps=s.max_steps, shortlist=s.shortlist,
                                       all_matches=s.all_matches)
    else:
        budget = search.backtracking_budget(arm)
        assert budget is not None  # check_arm let only "backtracking-N" through to here
        res = search.backtracking(mod, fn, alpha=s.alpha, budget=budget, rules=rules, cap=s.cap)
    return Run(arm, None, res.mod, res.initial_cost, res.cost, time.perf_counter() - start, res.expansions,
               list(res.applied))


def t_quantile(level: float, df: int) -> float:
    """The two-sided Student t quantile for confidence `level` with `df` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf((1 + level) / 2, df))


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float | None]:
    """(mean, half-width of its `level` t-interval); None for the half-width with fewer than two values."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return math.nan, None
    if len(x) < 2:
        return float(x[0]), None
    return float(x.mean()), t_quantile(level, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))


def summarise(rows: Iterable[dict], key: str = "speedup") -> dict:
    """Mean and 95% t-interval of `key` over runs (seeds), with their mean seconds and steps."""
    rows = list(rows)
    mean, half = mean_ci([r[key] for r in rows])
    return {"n": len(rows), "mean": mean, "ci95": half, "min": min(r[key] for r in rows),
            "max": max(r[key] for r in rows), "seconds": float(np.mean([r["seconds"] for r in rows])),
            "steps": float(np.mean([r["steps"] for r in rows]))}


def compare(summaries: dict[str, dict], threshold: float = THRESHOLD, learned: Iterable[str] = arms.LEARNED) -> dict:
    """The best non-learned arm (not in `learned`) by mean speedup, each arm's relative difference from it, the
    arms beyond `threshold` either way, and whether any two arms differ by more than `threshold` (worth
    measuring)."""
    means = {a: s["mean"] for a, s in summaries.items()}
    learned = set(learned)
    rules = {a: m for a, m in means.items() if a not in learned}
    best = max(rules, key=lambda a: rules[a]) if rules else None
    diff = {a: (m / rules[best] - 1 if best else math.nan) for a, m in means.items()}
    spread = max(means.values()) / min(means.values()) - 1 if means else 0.0
    return {"best_non_learned": best, "vs_best": diff,
            "differ": sorted(a for a, d in diff.items() if abs(d) > threshold),
            "spread": spread, "any_differ": spread > threshold}


def evaluate(mod: tvm.IRModule, names: Sequence[str], seeds: Sequence[int], cost_fn: Callable[[], CostFn],
             settings: Settings, done: dict[str, list[dict]] | None = None,
             on_run: Callable[[str, Run], None] | None = None) -> dict[str, list[dict]]:
    """Each arm's runs (`Run.row()`) on `mod`: one per seed for the pass's arms, one for a baseline. Runs already
    in `done` (arm -> rows) are kept; `on_run(arm, run)` is called after each new one (to save progress). For a
    learning curve, the non-learned arms' mean levels on a training model are `summarise` of these rows."""
    out = {a: list(rows) for a, rows in (done or {}).items()}
    for name in names:
        rows = out.setdefault(check_arm(name), [])
        for seed in (seeds if is_seeded(name) else [None]):
            if any(r["seed"] == seed for r in rows):
                continue
            result = run(mod, name, cost_fn, settings, 0 if seed is None else seed)
            result.seed = seed
            rows.append(result.row())
            if on_run is not None:
                on_run(name, result)
    return out


def cell(summary: dict, digits: int = 3) -> str:
    """"mean ± half-width" (the half-width left out for one run)."""
    if summary.get("ci95") is None:
        return f"{summary['mean']:.{digits}f}"
    return f"{summary['mean']:.{digits}f} ± {summary['ci95']:.{digits}f}"


def rewrite_counts(applied: Iterable[str]) -> Counter:
    """Single rewrites per rule family in a run's `applied` list: an every-match action ("family[all]: all N
    matches", `rules.AllMatches`) counts N for its family, so runs that took the same moves one at a time or all
    at once read alike."""
    counts: Counter = Counter()
    for entry in applied:
        every = AllMatches.parse(entry)
        family, n = every if every is not None else (entry.partition(": ")[0], 1)
        counts[family] += n
    return counts


def rewrites_table(runs: dict[str, Sequence[dict]]) -> str:
    """A Markdown table of each label's mean rewrites per family over its runs (rows with an "applied" list):
    what each arm or policy actually did, beside how well it did."""
    means = {label: {f: n / max(len(rows), 1) for f, n in sum((rewrite_counts(r["applied"]) for r in rows),
                                                              Counter()).items()}
             for label, rows in runs.items()}
    families = sorted({f for m in means.values() for f in m},
                      key=lambda f: (-max(m.get(f, 0) for m in means.values()), f))  # ties by name: one order
    lines = ["| arm or snapshot | " + " | ".join(families) + " |", "|---|" + "---|" * len(families)]
    lines += [f"| {label} | " + " | ".join(f"{m.get(f, 0):.3g}" for f in families) + " |" for label, m in means.items()]
    return "\n".join(lines)


def geomean(values: Iterable[float]) -> float:
    x = np.asarray(list(values), dtype=float)
    return float(np.exp(np.log(x).mean())) if len(x) else math.nan
