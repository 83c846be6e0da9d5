"""The tuner benchmark's archive (benchmarks/tuning/archive.py): improvers' records and shared batches kept beside
the JSON, so re-timing and resuming work when the work dir is gone."""
import gzip
import json
import shutil
from pathlib import Path

from benchmarks.tuning.archive import Archive, archive_path
from tvm_rl.database import RECORDS, WORKLOADS

MARK = "shared.json"


def fake_run(root: Path, name: str, records: int, improvers: list[int]) -> dict:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / RECORDS).write_text("".join(json.dumps([0, {"trace": name, "i": i}]) + "\n" for i in range(records)))
    return {"work_dir": str(folder), "improvers": improvers}


def fake_shared(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / WORKLOADS).write_text('["workload"]\n')
    (folder / RECORDS).write_text('[0, {"trace": "shared"}]\n')
    (folder / MARK).write_text('{"records": 1}')
    return folder


def test_the_archive_sits_beside_its_json():
    assert archive_path(Path("logs/tuner_llvm.json")) == Path("logs/tuner_llvm_records.jsonl.gz")


def test_a_run_keeps_only_its_improvers_and_they_outlive_its_folder(tmp_path):
    path = tmp_path / "t_records.jsonl.gz"
    run = fake_run(tmp_path, "run_a", records=6, improvers=[0, 2, 5])
    archive = Archive.open(path)
    assert archive.add_run(run) == 3
    assert archive.add_run(run) == 0  # nothing is archived twice
    shutil.rmtree(run["work_dir"])
    again = Archive.open(path)
    assert again.record(run["work_dir"], 2) == {"trace": "run_a", "i": 2}
    assert again.record(run["work_dir"], 1) is None  # not an improver: not kept
    assert len(again.records) == 3
    assert again.add_run(run) == 0  # its folder is gone: nothing to add, no error


def test_a_shared_batch_is_restored_byte_for_byte(tmp_path):
    path = tmp_path / "t_records.jsonl.gz"
    folder = fake_shared(tmp_path / "shared" / "task_s0")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    archive = Archive.open(path)
    assert archive.add_shared("task|0", folder, MARK) and not archive.add_shared("task|0", folder, MARK)
    shutil.rmtree(folder)
    again = Archive.open(path)
    assert not again.restore_shared("other|0", folder) and not folder.exists()
    assert again.restore_shared("task|0", folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_an_incomplete_shared_batch_is_not_archived(tmp_path):
    folder = fake_shared(tmp_path / "s")
    (folder / MARK).unlink()  # a batch cut short by a kill has no mark
    assert not Archive.open(tmp_path / "a.jsonl.gz").add_shared("task|0", folder, MARK)


def test_backfill_takes_what_the_work_dir_still_holds(tmp_path):
    path = tmp_path / "t_records.jsonl.gz"
    runs = [fake_run(tmp_path, "a", 3, [0, 1]), fake_run(tmp_path, "b", 2, [1])]
    fake_shared(tmp_path / "shared" / "task_s0")
    state = {"runs": runs + [{"work_dir": str(tmp_path / "gone"), "improvers": [0]}],
             "shared": {"task|0": {}, "task|1": {}}}
    assert Archive(path).backfill(state, tmp_path / "shared", MARK) == 4  # 3 improvers + 1 shared batch
    reread = Archive.open(path)
    assert len(reread.records) == 3 and set(reread.shared) == {"task|0"}


def test_a_truncated_last_member_loses_only_itself(tmp_path):
    path = tmp_path / "t_records.jsonl.gz"
    archive = Archive.open(path)
    archive.add_run(fake_run(tmp_path, "a", 2, [0, 1]))
    whole = path.read_bytes()
    archive.add_run(fake_run(tmp_path, "b", 2, [0, 1]))
    path.write_bytes(path.read_bytes()[:len(whole) + 10])  # killed while appending run b
    assert set(Archive.open(path).records) == {(str(tmp_path / "a"), 0), (str(tmp_path / "a"), 1)}
    with gzip.open(path, "rt") as f:  # the archive is plain gzip'd JSON lines, readable without tvm-rl
        assert json.loads(f.readline())["index"] == 0
    # The next sitting appends. A gzip reader cannot get past a member cut short, so what it appends would be lost
    # (and reading raised zlib.error) unless the cut member is dropped first.
    Archive.open(path).add_run(fake_run(tmp_path, "c", 1, [0]))
    assert set(Archive.open(path).records) == {(str(tmp_path / "a"), 0), (str(tmp_path / "a"), 1),
                                               (str(tmp_path / "c"), 0)}

