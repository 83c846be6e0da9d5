"""Design spaces as knob vectors: enumeration, encode/decode round trips, invalid vectors reported, and decoded
schedules that build (LLVM and CUDA codegen) and compute the workload's function (LLVM, against numpy)."""
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from numpy.lib.stride_tricks import sliding_window_view
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import Instruction, Trace

from tvm_rl import measure
from tvm_rl.tune import knobs, tophub
from tvm_rl.tune.knobs import COMPUTE_LOCATION, TILE, KnobError, KnobSpace

TOPHUB = Path(__file__).resolve().parents[3] / "shared" / "tophub"


def small_task(op: str) -> tophub.TophubTask:
    if not TOPHUB.is_dir():
        pytest.skip(f"no TopHub logs at {TOPHUB}")
    return tophub.load_tasks(TOPHUB, ops=[op], shape_filter=lambda t: t.flops < 2e7, max_tasks=1)[0]


_SPACES: dict[tuple[str, str], tuple[tophub.TophubTask, list[KnobSpace]]] = {}


def spaces_for(op: str, kind: str) -> tuple[tophub.TophubTask, list[KnobSpace]]:
    """The task and the knob spaces of all its design spaces, built once per session."""
    if (op, kind) not in _SPACES:
        task = small_task(op)
        target = measure.host_cpu_target() if kind == "llvm" else measure.cuda_target("sm_90")
        ctx = knobs.make_context(task.mod(), target, task.name, seed=0)
        _SPACES[(op, kind)] = task, knobs.knob_spaces(ctx)
    return _SPACES[(op, kind)]


CASES = [(op, kind) for op in ("conv2d", "batch_matmul", "depthwise_conv2d") for kind in ("llvm", "cuda")]


def replay_original(space: KnobSpace) -> Schedule | None:
    """What MetaSchedule itself does with the design space's trace: replay, then the postprocessors."""
    sch = Schedule(space.mod)
    space.trace.apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    return sch if all(p.apply(sch) for p in space.postprocs) else None


def reference(task: tophub.TophubTask, inputs: list[np.ndarray]) -> np.ndarray:
    """The workload computed with numpy."""
    x, w = inputs
    if task.op == "batch_matmul":
        return np.einsum("bmk,bnk->bmn", x, w)
    (sh, sw), (pt, pl, pb, pr), dil = task.args[2], task.args[3], task.args[4]
    assert tuple(dil) == (1, 1)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    windows = sliding_window_view(xp, w.shape[2:], axis=(2, 3))[:, :, ::sh, ::sw]
    return np.einsum("nchwij,ocij->nohw", windows, w)


# ------------------------------------------------------------------------------------------ enumeration


def test_factorisations_are_all_ordered_splits_in_lexicographic_order():
    assert knobs.factorisations(12, 2, 64) == [(1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1)]
    assert knobs.factorisations(12, 2, 4) == [(3, 4), (4, 3), (6, 2), (12, 1)]
    splits = knobs.factorisations(64, 4, 16)
    # 2^6 into 4 ordered parts: C(9, 3) = 84, minus those with innermost 32 (3 ways) or 64 (1 way)
    assert len(splits) == 84 - 4 == len(set(splits))
    assert splits == sorted(splits)
    assert all(np.prod(s) == 64 and s[-1] <= 16 for s in splits)
    assert knobs.factorisations(7, 3, 0) == [(1, 1, 7), (1, 7, 1), (7, 1, 1)]  # 0: no innermost limit


@pytest.mark.parametrize("op,kind", CASES)
def test_knobs_cover_the_sampling_instructions(op, kind):
    _, spaces = spaces_for(op, kind)
    assert spaces
    for space in spaces:
        sampled = [i for i, inst in enumerate(space.insts) if inst.kind.name.startswith("Sample")]
        assert sorted([k.inst_index for k in space.knobs] + [f.inst_index for f in space.fixed]) == sampled
        assert all(f.why for f in space.fixed)
        assert space.size == len(space.knobs) and list(space.cardinalities) == [k.cardinality for k in space.knobs]
        assert all(c >= 2 for c in space.cardinalities)
        assert len({k.name for k in space.knobs}) == space.size
        for knob in space.knobs:
            if knob.kind == TILE:
                assert len({int(np.prod(v)) for v in knob.values}) == 1  # all split the same extent
        if kind == "llvm" and op != "batch_matmul":  # the padding stage may be computed at any of several loops
            assert [k.kind for k in space.knobs].count(COMPUTE_LOCATION) == 1


# ------------------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("op,kind", CASES)
def test_encode_of_the_design_space_is_its_default(op, kind):
    _, spaces = spaces_for(op, kind)
    for space in spaces:
        assert np.array_equal(space.encode(space.trace), space.default())


@pytest.mark.parametrize("op,kind", CASES)
def test_decode_default_is_the_replayed_trace(op, kind):
    _, spaces = spaces_for(op, kind)
    for space in spaces:
        decoded, original = space.decode(space.default()), replay_original(space)
        # A design space's own random decisions may break GPU limits: then both must say so.
        assert (decoded is None) == (original is None), space.last_error
        if decoded is not None:
            assert tvm_ffi.structural_equal(decoded.mod, original.mod)
            assert np.array_equal(space.encode(decoded.trace), space.default())


def test_encode_ignores_the_parallel_extent_that_tuning_records_mutate():
    _, spaces = spaces_for("batch_matmul", "llvm")
    space = spaces[-1]
    decisions = dict(space.trace.decisions.items())
    insts = []
    for inst in space.trace.insts:
        if inst.kind.name == "Annotate" and str(inst.attrs[0]) == "meta_schedule.parallel":
            inst = Instruction(inst.kind, [inst.inputs[0], tvm.tirx.IntImm("int32", 16)], inst.attrs, inst.outputs)
        insts.append(inst)
    assert len(insts) == len(space.insts)
    assert np.array_equal(space.encode(Trace(insts, decisions)), space.default())


def test_encode_rejects_another_design_space():
    _, spaces = spaces_for("conv2d", "llvm")
    assert len(spaces) >= 2
    with pytest.raises(KnobError, match="another design space"):
        spaces[0].encode(spaces[-1].trace)


# ------------------------------------------------------------------------------------------ vector API


def test_step_normalised_and_random_stay_in_range():
    _, spaces = spaces_for("conv2d", "llvm")
    space, rng = spaces[0], np.random.default_rng(0)
    cards = space.cardinalities
    top = cards - 1
    assert np.array_equal(space.step(top, np.ones(space.size, int)), top)
    assert np.array_equal(space.step(np.zeros(space.size, int), -np.ones(space.size, int)), np.zeros(space.size))
    vec = space.default()
    for _ in range(200):
        vec = space.step(vec, rng.integers(-1, 2, space.size))
        assert np.all((vec >= 0) & (vec < cards))
        r = space.random(rng)
        assert np.all((r >= 0) & (r < cards))
        norm = space.normalised(r)
        assert np.all((norm >= 0) & (norm <= 1))
    assert np.array_equal(space.normalised(top), np.ones(space.size))
    with pytest.raises(KnobError):
        space.step(vec, np.full(space.size, 2))
    with pytest.raises(KnobError):
        space.decode(cards)  # one past the end of every knob
    with pytest.raises(KnobError):
        space.decode(vec[:-1])


def test_random_draws_are_reproducible():
    _, spaces = spaces_for("batch_matmul", "llvm")
    space = spaces[-1]
    assert np.array_equal(space.random(np.random.default_rng(3)), space.random(np.random.default_rng(3)))


# ------------------------------------------------------------------------------------------ validity


@pytest.mark.parametrize("op", ["conv2d", "batch_matmul"])
def test_random_llvm_schedules_are_valid_build_and_compute_the_workload(op):
    task, spaces = spaces_for(op, "llvm")
    rng = np.random.default_rng(1)
    data = np.random.default_rng(2)
    target = spaces[0].target
    built = 0
    for space in spaces:
        draws = [space.random(rng) for _ in range(6)]
        decoded = [(vec, space.decode(vec)) for vec in draws]
        valid = [(vec, sch) for vec, sch in decoded if sch is not None]
        assert len(valid) >= 5, space.last_error  # "most draws": only a rare compute-at rank runs out
        for vec, sch in valid:
            assert np.array_equal(space.encode(sch.trace), vec)
        vec, sch = valid[0]
        # Replayed decisions must give the same function: build one schedule per space and compare.
        func = tvm.compile(sch.mod, target=target)
        args = measure.random_args(sch.mod["main"], tvm.cpu(), data)
        func["main"](*args)
        expect = reference(task, [a.numpy() for a in args[:2]])
        np.testing.assert_allclose(args[2].numpy(), expect, rtol=1e-4, atol=1e-4)
        built += 1
    assert built == len(spaces)


def test_cuda_schedules_generate_code():
    for op in ("conv2d", "batch_matmul"):
        _, spaces = spaces_for(op, "cuda")
        space = spaces[0]
        found = space.random_valid(np.random.default_rng(0), tries=200)
        assert found is not None, space.last_error
        vec, sch = found
        assert np.array_equal(space.encode(sch.trace), vec)
        lib = tvm.compile(sch.mod, target=space.target)  # CUDA code generation needs no GPU
        assert "__global__" in lib.mod.imports[0].inspect_source()
        candidate = knobs.to_candidate(sch)
        assert len(candidate.args_info) == 3


def test_invalid_vectors_are_reported_with_a_reason():
    # CUDA: most random tilings break the thread-count or vthread limits; VerifyGPUCode says so.
    _, spaces = spaces_for("conv2d", "cuda")
    space, rng = spaces[0], np.random.default_rng(0)
    reasons = []
    for _ in range(10):
        if space.decode(space.random(rng)) is None:
            reasons.append(space.last_error)
    assert reasons and all("VerifyGPUCode rejected" in r and "threadIdx" in r for r in reasons)
    # A compute-at rank beyond what the chosen tiles leave is reported, not moved elsewhere: the tilings that
    # leave fewer legal locations than the design space's own (unit loops are skipped) show it.
    _, spaces = spaces_for("conv2d", "llvm")
    space = spaces[0]
    at = next(k for k in space.knobs if k.kind == COMPUTE_LOCATION)
    reported = []
    for _ in range(40):
        vec = space.random(rng)
        vec[at.position] = at.cardinality - 1
        if space.decode(vec) is None:
            reported.append(space.last_error)
    assert reported and all("asks for legal location" in r and at.name in r for r in reported)
    assert space.decode(space.default()) is not None and space.last_error is None


def test_candidate_carries_the_arguments():
    task, spaces = spaces_for("batch_matmul", "llvm")
    sch = spaces[0].decode(spaces[0].default())
    candidate = knobs.to_candidate(sch)
    shapes = [tuple(int(d) for d in info.shape) for info in candidate.args_info]
    (b, m, k), (_, n, _) = task.args[0][1], task.args[1][1]
    assert shapes[0] == (b, m, k) and shapes[2] == (b, m, n)
    # RewriteLayout may store the weights pre-transformed, as MetaSchedule's runner then feeds them.
    assert int(np.prod(shapes[1])) == b * n * k
