"""Reading and replaying MetaSchedule traces, for `tune.knobs`: what a knob's values are and what a replay saw.

`factorisations` lists a tile knob's values; `_Replay` records what one replay of a design-space trace saw at
each sampling instruction, and `_legal_locations` probes TVM's own sampler for the compute-at locations it
accepts. The rest reads traces and schedules: decisions and attributes as plain Python (`_norm`, `plain_literal`), a
trace's structure without its decisions (`_signature`), names for knobs (`_block_of`, `_rv_name`), the GPU
thread extents a schedule binds (`_bound_extents`) and the message line of a TVM error (`_first_line`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi
from tvm.s_tir import Schedule

_ENTER_POSTPROC = "EnterPostproc"  # the instruction that starts a trace's postprocessing part


def factorisations(extent: int, n: int, max_innermost: int) -> list[tuple[int, ...]]:
    """Every ordered split of `extent` into `n` factors with the last at most `max_innermost` (no limit when
    it is <= 0), in lexicographic order of the factors, outermost first."""
    if extent < 1 or n < 1:
        raise ValueError(f"cannot split extent {extent} into {n} parts")
    limit = extent if max_innermost <= 0 else max_innermost
    out: list[tuple[int, ...]] = []

    def split(rest: int, parts: int, prefix: tuple[int, ...]) -> None:
        if parts == 1:
            if rest <= limit:
                out.append(prefix + (rest,))
            return
        for f in range(1, rest + 1):
            if rest % f == 0:
                split(rest // f, parts - 1, prefix + (f,))

    split(extent, n, ())
    return out


@dataclass
class _Replay:
    """What one replay of the trace saw at each sampling instruction (keyed by instruction index)."""

    extents: dict[int, int | None] = field(default_factory=dict)
    legal: dict[int, list[int]] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    chosen: dict[int, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _legal_locations(sch: Schedule, block: Any) -> list[int]:
    """The compute-at locations TVM accepts for `block` in `sch`'s current state, ascending.

    Probes TVM's own sampler on a copy of the schedule. Candidates run from -2 (inline) and -1 (root) to the
    last loop above the first consumer, the deepest place TVM considers. TVM keeps a legal decision and moves an
    illegal one to the nearest legal location below it, so walking down from the deepest candidate costs one
    probe per legal location (each probe re-runs TVM's legality analysis, ~10 ms on a conv2d). Should that rule
    ever change, decode still checks every replayed decision against the one it asked for.
    """
    probe = sch.copy()
    consumers = probe.get_consumers(block)
    decision = len(probe.get_loops(consumers[0])) - 1 if len(consumers) else -1
    legal: list[int] = []
    while decision >= -2:
        probe.sample_compute_location(block, decision=decision)
        trace = probe.trace
        got = int(trace.decisions[trace.insts[-1]])
        if got <= decision:
            legal.append(got)
            decision = got - 1
        else:  # moved up: only -2 (inline) does that, when inlining is not legal
            decision -= 1
    return sorted(legal)


# ------------------------------------------------------------------------------------------------ reading traces


def _norm(value: Any) -> Any:
    """A decision or attribute as plain Python (ints, floats, tuples) for comparison."""
    if isinstance(value, (int, float, str)) or value is None:
        return value
    if hasattr(value, "value"):
        return value.value
    if isinstance(value, (list, tuple, tvm_ffi.Array)):
        return tuple(_norm(v) for v in value)
    return value


def plain_literal(value: Any) -> Any:
    """A literal as plain Python (IntImm and bool alike as their value, arrays as tuples), or its text when it has
    no plainer form."""
    value = _norm(value)
    if isinstance(value, tuple):
        return tuple(plain_literal(v) for v in value)
    return value if isinstance(value, (int, float, str)) or value is None else str(value)


def _signature(insts: Sequence[Any]) -> list[tuple]:
    """The structure of a trace without its decisions: each instruction's kind, attributes and inputs, with
    random variables named by the instruction that made them. The parallel extent that MetaSchedule's
    MutateParallel rewrites in tuning records is left out, so records of this space still match."""
    made: dict[Any, tuple[int, int]] = {}
    out = []
    for i, inst in enumerate(insts):
        attrs = tuple(plain_literal(a) for a in inst.attrs)
        inputs = []
        for x in inst.inputs:
            inputs.append(("rv",) + made[x] if x is not None and x in made else ("lit", plain_literal(x)))
        if inst.kind.name == "Annotate" and attrs[:1] == ("meta_schedule.parallel",):
            inputs = inputs[:1]
        out.append((inst.kind.name, attrs, tuple(inputs)))
        for j, y in enumerate(inst.outputs):
            made[y] = (i, j)
    return out


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    # TVM errors end with the message after a traceback; keep the last meaningful line.
    return lines[-1] if lines else type(err).__name__


def _block_of(sch: Schedule, loop: Any) -> str:
    """The name of the first block under a loop, so tile knobs read like "tile:conv2d_nchw.yy"."""
    node = sch.get(loop).body
    while node is not None:
        if isinstance(node, tvm.s_tir.SBlockRealize):
            return node.block.name_hint
        node = getattr(node, "body", None)
    return "?"


def _bound_extents(sch: Schedule) -> list[tuple[str, int]]:
    """(thread axis, extent) of each loop the trace binds to a GPU thread axis, in trace order."""
    out = []
    for inst in sch.trace.insts:
        if inst.kind.name == "Bind":
            extent = sch.get(inst.inputs[0]).extent
            out.append((str(_norm(inst.attrs[0])), int(extent.value) if hasattr(extent, "value") else -1))
    return out


def _rv_name(sch: Schedule, rv: Any) -> str:
    """The name of the block (or the loop variable) behind a schedule handle."""
    node = sch.get(rv)
    return node.name_hint if hasattr(node, "name_hint") else node.loop_var.name


__all__ = ["factorisations", "plain_literal"]
