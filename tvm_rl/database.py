"""The MetaSchedule JSON tuning-database folder: its one owner (`TuningDatabase`), and the checks run on it
before TVM reads it, so a bad one is named line by line.

TVM's own reader stops on the first bad line with a C++ check message ("Cannot tokenize", "json_array->size()
== 2") that names neither the file nor the line. Here every line is checked in Python first:

- `database_workload.json`: one `[structural hash, base64 module]` pair per line;
- `database_tuning_record.json`: one `[workload line index, [trace, run seconds, target, argument info]]`
  per line, the index pointing at an existing workload line.

A run killed while appending (SIGKILL, power loss) can leave a last line cut short, with no newline; the next
append would then be glued onto it and corrupt the file for good. Such a last line is the one thing repaired:
it is moved to `<file>.partial` (a warning says so) and the database opens without it. Anything else that is
wrong raises DatabaseError naming the file, the line and what to do.

`TuningDatabase` owns such a folder: its file names, its validated opening, its records and what tvm-rl keeps
beside them. Functions that take a `database` accept any `DatabaseLike` and go through `as_database` (to build
or tune with) or `TuningDatabase.of` (to read the folder).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Union

from .errors import DatabaseError, DatabaseTypeError

if TYPE_CHECKING:
    from tvm.s_tir import meta_schedule as ms

logger = logging.getLogger(__name__)

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
EXHAUSTED = "exhausted.json"  # workloads whose design space ran out, with their record counts then
ROOFLINE = "roofline.json"  # the graph proxy's rooflines fitted to these kernels (`graph.calibration`)
FAILURES = "failures.jsonl"  # why candidates failed (`tune.runner.FailureLog`); the records keep only 1e10 s
FROM_LIBRARY = "from_library.json"  # workloads whose records a schedule library gave (`tune.library`), unmeasured
# MetaSchedule's run time for a candidate that failed to build or run; a record at or above it is a failure.
FAILED_SECONDS = 1e10


def record_seconds(run_secs: Iterable[float] | None) -> float | None:
    """A record's run time: the mean of its repeats (how MetaSchedule orders records), or None for a failed
    candidate (no times, a time that is not finite and positive, or MetaSchedule's `FAILED_SECONDS`)."""
    secs = [float(s) for s in (run_secs or ())]
    if not secs or not all(0.0 < s < FAILED_SECONDS for s in secs):
        return None
    return sum(secs) / len(secs)


def check_database_dir(work_dir: str | Path) -> None:
    """Raise DatabaseError unless `work_dir` holds a readable MetaSchedule JSON database (or none yet).

    A missing or empty folder is fine (a new database starts there); a cut-short last line is moved aside.
    """
    work_dir = Path(work_dir)
    if work_dir.exists() and not work_dir.is_dir():
        raise DatabaseError(f"{work_dir} is a file, not a tuning database folder; give a folder (new or one a "
                            f"previous run wrote, holding {WORKLOADS} and {RECORDS})")
    workloads, records = work_dir / WORKLOADS, work_dir / RECORDS
    for path in (workloads, records):
        if path.exists() and not path.is_file():
            raise DatabaseError(f"{path} is not a file; {work_dir} is not a MetaSchedule database folder: "
                                "choose another folder or remove it")
    n_workloads = _check_lines(workloads, _check_workload)
    if not n_workloads and records.is_file() and records.read_bytes().strip():
        n_records = len(records.read_bytes().strip().splitlines())
        raise DatabaseError(f"{records} holds {n_records} records but {workloads.name} is missing or empty, "
                            f"so they cannot be read; restore {workloads.name} or move {records.name} aside to "
                            "start a fresh database")
    _check_lines(records, lambda entry: _check_record(entry, n_workloads))


def _check_lines(path: Path, check) -> int:
    """Check every line of `path` with `check` (a message, or None when fine); returns the number of entries."""
    if not path.is_file():
        return 0
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        # A live writer (another process tuning into this folder) ends its line within milliseconds; only a
        # line that stays cut short was left by a killed run.
        time.sleep(1.0)
        again = path.read_bytes()
        if again == data:
            data = _repair_last_line(path, data)
        elif again.endswith(b"\n"):
            data = again
        else:
            raise DatabaseError(f"{path} is being written by another process; wait for it to finish")
    lines = data.split(b"\n")[:-1] if data else []
    count = 0
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            problem = "is empty (TVM's reader stops there)"
        else:
            try:
                entry = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                problem = f"is not JSON ({err})"
            else:
                problem = check(entry)
        if problem is not None:
            raise DatabaseError(
                f"tuning database in {path.parent} is unreadable: line {number} of {path.name} {problem}. Either "
                "this folder does not hold a MetaSchedule database, or the file is corrupt: remove that line, "
                f"or move {WORKLOADS} and {RECORDS} aside to start a fresh database")
        count += 1
    return count


def _repair_last_line(path: Path, data: bytes) -> bytes:
    """The file's text with an unterminated last line ended (if it is whole JSON) or moved to `.partial`."""
    head, _, last = data.rpartition(b"\n")
    try:
        json.loads(last)
    except (UnicodeDecodeError, json.JSONDecodeError):
        aside = path.with_name(path.name + ".partial")
        with open(aside, "ab") as out:
            out.write(last + b"\n")
        with open(path, "r+b") as f:
            f.truncate(len(head) + 1 if head else 0)
        logger.warning("%s ended in a line cut short (a run killed while writing it?): moved it to %s",
                       path, aside.name)
        return head + b"\n" if head else b""
    with open(path, "ab") as f:  # whole, but the next append would be glued onto it
        f.write(b"\n")
    return data + b"\n"


def _check_workload(entry) -> str | None:
    if (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry)
            and entry[0].isdigit()):
        return None
    return "is not a workload entry ([structural hash, base64 module])"


def _check_record(entry, n_workloads: int) -> str | None:
    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int)
            and isinstance(entry[1], list) and len(entry[1]) == 4):
        return "is not a tuning record ([workload index, [trace, run seconds, target, argument info]])"
    if not 0 <= entry[0] < n_workloads:
        return (f"refers to workload {entry[0]}, but {WORKLOADS} has {n_workloads} "
                f"(the two files do not belong together)")
    trace, secs, target, args = entry[1]
    if not isinstance(trace, list) or not isinstance(target, dict) or not isinstance(args, list):
        return "is not a tuning record (its trace, target or argument info has the wrong type)"
    if secs is not None and not (isinstance(secs, list) and all(isinstance(s, (int, float)) for s in secs)):
        return "is not a tuning record (its run seconds are not a list of numbers)"
    return None


def open_database(work_dir: str | os.PathLike) -> ms.database.JSONDatabase:
    """The JSON tuning database in `work_dir` (created if absent); DatabaseError naming the file and line if
    its files are corrupt or foreign (see `check_database_dir`)."""
    return TuningDatabase(work_dir).open()


def merge_databases(out: str | os.PathLike, sources: Iterable[str | os.PathLike], replace: bool = False) -> int:
    """Commit every tuning record of the database folders `sources` into the folder `out` (created if absent), so
    that a build with `out` takes, per kernel, the best record any of them holds: the best of several tunings (tune
    seeds, runs). Returns the number of records committed. Each source is checked as `open_database` checks.

    With `replace`, `out` becomes exactly the sources' merge (its own records dropped): how a merge is refreshed
    as its sources grow without committing their records twice. The merge is written beside `out` and moved in,
    so a run killed meanwhile leaves the previous merge whole."""
    ms = _meta_schedule()
    out_path, owners = Path(out).resolve(), [TuningDatabase(source) for source in sources]
    # Every source checked before the first record is written, so a bad one leaves no half-merged folder.
    for owner in owners:
        if owner.path.resolve() == out_path:
            raise DatabaseError(f"{owner.path} is both a source and the merged database: give another folder to "
                                "merge into")
        if owner.record_count() == 0:
            raise DatabaseError(f"{owner.path} holds no tuning records: is it the database folder a tuning run wrote?")
    into = out_path.with_name(out_path.name + ".merging") if replace else out_path
    if replace:
        shutil.rmtree(into, ignore_errors=True)
    merged, count = open_database(into), 0
    for owner in owners:
        for rec in owner.open().get_all_tuning_records():
            workload = merged.commit_workload(rec.workload.mod)
            merged.commit_tuning_record(ms.database.TuningRecord(rec.trace, workload, rec.run_secs, rec.target,
                                                                 rec.args_info))
            count += 1
    if replace:
        del merged
        out_path.mkdir(parents=True, exist_ok=True)
        for name in (WORKLOADS, RECORDS):
            os.replace(into / name, out_path / name)
        shutil.rmtree(into)
    return count


def _meta_schedule():
    # Imported on first use: `tvm-rl report` counts database lines without loading TVM.
    from tvm.s_tir import meta_schedule as ms

    return ms


def _count_lines(path: Path) -> int:
    return sum(1 for _ in open(path, "rb")) if path.is_file() else 0


class TuningDatabase:
    """A MetaSchedule JSON tuning database folder: where its files are, its validated opening, its records,
    and the files tvm-rl keeps beside them. The one place the folder's layout is spelled out.

    Build one from a folder (`TuningDatabase(path)`), or from anything a `database` argument takes with
    `TuningDatabase.of`. Opening is done once per instance; an owner made from an open JSONDatabase keeps
    that database (and its file paths) rather than reading the files again.
    """

    def __init__(self, path: str | os.PathLike):
        if not str(path):
            # Path("") is the current folder: an unset option must not silently read a database from there.
            raise DatabaseError("an empty path names no tuning database folder; give a folder, or None for "
                                "untuned kernels")
        self.path = Path(path)
        self._workloads = self.path / WORKLOADS
        self._records = self.path / RECORDS
        self._opened: ms.Database | None = None

    @classmethod
    def of(cls, database: DatabaseLike) -> TuningDatabase | None:
        """The folder behind `database`: None for None and for a MetaSchedule database with no files (in
        memory); DatabaseTypeError for anything that is not a `DatabaseLike`."""
        if database is None or isinstance(database, TuningDatabase):
            return database
        if isinstance(database, (str, os.PathLike)):
            return cls(database)
        ms = _meta_schedule()
        if isinstance(database, ms.database.JSONDatabase):
            records = Path(str(database.path_tuning_record))
            owner = cls(records.parent)
            # Its files may be named otherwise (JSONDatabase takes any two paths): keep them as they are.
            owner._workloads, owner._records = Path(str(database.path_workload)), records
            owner._opened = database
            return owner
        if isinstance(database, ms.Database):
            return None
        raise DatabaseTypeError(_type_message(database))

    @property
    def workloads_path(self) -> Path:
        """`database_workload.json`: one [structural hash, base64 module] per line."""
        return self._workloads

    @property
    def records_path(self) -> Path:
        """`database_tuning_record.json`: one tuning record per line, appended in measurement order."""
        return self._records

    @property
    def exhausted_path(self) -> Path:
        """`exhausted.json`: {structural hash: record count} of workloads whose design space ran out."""
        return self.path / EXHAUSTED

    @property
    def failures_path(self) -> Path:
        """`failures.jsonl`: why failed candidates failed, one JSON line each."""
        return self.path / FAILURES

    @property
    def roofline_path(self) -> Path:
        """`roofline.json`: the graph proxy's rooflines fitted to this database's kernels, redone as it grows."""
        return self.path / ROOFLINE

    @property
    def tag(self) -> str:
        """What names this database in cache keys (`graph.cost.database_tag`): its records file, absolute.
        Measured kernel caches on disk are keyed by it, so its form must not change."""
        return f"json:{os.path.abspath(self.records_path)}"

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"TuningDatabase({str(self.path)!r})"

    def is_empty(self) -> bool:
        """True when the folder holds no tuning record (no records file, or an empty one)."""
        return not self.records_path.is_file() or self.records_path.stat().st_size == 0

    def check(self) -> None:
        """DatabaseError naming the file and line unless the folder is a readable database (or none yet)."""
        check_database_dir(self.path)

    def open(self) -> ms.database.JSONDatabase:
        """The MetaSchedule database (created if absent), checked first (`check_database_dir`), opened once."""
        if self._opened is None:
            self.check()
            self.path.mkdir(parents=True, exist_ok=True)
            try:
                self._opened = _meta_schedule().database.JSONDatabase(
                    str(self.workloads_path), str(self.records_path), allow_missing=True)
            except Exception as err:
                last = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
                raise DatabaseError(f"tuning database in {self.path} is unreadable ({last}); move "
                                    f"{self.workloads_path.name} and {self.records_path.name} aside to start a "
                                    "fresh one") from err
        return self._opened

    def records(self) -> Iterator[ms.database.TuningRecord]:
        """Every tuning record, as TVM reads them (opening the database if need be)."""
        return iter(self.open().get_all_tuning_records())

    def run_seconds(self) -> Iterator[list[float] | None]:
        """Each record's measured run seconds, in the order they were measured (TVM's reader returns them
        sorted by latency instead); None or [] for a record without. Nothing when there is no database."""
        for _, secs in self.measurements():
            yield secs

    def measurements(self) -> Iterator[tuple[int, list[float] | None]]:
        """(workload index, run seconds) of each record in the order measured; see `run_seconds`."""
        if not self.records_path.is_file():
            return
        self.check()
        with open(self.records_path, "rb") as f:
            for line in f:
                entry = json.loads(line)
                yield entry[0], entry[1][1]

    def workload_count(self) -> int:
        """Lines in the workloads file, unchecked (cheap: for summaries)."""
        return _count_lines(self.workloads_path)

    def record_count(self) -> int:
        """Lines in the records file, unchecked (cheap: for summaries and messages)."""
        return _count_lines(self.records_path)

    def failure_count(self) -> int:
        """Failed candidates logged in `failures.jsonl`."""
        return _count_lines(self.failures_path)

    def read_exhausted(self) -> dict[str, int]:
        """{structural hash: records it had when its search ran out of new candidates}."""
        return _read_counts(self.exhausted_path)

    def write_exhausted(self, exhausted: dict[str, int]) -> None:
        """Replace `exhausted.json` in one step, so a killed run leaves the old file rather than half a new one."""
        _write_counts(self.exhausted_path, exhausted)

    @property
    def from_library_path(self) -> Path:
        """`from_library.json`: {structural hash: records} committed from a schedule library, not measured here."""
        return self.path / FROM_LIBRARY

    def read_from_library(self) -> dict[str, int]:
        """{structural hash: records} of workloads whose records came from a schedule library (no measurement)."""
        return _read_counts(self.from_library_path)

    def write_from_library(self, counts: dict[str, int]) -> None:
        """Replace `from_library.json` in one step."""
        _write_counts(self.from_library_path, counts)

    @classmethod
    def find_under(cls, root: str | os.PathLike) -> list[TuningDatabase]:
        """Every database folder under `root` (itself included), in the order of their workloads files' paths."""
        return [cls(path.parent) for path in sorted(Path(root).rglob(WORKLOADS))]


# What a `database` argument takes: a folder (path or TuningDatabase), an open MetaSchedule database, or None
# (untuned kernels). Strings name the TVM types so that this module loads without TVM.
DatabaseLike = Union[TuningDatabase, str, "os.PathLike[str]", "ms.Database", None]


def _read_counts(path: Path) -> dict[str, int]:
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        return {}  # a file cut short by a killed run: at worst those kernels are searched once more
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write_counts(path: Path, counts: dict[str, int]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(counts, indent=0))
    tmp.replace(path)


def as_database(database: DatabaseLike) -> ms.Database | None:
    """`database` as a MetaSchedule database to build or tune with: a folder is opened (and checked), an open
    database is returned as it is, None stays None; DatabaseTypeError for anything else."""
    if database is None:
        return None
    owner = TuningDatabase.of(database)
    return database if owner is None else owner.open()


def _type_message(database: object) -> str:
    return (f"a tuning database is a folder (str, path or TuningDatabase), a MetaSchedule database or None, "
            f"not {type(database).__name__}")
