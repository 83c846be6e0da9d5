"""The tuner benchmark's statistics (`benchmarks.tuning.stats`): curves, censoring, targets, clustered bootstrap."""
import math

import numpy as np
import pytest

from benchmarks.tuning import stats as S


def run(task, arm, seed, retimed_at, n=None):
    """A run record whose improvers are the keys of `retimed_at` (trial index -> re-timed seconds)."""
    idx = sorted(retimed_at)
    n = n or (idx[-1] + 1 if idx else 4)
    tuning = [None] * n
    for rank, i in enumerate(idx):  # tuning-time values that improve exactly at these indices
        tuning[i] = 10.0 - rank
    return {"task": task, "arm": arm, "seed": seed, "tuning_seconds": tuning, "improvers": S.improvers(tuning),
            "retimed": [retimed_at[i] for i in idx], "wall_seconds": 10.0}


def test_median_seconds_takes_the_median_and_rejects_failures():
    assert S.median_seconds([3.0, 1.0, 2.0, 100.0, 1.5]) == 2.0
    assert S.median_seconds([1e10]) is None
    assert S.median_seconds([]) is None and S.median_seconds(None) is None


def test_improvers_and_best_so_far_skip_failed_records():
    values = [None, 5.0, 6.0, 4.0, None, 4.0, 3.0]
    assert S.improvers(values) == [1, 3, 6]
    assert S.best_so_far(values) == [math.inf, 5.0, 5.0, 4.0, 4.0, 4.0, 3.0]


def test_retimed_curve_is_the_best_retimed_improver_so_far():
    r = run("t", "a", 0, {1: 2.0, 3: 2.5, 5: 1.0}, n=7)  # the second improver re-times slower than the first
    assert S.retimed_curve(r) == [math.inf, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0]
    assert S.retimed_curve(r, length=9)[-1] == 1.0
    r["retimed"][2] = None  # an improver that did not build is left out
    assert S.retimed_curve(r)[-1] == 2.0
    assert S.retimed_curve({**r, "retimed": None}) == []


def test_value_at_and_trials_to_target_with_limits():
    curve = [5.0, 4.0, 4.0, 2.0]
    assert S.value_at(curve, 2) == 4.0 and S.value_at(curve, 10) == 2.0 and S.value_at([], 3) == math.inf
    assert S.trials_to_target(curve, 4.0) == 2
    assert S.trials_to_target(curve, 2.0) == 4
    assert S.trials_to_target(curve, 2.0, limit=3) is None  # censored at the budget
    assert S.trials_to_target(curve, 1.0) is None


def test_task_targets_take_the_best_over_every_arm_and_seed():
    runs = [run("t", "a", 0, {0: 3.0, 2: 2.0}), run("t", "b", 1, {1: 1.5}), run("u", "a", 0, {0: 7.0}),
            {**run("v", "a", 0, {}), "retimed": []}]
    assert S.task_targets(runs, slack=1.1) == pytest.approx({"t": 1.65, "u": 7.7})


def test_censored_median():
    assert S.censored_median([3, 5, None]) == 5
    assert S.censored_median([3, None, None]) is None  # the median run never got there: "> N"
    assert S.censored_median([2, 4, None, None]) is None
    assert S.censored_median([2, 4, 6, None]) == 5
    assert math.isnan(S.censored_median([]))


def test_reach_shares_count_runs_at_target_by_each_trial():
    assert S.reach_shares([1, 3, None, 2], 4) == [0.25, 0.5, 0.75, 0.75]
    assert S.reach_shares([5], 3) == [0.0, 0.0, 0.0]  # a hit past the horizon is not counted


def test_cluster_bootstrap_point_interval_and_equal_task_weights():
    point, lo, hi = S.cluster_bootstrap([[1.0, 1.0, 1.0, 1.0], [3.0]], n_boot=500)
    assert point == pytest.approx(2.0)  # each task weighs the same, whatever its number of seeds
    assert lo <= point <= hi and lo >= 1.0 and hi <= 3.0
    same = S.cluster_bootstrap([[0.5, 0.5], [0.5]], n_boot=200)
    assert same == pytest.approx((0.5, 0.5, 0.5))
    assert S.cluster_bootstrap([[0.1, -0.2]], n_boot=300, seed=4) == S.cluster_bootstrap([[0.1, -0.2]], n_boot=300,
                                                                                         seed=4)
    assert all(math.isnan(x) for x in S.cluster_bootstrap([]))


def test_cluster_bootstrap_interval_narrows_with_more_tasks():
    rng = np.random.default_rng(1)
    few = [list(rng.normal(0.1, 0.3, 3)) for _ in range(3)]
    many = [list(rng.normal(0.1, 0.3, 3)) for _ in range(40)]
    _, lo_f, hi_f = S.cluster_bootstrap(few, n_boot=800)
    _, lo_m, hi_m = S.cluster_bootstrap(many, n_boot=800)
    assert hi_m - lo_m < hi_f - lo_f
    assert lo_m < 0.1 < hi_m


def test_paired_log_ratios_pair_by_task_and_seed():
    runs = [run("t", "evolutionary", 0, {0: 2.0}), run("t", "ppo", 0, {0: 1.0}),
            run("t", "evolutionary", 1, {0: 3.0}), run("t", "ppo", 1, {0: 3.0}),
            run("t", "ppo", 2, {0: 1.0}),  # no baseline run for seed 2: not paired
            run("u", "evolutionary", 0, {0: 1.0}), run("u", "ppo", 0, {0: 4.0})]

    def best(r):
        return S.retimed_curve(r)[-1]

    groups = S.paired_log_ratios(runs, "ppo", "evolutionary", best)
    assert groups == [pytest.approx([math.log(2.0), 0.0]), pytest.approx([math.log(0.25)])]


def test_summarise_reports_reach_censoring_and_ratios_per_budget():
    # Task t: target 1.0 * slack. evolutionary reaches it at trial 4, ppo at trial 2; random never does.
    runs = [run("t", "evolutionary", 0, {0: 4.0, 3: 1.0}, n=8), run("t", "ppo", 0, {0: 4.0, 1: 1.0}, n=8),
            run("t", "random", 0, {0: 4.0, 5: 2.0}, n=8),
            # Task u: everyone starts at 3.0; only ppo gets to 1.5 (at trial 7, past N = 4).
            run("u", "evolutionary", 0, {0: 3.0}, n=8), run("u", "ppo", 0, {0: 3.0, 6: 1.5}, n=8),
            run("u", "random", 0, {0: 3.0}, n=8),
            {"task": "t", "arm": "ppo", "seed": 9, "curve": [1.0]}]  # an old-format run: ignored
    rows = {(r["trials"], r["arm"]): r for r in S.summarise(runs, [4, 8], slack=1.0, n_boot=200)}
    assert set(rows) == {(n, a) for n in (4, 8) for a in ("evolutionary", "ppo", "random")}
    ppo4, evo4, rnd8 = rows[(4, "ppo")], rows[(4, "evolutionary")], rows[(8, "random")]
    assert (ppo4["runs"], ppo4["reached"]) == (2, 1) and ppo4["reach_share"] == 0.5
    assert ppo4["median_trials_to_target"] is None  # reached at 2 on t, not by 4 on u: the median run is "> 4"
    assert evo4["reached"] == 1 and "speedup_vs_baseline" not in evo4
    assert rows[(8, "ppo")]["reached"] == 2 and rows[(8, "ppo")]["median_trials_to_target"] == pytest.approx(4.5)
    assert rnd8["reached"] == 0 and rnd8["median_trials_to_target"] is None
    # Best latency at N = 4: both at 1.0 on t (evolutionary gets there at trial 4), both at 3.0 on u.
    assert ppo4["speedup_vs_baseline"]["ratio"] == pytest.approx(1.0)
    # At N = 8, ppo is 2x on u, 1x on t: the geomean over tasks is sqrt(2).
    assert rows[(8, "ppo")]["speedup_vs_baseline"]["ratio"] == pytest.approx(math.sqrt(2))
    # Trials to target at N = 4: t 4 vs 2 (2x saving); u: both censored at 5 (1x).
    assert ppo4["trials_saving_vs_baseline"]["ratio"] == pytest.approx(math.sqrt(2))
    assert ppo4["trials_saving_vs_baseline"]["pairs"] == 2
    assert rows[(8, "random")]["best_over_target"] == pytest.approx(2.0)  # 2.0 / 1.0 on t, 3.0 / 1.5 on u


def test_reach_fractions_use_each_tasks_fixed_target():
    runs = [run("t", "evolutionary", 0, {0: 5.0, 1: 4.0, 2: 2.0}), run("t", "ppo", 0, {0: 3.0, 1: 2.0, 2: 1.0}),
            run("u", "evolutionary", 0, {0: 1.0}, n=3), run("u", "ppo", 0, {0: 9.0}, n=3)]
    frac = S.reach_fractions(runs, 3, slack=1.0)
    assert frac["ppo"] == [0.0, 0.0, 0.5]  # t's target is ppo's own 1.0; u's (1.0) it never reaches
    assert frac["evolutionary"] == [0.5, 0.5, 0.5]


def test_ablation_pairs_compare_each_pair_present_at_the_budget():
    # ppo is 2x its walks on t by trial 2 and equal on u; ppo-pretrained has no baseline arm here: no pair for it.
    runs = [run("t", "ppo", 0, {0: 4.0, 1: 1.0}, n=4), run("t", "random-walk", 0, {0: 4.0, 3: 2.0}, n=4),
            run("u", "ppo", 0, {0: 3.0}, n=4), run("u", "random-walk", 0, {0: 3.0}, n=4),
            run("t", "ppo-pretrained", 0, {0: 1.0}, n=4)]
    at2 = S.ablation_pairs(runs, 2, n_boot=200)
    assert [(p["arm"], p["baseline"]) for p in at2] == [("ppo", "random-walk"), ("ppo-pretrained", "random-walk")]
    assert at2[0]["ratio"] == pytest.approx(math.sqrt(4.0)) and at2[0]["pairs"] == 2  # 4x on t, 1x on u
    assert at2[0]["trials"] == 2 and "learning" in at2[0]["share"]
    assert S.ablation_pairs(runs, 4, n_boot=200)[0]["ratio"] == pytest.approx(math.sqrt(2.0))  # walks got to 2.0


def test_adaptive_samplings_share_pairs_ppo_with_its_top_k_variant():
    runs = [run("t", "ppo", 0, {0: 2.0}), run("t", "ppo-topk", 0, {0: 3.0})]
    (pair,) = S.ablation_pairs(runs, 1, n_boot=50)
    assert (pair["arm"], pair["baseline"]) == ("ppo", "ppo-topk") and "adaptive sampling" in pair["share"]
    assert pair["ratio"] == pytest.approx(1.5)


def test_ablation_pairs_give_the_saving_in_trials_to_target_too():
    # t's target is 1.0 (x slack 1.0): the own-first arm is there at trial 1, the shared-batch arm at trial 3, so
    # 3x on t; on u neither gets there within 4, both count 5: 1x. Geomean sqrt(3).
    runs = [run("t", "evolutionary-pretrained-own-first", 0, {0: 1.0}, n=4),
            run("t", "evolutionary-pretrained", 0, {0: 4.0, 2: 1.0}, n=4),
            run("u", "evolutionary-pretrained-own-first", 0, {0: 3.0}, n=4),
            run("u", "evolutionary-pretrained", 0, {0: 3.0}, n=4), run("u", "evolutionary", 0, {0: 1.0}, n=5)]
    pairs = {(p["arm"], p["baseline"]): p for p in S.ablation_pairs(runs, 4, n_boot=200, slack=1.0)}
    pair = pairs[("evolutionary-pretrained-own-first", "evolutionary-pretrained")]
    assert pair["trials_saving"]["ratio"] == pytest.approx(math.sqrt(3.0)) and pair["trials_saving"]["pairs"] == 2
    assert pair["ratio"] == pytest.approx(1.0)  # the same best latency by trial 4
    assert "first batch" in pair["share"]


def test_common_level_is_the_worse_final_best_and_neither_run_is_censored():
    arm, base = [5.0, 2.0, 2.0, 2.0], [5.0, 4.0, 3.0, 1.0]
    assert S.common_level_trials(arm, base, 4) == (2, 4)  # level 2.0, the arm's: the baseline is under it at 4
    assert S.common_level_trials(arm, base, 2) == (2, 2)  # level 4.0 at N = 2: both there at trial 2
    assert S.common_level_trials(base, arm, 4) == (4, 2)  # the same pair the other way round
    assert S.common_level_trials([math.inf, 3.0], [1.0, 1.0], 1) is None  # the arm has nothing valid by trial 1
    assert S.common_level_trials([4.0, 4.0], [4.0, 1.0], 8) == (1, 1)  # a run shorter than N keeps its last value


def test_mean_curve_log_ratio_averages_over_trials_where_both_are_valid():
    arm, base = [math.inf, 2.0, 1.0, 1.0], [4.0, 4.0, 2.0, 1.0]
    # Trials 2-4: log 2, log 2, log 1 (trial 1 has no arm latency yet).
    assert S.mean_curve_log_ratio(arm, base, 4) == pytest.approx(2 * math.log(2.0) / 3)
    assert S.mean_curve_log_ratio(arm, base, 1) is None
    assert S.mean_curve_log_ratio(base, arm, 4) == pytest.approx(-2 * math.log(2.0) / 3)


def test_the_threshold_free_measures_do_not_move_with_the_global_target():
    # t: ppo gets to 1.0 at trial 2, evolutionary at trial 4; u: both end at 3.0, ppo at trial 1, evolutionary at 2.
    runs = [run("t", "evolutionary", 0, {0: 4.0, 3: 1.0}, n=4), run("t", "ppo", 0, {0: 4.0, 1: 1.0}, n=4),
            run("u", "evolutionary", 0, {0: 5.0, 1: 3.0}, n=4), run("u", "ppo", 0, {0: 3.0}, n=4)]
    for slack in (1.0, 1.5):  # the targets move; the pair's own level does not
        row = next(r for r in S.summarise(runs, 4, slack=slack, n_boot=200) if r["arm"] == "ppo")
        assert row["common_level_saving_vs_baseline"]["ratio"] == pytest.approx(math.sqrt(2.0 * 2.0))
    # Along the curve: on t, 1x, 4x, 4x, 1x; on u, 5/3x, 1x, 1x, 1x: the mean of the two tasks' mean logs.
    along = (2 * math.log(4.0) / 4 + math.log(5 / 3) / 4) / 2
    assert row["curve_speedup_vs_baseline"]["ratio"] == pytest.approx(math.exp(along))
    walks = [dict(r, arm="random-walk") for r in runs if r["arm"] == "evolutionary"]
    pair = S.ablation_pairs([r for r in runs if r["arm"] == "ppo"] + walks, 4, n_boot=200)[0]
    assert pair["common_level_saving"]["ratio"] == pytest.approx(2.0) and pair["common_level_saving"]["pairs"] == 2
    assert pair["curve_speedup"]["ratio"] == pytest.approx(math.exp(along))
    # ppo is at evolutionary's best by trial 2 on t and 1 on u; evolutionary itself by 4 and 2.
    assert row["to_baseline_best_vs_baseline"] == {"median": 1.5, "reached": 2, "within_fifth": 0, "pairs": 2,
                                                   "baseline_median": 3.0}


def test_paired_speedup_curve_is_the_per_trial_geomean_whose_mean_log_is_the_curve_speedup():
    runs = [run("t", "evolutionary", 0, {0: 4.0, 3: 1.0}, n=4), run("t", "ppo", 0, {0: 4.0, 1: 1.0}, n=4),
            run("u", "evolutionary", 0, {0: 5.0, 1: 3.0}, n=4), run("u", "ppo", 0, {0: 3.0}, n=4),
            run("v", "evolutionary", 0, {1: 2.0}, n=4), run("v", "ppo", 0, {0: 2.0}, n=4)]  # v: no pair at trial 1
    curve = S.paired_speedup_curve(runs, "ppo", "evolutionary", 4)
    # Trial 1: t 1x, u 5/3x (v has no baseline latency yet); trial 2: t 4x, u 1x, v 1x; 3: the same; 4: all 1x.
    assert curve == pytest.approx([math.sqrt(5 / 3), 4 ** (1 / 3), 4 ** (1 / 3), 1.0])
    row = next(r for r in S.summarise(runs, 4, n_boot=50) if r["arm"] == "ppo")
    along = np.mean([np.mean([0, math.log(4), math.log(4), 0]), np.mean([math.log(5 / 3), 0, 0, 0]), 0.0])
    assert row["curve_speedup_vs_baseline"]["ratio"] == pytest.approx(math.exp(along))
    assert all(math.isnan(v) for v in S.paired_speedup_curve(runs, "ppo", "random-walk", 2))  # no such pairs


def test_reach_baseline_best_censors_runs_that_never_get_there():
    runs = [run("t", "evolutionary", 0, {0: 4.0, 3: 1.0}, n=4), run("t", "ppo", 0, {0: 4.0, 1: 2.0}, n=4),
            run("t", "evolutionary", 1, {0: 3.0}, n=4), run("t", "ppo", 1, {0: 3.0}, n=4),
            run("t", "evolutionary", 2, {0: 5.0, 2: 2.0}, n=4), run("t", "ppo", 2, {0: 5.0}, n=4),
            run("t", "ppo", 3, {0: 1.0}, n=4)]  # no baseline run for seed 3: left out
    reach = S.reach_baseline_best(runs, "ppo", "evolutionary", S.retimed_curve, 4)
    assert reach == {"median": None, "reached": 1, "within_fifth": 0, "pairs": 3,  # ppo: > 4, 1, > 4
                     "baseline_median": 3.0}
    at10 = S.reach_baseline_best(runs, "ppo", "evolutionary", S.retimed_curve, 10)  # curves keep their last value
    assert at10["reached"] == 1 and at10["within_fifth"] == 1  # seed 1 at trial 1 <= 10 / 5; seed 0's 2.0 > 1.0
    assert S.reach_baseline_best(runs, "ppo", "evolutionary", S.retimed_curve, 1)["median"] == 1.0  # all at 1


def test_the_default_arms_ablations_need_a_model_file():
    from benchmarks.tuning.benchmark import _parser, make_arms

    args = _parser("bench").parse_args([])
    args.cost_model_file = None
    arms, skipped = make_arms(args)
    assert {"evolutionary-pretrained-frozen", "evolutionary-pretrained-calibrated",
            "evolutionary-pretrained-own-first"} <= set(skipped)
    assert arms["evolutionary-own-first"].own_first_batch and not arms["evolutionary"].own_first_batch
    args.cost_model_file = "model.npz"  # read only when an arm's cost model is made
    arms, skipped = make_arms(args)
    assert {"evolutionary-pretrained-frozen", "evolutionary-pretrained-calibrated"} <= set(arms)
    assert arms["evolutionary-pretrained-own-first"].own_first_batch
    assert ("evolutionary-pretrained", "evolutionary-pretrained-frozen") in [p[:2] for p in S.ABLATION_PAIRS]


def test_tophub_tasks_without_a_tophub_folder_are_one_clear_line(tmp_path):
    from benchmarks.tuning.benchmark import TASKS, resolve_tasks

    with pytest.raises(SystemExit, match=r"come from TopHub: TopHub folder .*missing.* does not exist"):
        resolve_tasks([TASKS[0]], str(tmp_path / "missing"))
