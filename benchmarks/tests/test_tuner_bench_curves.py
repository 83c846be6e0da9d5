"""The tuner benchmark's trials-to-target curves, plot and tables (no tuning)."""
from benchmarks.tuning import stats as bench_stats
from benchmarks.tuning.benchmark import format_cost, format_table, format_tasks, plot_reach, reach_fractions, summarise
from benchmarks.tuning.report import format_pairs, plot_paired


def run(task, arm, seed, retimed, n=3):
    """A run whose every trial improves on the last at tuning time, re-timed as `retimed`."""
    tuning = [float(10 - i) for i in range(n)]
    return {"task": task, "arm": arm, "seed": seed, "tuning_seconds": tuning,
            "improvers": bench_stats.improvers(tuning), "retimed": retimed, "wall_seconds": 60.0}


RUNS = [run("t", "evolutionary", 0, [5.0, 4.0, 2.0]), run("t", "ppo", 0, [3.0, 2.0, 1.0]),
        run("u", "evolutionary", 0, [1.0, 1.0, 1.0]), run("u", "ppo", 0, [9.0, 9.0, 9.0])]


def test_reach_fractions_and_plot(tmp_path):
    frac = reach_fractions(RUNS, 3)
    # Targets: t 1.0 x 1.05 (ppo reaches it at trial 3), u 1.0 x 1.05 (evolutionary from trial 1).
    assert frac["ppo"] == [0.0, 0.0, 0.5]
    assert frac["evolutionary"] == [0.5, 0.5, 0.5]
    plot_reach(RUNS, 3, tmp_path / "reach.png", marks=[1, 3], shared=1)
    assert (tmp_path / "reach.png").stat().st_size > 0
    walks = [dict(r, arm="random-walk") for r in RUNS if r["arm"] == "evolutionary"]
    assert plot_paired(RUNS + walks, 3, tmp_path / "paired.png")  # ppo and random-walk vs evolutionary; ppo vs walks
    assert (tmp_path / "paired.png").stat().st_size > 0


def test_paired_plot_draws_only_the_panels_the_runs_hold(tmp_path):
    import matplotlib.image

    ppo = [r for r in RUNS if r["arm"] == "ppo"]
    walks = [dict(r, arm="random-walk") for r in RUNS if r["arm"] == "evolutionary"]
    both = tmp_path / "both.png"
    assert plot_paired(RUNS + walks, 3, both)
    alone = tmp_path / "pair_only.png"
    assert plot_paired(ppo + walks, 3, alone)  # no evolutionary run: the ablation pair's panel alone
    assert matplotlib.image.imread(alone).shape[1] < 0.6 * matplotlib.image.imread(both).shape[1]
    assert not plot_paired(ppo, 3, tmp_path / "none.png")  # nothing to pair: no file
    assert not (tmp_path / "none.png").exists()


def test_tables_show_censoring_and_ratios():
    rows = summarise(RUNS, [3], n_boot=100)
    table = format_table(rows, [3])
    assert "| ppo | 2 | 1/2 (50%) | > 3 |" in table  # one of two runs at target: the median run is not
    assert "| evolutionary | 2 | 1/2 (50%) | > 3 | - | - |" in table
    tasks = format_tasks(RUNS, 3)
    assert "| t | 1050000.0 | 2000000.0 | 1000000.0 |" in tasks  # target and median best, seconds shown in us


def test_old_format_runs_give_an_explicit_empty_table():
    old = [{"task": "t", "strategy": "ppo", "seed": 0, "curve": [1.0], "wall_seconds": 3.0}]
    assert "no re-timed runs" in format_table(summarise(old, 32), 32)


def test_cost_line_of_a_run_stopped_before_anything_was_charged():
    """A report on a JSON whose runs were stopped part-way has no total yet: the line says 0, it does not fail."""
    line = format_cost({"shared_seconds": 1800.0}, {"evolutionary": 3600.0, "ppo": 720.0})
    assert line == ("cost: evolutionary 1.00 h, ppo 0.20 h; shared batches 0.50 h, re-timing 0.00 h, waiting for "
                    "the cores 0.00 h; total 0.00 h")


def test_pairs_table_names_each_share_and_says_when_none_applies():
    walks = [dict(r, arm="random-walk") for r in RUNS if r["arm"] == "evolutionary"]
    pairs = bench_stats.ablation_pairs([r for r in RUNS if r["arm"] == "ppo"] + walks, 3, n_boot=100)
    table = format_pairs(pairs)
    # ppo 2x its walks on t (1.0 vs 2.0), 1/9 on u: geomean sqrt(2/9).
    assert ("| learning's share (PPO updates against the same walks without them) | ppo vs random-walk | 0.47x ["
            in table)
    assert "| trials to target within 3, saving [95% CI] |" in table.splitlines()[0]
    second = table.split("\n\n")[1].splitlines()
    assert "| trials to the pair's common level, saving | best-so-far speedup, mean over 1..3 |" in second[0]
    assert second[2].startswith("| ppo vs random-walk | ") and second[2].count("|") == second[0].count("|")
    assert "(no ablation pair" in format_pairs(bench_stats.ablation_pairs(RUNS, 3))
