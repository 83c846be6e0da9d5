"""`RLRewritePass`: graph rewriting as a TVM module pass over Relax.

    seq = tvm.transform.Sequential([RLRewritePass(target="llvm"), relax.transform.LegalizeOps()])
    exe = tvm.compile(seq(mod), target="llvm")

Per episode a chooser (an "arm" of `arms`) rewrites `main` one (rule, match) at a time until it picks "stop" or
the step/time budget runs out (`episode.rollout`); a search (`search.pass_search`) can run in place of the
episodes. The cheapest graph met (by the cost function, default: the roofline proxy) is kept. It is returned only
if it is cheaper than the input and, with `confirm` (the default), also measures faster end to end on the target
(with `database`'s tuned kernels, the same for both): the pass never returns a graph slower than its input by the
measure it was given.
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
from .candidates import past
from .episode import rollout
from .observation import FeatureSpec, features_for_policy
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


@tvm.transform.module_pass(opt_level=0, name="RLRewritePass")
class RLRewritePass:
    """Rewrite `main` with a chooser of rewrites, keeping the cheapest graph found only if it is cheaper than the
    input and, with `confirm`, measures faster end to end.

    target: what the graph is optimised and measured for.
    policy: what chooses the rewrites. None: `arms.DEFAULT_ARM`; an arm's name (`arms.ARMS`: "cheapest-first",
      "uniform", "cost-softmax", "cheapest-then-softmax", "cheapest-then-trained", "untrained" (a fresh network,
      weights from `seed`), "trained" (the policy shipped with tvm-rl)); a checkpoint path; a `GraphActorCritic`;
      an `arms.Arm`. Or a search run once in place of the episodes, until done or `time_budget_s`: "greedy",
      "backtracking" (TASO's 1000 expansions) or "backtracking-N" (`search.pass_search`).
    max_steps, time_budget_s: rewrites per episode and seconds for the whole search (not the confirmation).
    episodes: episodes per run (cheapest-first's and a network's first is greedy, the rest sample with `seed`);
      the cheapest graph over all of them is kept.
    confirm, repeat: measure input and result end to end (median of `repeat`) and keep the result only if faster.
    database: MetaSchedule database whose tuned kernels both confirmation builds use, and whose kernels the
      default cost's roofline is fitted to (`calibration.proxy_roofline`).
    cost: the cost function steering the search (IRModule -> ms; default: the roofline proxy for `target`).
    rules: the rewrite rules (default: `rules.all_rules(fast_math)`).
    cap: candidates enumerated per step (None: all). shortlist: the chooser sees this many of them, the cheapest
      by `cost` (None: all). Defaults: `defaults`.
    seed: seeds the choices of sampling arms and an "untrained" network's weights.
    measure_pair: replaces the confirmation's measurement ((input, result) -> their ms, as `cost.pair_measure`).
    all_matches: also offer, per rule family with two or more matches, "apply every match of it"
      (`rules.AllMatches`).
    features: the roofline a network's node features are computed with (an `observation.FeatureSpec` or a
      roofline; default: the policy's own, recorded by training). FeatureMismatchError when they differ from
      the policy's or it was trained for another target kind, unless `allow_feature_mismatch`.
    fast_math: the result will be built with `tvm_rl.fast_math.FastMath()`, so the rules also offer rewrites that
      pay only then (`Rule.for_fast_math`). Ignored when `rules` are given.

    What a run did is logged (logger "tvm_rl.graph") and kept in `.last_report`.
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

