"""The tuner benchmark's measurements-to-target curves."""
from tvm_rl.tune.benchmark import plot_reach, reach_fractions


def test_reach_fractions_count_runs_at_evolutionary_best(tmp_path):
    runs = [{"task": "t", "strategy": "evolutionary", "seed": 0, "curve": [5.0, 4.0, 2.0]},
            {"task": "t", "strategy": "ppo", "seed": 0, "curve": [3.0, 2.0, 1.0]},
            {"task": "u", "strategy": "evolutionary", "seed": 0, "curve": [1.0, 1.0, 1.0]},
            {"task": "u", "strategy": "ppo", "seed": 0, "curve": [9.0, 9.0, 9.0]}]
    frac = reach_fractions(runs, 3)
    assert frac["ppo"] == [0.0, 0.5, 0.5]  # task t reached 2.0 at trial 2; task u never
    assert frac["evolutionary"] == [0.5, 0.5, 1.0]  # by definition it ends at its own best
    plot_reach(runs, 3, tmp_path / "reach.png")
    assert (tmp_path / "reach.png").stat().st_size > 0
