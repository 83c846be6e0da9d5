"""Checks on a MetaSchedule JSON database folder before TVM reads it, so a bad one is named line by line.

TVM's own reader stops on the first bad line with a C++ check message ("Cannot tokenize", "json_array->size()
== 2") that names neither the file nor the line. Here every line is checked in Python first:

- `database_workload.json`: one `[structural hash, base64 module]` pair per line;
- `database_tuning_record.json`: one `[workload line index, [trace, run seconds, target, argument info]]`
  per line, the index pointing at an existing workload line.

A run killed while appending (SIGKILL, power loss) can leave a last line cut short, with no newline; the next
append would then be glued onto it and corrupt the file for good. Such a last line is the one thing repaired:
it is moved to `<file>.partial` (a warning says so) and the database opens without it. Anything else that is
wrong raises DatabaseError naming the file, the line and what to do.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from tvm.s_tir import meta_schedule as ms

from .errors import DatabaseError

logger = logging.getLogger(__name__)

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"


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


def open_database(work_dir: str | Path) -> ms.database.JSONDatabase:
    """The JSON tuning database in `work_dir` (created if absent); DatabaseError naming the file and line if
    its files are corrupt or foreign (see `check_database_dir`)."""
    work_dir = Path(work_dir)
    check_database_dir(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    workloads, records = work_dir / "database_workload.json", work_dir / "database_tuning_record.json"
    try:
        return ms.database.JSONDatabase(str(workloads), str(records), allow_missing=True)
    except Exception as err:
        last = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise DatabaseError(f"tuning database in {work_dir} is unreadable ({last}); move {workloads.name} and "
                            f"{records.name} aside to start a fresh one") from err
