"""The end-to-end benchmark's summary over seeds: geomeans, paired and unpaired speedups with intervals."""
import math

import pytest

from benchmarks.e2e.seeds import format_seed_table, seed_summary


def _entry(builds: dict[tuple[str, int, int], float], torch_ms=10.0, ort_ms=5.0):
    runs = {f"{a}/N{n}/s{s}": {"arm": a, "trials": n, "seed": s} for a, n, s in builds}
    variants = {f"{a}/N{n}/s{s}": {"ms": ms} for (a, n, s), ms in builds.items()}
    variants.update({"PyTorch": {"ms": torch_ms}, "ORT": {"ms": ort_ms}})
    return {"runs": runs, "timing": {"variants": variants}}


def test_speedups_over_seeds_are_paired_at_the_same_budget_and_unpaired_across_budgets():
    entry = _entry({("budget-ours", 256, 0): 20.0, ("budget-ours", 256, 1): 20.0, ("budget-ours", 256, 2): 20.0,
                    ("budget-metaschedule", 256, 0): 80.0, ("budget-metaschedule", 256, 1): 40.0,
                    ("budget-metaschedule", 256, 2): 20.0,
                    ("budget-metaschedule", 1024, 0): 25.0, ("budget-metaschedule", 1024, 1): 25.0,
                    ("budget-ours", 128, 0): 30.0})  # one seed: no row
    rows = {(r["arm"], r["trials"]): r for r in seed_summary(entry)}
    assert set(rows) == {("budget-ours", 256), ("budget-metaschedule", 256), ("budget-metaschedule", 1024)}
    ours = rows[("budget-ours", 256)]
    assert ours["seeds"] == 3 and ours["ms"] == [20.0, 20.0, 20.0]
    point, low, high = ours["vs_metaschedule"][256]
    assert point == pytest.approx(math.exp((math.log(4) + math.log(2) + 0) / 3), abs=1e-3)
    assert low >= 1.0 - 1e-9 and high <= 4.0 + 1e-9 and low < point < high
    assert ours["vs_metaschedule"][1024] == [1.25, 1.25, 1.25]
    assert ours["vs_torch"] == [0.5, 0.5, 0.5] and ours["vs_ort"] == [0.25, 0.25, 0.25]
    assert 256 not in rows[("budget-metaschedule", 256)]["vs_metaschedule"]  # not against itself
    text = format_seed_table("m", list(rows.values()))
    assert "budget-ours N=256 (3 seeds): 20 ms [20, 20]; vs MetaSchedule N=256 2x" in text


def test_no_summary_without_two_seeds():
    assert seed_summary(_entry({("budget-ours", 256, 0): 20.0})) == []
    assert format_seed_table("m", []) == ""


def test_metaschedule_on_tvms_tuning_pipeline_is_a_second_baseline_even_with_one_seed():
    entry = _entry({("budget-optimize", 256, 0): 10.0, ("budget-optimize", 256, 1): 20.0,
                    ("budget-ms-static", 1024, 0): 40.0})
    (row,) = seed_summary(entry)
    point, low, high = row["vs_ms_static"][1024]
    assert point == pytest.approx(40.0 / math.sqrt(200.0), abs=1e-3)  # over the geomean of our seeds
    assert low == pytest.approx(2.0) and high == pytest.approx(4.0)  # our spread over seeds alone
    assert row["vs_metaschedule"] == {}
    assert "vs MetaSchedule (TVM's tuning pipeline) N=1024 2.83x" in format_seed_table("m", [row])
