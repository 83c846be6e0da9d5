"""The tuner's default is the arm the committed benchmark measured best, not the one we would like to win.

`logs/tuner_llvm.json` is the tuner benchmark of record (`benchmarks/tuner.py`, command in docs/results/tuner.md).
When a rerun changes which arm is best, this test fails until `search_strategy.DEFAULT` follows it."""
import json
from pathlib import Path

from benchmarks.common.jsonfile import read_json
from benchmarks.tuning.arms import default_arm
from benchmarks.tuning.stats import BASELINE
from tvm_rl.tune.search_strategy import DEFAULT, create, names

RESULTS = Path(__file__).resolve().parents[2] / "logs" / "tuner_llvm.json"


def speedups_at_largest_budget(summary: list[dict]) -> dict[str, float]:
    """Arm -> geomean speedup of its best kernel over evolutionary search's (same task and seed), at the largest N."""
    largest = max(row["trials"] for row in summary)
    rows = [row for row in summary if row["trials"] == largest]
    return {row["arm"]: (1.0 if row["arm"] == BASELINE else row["speedup_vs_baseline"]["ratio"]) for row in rows
            if row["arm"] == BASELINE or row.get("speedup_vs_baseline")}


def test_the_default_strategy_is_what_the_committed_benchmark_supports():
    summary = read_json(RESULTS)["summary"]
    speedups = speedups_at_largest_budget(summary)
    arm = default_arm("llvm")
    assert arm in speedups, f"the default's arm {arm!r} is not in {RESULTS.name}: rerun the benchmark with it"
    best = max(speedups, key=lambda a: speedups[a])
    assert speedups[arm] == speedups[best], (
        f"{RESULTS.name} measures {best!r} best ({speedups[best]:.3f}x over {BASELINE}), the default's arm {arm!r} "
        f"{speedups[arm]:.3f}x: make the winner the default (search_strategy.DEFAULT) and say so in the README")


def test_the_default_is_a_registered_strategy_and_create_none_gives_it():
    assert DEFAULT in names()
    assert type(create(None)) is type(create(DEFAULT))


def test_speedups_read_the_largest_budget_and_count_the_baseline_as_one():
    summary = [{"trials": 64, "arm": "evolutionary"},
               {"trials": 64, "arm": "ppo", "speedup_vs_baseline": {"ratio": 1.5}},
               {"trials": 128, "arm": "evolutionary"},
               {"trials": 128, "arm": "ppo", "speedup_vs_baseline": {"ratio": 0.9}},
               {"trials": 128, "arm": "random", "speedup_vs_baseline": None}]
    assert speedups_at_largest_budget(summary) == {"evolutionary": 1.0, "ppo": 0.9}


POOLED = RESULTS.with_name("tuner_llvm_pooled.json")


def test_ppo_searchs_pick_is_adaptive_only_where_the_pooled_benchmark_shows_adaptive_sampling_wins():
    """Adaptive sampling must beat top-k (its CI above 1.0 at every budget pooled) to be PPOSearch's default."""
    from tvm_rl.tune.search_strategy.ppo import PPOSearch

    shares = [p for reading in json.loads(POOLED.read_text())["readings"] for p in reading["pairs"]
              if (p["arm"], p["baseline"]) == ("ppo", "ppo-topk")]
    assert shares, f"{POOLED.name} has no ppo vs ppo-topk pair: pool blocks that ran both arms"
    adaptive_wins = all(p["ci_low"] > 1.0 for p in shares)
    assert PPOSearch().adaptive == adaptive_wins, (
        f"{POOLED.name}: adaptive vs top-k {[round(p['ratio'], 3) for p in shares]} (CI lows "
        f"{[round(p['ci_low'], 3) for p in shares]}); PPOSearch's default must follow it")


def test_strategy_names_say_which_pick_ppo_search_uses():
    def adaptive(name: str) -> bool:
        return getattr(create(name), "_inst", create(name)).adaptive

    assert not adaptive("ppo") and not adaptive("ppo-topk") and adaptive("ppo-adaptive")


def test_benchmark_arms_keep_the_pick_they_were_pooled_with():
    """An arm's name means what it meant in the committed blocks, whatever PPOSearch's default becomes."""
    from benchmarks.tuning.benchmark import _parser, make_arms

    args = _parser("bench").parse_args([])
    args.cost_model_file, args.policy = "model.npz", None  # read only when an arm's cost model is made
    arms, _ = make_arms(args)
    picks = {name: getattr(arms[name].strategy(0), "_inst", None).adaptive
             for name in ("ppo", "ppo-topk", "ppo-pretrained-model", "random-walk")}
    assert picks == {"ppo": True, "ppo-topk": False, "ppo-pretrained-model": True, "random-walk": True}
