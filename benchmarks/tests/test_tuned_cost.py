"""The tuners the graph benchmarks build with: the best of several tunings (`tuned_cost.best_of_seeds_tuner`)."""
import pytest
import tvm_ffi

from benchmarks.graphs import tuned_cost
from tests.support import graph_examples as testing
from tvm_rl.database import RECORDS, TuningDatabase, open_database


def _best_ms(database) -> dict[str, float]:
    """The best record's milliseconds per workload (structural hash) of an open database."""
    best: dict[str, float] = {}
    for rec in database.get_all_tuning_records():
        key = str(tvm_ffi.structural_hash(rec.workload.mod))
        ms = 1e3 * min(float(s) for s in rec.run_secs)
        best[key] = min(best.get(key, ms), ms)
    return best


def test_best_of_seeds_tunes_each_seed_apart_and_builds_with_the_best_record(cpu, tmp_path):
    mod = testing.dense_graph(n=4, c=32, o=16)
    # random sampling: any records will do (evolutionary search costs a minute here)
    tune = tuned_cost.best_of_seeds_tuner(cpu, tmp_path, 2, [0, 3], trials_per_iter=2, strategy="random")
    merged = tune(mod)
    seeds = [TuningDatabase(tuned_cost.seed_folder(tmp_path, s)) for s in (0, 3)]
    assert all(db.record_count() > 0 for db in seeds)
    assert TuningDatabase(tmp_path).record_count() == sum(db.record_count() for db in seeds)
    # Per kernel, the merge holds the better of the two seeds' records: the one a build takes.
    per_seed = [_best_ms(db.open()) for db in seeds]
    assert _best_ms(merged) == {k: min(p[k] for p in per_seed if k in p) for k in set().union(*per_seed)}
    # Again: nothing is tuned anew, so the merge is left as it was (not rewritten); a refresh does not commit its
    # sources' records twice.
    counts = [db.record_count() for db in seeds]
    merge_file = tmp_path / RECORDS
    written = (merge_file.stat().st_ino, merge_file.stat().st_mtime_ns)  # a rewrite moves a new file in
    tune(mod)
    assert [TuningDatabase(db.path).record_count() for db in seeds] == counts
    assert (merge_file.stat().st_ino, merge_file.stat().st_mtime_ns) == written
    merge_file.unlink()  # a merge lost (say, a run killed mid-move) is rebuilt from the seeds
    tune(mod)
    assert len(open_database(tmp_path).get_all_tuning_records()) == sum(counts)


def test_best_of_seeds_wants_distinct_seeds(cpu, tmp_path):
    with pytest.raises(ValueError, match="distinct"):
        tuned_cost.best_of_seeds_tuner(cpu, tmp_path, 2, [1, 1])
    with pytest.raises(ValueError, match="at least one"):
        tuned_cost.best_of_seeds_tuner(cpu, tmp_path, 2, [])


def test_the_graph_benchmarks_tune_seeds_option(monkeypatch, cpu, tmp_path):
    import argparse
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    sys.modules.pop("graph_search", None)
    import graph_search

    ap = argparse.ArgumentParser()
    graph_search.add_tuning_args(ap)
    ap.add_argument("--repeat", type=int, default=3)

    def parsed(*argv: str):
        args = ap.parse_args(["--database", str(tmp_path), *argv])
        graph_search.check_tuning_args(ap, args)
        return args

    for bad in (["--tune-seeds", "0", "1"], ["--tune-trials", "4", "--tune-seed", "2", "--tune-seeds", "0", "1"],
                ["--tune-trials", "4", "--tune-seeds", "1", "1"]):
        with pytest.raises(SystemExit):
            parsed(*bad)
    args = parsed("--tune-trials", "4", "--tune-seeds", "0", "1")
    assert graph_search.tune_options(args) == {"tune_trials": 4, "tune_seed": 0, "tune_seeds": [0, 1]}
    assert graph_search.tune_options(parsed("--tune-trials", "4")) == {"tune_trials": 4, "tune_seed": 0}
    # The tuner the benchmarks build with is the seeds' merge: every seed tunes, into its own folder.
    seen = []
    monkeypatch.setattr(tuned_cost, "database_tuner", lambda t, folder, n, seed, **_: seen.append((folder, seed)))
    graph_search.tuner(cpu, args)
    assert seen == [(tmp_path / "seed0", 0), (tmp_path / "seed1", 1)]
