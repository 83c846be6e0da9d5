"""The end-to-end tuner benchmark's archive (benchmarks/e2e/archive.py): each run's best record per kernel kept
beside the JSON, so a variant whose folder is gone is rebuilt from it, and never built untuned in its name."""
import json
import shutil

import pytest

from benchmarks.e2e import archive as arch
from tvm_rl.database import RECORDS, WORKLOADS, TuningDatabase


def fake_db(folder, rows, workloads='["w0"]\n["w1"]\n'):
    """rows: (workload index, run seconds or None) in measurement order."""
    folder.mkdir(parents=True)
    (folder / WORKLOADS).write_text(workloads)
    (folder / RECORDS).write_text("".join(json.dumps([w, [f"trace{i}", secs]]) + "\n" for i, (w, secs) in
                                          enumerate(rows)))
    return folder


def test_best_records_take_the_lowest_mean_per_kernel_and_never_a_failed_one(tmp_path):
    folder = fake_db(tmp_path / "run", [(0, [3.0, 3.0]), (0, [1.0, 5.0]), (0, [2.5]), (1, None), (1, [9.0]),
                                        (1, [])])
    best = [json.loads(line) for line in arch.best_records(folder)]
    assert best == [[0, ["trace2", [2.5]]], [1, ["trace4", [9.0]]]]  # mean 2.5 beats 3.0 (its median would not)
    assert arch.best_records(tmp_path / "none") == []


def test_a_gone_folder_is_rebuilt_from_the_archive(tmp_path):
    path = tmp_path / "e2e_best.jsonl.gz"
    folder = fake_db(tmp_path / "w" / "evolutionary_n32_s0", [(0, [2.0]), (1, [4.0]), (0, [1.0])])
    assert arch.add(path, "bert", "evolutionary/N32/s0", folder)
    assert not arch.add(path, "bert", "evolutionary/N32/s0", folder)  # nothing new: nothing appended
    assert arch.database_for(path, "bert", "evolutionary/N32/s0", folder) == folder  # its folder is still here
    shutil.rmtree(folder)
    where = arch.database_for(path, "bert", "evolutionary/N32/s0", folder)
    assert where == folder.with_name("evolutionary_n32_s0_best")
    assert (where / WORKLOADS).read_text() == '["w0"]\n["w1"]\n'
    assert [json.loads(line)[1][1] for line in open(where / RECORDS)] == [[1.0], [4.0]]


def test_a_gone_folder_that_was_never_archived_is_an_error_naming_it(tmp_path):
    path = tmp_path / "e2e_best.jsonl.gz"
    with pytest.raises(SystemExit, match="bert ppo/N32/s0: its tuning database .*ppo_n32_s0 is gone"):
        arch.database_for(path, "bert", "ppo/N32/s0", tmp_path / "ppo_n32_s0")
    assert not (tmp_path / "ppo_n32_s0_best").exists()


def test_a_later_sitting_replaces_the_runs_records_and_workloads_are_kept_once(tmp_path):
    path = tmp_path / "e2e_best.jsonl.gz"
    a = fake_db(tmp_path / "a", [(0, [2.0])])
    b = fake_db(tmp_path / "b", [(0, [3.0])])
    assert arch.add(path, "bert", "a", a) and arch.add(path, "bert", "b", b)
    with open(a / RECORDS, "a") as f:  # another sitting found a faster schedule
        f.write(json.dumps([1, ["later", [0.5]]]) + "\n")
    assert arch.add(path, "bert", "a", a)
    workloads, runs = arch._read(path)
    assert len(workloads) == 1 and len(runs) == 2
    assert arch.restore(path, "bert", "a", tmp_path / "r")
    assert [json.loads(line)[1][0] for line in open(tmp_path / "r" / RECORDS)] == ["trace0", "later"]
    assert not arch.restore(path, "vit", "a", tmp_path / "x")


def test_every_record_is_archived_batch_by_batch_and_restores_a_run_to_resume(tmp_path):
    path = tmp_path / "e2e_best.jsonl.gz"
    folder = fake_db(tmp_path / "w" / "run", [(0, [2.0]), (0, None)])
    records = arch.RunRecords(path, "bert", "k", folder)
    assert records.flush() == 2
    assert records.flush() == 0  # nothing new: nothing appended
    size = path.stat().st_size
    with open(folder / RECORDS, "a") as f:  # the next batch, and the start of a line still being written
        f.write(json.dumps([1, ["t2", [4.0]]]) + "\n" + '[1, ["t3"')
    assert records.flush() == 1 and path.stat().st_size > size
    TuningDatabase(folder).write_exhausted({"123": 1})
    assert records.flush() == 0  # the exhaustion marks alone are archived too
    TuningDatabase(folder).write_from_library({"456": 1})
    size = path.stat().st_size
    assert records.flush() == 0 and path.stat().st_size > size  # so are a library's marks (no new record)
    assert arch.RunRecords(path, "bert", "k", folder).count == 3  # a later sitting carries on from the archive
    lines = (folder / RECORDS).read_text().splitlines(keepends=True)[:3]
    shutil.rmtree(folder)
    assert arch.restore_all(path, "bert", "k", folder) == 3
    assert (folder / RECORDS).read_text() == "".join(lines)  # failed candidates too: they count against the budget
    assert (folder / WORKLOADS).read_text() == '["w0"]\n["w1"]\n'
    assert TuningDatabase(folder).read_exhausted() == {"123": 1}
    assert TuningDatabase(folder).read_from_library() == {"456": 1}  # not counted as measured when resumed
    assert arch.restore_all(path, "bert", "other", tmp_path / "x") == 0 and not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="already holds tuning records"):
        arch.restore_all(path, "bert", "k", folder)
    # Best-records entries and every-record entries live in one file without mixing.
    assert arch.add(path, "bert", "k", folder) and arch.restore(path, "bert", "k", tmp_path / "best")
    assert [json.loads(line)[1][0] for line in open(tmp_path / "best" / RECORDS)] == ["trace0", "t2"]
    assert arch.restore_all(path, "bert", "k", tmp_path / "again") == 3


def test_a_folder_tuned_afresh_starts_the_runs_archive_over(tmp_path):
    path = tmp_path / "e2e_best.jsonl.gz"
    folder = fake_db(tmp_path / "run", [(0, [2.0]), (0, [3.0]), (1, [1.0])])
    arch.RunRecords(path, "bert", "k", folder).flush()
    shutil.rmtree(folder)
    fake_db(folder, [(1, [5.0])])  # deleted by hand and tuned again from nothing
    assert arch.RunRecords(path, "bert", "k", folder).flush() == 1
    assert arch.restore_all(path, "bert", "k", tmp_path / "r") == 1
    assert json.loads((tmp_path / "r" / RECORDS).read_text())[1][1] == [5.0]


def test_a_workloads_file_that_grows_between_batches_is_archived_anew(tmp_path):
    path = tmp_path / "e2e_best.jsonl.gz"
    folder = fake_db(tmp_path / "run", [(0, [2.0])], workloads='["w0"]\n')
    records = arch.RunRecords(path, "bert", "k", folder)
    assert records.flush() == 1
    with open(folder / WORKLOADS, "a") as f:  # the next kernel's workload, committed before its first batch
        f.write('["w1"]\n')
    with open(folder / RECORDS, "a") as f:
        f.write(json.dumps([1, ["t1", [4.0]]]) + "\n")
    assert records.flush() == 1
    assert arch.restore_all(path, "bert", "k", tmp_path / "r") == 2
    assert (tmp_path / "r" / WORKLOADS).read_text() == '["w0"]\n["w1"]\n'
