"""Search baselines over graph rewrites: the peers the RL agent must beat.

`tvm_builtin` is TVM's own graph-level Relax rewrites in one sequence (what a user gets without us). The
searches take an IRModule and a cost function (IRModule -> ms, e.g. `cost.roofline_cost(hw)` or a
`cost.KernelCostCache`) and return a `SearchResult` whose graph is never costlier than the input by that
function: plain greedy descent, greedy that never stops (the pass's loop taking the cheapest candidate, uphill
too), TASO's cost-based backtracking (TASO's own default budget is 1000 expansions), and random rollouts.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
import psutil
import tvm

from ..errors import SearchNameError
from . import defaults
from .candidates import enumerate_candidates, past
from .cost import CostFn, Memo, PairMeasure
from .episode import rollout
from .fingerprint import module_key
from .rules import Rule, all_rules

log = logging.getLogger("tvm_rl.graph")
MIN_AVAILABLE = 0.10  # backtracking stops once less than this share of the machine's memory is available


@dataclass
class SearchResult:
    """The best graph found, its cost and the input's, the rewrites that lead to it, and the effort spent.

    After `confirm`: `measured_ms` holds (input, result) end-to-end times, and `kept` is False when the
    search's graph measured no faster, in which case `mod` is the input again, `applied` is empty, and
    `rejected` holds the rewrites and cost of the graph the measurement turned down.
    """

    mod: tvm.IRModule = field(repr=False)
    cost: float
    initial_cost: float
    applied: list[str]
    expansions: int
    evaluations: int
    seconds: float
    measured_ms: tuple[float, float] | None = None
    kept: bool = True
    rejected: tuple[list[str], float] | None = None  # (rewrites, cost) of a graph `confirm` turned down
    stopped: str = ""  # why a search ended before its budget: "deadline", "memory"; "" when it did not

    @property
    def speedup(self) -> float:
        return self.initial_cost / self.cost if self.cost > 0 else float("inf")

    def summary(self) -> str:
        return (f"{self.initial_cost:.4g} -> {self.cost:.4g} ms ({self.speedup:.3f}x) with {len(self.applied)} "
                f"rewrites; {self.expansions} expansions, {self.evaluations} graphs costed, {self.seconds:.1f} s")


TVM_BUILTIN_PASSES = ("CombineParallelMatmul", "FoldBatchnormToConv2D", "AdjustMatmulOrder", "ExpandMatmulOfSum",
                      "ReorderPermuteDimsAfterConcat", "FuseTransposeMatmul", "CanonicalizeBindings",
                      "EliminateCommonSubexpr", "DeadCodeElimination", "FoldConstant")


def tvm_builtin(mod: tvm.IRModule) -> tvm.IRModule:
    """TVM's built-in graph-level Relax rewrites (`TVM_BUILTIN_PASSES`), in one sequence."""
    from tvm import relax

    return tvm.transform.Sequential([getattr(relax.transform, n)() for n in TVM_BUILTIN_PASSES])(mod)


def _setup(cost: CostFn, rules: Sequence[Rule] | None) -> tuple[Memo, list[Rule]]:
    # Memoise so revisited graphs are costed once; keep a caller's Memo (and its counts) as it is.
    return (cost if isinstance(cost, Memo) else Memo(cost)), (all_rules() if rules is None else list(rules))


def greedy(mod: tvm.IRModule, cost: CostFn, rules: Sequence[Rule] | None = None, cap: int | None = None,
           max_steps: int = 500, check: bool = False, deadline: float | None = None) -> SearchResult:
    """Apply the cheapest candidate while it is cheaper than the current graph (at most `max_steps` times: a
    safety bound; full-size ResNet-50 takes over 100 rewrites). Past `deadline` (a `time.perf_counter()` value)
    it stops with the graph reached so far: a step still enumerating or pricing its candidates is abandoned."""
    start = time.perf_counter()
    cost, rules = _setup(cost, rules)
    current, current_cost = mod, cost(mod)
    initial, applied, expansions, evaluations = current_cost, [], 0, 0
    stopped = ""
    for _ in range(max_steps):
        if past(deadline):
            stopped = "deadline"
            break
        found = enumerate_candidates(current, rules, cap=cap, check=check, strict=False, deadline=deadline)
        cands = list(found)
        expansions += 1
        scored = []
        for i, c in enumerate(cands):
            if past(deadline):
                break
            scored.append((cost(c.mod), i))
        evaluations += len(scored)
        if found.timed_out or len(scored) < len(cands):
            stopped = "deadline"
            break
        if not scored:
            break
        best_cost, best_i = min(scored)  # ties go to the first candidate in the deterministic order
        if best_cost >= current_cost:
            break
        current, current_cost = cands[best_i].mod, best_cost
        applied.append(str(cands[best_i].match))
    return SearchResult(current, current_cost, initial, applied, expansions, evaluations,
                        time.perf_counter() - start, stopped=stopped)


def greedy_never_stop(mod: tvm.IRModule, cost: CostFn, rules: Sequence[Rule] | None = None, cap: int | None = None,
                      max_steps: int = 50, shortlist: int | None = 16, all_matches: bool = True,
                      time_budget_s: float | None = None) -> SearchResult:
    """"cheapest-first"'s episode 0 alone (`arms.CheapestFirst` in `episode.rollout`): in the pass's setting
    (the `shortlist` cheapest candidates, "every match of a rule" actions with `all_matches`), take the cheapest
    candidate every step, also when it is costlier than the current graph, for `max_steps` steps (or until no
    candidate is left, or `time_budget_s` ends); returns the cheapest graph seen. Unlike `greedy` it walks
    through slowdowns that later rewrites repay (an NHWC move before its transposes cancel)."""
    from .arms import CheapestFirst  # here: arms imports torch, which the other searches do without
    from .rules import with_all_matches

    start = time.perf_counter()
    memo, rules = _setup(cost, rules)
    if all_matches:
        rules = with_all_matches(rules)
    calls = memo.calls
    initial = memo(mod)
    deadline = start + time_budget_s if time_budget_s is not None else float("inf")
    graph, c, applied, steps = rollout(mod, CheapestFirst(), memo, None, rules, max_steps, None, deadline, cap,
                                       shortlist, episode=0)
    return SearchResult(graph, c, initial, applied, steps, memo.calls - calls, time.perf_counter() - start)


def backtracking(mod: tvm.IRModule, cost: CostFn, alpha: float = 1.05, budget: int = 100,
                 rules: Sequence[Rule] | None = None, cap: int | None = None, check: bool = False,
                 deadline: float | None = None) -> SearchResult:
    """TASO's cost-based backtracking search.

    A priority queue of graphs by cost, starting from `mod`; each of `budget` expansions pops the cheapest
    graph and enqueues every candidate not seen before (by `module_key`) whose cost is below
    `alpha` x the best cost so far; alpha > 1 lets it pass through slightly slower graphs. Returns the best
    graph seen, which is `mod` itself when nothing is cheaper. Past `deadline` (a `time.perf_counter()` value)
    it stops expanding and returns the best graph seen so far (every one seen was fully priced).
    """
    if alpha < 1.0:
        raise ValueError(f"alpha must be >= 1 (1.0 = strictly downhill), got {alpha}")
    if budget < 1:
        raise ValueError(f"budget must be >= 1 expansion, got {budget}")
    start = time.perf_counter()
    cost, rules = _setup(cost, rules)
    initial = cost(mod)
    tie = itertools.count()  # equal costs pop in insertion order: deterministic
    # A queued graph is kept as (parent, rule, match) and rebuilt when popped: on full-size models each
    # candidate carries its own folded weights, and holding every queued graph ran a 24 GB host out of memory on VGG-16.
    # Parents are graphs already expanded (at most `budget` of them). Graphs seen are remembered by key only.
    queue = [(initial, next(tie), None, None, [])]
    seen = {module_key(mod)}
    best = (initial, mod, [])
    expansions = evaluations = 0
    stopped = ""
    while queue and expansions < budget:
        if past(deadline):
            stopped = "deadline"
            break
        if memory_short():
            stopped = "memory"
            log.warning("backtracking stopped after %d of %d expansions: under %.0f%% of this machine's memory is "
                        "left (every queued graph keeps the weights its rewrites made); keeping the best graph so "
                        "far. A smaller budget, or greedy, needs less.", expansions, budget, 100 * MIN_AVAILABLE)
            break
        c, _, parent, step, history = heapq.heappop(queue)
        if c > alpha * best[0]:
            continue  # the bound tightened since it was queued
        graph = mod if parent is None else step[0].apply(parent, step[1], check=check)
        expansions += 1
        for cand in enumerate_candidates(graph, rules, cap=cap, check=check, strict=False, deadline=deadline):
            if cand.key in seen or past(deadline):
                continue
            seen.add(cand.key)
            new_cost = cost(cand.mod)
            evaluations += 1
            path = history + [str(cand.match)]
            if new_cost < best[0]:
                best = (new_cost, cand.mod, path)
            if new_cost < alpha * best[0]:
                heapq.heappush(queue, (new_cost, next(tie), graph, (cand.rule, cand.match), path))
    return SearchResult(best[1], best[0], initial, best[2], expansions, evaluations, time.perf_counter() - start,
                        stopped=stopped)


def memory_short() -> bool:
    """Whether less than `MIN_AVAILABLE` of this machine's memory is available. Backtracking keeps every graph it
    expanded while a child of it is queued, each with the weights its rewrites made, which on a large model can
    exhaust the machine; checking between expansions stops it with its best graph instead."""
    vm = psutil.virtual_memory()
    return vm.available < MIN_AVAILABLE * vm.total


TASO_BUDGET = 1000  # TASO's default backtracking budget: `optimize(alpha=1.0, budget=1000)`
SEARCH_CAP = defaults.CAP  # candidates per expansion when the pass runs a search with no cap, as measured
PassSearch = Callable[[tvm.IRModule, CostFn, Sequence[Rule], int | None, float | None], SearchResult]


def pass_search(name: object) -> PassSearch | None:
    """The search `name` names for `RLRewritePass(policy=name)`, as (mod, cost, rules, cap, deadline) ->
    `SearchResult`: "greedy", "backtracking" (TASO's budget, `TASO_BUDGET` expansions) or "backtracking-N" (N
    expansions, N >= 1); None when `name` names no search. They run one match per step (no every-match actions)
    and at most `SEARCH_CAP` candidates an expansion when `cap` is None, as they were measured, until done or the
    deadline."""
    if name == "greedy":
        return lambda mod, cost, rules, cap, deadline: greedy(mod, cost, rules, cap=SEARCH_CAP if cap is None else cap,
                                                              deadline=deadline)
    budget = TASO_BUDGET if name == "backtracking" else backtracking_budget(name)
    if budget is None:
        return None
    return lambda mod, cost, rules, cap, deadline: backtracking(mod, cost, budget=budget, rules=rules,
                                                                cap=SEARCH_CAP if cap is None else cap,
                                                                deadline=deadline)


def backtracking_budget(name: object) -> int | None:
    """N of "backtracking-N" (the pass's and the benchmarks' name for backtracking with N expansions); None when
    `name` is not of that form; SearchNameError when N is not a whole number >= 1."""
    if not isinstance(name, str) or not name.startswith("backtracking-"):
        return None
    budget = name.removeprefix("backtracking-")
    if not budget.isdigit() or int(budget) < 1:
        raise SearchNameError(f"{name!r}: a backtracking search's budget is a whole number of expansions >= 1, e.g. "
                              f"backtracking-{TASO_BUDGET} (TASO's default; plain \"backtracking\" is that)")
    return int(budget)


def random_rollouts(mod: tvm.IRModule, cost: CostFn, rollouts: int = 8, horizon: int = 10, seed: int = 0,
                    rules: Sequence[Rule] | None = None, cap: int | None = None, check: bool = False
                    ) -> SearchResult:
    """`rollouts` episodes of up to `horizon` uniformly random rewrites (stopping, like the agent's "stop",
    with probability 1/(candidates + 1) each step); returns the cheapest graph met on any of them."""
    start = time.perf_counter()
    cost, rules = _setup(cost, rules)
    rng = np.random.default_rng(seed)
    initial = cost(mod)
    best = (initial, mod, [])
    expansions = evaluations = 0
    for _ in range(rollouts):
        graph, path = mod, []
        for _ in range(horizon):
            cands = enumerate_candidates(graph, rules, cap=cap, check=check, strict=False)
            expansions += 1
            pick = int(rng.integers(len(cands) + 1))
            if pick == len(cands):
                break
            graph, path = cands[pick].mod, path + [str(cands[pick].match)]
            c = cost(graph)
            evaluations += 1
            if c < best[0]:
                best = (c, graph, path)
    return SearchResult(best[1], best[0], initial, best[2], expansions, evaluations, time.perf_counter() - start)


def confirm(result: SearchResult, original: tvm.IRModule, measure_pair: PairMeasure) -> SearchResult:
    """Keep a search's graph only if it measures faster than `original`.

    `measure_pair(original, graph) -> (ms, ms)` times both side by side (`cost.pair_measure`): a cost model can
    prefer a graph that runs slower (a proxy's misjudgement, a kernel that tunes badly), and this guard makes
    the search never slower than its input by measurement, as `RLRewritePass(confirm=True)` is. The result is
    returned unchanged when it is the input already.
    """
    if not result.applied:
        return result
    before, after = map(float, measure_pair(original, result.mod))
    if after < before:
        return replace(result, measured_ms=(before, after))
    return replace(result, mod=original, cost=result.initial_cost, applied=[], measured_ms=(before, after),
                   kept=False, rejected=(result.applied, result.cost))
