"""`RLRewritePass`: graph rewriting as a TVM module pass over Relax.

    seq = tvm.transform.Sequential([RLRewritePass(target="llvm"), relax.transform.LegalizeOps()])
    exe = tvm.compile(seq(mod), target="llvm")

Per episode a chooser (an "arm" of `arms`) rewrites `main` one (rule, match) at a time until it picks "stop" or
the step/time budget runs out. The default, `arms.DEFAULT_ARM`, is "cheapest-first", a rule without learning:
the learned policy did not beat it (docs/results/graph_ablation.md), so it runs no network and loads no
checkpoint. The learned policy stays an option (`policy="trained"`, a checkpoint path or a `GraphActorCritic`;
its first episode is its argmax, the others sample), as do "uniform", "cost-softmax", "cheapest-then-softmax" and
"untrained", all run in the same loop (what each does per episode: `arms`). The cheapest graph met on any episode
(by the cost function, default: the roofline proxy) is kept. It is returned only if it is cheaper than the input,
and, with `confirm` (the default), only if it also *measures* faster end to end on the target (with `database`'s
tuned kernels, the same for both): the pass never returns a graph that is slower than its input by the measure it
was given.
What it did is logged (logger "tvm_rl.graph") and kept in `.last_report`.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import tvm
from tvm import relax

from .. import measure
from ..database import DatabaseLike
from . import arms, defaults, roofline, search
from . import cost as costs
from .agent import GraphActorCritic
from .calibration import proxy_roofline
from .candidates import Shortlist, enumerate_candidates, past
from .observation import FeatureSpec, features_for_policy, observe
from .rules import Rule, all_rules, with_all_matches

log = logging.getLogger("tvm_rl.graph")


@dataclass
class RewriteReport:
    """What one run of the pass did: the rewrites kept, costs by the cost function, measured latencies."""

    applied: list[str] = field(default_factory=list)
    initial_cost: float = 0.0
    cost: float = 0.0
    initial_ms: float | None = None
    final_ms: float | None = None
    episodes: int = 0
    steps: int = 0
    seconds: float = 0.0
    confirm_seconds: float = 0.0
    kept: bool = False
    reason: str = ""
    best_episode: int | None = None  # the episode the kept graph came from (None: no cheaper graph found)
    policy: str = ""  # the arm that chose the rewrites (`arms.Arm.name`; a checkpoint's network is "trained")

    @property
    def speedup(self) -> float:
        """Measured speedup when confirmed, else the cost function's."""
        if self.initial_ms and self.final_ms:
            return self.initial_ms / self.final_ms
        return self.initial_cost / self.cost if self.cost > 0 else 1.0


def rollout(mod: tvm.IRModule, policy: arms.Arm | GraphActorCritic, cost: costs.CostFn,
            features: FeatureSpec | roofline.Roofline | None, rules: Sequence[Rule], max_steps: int,
            rng: np.random.Generator | None, deadline: float, cap: int | None = None, shortlist: int | None = None,
            episode: int | None = None) -> tuple[tvm.IRModule, float, list[str], int]:
    """One episode of `policy` (an `arms.Arm`, or a network: `arms.Network`) from `mod`; returns the cheapest
    graph on the way (possibly `mod`), its cost, the rewrites leading to it, and the steps taken. `episode`
    tells the arm which episode this is (None: 0 when `rng` is None, else 1; a network's episode 0 is its
    argmax); `rng` is the generator its choices draw from. A network reads the graphs as `observation.observe`
    builds them, node features from `features` (unused by the arms without a network). With `shortlist`, the
    arm sees only that many candidates, the cheapest by `cost` (ranked incrementally: `Shortlist`), and
    "stop"; the costs it sees are exact. A step still finding or pricing its candidates at `deadline` is
    abandoned there: one step on a full-size model can take seconds, and the budget is the user's."""
    arm = arms.make(policy)
    episode = (0 if rng is None else 1) if episode is None else episode
    rng = rng if rng is not None else np.random.default_rng(0)  # only read by sampling arms when no rng is given
    current, rt0 = mod, cost(mod)
    best, best_cost, best_path, path = mod, rt0, [], []
    steps, short = 0, Shortlist(shortlist, cost) if shortlist is not None else None
    while steps < max_steps and not past(deadline):
        now = cost(current)
        found = (short.enumerate(current, now, rules, cap=cap, deadline=deadline) if short is not None
                 else enumerate_candidates(current, rules, cap=cap, check=False, strict=False, deadline=deadline))
        cands = list(found)
        costs_ = [cost(c.mod) for c in cands if not past(deadline)]
        if not cands or found.timed_out or len(costs_) < len(cands):
            break
        if short is not None:
            short.record(cands, costs_, now)

        def observation(cands=cands, current=current, costs_=costs_, now=now):
            if features is None:
                raise ValueError("a network policy needs `features` to read the graphs with")
            return observe([c.mod for c in cands] + [current], costs_ + [now], rt0, features)

        row = arm.choose(arms.Step(costs_, now, episode, observation), rng)
        steps += 1
        if row == len(cands):  # stop
            break
        current, path = cands[row].mod, path + [str(cands[row].match)]
        c = cost(current)
        if c < best_cost:
            best, best_cost, best_path = current, c, list(path)
    return best, best_cost, best_path, steps


@tvm.transform.module_pass(opt_level=0, name="RLRewritePass")
class RLRewritePass:
    """Rewrite `main` with a chooser of rewrites (default: `arms.DEFAULT_ARM`, "cheapest-first", a rule without
    learning, which the learned policy did not beat).

    target: what the graph is optimised and measured for. policy: None (`arms.DEFAULT_ARM`), an arm's name:
    "cheapest-first", "uniform", "cost-softmax", "cheapest-then-softmax", "cheapest-then-trained", "untrained" (a
    fresh network, weights from `seed`), "trained"
    (the learned policy shipped with tvm-rl); a checkpoint path; a `GraphActorCritic`; or an `arms.Arm`. See
    `tvm_rl.graph.arms`. Or a search run once in place of the episodes, until done or `time_budget_s`: "greedy",
    "backtracking" (TASO's 1000 expansions) or "backtracking-N" (`search.pass_search`); they take minutes on
    full-size models; on MobileNet-V2 backtracking's graph measured the fastest of any arm without learning.
    max_steps / time_budget_s: per-run budget (the time budget covers the search, not the confirmation).
    episodes: cheapest-first's and a network's first is greedy, the rest sample with `seed` (each arm:
    `arms`); the best graph over all is kept.
    confirm: measure input and result end to end (median of `repeat`) and keep the result only if faster;
    `database`: MetaSchedule database whose tuned kernels both builds use (on CPU untuned kernels are naive
    loops). cost: the cost function steering the search (default: the roofline proxy for `target`, fitted to
    `database`'s tuned kernels when it has any: `calibration.proxy_roofline`; `record_cost.record_cost(database,
    target=target)` prices each kernel the database has tuned by its own record instead, which ranks graphs whose
    kernels are tuned as they ran, but steered searches to slower graphs: see its module docstring).
    cap: candidates enumerated per step (None: all). shortlist: the policy chooses among this many of them, the
    cheapest by `cost` (None: all); encoding every candidate is most of a step's time on full-size models. The
    limits' defaults are `defaults`', what the ablation benchmark measures.
    all_matches: also offer, per rule family with two or more matches, the action "apply every match of it"
    (`rules.AllMatches`): full-size CNNs need 50-120 single rewrites, more than fit in the time budget.
    measure_pair: replaces the confirmation's measurement ((input, result) -> their ms, timed side by side as
    `cost.pair_measure` does; e.g. `tvm_rl.tuned_cost.tuned_pair_measure` to tune new kernels first).
    features: the roofline the policy's node features are computed with (an `observation.FeatureSpec` or a
    roofline). Default: the policy's own, recorded by training (a checkpoint without a record: `target`'s
    nominal roofline), whatever `cost` and `database` price candidates with. FeatureMismatchError when
    `features` differ from the policy's or the policy was trained for another target kind (CPU/GPU), unless
    `allow_feature_mismatch`. Arms without a network read no features.
    fast_math: the result will be built with `tvm_rl.fast_math.FastMath()` (as `tvm_rl.optimize` does on CPU), so
    the rules also offer rewrites that pay only then (`Rule.for_fast_math`: a GELU moved into a matmul's
    epilogue). Ignored when `rules` are given.
    """

    def __init__(self, target: tvm.target.Target | str = "llvm",
                 policy: arms.Arm | GraphActorCritic | str | Path | None = None,
                 max_steps: int = defaults.MAX_STEPS, time_budget_s: float | None = defaults.TIME_BUDGET_S,
                 episodes: int = defaults.EPISODES, confirm: bool = True,
                 database: DatabaseLike = None, repeat: int = 10, cost: costs.CostFn | None = None,
                 rules: Sequence[Rule] | None = None, cap: int | None = defaults.CAP,
                 shortlist: int | None = defaults.SHORTLIST,
                 seed: int = 0, measure_pair: costs.PairMeasure | None = None, all_matches: bool = True,
                 features: FeatureSpec | roofline.Roofline | None = None, allow_feature_mismatch: bool = False,
                 fast_math: bool = False):
        if max_steps < 0 or episodes < 1:
            raise ValueError(f"need max_steps >= 0 and episodes >= 1, got {max_steps} and {episodes}")
        self.target = measure.parse_target(target)
        self.search = search.pass_search(policy)  # a search in place of the episodes of an arm
        self.arm = arms.make(policy, seed) if self.search is None else None
        self.policy_name = str(policy) if self.arm is None else self.arm.name
        self.policy: GraphActorCritic | None = getattr(self.arm, "policy", None)  # the network, if the arm has one
        if isinstance(features, (roofline.Hardware, roofline.RooflineModel)):
            features = FeatureSpec.of(features, self.target)
        if self.policy is None:
            self.features = features or FeatureSpec.nominal(self.target)
        else:
            source = getattr(self.policy, "path", None) or "(the policy object given, not loaded from a file)"
            self.features = features_for_policy(getattr(self.policy, "features", None), str(source), self.target,
                                                features, allow_feature_mismatch)
        self.cost = cost or costs.roofline_cost(proxy_roofline(self.target, database))
        self.max_steps, self.time_budget_s, self.episodes = max_steps, time_budget_s, episodes
        self.confirm = confirm
        self.search_rules = all_rules(fast_math) if rules is None else list(rules)
        self.rules = with_all_matches(self.search_rules) if all_matches else self.search_rules
        self.cap, self.shortlist, self.seed = cap, shortlist, seed
        self.measure_pair = measure_pair or costs.pair_measure(self.target, database=database, repeat=repeat)
        self.last_report: RewriteReport | None = None

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if self.policy is None:  # a rule: no tensors to run
            return self._rewrite(mod)
        # The policy's tensors are small (hundreds of nodes a graph): one thread is as fast, and with several,
        # every op waits for the slowest thread, so one core busy with another job can double a step's time.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._rewrite(mod)
        finally:
            torch.set_num_threads(threads)

    def _rewrite(self, mod: tvm.IRModule) -> tvm.IRModule:
        report = RewriteReport(policy=self.policy_name)
        self.last_report = report
        start = time.perf_counter()
        reason = self._unsupported(mod)
        if reason:
            report.reason = f"left unchanged: {reason}"
            log.warning("RLRewritePass %s", report.reason)
            return mod
        deadline = start + (self.time_budget_s if self.time_budget_s is not None else float("inf"))
        rng = np.random.default_rng(self.seed)
        report.initial_cost = best_cost = self.cost(mod)
        best, best_path = mod, []
        for episode in range(1 if self.search is not None else self.episodes):
            if episode and past(deadline):
                break
            if self.search is not None:  # steps: the search's expansions
                found = self.search(mod, self.cost, self.search_rules, self.cap, deadline)
                graph, c, path, steps = found.mod, found.cost, found.applied, found.expansions
            else:
                graph, c, path, steps = rollout(mod, self.arm, self.cost, self.features, self.rules,
                                                self.max_steps, rng, deadline, self.cap, self.shortlist,
                                                episode=episode)
            report.episodes += 1
            report.steps += steps
            if c < best_cost:
                best, best_cost, best_path = graph, c, path
                report.best_episode = episode
        report.seconds = time.perf_counter() - start
        report.cost = best_cost
        if best is mod:
            report.reason = "the policy found no cheaper graph"
            log.info("RLRewritePass: %s (%d episodes, %d steps, %.1f s)", report.reason, report.episodes,
                     report.steps, report.seconds)
            return mod
        if self.confirm:
            t0 = time.perf_counter()
            report.initial_ms, report.final_ms = map(float, self.measure_pair(mod, best))
            report.confirm_seconds = time.perf_counter() - t0
            if report.final_ms >= report.initial_ms:
                report.reason = (f"rewritten graph measured {report.final_ms:.4g} ms, not faster than the input's "
                                 f"{report.initial_ms:.4g} ms: input kept")
                log.info("RLRewritePass: %s", report.reason)
                return mod
        report.applied, report.kept = best_path, True
        report.reason = f"{len(best_path)} rewrites, {report.speedup:.3f}x"
        log.info("RLRewritePass: %s (%d episodes, %d steps, %.1f s search): %s", report.reason, report.episodes,
                 report.steps, report.seconds, "; ".join(best_path))
        return best

    def _unsupported(self, mod: tvm.IRModule) -> str:
        """Why the pass cannot work on `mod` ('' when it can)."""
        if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
            return "the module has no `main` function"
        if not isinstance(mod["main"], relax.Function):
            return "`main` is not a Relax function"
        from .rules.ir import static_shape

        dynamic = [p.name for p in mod["main"].params if static_shape(p.ty) is None]
        if dynamic:
            return (f"input(s) {', '.join(dynamic)} of `main` have dynamic or symbolic shapes; the rewrite rules "
                    "need static shapes (bind them, e.g. with relax.transform.BindSymbolicVars)")
        return ""

