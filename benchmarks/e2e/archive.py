"""What the end-to-end tuner benchmark needs to build its tuned variants again, and to resume its runs, kept
beside its JSON.

A model's variants are timed together, so adding an arm, a budget or a seed to a model re-times its earlier runs
too, and each is built from its run's database (in `logs/scratch/...`, not committed, lost with the machine). A
build reads only the best record of each kernel, so that is what is kept: per run, its workloads and, for each
workload, the record with the lowest mean run time (MetaSchedule's own order), appended as gzip'd JSON lines to
`<out stem>_best.jsonl.gz`. Where a run's folder is gone, those records are written to `<folder>_best` and the
variant is built from there; a folder that is gone and not archived is an error, never an untuned build timed
under a tuned variant's name.

The same file also holds every record of every run, failed candidates included, appended batch by batch as they
are measured (`RunRecords`), so that a run stopped part-way on a machine that is then lost (a session's end, a
fresh clone) is restored in full (`restore_all`) and resumed where it stopped, not tuned again from the start nor
taken as finished. Runs archived before that was kept have only their best records, and are built, never resumed.
A run thrown away (`discard`) gets a mark, after which its earlier entries count for nothing.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.common.jsonl_gz import append_json_lines_gz, read_json_lines_gz
from tvm_rl.database import RECORDS, WORKLOADS, TuningDatabase


def archive_path(out: Path) -> Path:
    """The archive that goes with the benchmark JSON `out`."""
    return out.with_name(f"{out.stem}_best.jsonl.gz")


def _mean(secs: Any) -> float | None:
    ok = isinstance(secs, list) and secs and all(isinstance(s, (int, float)) for s in secs)
    return sum(secs) / len(secs) if ok else None


def best_records(folder: Path) -> list[str]:
    """The record line of each workload in `folder`'s database with the lowest mean run seconds (failed
    candidates, which have none, never count); one per tuned workload, in workload order."""
    best: dict[int, tuple[float, str]] = {}
    path = Path(folder) / RECORDS
    if path.is_file():
        with open(path) as f:
            for line in f:
                entry = json.loads(line)
                mean = _mean(entry[1][1])
                if mean is not None and (entry[0] not in best or mean < best[entry[0]][0]):
                    best[entry[0]] = (mean, line if line.endswith("\n") else line + "\n")
    return [best[w][1] for w in sorted(best)]


def _read(path: Path) -> tuple[dict[str, str], dict[tuple[str, str], dict[str, Any]]]:
    """The archive's workloads texts by sha, and each run's last best-records entry."""
    workloads: dict[str, str] = {}
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in read_json_lines_gz(path):
        if "workloads" in entry:
            workloads[entry["sha"]] = entry["workloads"]
        elif entry.get("discarded"):
            runs.pop((entry["model"], entry["key"]), None)
        elif "start" not in entry:
            runs[(entry["model"], entry["key"])] = entry
    return workloads, runs


def _read_all(path: Path) -> tuple[dict[str, str], dict[tuple[str, str], dict[str, Any]]]:
    """The archive's workloads texts by sha, and each run's every record as the batches appended them: {"records":
    lines in order, "sha": of its latest workloads text, "exhausted": its latest exhaustion marks, "from_library": the
    records a schedule library gave it, unmeasured, or None}. A batch that
    starts at 0 begins the run again (its folder was tuned afresh); one that does not continue it is dropped."""
    workloads: dict[str, str] = {}
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in read_json_lines_gz(path):
        if "workloads" in entry:
            workloads[entry["sha"]] = entry["workloads"]
        elif entry.get("discarded"):
            runs.pop((entry["model"], entry["key"]), None)
        elif "start" in entry:
            run = runs.setdefault((entry["model"], entry["key"]), {"records": []})
            if entry["start"] == 0:
                run["records"] = []
            if entry["start"] == len(run["records"]):
                run["records"] += entry["records"]
                run.update(sha=entry["sha"], exhausted=entry["exhausted"], from_library=entry.get("from_library"))
    return workloads, runs


def _whole_lines(path: Path) -> list[str]:
    """The complete lines of a database file (a line being written as it is read is left for the next call)."""
    if not path.is_file():
        return []
    with open(path) as f:
        return [line for line in f if line.endswith("\n")]


class RunRecords:
    """Appends run `key` of `model`'s new records in `folder` to the archive at `path` on each `flush()` (called
    after every measured batch), with the folder's workloads text when it is new and its exhaustion marks."""

    def __init__(self, path: Path, model: str, key: str, folder: Path) -> None:
        self.path, self.model, self.key, self.folder = Path(path), model, key, Path(folder)
        workloads, runs = _read_all(self.path)
        held = runs.get((model, key), {})
        self.shas = set(workloads)
        self.count = len(held.get("records", []))
        self.exhausted = held.get("exhausted")
        self.from_library = held.get("from_library")
        self._workloads: tuple[tuple[int, int], str, str] | None = None  # (mtime, size), text, sha

    def _workloads_text(self) -> tuple[str, str]:
        """The folder's workloads text and its sha, read and hashed again only when the file has changed (it runs
        to megabytes for a whole model, and is flushed after every batch)."""
        path = self.folder / WORKLOADS
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        if self._workloads is None or self._workloads[0] != stamp:
            text = path.read_text()
            self._workloads = (stamp, text, hashlib.sha256(text.encode()).hexdigest())
        return self._workloads[1], self._workloads[2]

    def flush(self) -> int:
        """Archive what the folder gained since the last flush; returns how many records were appended."""
        lines = _whole_lines(self.folder / RECORDS)
        if not lines:
            return 0
        start = self.count if len(lines) >= self.count else 0  # fewer than archived: tuned afresh, start over
        tuning = TuningDatabase(self.folder)
        exhausted = tuning.read_exhausted()
        # Records a schedule library gave unmeasured: a restored run must not count them as measured.
        from_library = tuning.read_from_library() or None
        if start == len(lines) and exhausted == self.exhausted and from_library == self.from_library:
            return 0
        text, sha = self._workloads_text()
        entries: list[dict[str, Any]] = [] if sha in self.shas else [{"sha": sha, "workloads": text}]
        entries.append({"model": self.model, "key": self.key, "sha": sha, "start": start, "records": lines[start:],
                        "exhausted": exhausted, **({"from_library": from_library} if from_library else {})})
        append_json_lines_gz(self.path, entries)
        self.shas.add(sha)
        self.count, self.exhausted, self.from_library = len(lines), exhausted, from_library
        return len(lines) - start


def restore_all(path: Path, model: str, key: str, folder: Path) -> int:
    """Write every archived record of run `key` of `model` (and its workloads, exhaustion and library marks) as the
    database in `folder`, which must hold none; returns how many records, 0 where the archive has none of them."""
    workloads, runs = _read_all(path)
    run = runs.get((model, key))
    if not run or not run["records"] or run["sha"] not in workloads:
        return 0
    folder = Path(folder)
    if (folder / RECORDS).is_file() and (folder / RECORDS).stat().st_size:
        raise ValueError(f"{folder} already holds tuning records; not overwritten from {path}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / WORKLOADS).write_text(workloads[run["sha"]])
    (folder / RECORDS).write_text("".join(run["records"]))
    if run["exhausted"]:
        TuningDatabase(folder).write_exhausted(run["exhausted"])
    if run.get("from_library"):
        TuningDatabase(folder).write_from_library(run["from_library"])
    return len(run["records"])


def discard(path: Path, model: str, key: str, folder: Path) -> Path | None:
    """Throw run `key` of `model` away: a mark in the archive (after which neither its records nor its best ones
    are restored), its folder moved aside to `<folder>.discarded-<UTC time>` (measurements are never deleted), and
    a copy of its best records restored beside it removed. Returns where the folder went, None if it had none."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    append_json_lines_gz(path, [{"model": model, "key": key, "discarded": True, "date": stamp}])
    folder = Path(folder)
    best = folder.with_name(folder.name + "_best")
    if (best / RECORDS).is_file():  # rebuilt from the archive whenever needed, so only a copy
        (best / RECORDS).unlink()
    if not folder.exists():
        return None
    aside = folder.with_name(f"{folder.name}.discarded-{stamp}")
    folder.rename(aside)
    return aside


def add(path: Path, model: str, key: str, folder: Path) -> bool:
    """Archive run `key` of `model` from `folder` (again if it has changed, e.g. after another sitting);
    False when the folder holds no tuned record or the archive already holds these records."""
    records = best_records(folder)
    if not records:
        return False
    text = (Path(folder) / WORKLOADS).read_text()
    sha = hashlib.sha256(text.encode()).hexdigest()
    workloads, runs = _read(path)
    held = runs.get((model, key))
    if held is not None and held["records"] == records and held["sha"] == sha:
        return False
    entries: list[dict[str, Any]] = [] if sha in workloads else [{"sha": sha, "workloads": text}]
    entries.append({"model": model, "key": key, "sha": sha, "records": records})
    append_json_lines_gz(path, entries)
    return True


def restore(path: Path, model: str, key: str, dest: Path) -> bool:
    """Write run `key` of `model`'s best records (and their workloads) as a database in `dest`; False if the
    archive does not hold them. The last archived version of a run wins."""
    workloads, runs = _read(path)
    entry = runs.get((model, key))
    if entry is None or entry["sha"] not in workloads:
        return False
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / WORKLOADS).write_text(workloads[entry["sha"]])
    (dest / RECORDS).write_text("".join(entry["records"]))
    return True


def database_for(path: Path, model: str, key: str, folder: Path) -> Path:
    """Where to build run `key` of `model` from: its folder while that holds records, else the archived best
    records restored next to it; SystemExit naming the folder when neither is there."""
    folder = Path(folder)
    if (folder / RECORDS).is_file():
        return folder
    restored = folder.with_name(folder.name + "_best")
    if restore(path, model, key, restored):
        return restored
    raise SystemExit(f"{model} {key}: its tuning database {folder} is gone and {path} does not hold its records; "
                     "restore the folder, or remove the run from the JSON to tune it again")


__all__ = ["RunRecords", "add", "archive_path", "best_records", "database_for", "discard", "restore", "restore_all"]
