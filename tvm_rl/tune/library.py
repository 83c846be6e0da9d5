"""A schedule library: the best schedules measured so far, reused before (or instead of) measuring again.

A library is one small gzip'd file of JSON lines, one per schedule: the workload's structural hash, its kind (the
names of its blocks), its buffer shapes, the target it was measured on, its median seconds and its trace.
`build_library` keeps the best few records of each workload of one or more tuning databases.

Tuning reads it two ways (`tune_workloads(library=...)`):
- `ScheduleLibrary.apply`: a kernel with no record yet whose exact workload the library holds, measured on the same
  target, gets the library's best record committed to the run's database, with no measurement.
- `ScheduleLibrary.seeds`: for any kernel, the library's schedules of the same kind of kernel (the same blocks,
  other shapes) replayed on it, each tile split re-chosen for the new loop extents (`nearest_split`); the search
  measures the ones its cost model rates best first (`search_strategy.seeded`).
"""
from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import tvm
import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import Trace

from ..database import TuningDatabase, open_database, record_seconds
from ..errors import TvmRlError
from ..interrupt import interrupt_pending
from .knob_trace import factorisations, plain_literal
from .tir_blocks import blocks

FORMAT = "tvm-rl schedule library"
VERSION = 1
SHIPPED = "shipped"  # what names the library shipped in the package for a target kind
DEFAULT = "default"  # the shipped library where one ships for the target kind, else none
NONE = "none"
SHIPPED_DIR = Path(__file__).resolve().parent / "models"  # made by the command in its README.md


class LibraryError(TvmRlError):
    """A schedule library file that is missing, unreadable, or not a library."""


@dataclass(frozen=True)
class Entry:
    """One library schedule: what it was measured on and how fast it ran."""

    workload: int  # structural hash of the workload (an IRModule with one PrimFunc)
    kind: tuple[str, ...]  # the workload's block names, sorted: schedules transfer between workloads of one kind
    shapes: tuple[tuple[int, ...], ...]  # each block's iteration extents, to find the nearest workloads of a kind
    target: str
    seconds: float
    trace: Any  # the record's trace as JSON (postprocessing included)


def kind_of(mod: tvm.IRModule) -> tuple[str, ...]:
    """The sorted block names of `mod`'s one PrimFunc (without the root block)."""
    return tuple(sorted(b.name_hint for b in blocks(_func(mod)) if b.name_hint != "root"))


def shapes_of(mod: tvm.IRModule) -> tuple[tuple[int, ...], ...]:
    """The iteration extents of each block of `mod`'s PrimFunc, in block order (a symbolic extent counts as 1)."""
    out = []
    for block in blocks(_func(mod)):
        if block.name_hint != "root":
            extents = (iv.dom.extent for iv in block.iter_vars)
            out.append(tuple(int(e.value) if isinstance(e, tvm.tirx.IntImm) else 1 for e in extents))
    return tuple(out)


def _func(mod: tvm.IRModule) -> Any:
    funcs = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    if len(funcs) != 1:
        raise TvmRlError(f"a tuning workload is a module with one PrimFunc; this one has {len(funcs)}")
    return funcs[0]


def build_library(sources: Iterable[str | os.PathLike | TuningDatabase], out: str | os.PathLike,
                  top: int = 4, libraries: Iterable[ScheduleLibrary | str | os.PathLike] = ()) -> ScheduleLibrary:
    """Write the best `top` distinct schedules of every (workload, target) in the tuning databases `sources` and the
    schedule libraries `libraries` (merged: a library grows run by run) to the library file `out` (gzip'd JSON
    lines) and return it. Failed records are left out."""
    if top < 1:
        raise LibraryError(f"a library keeps at least one schedule per workload (got top={top})")
    best: dict[tuple[int, str], list[tuple[float, str, Any]]] = {}
    info: dict[int, tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]] = {}
    for library in libraries:  # read before `out` is written: it may be one of them
        for entry in (library if isinstance(library, ScheduleLibrary) else ScheduleLibrary(library)).entries:
            info.setdefault(entry.workload, (entry.kind, entry.shapes))
            best.setdefault((entry.workload, entry.target), []).append(
                (entry.seconds, json.dumps(entry.trace), entry.trace))
    for source in sources:
        database = open_database(source)
        for record in database.get_all_tuning_records():
            seconds = record_seconds(record.run_secs)
            if seconds is None:
                continue
            mod = record.workload.mod
            key = int(tvm_ffi.structural_hash(mod))
            if key not in info:
                info[key] = (kind_of(mod), shapes_of(mod))
            trace = plain_literal(record.trace.as_json(remove_postproc=False))
            best.setdefault((key, str(record.target)), []).append((seconds, json.dumps(trace), trace))
    entries = []
    for (key, target), found in best.items():
        seen: set[str] = set()
        for seconds, text, trace in sorted(found, key=lambda f: f[0]):
            if text in seen:
                continue
            seen.add(text)
            entries.append(Entry(key, *info[key], target, seconds, trace))
            if len(seen) == top:
                break
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as f:
        f.write(json.dumps({"format": FORMAT, "version": VERSION}) + "\n")
        for entry in entries:
            f.write(json.dumps(asdict(entry)) + "\n")
    return ScheduleLibrary(out)


class ScheduleLibrary:
    """A library file, read once: its entries by workload and by kind, best first."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise LibraryError(f"no schedule library at {self.path} (`tvm-rl library build` makes one)")
        self.entries: list[Entry] = []
        try:
            with gzip.open(self.path, "rt") as f:
                lines = f.read().splitlines()
        except (OSError, EOFError, UnicodeDecodeError) as err:
            raise LibraryError(f"{self.path} is not a gzip'd schedule library ({err})") from None
        header = _parse(self.path, 1, lines[0] if lines else "")
        if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("version") != VERSION:
            raise LibraryError(f"{self.path} is not a version-{VERSION} tvm-rl schedule library (its first line "
                               f"is {lines[0][:80] if lines else 'missing'!r})")
        for number, line in enumerate(lines[1:], start=2):
            data = _parse(self.path, number, line)
            try:
                self.entries.append(Entry(int(data["workload"]), tuple(data["kind"]),
                                          tuple(tuple(s) for s in data["shapes"]), str(data["target"]),
                                          float(data["seconds"]), data["trace"]))
            except (KeyError, TypeError, ValueError) as err:
                raise LibraryError(f"{self.path}, line {number}: not a library entry ({err!r})") from None
        self.entries.sort(key=lambda e: e.seconds)
        self._by_workload: dict[int, list[Entry]] = {}
        self._by_kind: dict[tuple[str, ...], list[Entry]] = {}
        for entry in self.entries:
            self._by_workload.setdefault(entry.workload, []).append(entry)
            self._by_kind.setdefault(entry.kind, []).append(entry)

    def __len__(self) -> int:
        return len(self.entries)

    def workloads(self) -> list[int]:
        """The structural hashes of the workloads the library has schedules of."""
        return list(self._by_workload)

    def __repr__(self) -> str:
        return (f"ScheduleLibrary({str(self.path)!r}: {len(self.entries)} schedules of {len(self._by_workload)} "
                "workloads)")

    def best(self, mod: tvm.IRModule, target: tvm.target.Target) -> Entry | None:
        """The fastest schedule of exactly this workload measured on this target, or None."""
        for entry in self._by_workload.get(int(tvm_ffi.structural_hash(mod)), []):
            if entry.target == str(target):
                return entry
        return None

    def apply(self, database: ms.Database, workloads: Sequence[tuple[str, tvm.IRModule, float]],
              target: tvm.target.Target) -> list[tuple[str, int]]:
        """Commit to `database` the library's best record for each workload that has no record there yet and
        whose exact workload the library measured on `target`. Returns the (name, structural hash) applied."""
        applied = []
        for name, mod, _ in workloads:
            entry = self.best(mod, target)
            if entry is None or database.has_workload(mod) and database.get_top_k(database.commit_workload(mod), 1):
                continue
            sch = Schedule(mod)
            try:
                Trace.apply_json_to_schedule(entry.trace, sch)
            except Exception:  # a library made by another TVM version whose trace no longer replays
                if interrupt_pending():
                    raise
                continue
            database.commit_tuning_record(ms.database.TuningRecord(
                sch.trace, database.commit_workload(mod), [entry.seconds], target,
                ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
            applied.append((name, int(tvm_ffi.structural_hash(mod))))
        return applied

    def apply_to(self, folder: TuningDatabase, workloads: Sequence[tuple[str, tvm.IRModule, float]],
                 target: tvm.target.Target) -> list[str]:
        """`apply` to the database in `folder`, the records applied added to its `from_library.json` (so that tuning
        does not count them as measured). Returns the names of the workloads applied."""
        applied = self.apply(folder.open(), workloads, target)
        if applied:
            counts = folder.read_from_library()
            counts.update({str(key): counts.get(str(key), 0) + 1 for _, key in applied})
            folder.write_from_library(counts)
        return [name for name, _ in applied]

    def seeds(self, mod: tvm.IRModule, limit: int = 16) -> list[Schedule]:
        """Up to `limit` schedules for `mod` from the library's schedules of its kind (the same workload measured
        elsewhere first, then the nearest shapes), each replayed with its tile splits re-chosen for `mod`'s loop
        extents (`transfer`), without postprocessing. Schedules that do not replay are left out."""
        key, shapes = int(tvm_ffi.structural_hash(mod)), shapes_of(mod)
        same_kind = self._by_kind.get(kind_of(mod), [])
        ranked = sorted(same_kind, key=lambda e: (e.workload != key, _shape_distance(e.shapes, shapes), e.seconds))
        out: list[Schedule] = []
        seen: set[int] = set()
        for entry in ranked:
            if len(out) >= limit:
                break
            sch = transfer(entry.trace, mod)
            if sch is None:
                continue
            digest = int(tvm_ffi.structural_hash(sch.mod))
            if digest not in seen:
                seen.add(digest)
                out.append(sch)
        return out


def shipped_library(target_kind: str = "llvm") -> Path | None:
    """The schedule library shipped with tvm-rl for a target kind, or None if none is."""
    path = SHIPPED_DIR / f"library_{target_kind}.jsonl.gz"
    return path if path.is_file() else None


def open_library(library: ScheduleLibrary | str | os.PathLike | None,
                 target_kind: str = "llvm") -> ScheduleLibrary | None:
    """A library as `tune_workloads` takes it: itself, its file, "shipped" (the one shipped for `target_kind`; an
    error where none ships), "default" (the shipped one where one ships, else none), or None / "none"."""
    if library is None or isinstance(library, ScheduleLibrary):
        return library
    if str(library) == NONE:
        return None
    if str(library) == DEFAULT:
        path = shipped_library(target_kind)
        return ScheduleLibrary(path) if path is not None else None
    if str(library) == SHIPPED:
        path = shipped_library(target_kind)
        if path is None:
            raise LibraryError(f"no schedule library is shipped for {target_kind!r} targets; build one from your "
                               "own tuning runs (`tvm-rl library build`) and give its file")
        return ScheduleLibrary(path)
    return ScheduleLibrary(library)


def _parse(path: Path, number: int, line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        raise LibraryError(f"{path}, line {number}: not JSON ({err.msg})") from None


def _shape_distance(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> float:
    """How far two workloads' shapes are apart: the summed |log| ratio of their extents (inf if ranks differ)."""
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        return math.inf
    return sum(abs(math.log(max(p, 1) / max(q, 1))) for x, y in zip(a, b) for p, q in zip(x, y))


def nearest_split(extent: int, old: Sequence[int], max_innermost: int) -> tuple[int, ...]:
    """The split of `extent` into len(old) factors nearest to `old`: the least |log| distance per level, weighed
    more the further in (the inner tiles are the register and cache blocks a schedule is made of)."""
    n = len(old)
    weights = [2.0 ** i for i in range(n)]
    options = factorisations(extent, n, max_innermost) or factorisations(extent, n, 0)

    def distance(split: tuple[int, ...]) -> float:
        return sum(w * abs(math.log(f / max(o, 1))) for w, f, o in zip(weights, split, old))

    return min(options, key=distance)


def _without_postproc(trace_json: Any) -> list:
    """A trace's JSON cut before its postprocessing part (which the search's own postprocessors redo)."""
    insts, decisions = trace_json[0], trace_json[1] if len(trace_json) > 1 else []
    end = next((i for i, inst in enumerate(insts) if inst[0] == "EnterPostproc"), len(insts))
    return [insts[:end], [d for d in decisions if int(d[0]) < end]]


def transfer(trace_json: Any, mod: tvm.IRModule) -> Schedule | None:
    """`trace_json` (a record's trace as JSON) replayed on `mod`, each SamplePerfectTile given the split of its
    new loop extent nearest to the recorded one, other decisions kept (TVM moves a compute-at location that is no
    longer legal to the nearest legal one). Postprocessing is left out. None if the trace does not replay on
    `mod` (another kind of kernel)."""
    trace_json = _without_postproc(trace_json)
    recorded = {int(i): d for i, d in trace_json[1]}
    try:
        # First replay: the trace's structure on this workload (a split that does not fit is redrawn by TVM)...
        shaped = Schedule(mod, debug_mask="none", error_render_level="none")
        Trace.apply_json_to_schedule(trace_json, shaped)
        sch = Schedule(mod, debug_mask="none", error_render_level="none")
        counter = iter(range(1 << 30))

        def provide(inst: Any, inputs: list, attrs: list, decision: Any) -> Any:
            # ...second: every split chosen as the nearest to the one recorded at the same instruction.
            i = next(counter)
            if inst.kind.name == "SamplePerfectTile" and i in recorded:
                extent = sch.get(inputs[0]).extent
                if isinstance(extent, tvm.tirx.IntImm):
                    innermost = int(getattr(attrs[1], "value", attrs[1]))
                    return [int(f) for f in nearest_split(int(extent.value), recorded[i], innermost)]
            return decision

        shaped.trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provide)
    except Exception:  # not this kind of kernel, or decisions the new extents cannot take
        if interrupt_pending():
            raise
        return None
    return sch


__all__ = ["Entry", "LibraryError", "ScheduleLibrary", "build_library", "kind_of", "nearest_split", "open_library",
           "shapes_of", "shipped_library", "transfer"]
