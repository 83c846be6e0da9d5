"""A MetaSchedule design space seen as a vector of knobs (`KnobSpace`): the state and action space of the
CHAMELEON tuner. Reading traces and probing TVM's sampler, which it builds on, are in `tune.knob_trace`.

One design space (a Schedule from `TuneContext.generate_design_space()`) is a trace whose sampling instructions
hold the decisions a search strategy may change; the rest of the trace is fixed structure. `KnobSpace` gives
each sampling instruction one integer knob over an ordered list of legal values, so a schedule is an index
vector, and turns index vectors back into schedules by replaying the trace with those decisions and running the
space generator's postprocessors, exactly as MetaSchedule's own search does (replay, `enter_postproc`,
postprocs). A vector whose schedule is not valid decodes to None and `last_error` says why; TVM's own silent
repairs of stale decisions (a tile that no longer divides its loop, a compute-at loop that vanished) are caught
and reported the same way, so a schedule never stands for a vector it does not implement.

Knob kinds:
- "tile" (SamplePerfectTile): every ordered factorisation of the loop extent into n parts whose innermost part
  is at most max_innermost_factor, sorted lexicographically by the per-level factors, outermost first. Neighbours
  in that order mostly differ by moving one prime factor between the two innermost levels, so +1/-1 steps are
  small changes of the tiling; the order wraps coarsely only where an outer level changes.
- "categorical" (SampleCategorical): the candidates in their given order (unroll depths, fetch vector widths);
  the index is TVM's decision itself.
- "compute_location" (SampleComputeLocation): which locations are legal depends on the tile sizes chosen
  before it (TVM skips unit-extent loops), so the knob is relative: index r is the r-th legal location under the
  decoded tiling, ordered inline (-2), root (-1), then loops outermost to innermost ("deeper" = +1). Its
  cardinality is the number of legal locations under the design space's own tiling; under another tiling with
  fewer legal locations a too-large r decodes to None (reported), and deeper locations that only another tiling
  allows are out of reach. Legal locations are found by probing TVM's own sampler on a copy of the schedule.

Kept fixed (listed in `KnobSpace.fixed` with the reason): instructions with a single legal value, tiles of loops
whose extent is not a constant, SamplePartitionedTile and any other sampling instruction kind. The parallel
extent annotation of CPU schedules (MetaSchedule's MutateParallel changes it) is not a sampling instruction and
stays as the design space has it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from ..errors import TvmRlError
from ..interrupt import interrupt_pending
from .intrin import preload_tensor_intrinsics
from .knob_trace import (
    _ENTER_POSTPROC,
    _block_of,
    _bound_extents,
    _first_line,
    _legal_locations,
    _norm,
    _Replay,
    _rv_name,
    _signature,
    factorisations,
)

TILE, CATEGORICAL, COMPUTE_LOCATION = "tile", "categorical", "compute_location"


class KnobError(TvmRlError):
    """A knob vector or trace that does not belong to this knob space (wrong length, range, or structure)."""


# ------------------------------------------------------------------------------------------- tuning contexts


def make_context(mod: tvm.IRModule, target: tvm.target.Target, task_name: str = "main",
                 seed: int = 0) -> ms.TuneContext:
    """A TuneContext with MetaSchedule's default space for `target` ("post-order-apply"), no search strategy,
    a fixed seed (so the design spaces' own decisions are reproducible) and one thread."""
    preload_tensor_intrinsics()
    return ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", search_strategy=None,
                          task_name=task_name, rand_state=seed, num_threads=1)


# ------------------------------------------------------------------------------------------------ the knobs


@dataclass(frozen=True)
class Knob:
    """One tunable sampling instruction: its position in the trace and its ordered legal values.

    `values` are the decisions of a tile or categorical knob (factor tuples; candidate values, whose index is
    the decision), and for a compute-location knob the legal locations under the design space's own tiling
    (the knob's index is a rank among the legal locations of the decoded tiling; see the module docstring).
    """

    position: int  # index in the knob vector
    inst_index: int  # index of the sampling instruction in the design-space trace
    kind: str
    name: str
    values: tuple
    default: int  # the design space's own decision, as an index

    @property
    def cardinality(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class FixedDecision:
    """A sampling instruction left as the design space decided it, and why."""

    inst_index: int
    kind: str
    decision: Any
    why: str



class KnobSpace:
    """The sampling decisions of one design space as a vector of integer knobs (see the module docstring).

    `design_space` is one Schedule from `context.generate_design_space()`; `context` supplies the workload,
    target and the postprocessors a decoded schedule must pass.
    """

    def __init__(self, design_space: Schedule, context: ms.TuneContext):
        if context.space_generator is None or context.mod is None:
            raise KnobError("the TuneContext needs a workload (mod) and a space generator (for postprocessors)")
        self.context = context
        self.mod: tvm.IRModule = context.mod
        self.target = context.target
        self.postprocs: list[ms.Postproc] = list(context.space_generator.postprocs)
        self.trace = design_space.trace
        self.insts = list(self.trace.insts)
        end = next((i for i, inst in enumerate(self.insts) if inst.kind.name == _ENTER_POSTPROC), len(self.insts))
        self.insts = self.insts[:end]
        self._signature = _signature(self.insts)
        self.last_error: str | None = None
        self._legal_cache: dict[tuple, list[int]] = {}

        replayed = Schedule(self.mod)
        seen = self._replay(self.trace, {}, sch=replayed, record=True)
        if seen.problems or not tvm_ffi.structural_equal(replayed.mod, design_space.mod):
            why = seen.problems[0] if seen.problems else "the result differs from the design space's module"
            raise KnobError(f"the design space's trace does not replay onto the context's workload: {why}")
        knobs: list[Knob] = []
        self.fixed: list[FixedDecision] = []
        for i, inst in enumerate(self.insts):
            kind = inst.kind.name
            if not kind.startswith("Sample"):
                continue
            decision = _norm(self.trace.decisions[inst])
            name = seen.names.get(i, f"{kind}#{i}")
            if kind == "SamplePerfectTile":
                n, max_innermost = int(inst.attrs[0]), int(inst.attrs[1])
                extent = seen.extents.get(i)
                if extent is None:
                    self.fixed.append(FixedDecision(i, kind, decision, "loop extent is not a constant"))
                    continue
                knob_kind, values = TILE, tuple(factorisations(extent, n, max_innermost))
                default = values.index(decision) if decision in values else -1
            elif kind == "SampleCategorical":
                knob_kind, values, default = CATEGORICAL, _norm(inst.attrs[0]), decision
            elif kind == "SampleComputeLocation":
                knob_kind, values = COMPUTE_LOCATION, tuple(seen.legal[i])
                default = values.index(decision) if decision in values else -1
            else:
                self.fixed.append(FixedDecision(i, kind, decision, f"{kind} is not enumerated by tvm-rl"))
                continue
            if not 0 <= default < len(values):
                raise KnobError(f"{name}: the design space's decision {decision} is not among its legal values")
            if len(values) == 1:
                self.fixed.append(FixedDecision(i, kind, decision, "only one legal value"))
                continue
            knobs.append(Knob(len(knobs), i, knob_kind, name, values, default))
        names = [k.name for k in knobs]
        knobs = [k if names.count(k.name) == 1 else replace(k, name=f"{k.name}#{k.inst_index}") for k in knobs]
        self.knobs: tuple[Knob, ...] = tuple(knobs)
        self._by_inst = {k.inst_index: k for k in self.knobs}
        self._cards = np.array([k.cardinality for k in self.knobs], dtype=np.int64)

    # --- the vector view ---
    @property
    def size(self) -> int:
        """Number of knobs."""
        return len(self.knobs)

    @property
    def cardinalities(self) -> np.ndarray:
        """Number of values of each knob."""
        return self._cards.copy()

    def default(self) -> np.ndarray:
        """The design space's own decisions as an index vector."""
        return np.array([k.default for k in self.knobs], dtype=np.int64)

    def random(self, rng: np.random.Generator) -> np.ndarray:
        """A uniformly random index vector (each knob independently)."""
        return rng.integers(0, self._cards).astype(np.int64) if self.size else np.zeros(0, dtype=np.int64)

    def normalised(self, vec: Sequence[int] | np.ndarray) -> np.ndarray:
        """The vector scaled to [0, 1] per knob (index / (cardinality - 1))."""
        return self._check(vec) / np.maximum(self._cards - 1, 1)

    def step(self, vec: Sequence[int] | np.ndarray, actions: Sequence[int] | np.ndarray) -> np.ndarray:
        """Move every knob by its action (-1 decrease, 0 keep, +1 increase), clipped to its range."""
        vec = self._check(vec)
        actions = np.asarray(actions, dtype=np.int64)
        if actions.shape != vec.shape or np.any(np.abs(actions) > 1):
            raise KnobError(f"actions must be {self.size} values in {{-1, 0, 1}}, got {actions.tolist()}")
        return np.clip(vec + actions, 0, self._cards - 1)

    def describe(self, vec: Sequence[int] | np.ndarray) -> dict[str, Any]:
        """Knob name -> chosen value, for logs."""
        vec = self._check(vec)
        return {k.name: k.values[i] if k.kind != COMPUTE_LOCATION else f"rank {i}" for k, i in zip(self.knobs, vec)}

    def _check(self, vec: Sequence[int] | np.ndarray) -> np.ndarray:
        arr = np.asarray(vec)
        if arr.shape != (self.size,) or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise KnobError(f"a knob vector has {self.size} integers, got shape {arr.shape} of {arr.dtype}")
        arr = arr.astype(np.int64)
        if np.any(arr < 0) or np.any(arr >= self._cards):
            bad = [k.name for k, i in zip(self.knobs, arr) if not 0 <= i < k.cardinality]
            raise KnobError(f"knob index out of range for {bad}")
        return arr

    # --- replay ---
    def _replay(self, trace: Any, wanted: dict[int, Any], ranks: dict[int, int] | None = None,
                sch: Schedule | None = None, record: bool = False) -> _Replay:
        """Apply `trace` (without its postprocessing part) to `sch` (a fresh schedule of the workload if None).

        `wanted` overrides decisions by instruction index; `ranks` picks compute-at locations by rank among the
        legal ones (None: find the legal locations of every compute-at instruction, keep the trace's choice).
        Records what each sampling instruction saw and the decision it was given; `record` adds names.
        """
        seen = _Replay()
        target = sch if sch is not None else Schedule(self.mod)
        counter = iter(range(1 << 30))
        so_far: list[Any] = []  # decisions given so far: they fix the state a compute-at is sampled in
        categoricals: list[tuple[Any, int]] = []  # (the sampled value's variable in the trace, instruction index)

        def provide(inst: Any, inputs: list, attrs: list, decision: Any) -> Any:
            i = next(counter)
            kind = inst.kind.name
            if record and kind == "Annotate":
                # Name a categorical knob after the annotation it feeds and the block or loop annotated.
                for var, j in categoricals:
                    if len(inst.inputs) > 1 and var.same_as(inst.inputs[1]):
                        key = str(_norm(attrs[0])).removeprefix("meta_schedule.")
                        seen.names[j] = f"{key}:{_rv_name(target, inputs[0])}"
            if not kind.startswith("Sample"):
                return decision
            if kind == "SamplePerfectTile":
                loop = target.get(inputs[0])
                extent = loop.extent
                seen.extents[i] = int(extent.value) if isinstance(extent, tvm.tirx.IntImm) else None
                if record:
                    seen.names[i] = f"tile:{_block_of(target, inputs[0])}.{loop.loop_var.name}"
            elif kind == "SampleComputeLocation":
                if record:
                    seen.names[i] = f"compute_at:{target.get(inputs[0]).name_hint}"
                if ranks is None or i in ranks:
                    seen.legal[i] = self._legal(tuple(so_far), target, inputs[0])
                if ranks is not None and i in ranks:
                    legal, rank = seen.legal[i], ranks[i]
                    if rank >= len(legal):
                        seen.problems.append(
                            f"{self._name(i)} asks for legal location #{rank}, but these tile sizes leave only "
                            f"{len(legal)} ({legal})")
                    else:
                        decision = legal[rank]
            elif kind == "SampleCategorical" and record:
                seen.names[i] = f"categorical#{i}"
                categoricals.append((inst.outputs[0], i))
            if i in wanted:
                decision = wanted[i]
            seen.chosen[i] = _norm(decision)
            so_far.append(seen.chosen[i])
            return decision

        try:
            trace.apply_to_schedule(target, remove_postproc=True, decision_provider=provide)
        except Exception as err:  # a schedule primitive refusing the decisions: the vector is invalid
            if interrupt_pending():  # or Ctrl-C, which TVM hands back as a RuntimeError
                raise
            seen.problems.append(f"replay failed: {_first_line(err)}")
        return seen

    def _legal(self, key: tuple, sch: Schedule, block: Any) -> list[int]:
        """Legal compute-at locations, memoised on the decisions taken before (which fix the schedule state):
        probing is most of a decode's time, and a search revisits tilings often."""
        if key not in self._legal_cache:
            if len(self._legal_cache) >= 4096:
                self._legal_cache.clear()
            self._legal_cache[key] = _legal_locations(sch, block)
        return self._legal_cache[key]

    def _name(self, inst_index: int) -> str:
        knob = getattr(self, "_by_inst", {}).get(inst_index)
        return knob.name if knob is not None else f"{self.insts[inst_index].kind.name}#{inst_index}"

    # --- decode / encode ---
    def decode(self, vec: Sequence[int] | np.ndarray) -> Schedule | None:
        """The schedule for an index vector (replay + postprocessors), or None with `last_error` saying why."""
        vec = self._check(vec)
        self.last_error = None
        wanted: dict[int, Any] = {}
        ranks: dict[int, int] = {}
        for knob, index in zip(self.knobs, vec):
            if knob.kind == COMPUTE_LOCATION:
                ranks[knob.inst_index] = int(index)
            elif knob.kind == TILE:
                wanted[knob.inst_index] = list(knob.values[index])
            else:
                wanted[knob.inst_index] = int(index)
        sch = Schedule(self.mod, debug_mask="none", error_render_level="none")
        seen = self._replay(self.trace, wanted, ranks, sch)
        if seen.problems:
            self.last_error = seen.problems[0]
            return None
        # TVM silently repairs decisions that no longer fit (a tile that does not divide its loop, a compute-at
        # loop that became unit): a repaired schedule is not the one asked for.
        sampled = [inst for inst in sch.trace.insts if inst.kind.name.startswith("Sample")]
        for i, inst in zip(sorted(seen.chosen), sampled):
            actual = _norm(sch.trace.decisions[inst])
            if actual != seen.chosen[i]:
                self.last_error = (f"{self._name(i)}: decision {seen.chosen[i]} is not legal with the other "
                                   f"decisions, TVM replaced it by {actual}")
                return None
        bound = _bound_extents(sch)  # read before the postprocessors, which may drop the loop handles
        sch.enter_postproc()
        for proc in self.postprocs:
            try:
                ok = proc.apply(sch)
            except Exception as err:
                if interrupt_pending():
                    raise
                self.last_error = f"postprocessor {type(proc).__name__} failed: {_first_line(err)}"
                return None
            if not ok:
                self.last_error = f"postprocessor {type(proc).__name__} rejected the schedule"
                if bound:  # thread and vthread counts are what GPU checks reject most often
                    self.last_error += " (bound loop extents: " + ", ".join(f"{k}={v}" for k, v in bound) + ")"
                return None
        return sch

    def random_valid(self, rng: np.random.Generator, tries: int = 64) -> tuple[np.ndarray, Schedule] | None:
        """A uniformly random vector that decodes, with its schedule; None after `tries` invalid draws.
        (On CUDA convolutions most draws break the thread/vthread limits, about as often as with
        MetaSchedule's own sampler.)"""
        for _ in range(tries):
            vec = self.random(rng)
            sch = self.decode(vec)
            if sch is not None:
                return vec, sch
        return None

    def encode(self, trace: Any) -> np.ndarray:
        """The index vector of a trace of this design space (e.g. from a tuning record); KnobError if the trace
        has another structure or a decision outside the knobs' values. A record's parallel-extent annotation
        (not a knob) is ignored: decoding its vector gives the design space's own parallel extent."""
        insts = list(trace.insts)
        end = next((i for i, inst in enumerate(insts) if inst.kind.name == _ENTER_POSTPROC), len(insts))
        insts = insts[:end]
        if len(insts) != len(self.insts) or _signature(insts) != self._signature:
            raise KnobError("the trace comes from another design space (its instructions differ)")
        seen = self._replay(trace, {}) if any(k.kind == COMPUTE_LOCATION for k in self.knobs) else _Replay()
        if seen.problems:
            raise KnobError(f"the trace does not replay onto this workload: {seen.problems[0]}")
        vec = np.zeros(self.size, dtype=np.int64)
        for knob in self.knobs:
            mine, theirs = self.insts[knob.inst_index], insts[knob.inst_index]
            if [_norm(a) for a in mine.attrs] != [_norm(a) for a in theirs.attrs]:
                raise KnobError(f"{knob.name}: the trace samples with other attributes")
            decision = _norm(trace.decisions[theirs])
            if knob.kind == TILE:
                if decision not in knob.values:
                    raise KnobError(f"{knob.name}: tiling {decision} is not a legal value")
                vec[knob.position] = knob.values.index(decision)
            elif knob.kind == CATEGORICAL:
                if not 0 <= decision < knob.cardinality:
                    raise KnobError(f"{knob.name}: candidate index {decision} is out of range")
                vec[knob.position] = decision
            else:
                legal = seen.legal[knob.inst_index]
                rank = legal.index(decision) if decision in legal else -1
                if not 0 <= rank < knob.cardinality:
                    raise KnobError(f"{knob.name}: location {decision} (legal here: {legal}) is beyond the knob's "
                                    f"{knob.cardinality} ranks")
                vec[knob.position] = rank
        for fixed in self.fixed:
            if _norm(trace.decisions[insts[fixed.inst_index]]) != _norm(fixed.decision):
                raise KnobError(f"{fixed.kind} #{fixed.inst_index} differs from the fixed decision ({fixed.why})")
        return vec

    def __repr__(self) -> str:
        cards = ", ".join(f"{k.name}={k.cardinality}" for k in self.knobs)
        return f"KnobSpace({self.size} knobs: {cards}; {len(self.fixed)} fixed)"


def knob_spaces(context: ms.TuneContext) -> list[KnobSpace]:
    """One KnobSpace per design space MetaSchedule generates for the context."""
    return [KnobSpace(space, context) for space in context.generate_design_space()]


def to_candidate(sch: Schedule) -> ms.MeasureCandidate:
    """A MeasureCandidate for a decoded schedule, with the argument info builders and runners need."""
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))



__all__ = ["CATEGORICAL", "COMPUTE_LOCATION", "TILE", "FixedDecision", "Knob", "KnobError", "KnobSpace",
           "factorisations", "knob_spaces", "make_context", "preload_tensor_intrinsics", "to_candidate"]
