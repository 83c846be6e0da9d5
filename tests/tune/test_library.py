"""The schedule library: best records kept, exact matches applied without measuring, schedules moved to new shapes."""
import gzip
import json

import pytest
import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from tests.support.kernels import drive, fake_corpus, matmul
from tvm_rl.database import TuningDatabase, record_seconds
from tvm_rl.tune.library import LibraryError, ScheduleLibrary, build_library, kind_of, nearest_split, transfer


@pytest.fixture(scope="module")
def corpus(cpu, tmp_path_factory):
    """Matmuls of 16 and 32, 6 made-up-seconds records each (every 3rd failed)."""
    return fake_corpus(tmp_path_factory.mktemp("corpus"), cpu, sizes=(16, 32), per_workload=6, fail_every=3)


@pytest.fixture(scope="module")
def library(corpus, tmp_path_factory):
    return build_library([corpus.database(f"matmul{n}") for n in (16, 32)],
                         tmp_path_factory.mktemp("lib") / "lib.jsonl.gz", top=2)


def _splits(sch):
    return [tuple(int(f) for f in sch.trace.decisions[i]) for i in sch.trace.insts
            if i.kind.name == "SamplePerfectTile"]


def test_the_nearest_split_keeps_the_inner_tiles_and_moves_the_rest_outward():
    assert nearest_split(64, (2, 4, 8), 64) == (2, 4, 8)  # it fits: unchanged
    assert nearest_split(96, (2, 4, 8), 64) == (3, 4, 8)
    assert nearest_split(24, (1, 4, 16), 64) == (1, 2, 12)  # 16 does not divide 24: 12 is the nearest inner tile
    assert nearest_split(7, (2, 2, 2), 64) == (7, 1, 1)  # a prime: the inner levels stay nearest, the rest goes out
    assert nearest_split(32, (1, 1, 64), 16) == (2, 1, 16)  # the innermost limit holds


def test_the_library_keeps_each_workloads_best_records_and_no_failed_one(corpus, library):
    assert len(library) == 4
    for n in (16, 32):
        records = corpus.database(f"matmul{n}").open().get_all_tuning_records()
        seconds = sorted(s for s in (record_seconds(r.run_secs) for r in records) if s is not None)
        kept = sorted(e.seconds for e in library.entries if e.workload == tvm_ffi.structural_hash(matmul(n)))
        assert kept == pytest.approx(seconds[:2])
        assert all(e.kind == ("C",) for e in library.entries)


def test_an_exact_match_on_the_same_target_is_applied_without_measuring(cpu, library, tmp_path):
    db = TuningDatabase(tmp_path).open()
    applied = library.apply(db, [("mm16", matmul(16), 1.0), ("mm24", matmul(24), 1.0)], cpu)
    assert applied == [("mm16", tvm_ffi.structural_hash(matmul(16)))]  # matmul(24) is not in the library
    [record] = db.get_all_tuning_records()
    assert record_seconds(record.run_secs) == pytest.approx(library.best(matmul(16), cpu).seconds)
    assert library.apply(db, [("mm16", matmul(16), 1.0)], cpu) == []  # it has a record now: left alone


def test_another_target_gets_no_record_applied(library, tmp_path):
    other = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 64})
    assert library.apply(TuningDatabase(tmp_path).open(), [("mm16", matmul(16), 1.0)], other) == []


def test_a_schedule_moves_to_a_new_shape_with_the_nearest_splits(library):
    entry = library.entries[0]
    source = matmul(16) if entry.workload == tvm_ffi.structural_hash(matmul(16)) else matmul(32)
    old = _splits(transfer(entry.trace, source))
    moved = transfer(entry.trace, matmul(48))
    assert moved is not None
    new = _splits(moved)
    assert len(new) == len(old)
    for split_old, split_new in zip(old, new):
        assert nearest_split(48, split_old, 64) == split_new


def test_seeds_come_only_from_the_same_kind_of_kernel_and_the_same_workload_first(library):
    from tvm import te, topi

    seeds = library.seeds(matmul(32), limit=8)
    assert 2 <= len(seeds) <= 4
    exact = {json.dumps(e.trace) for e in library.entries if e.workload == tvm_ffi.structural_hash(matmul(32))}
    first = [transfer(json.loads(t), matmul(32)) for t in exact]
    firsts = {tvm_ffi.structural_hash(s.mod) for s in first}
    assert {tvm_ffi.structural_hash(s.mod) for s in seeds[: len(firsts)]} == firsts
    data = te.placeholder((1, 8, 8, 8), name="data")
    weight = te.placeholder((8, 8, 3, 3), name="weight")
    conv = tvm.IRModule({"main": te.create_prim_func([data, weight, topi.nn.conv2d_nchw(data, weight, 1, 1, 1)])})
    assert kind_of(conv) != kind_of(matmul(32)) and library.seeds(conv) == []
    assert transfer(library.entries[0].trace, conv) is None  # a matmul's trace does not replay on a conv


def test_the_first_batch_gives_the_librarys_best_schedules_their_share_and_the_search_the_rest(cpu, library):
    from tvm_rl.tune.search_strategy.seeded import Seeded
    from tvm_rl.tune.search_strategy.skip_measured import trace_key

    strategy = Seeded(ms.search_strategy.ReplayTrace(), library)
    ctx = ms.TuneContext(mod=matmul(48), target=cpu, space_generator="post-order-apply", search_strategy=strategy,
                         task_name="mm48", rand_state=0, num_threads=1)
    inst, batches = drive(strategy, ctx, trials=12, per_iter=8)
    seeds = {trace_key(s.trace) for s in library.seeds(matmul(48))}
    assert 2 <= len(seeds) <= 4  # fewer than the 4 places (half the batch) the seeds may take
    first = [trace_key(c.sch.trace) for c in batches[0]]
    assert len(first) == 8 and set(first[: len(seeds)]) == seeds  # the seeds, then the inner strategy's
    assert inst.seeded[0] == len(seeds)
    assert sum(len(b) for b in batches) == 12
    strategy = Seeded(ms.search_strategy.ReplayTrace(), library, share=0.25)
    ctx = ms.TuneContext(mod=matmul(48), target=cpu, space_generator="post-order-apply", search_strategy=strategy,
                         task_name="mm48", rand_state=0, num_threads=1)
    inst, batches = drive(strategy, ctx, trials=8, per_iter=8)
    assert inst.seeded[0] == 2 and {trace_key(c.sch.trace) for c in batches[0][:2]} <= seeds  # a quarter of 8


# Explicit ids: pytest-xdist's workers must collect the same names (gzip's bytes carry a timestamp).
@pytest.mark.parametrize("content, message", [
    (None, "no schedule library"),
    (b"not gzip", "not a gzip'd schedule library"),
    (gzip.compress(b'{"format": "something else"}\n', mtime=0), "not a version-1 tvm-rl schedule library"),
    (gzip.compress(b'{"format": "tvm-rl schedule library", "version": 1}\n{"workload": 1}\n', mtime=0), "line 2"),
    (gzip.compress(b'{"format": "tvm-rl schedule library", "version": 1}\n{oops\n', mtime=0), "line 2: not JSON"),
], ids=["missing", "not-gzip", "other-format", "bad-entry", "not-json"])
def test_a_bad_library_file_is_named_with_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "lib.jsonl.gz"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(LibraryError, match=message) as err:
        ScheduleLibrary(path)
    assert str(path) in str(err.value)


def test_seeds_are_rated_by_the_runs_cost_model_best_first(cpu, library):
    from types import SimpleNamespace

    from tvm_rl.tune.search_strategy.seeded import Seeded
    from tvm_rl.tune.search_strategy.skip_measured import trace_key

    strategy = Seeded(ms.search_strategy.ReplayTrace(), library)
    ctx = ms.TuneContext(mod=matmul(48), target=cpu, space_generator="post-order-apply", search_strategy=strategy,
                         task_name="mm48", rand_state=0, num_threads=1)
    inst = strategy._inst
    inst._initialize_with_tune_context(ctx)
    rating = SimpleNamespace(predict=lambda context, candidates: list(range(len(candidates))))  # the last best
    inst.pre_tuning(8, 8, ctx.generate_design_space(), None, None)
    unrated = [trace_key(c.sch.trace) for c in inst._ranked_seeds()]
    inst.cost_model = rating
    rated = [trace_key(c.sch.trace) for c in inst._ranked_seeds()]
    assert len(rated) >= 2 and rated == unrated[::-1]


@pytest.mark.slow
def test_tuning_with_a_library_spends_no_measurement_on_its_exact_kernels(cpu, library, tmp_path):
    from tvm_rl.tune import tune_workloads

    workloads = [("mm16", matmul(16), 1.0)]
    quick = dict(trials_per_iter=2, cost_model="xgb")
    database, report = tune_workloads(workloads, cpu, tmp_path, budget=2, library=library, **quick)
    assert report.from_library == ["mm16"] and report.measured == 2  # the library's record cost nothing
    folder = TuningDatabase(tmp_path)
    assert folder.read_from_library() == {str(tvm_ffi.structural_hash(matmul(16))): 1}
    assert folder.record_count() == 3
    _, report = tune_workloads(workloads, cpu, tmp_path, budget=2, library=library, **quick)
    assert report.measured == 0 and report.from_library == []  # resumed: the budget is spent, nothing applied again
    _, report = tune_workloads(workloads, cpu, tmp_path / "per_kernel", trials_per_kernel=2, library=library, **quick)
    assert report.measured == 2  # per kernel too, the library's record is not one of the kernel's trials


def test_the_library_command_builds_from_every_database_under_a_folder_and_shows_it(corpus, tmp_path, capsys):
    from tvm_rl.cli import main

    out = tmp_path / "lib.jsonl.gz"
    assert main(["library", "build", str(corpus.path), "--out", str(out), "--top", "1"]) == 0
    assert "2 schedules of 2 workloads from 2 database(s)" in capsys.readouterr().out
    assert main(["library", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "kind C: 2 schedules" in shown and "target " in shown
    assert main(["library", "show", str(tmp_path / "missing.jsonl.gz")]) == 2
    assert "no schedule library at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["library", "build", str(tmp_path / "empty"), "--out", str(out)])
    assert "no tuning database in" in capsys.readouterr().err


def test_shipped_names_the_library_shipped_for_the_target_kind(monkeypatch, library, tmp_path):
    from tvm_rl.tune import library as library_module

    assert library_module.open_library(None) is None and library_module.open_library(library) is library
    monkeypatch.setattr(library_module, "SHIPPED_DIR", tmp_path)
    with pytest.raises(LibraryError, match="no schedule library is shipped for 'cuda'"):
        library_module.open_library("shipped", "cuda")
    assert library_module.open_library("default", "cuda") is None  # the default where none ships: no library
    (tmp_path / "library_llvm.jsonl.gz").write_bytes(library.path.read_bytes())
    assert len(library_module.open_library("shipped", "llvm")) == len(library)
    assert len(library_module.open_library("default", "llvm")) == len(library)
    assert library_module.open_library("none", "llvm") is None


def test_the_shipped_cpu_library_reads_and_names_its_targets():
    from tvm_rl.tune.library import open_library

    shipped = open_library("shipped", "llvm")
    assert len(shipped) > 0 and all(json.loads(e.target)["kind"] == "llvm" for e in shipped.entries)
    assert ("conv2d_nchw", "pad_temp") in {e.kind for e in shipped.entries}


def test_a_library_grows_by_merging_it_with_new_databases(corpus, tmp_path, capsys):
    from tvm_rl.cli import main

    out = tmp_path / "lib.jsonl.gz"
    first = build_library([corpus.database("matmul16")], out, top=2)
    assert len(first.workloads()) == 1
    # The library itself as a source, written over: its schedules kept, the new database's added, none twice.
    assert main(["library", "build", str(corpus.database("matmul32").path), str(out), "--out", str(out),
                 "--top", "2"]) == 0
    assert "from 1 database(s) and 1 library file(s)" in capsys.readouterr().out
    grown = ScheduleLibrary(out)
    assert len(grown.workloads()) == 2 and len(grown) == 4
    again = build_library([corpus.database("matmul16")], tmp_path / "again.jsonl.gz", top=2, libraries=[grown])
    assert len(again) == 4  # the same schedules from both: kept once
    assert sorted(e.seconds for e in again.entries) == sorted(e.seconds for e in grown.entries)
    (tmp_path / "junk.jsonl.gz").write_text("not a library")
    assert main(["library", "build", str(tmp_path / "junk.jsonl.gz"), "--out", str(out)]) == 2
    assert "is not a gzip'd schedule library" in capsys.readouterr().err
