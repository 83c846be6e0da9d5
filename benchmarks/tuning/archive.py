"""The tuner benchmark's archive: what re-timing and resuming need, kept beside the JSON so that a fresh clone can
extend a committed benchmark.

Re-timing rebuilds every improver of every run of a task from its run's database, and new arms start from the
(task, seed)'s shared first batch; both live in the work dir (`logs/scratch/...`), which is not committed and is
lost with the machine. The archive (`<out stem>_records.jsonl.gz`, a few hundred KB for hundreds of runs) holds
the improvers' tuning records and the shared batches' database files, appended as each is made (gzip members
append, so a killed run loses at most the line being written). Re-timing and resuming read the work dir first
and fall back to the archive.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common.jsonl_gz import append_json_lines_gz, read_json_lines_gz
from tvm_rl.database import RECORDS, WORKLOADS


def archive_path(out: Path) -> Path:
    """The archive that goes with the benchmark JSON `out`."""
    return out.with_name(f"{out.stem}_records.jsonl.gz")


@dataclass
class Archive:
    """What the archive holds: improvers' records keyed by (run work dir, record index), and shared batches'
    files keyed by the benchmark's `task|seed`."""

    path: Path
    records: dict[tuple[str, int], Any] = field(default_factory=dict)
    shared: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path) -> Archive:
        """Read `path` (an absent file is an empty archive; a truncated last member is skipped, not fatal)."""
        archive = cls(Path(path))
        for entry in read_json_lines_gz(archive.path):
            archive._take(entry)
        return archive

    def _take(self, entry: dict[str, Any]) -> None:
        if "shared" in entry:
            self.shared[entry["shared"]] = entry["files"]
        else:
            self.records[(entry["work_dir"], int(entry["index"]))] = entry["record"]

    def add_run(self, run: dict[str, Any]) -> int:
        """Archive the improvers of `run` (a benchmark run record) from its database; returns how many were new.
        A run whose database is gone adds nothing (its improvers are either archived already or lost)."""
        path = Path(run["work_dir"]) / RECORDS
        wanted = {int(k) for k in run["improvers"] if (run["work_dir"], int(k)) not in self.records}
        if not wanted or not path.is_file():
            return 0
        new = []
        with open(path) as f:
            for i, line in enumerate(f):
                if i in wanted:
                    new.append({"work_dir": run["work_dir"], "index": i, "record": json.loads(line)[1]})
        append_json_lines_gz(self.path, new)
        for entry in new:
            self._take(entry)
        return len(new)

    def add_shared(self, key: str, folder: Path, mark: str) -> bool:
        """Archive the shared first batch `key` (its database files and its `mark` file); False if already held
        or the folder is incomplete."""
        files = {name: Path(folder) / name for name in (WORKLOADS, RECORDS, mark)}
        if key in self.shared or not all(p.is_file() for p in files.values()):
            return False
        entry = {"shared": key, "files": {name: p.read_text() for name, p in files.items()}}
        append_json_lines_gz(self.path, [entry])
        self._take(entry)
        return True

    def restore_shared(self, key: str, folder: Path) -> bool:
        """Write the shared batch `key` back into `folder`; False if the archive does not hold it."""
        files = self.shared.get(key)
        if files is None:
            return False
        Path(folder).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (Path(folder) / name).write_text(text)
        return True

    def record(self, work_dir: str, index: int) -> Any | None:
        """The archived tuning record (MetaSchedule's JSON form) of record `index` of the run in `work_dir`."""
        return self.records.get((str(work_dir), int(index)))

    def backfill(self, state: dict[str, Any], shared_root: Path, mark: str) -> int:
        """Archive whatever of a benchmark state's runs and shared batches is still in the work dir and not yet
        held (results made before the archive existed); returns the number of entries added."""
        added = sum(self.add_run(run) for run in state.get("runs", []))
        for key in state.get("shared", {}):
            task, seed = key.rsplit("|", 1)
            added += self.add_shared(key, Path(shared_root) / f"{task}_s{seed}", mark)
        return added


__all__ = ["Archive", "archive_path"]
