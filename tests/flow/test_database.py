"""`tvm_rl.database.TuningDatabase` owns a tuning-database folder: its file names, the checked opening, its
records; `as_database` / `TuningDatabase.of` take every kind of `database` argument, and the cache tag keeps
the form existing kernel caches are keyed by."""
import os
from pathlib import Path

import pytest
import tvm
from tvm import te
from tvm.s_tir import meta_schedule as ms

from tvm_rl import measure
from tvm_rl.database import TuningDatabase, as_database, merge_databases, open_database
from tvm_rl.errors import DatabaseError, DatabaseTypeError
from tvm_rl.graph import calibration, cost


def _matmul(n: int = 16) -> tvm.IRModule:
    a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def _commit(db: ms.Database, seconds) -> None:
    """Records as TVM writes them (the unscheduled trace, made-up times), in the order given."""
    mod = _matmul()
    workload = db.commit_workload(mod)
    trace = tvm.s_tir.Schedule(mod).trace
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    for secs in seconds:
        db.commit_tuning_record(ms.database.TuningRecord(trace, workload, secs, measure.host_cpu_target(), args))


@pytest.fixture
def folder(tmp_path) -> Path:
    """A real database whose records were measured slower first: file order is not TVM's sorted order."""
    work = tmp_path / "db"
    _commit(open_database(work), ([3e-3], [1e-3], [2e-3]))
    return work


def old_tag(db: ms.database.JSONDatabase) -> str:
    """How `graph.cost.database_tag` named a JSON database before the owner existed (kernel caches use it)."""
    return f"json:{os.path.abspath(str(db.path_tuning_record))}"


def test_the_owner_names_the_folder_files(tmp_path):
    db = TuningDatabase(tmp_path)
    assert db.path == tmp_path and os.fspath(db) == str(tmp_path)
    assert db.workloads_path == tmp_path / "database_workload.json"
    assert db.records_path == tmp_path / "database_tuning_record.json"
    assert db.exhausted_path == tmp_path / "exhausted.json" and db.failures_path == tmp_path / "failures.jsonl"
    assert db.roofline_path == tmp_path / "roofline.json"
    assert db.is_empty() and db.record_count() == db.workload_count() == db.failure_count() == 0
    assert list(db.run_seconds()) == []
    with pytest.raises(DatabaseError, match="empty path"):
        TuningDatabase("")


def test_open_checks_once_and_reads_the_records(folder):
    db = TuningDatabase(folder)
    opened = db.open()
    assert isinstance(opened, ms.database.JSONDatabase) and db.open() is opened
    assert not db.is_empty() and db.workload_count() == 1 and db.record_count() == 3
    assert sorted(float(r.run_secs[0]) for r in db.records()) == pytest.approx([1e-3, 2e-3, 3e-3])
    # Measurement order, as the tuner benchmark's curves need (TVM's reader sorts by latency).
    assert [secs[0] for secs in db.run_seconds()] == pytest.approx([3e-3, 1e-3, 2e-3])
    assert len(open_database(folder).get_all_tuning_records()) == 3


def test_a_corrupt_folder_is_refused_wherever_it_is_read(folder):
    records = folder / "database_tuning_record.json"
    records.write_text(records.read_text().splitlines()[0] + "\ngarbage here\n")
    for read in (lambda: TuningDatabase(folder).open(), lambda: list(TuningDatabase(folder).run_seconds()),
                 lambda: as_database(folder), lambda: calibration.tuned_kernels(folder)):
        with pytest.raises(DatabaseError, match="line 2 of database_tuning_record.json is not JSON"):
            read()


def test_exhausted_marks_round_trip(tmp_path):
    db = TuningDatabase(tmp_path)
    assert db.read_exhausted() == {}
    db.write_exhausted({"123": 4})
    assert db.read_exhausted() == TuningDatabase(tmp_path).read_exhausted() == {"123": 4}
    db.exhausted_path.write_text('{"123": ')  # cut short by a killed run
    assert db.read_exhausted() == {}


def test_find_under_lists_every_database_folder(tmp_path):
    for sub in ("b", "a/deeper", "a"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / sub / "database_workload.json").write_text("")
    assert [db.path for db in TuningDatabase.find_under(tmp_path)] == [
        tmp_path / "a", tmp_path / "a" / "deeper", tmp_path / "b"]


def test_every_kind_of_database_argument_is_accepted(folder):
    opened = open_database(folder)
    owner = TuningDatabase(folder)
    memory = ms.database.MemoryDatabase()
    assert as_database(None) is None and TuningDatabase.of(None) is None
    assert as_database(opened) is opened and TuningDatabase.of(opened).open() is opened
    assert as_database(owner) is owner.open() and TuningDatabase.of(owner) is owner
    assert as_database(memory) is memory and TuningDatabase.of(memory) is None
    for path in (folder, str(folder)):
        db = as_database(path)
        assert isinstance(db, ms.database.JSONDatabase) and len(db.get_all_tuning_records()) == 3
        assert TuningDatabase.of(path).path == folder
    for wrong in (3, ["db"], b"db"):
        with pytest.raises(DatabaseTypeError, match=f"not {type(wrong).__name__}"):
            as_database(wrong)
    with pytest.raises(DatabaseTypeError, match="not int"):  # not a build failure
        measure.build(None, "llvm", database=3)


def test_cache_tag_keeps_its_old_form(folder, monkeypatch):
    monkeypatch.chdir(folder.parent)
    relative = Path(folder.name)
    opened = open_database(relative)
    tag = old_tag(opened)
    assert tag == f"json:{folder / 'database_tuning_record.json'}"
    for database in (opened, relative, str(relative), folder, TuningDatabase(relative)):
        assert TuningDatabase.of(database).tag == cost.database_tag(database) == tag
    assert cost.KernelCostCache("llvm", str(relative)).tag == tag
    # A JSONDatabase with other file names keeps them: its tag is still the old one.
    other = ms.database.JSONDatabase(str(folder / "wl.json"), str(folder / "rec.json"), allow_missing=True)
    owner = TuningDatabase.of(other)
    assert owner.path == folder and owner.records_path == folder / "rec.json"
    assert owner.workloads_path == folder / "wl.json" and owner.tag == old_tag(other)


def test_proxy_roofline_reads_only_folders_with_records(cpu, folder, tmp_path):
    nominal = calibration.roofline.default_hardware(cpu)
    assert calibration.proxy_roofline(cpu, tmp_path / "none") == nominal
    assert calibration.proxy_roofline(cpu, TuningDatabase(tmp_path / "none")) == nominal
    assert calibration.proxy_roofline(cpu, ms.database.MemoryDatabase()) == nominal
    kernels = calibration.tuned_kernels(TuningDatabase(folder))
    assert len(kernels) == 1 and kernels[0].flops == 2 * 16 ** 3 and kernels[0].best_ms == pytest.approx(1.0)


def test_merging_databases_builds_with_the_best_record_any_of_them_holds(tmp_path, folder):
    other = tmp_path / "other"
    _commit(open_database(other), ([5e-4], [4e-3]))
    merged = tmp_path / "merged"
    assert merge_databases(merged, [folder, other]) == 5
    db = open_database(merged)
    assert len(db.get_all_tuning_records()) == 5
    assert sorted(float(r.run_secs[0]) for r in db.get_all_tuning_records()) == [5e-4, 1e-3, 2e-3, 3e-3, 4e-3]
    kernels = calibration.tuned_kernels(merged)
    assert len(kernels) == 1 and kernels[0].best_ms == pytest.approx(0.5)  # the other tuning's better record
    with pytest.raises(DatabaseError, match="both a source and the merged"):
        merge_databases(merged, [folder, merged])
    with pytest.raises(DatabaseError, match=r"empty.*holds no tuning records"):
        merge_databases(tmp_path / "m2", [folder, tmp_path / "empty"])
    assert not (tmp_path / "m2").exists()  # sources checked before anything is written: no half-merged folder


def test_a_replacing_merge_is_exactly_its_sources_however_often_it_is_refreshed(tmp_path, folder):
    other, merged = tmp_path / "other", tmp_path / "merged"
    _commit(open_database(other), ([5e-4],))
    assert merge_databases(merged, [folder, other]) == 4
    assert merge_databases(merged, [folder, other]) == 4  # without replace: committed twice
    assert len(open_database(merged).get_all_tuning_records()) == 8
    _commit(open_database(other), ([2e-4],))  # a source grew (another kernel tuned)
    assert merge_databases(merged, [folder, other], replace=True) == 5
    assert len(open_database(merged).get_all_tuning_records()) == 5
    assert calibration.tuned_kernels(merged)[0].best_ms == pytest.approx(0.2)
    assert not (tmp_path / "merged.merging").exists()
