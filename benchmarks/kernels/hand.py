"""Hand-written TIR schedules in the style of TVM's "How to optimize GEMM on CPU" tutorial.

GEMM: the weight packed offline into [N/nt, K, nt] panels (as ONNX Runtime prepacks a constant B), each core
computing mt x nt tiles of C in a register-resident local accumulator: the k loop outside, the mt rows unrolled,
the nt columns vectorized (nt = 16 or 32 floats: one or two AVX-512 registers per row), the outer tile loops
fused and parallel.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import te


def pack_weight(w: np.ndarray, nt: int) -> np.ndarray:
    """W [K, N] as [N/nt, K, nt] panels (N divisible by nt)."""
    k, n = w.shape
    return np.ascontiguousarray(w.reshape(k, n // nt, nt).transpose(1, 0, 2))


def gemm(m: int, k: int, n: int, mt: int = 8, nt: int = 32, kc: int = 0) -> tvm.IRModule:
    """C[M,N] = A[M,K] @ W, W given packed (`pack_weight(w, nt)`); mt x nt register tiles; `kc` > 0 splits the
    reduction into kc-long chunks outside the tile loops (C then accumulates in memory across chunks)."""
    if m % mt or n % nt or (kc and k % kc):
        raise ValueError(f"tile {mt}x{nt} (kc={kc}) does not divide GEMM {m}x{k}x{n}")
    a = te.placeholder((m, k), "float32", name="A")
    bp = te.placeholder((n // nt, k, nt), "float32", name="Bp")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * bp[j // nt, r, j % nt], axis=r), name="C")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, bp, c]).with_attr("global_symbol", "main"))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    io, ii = sch.split(i, [None, mt])
    jo, ji = sch.split(j, [None, nt])
    sch.reorder(jo, io, kk, ii, ji)
    outer = sch.fuse(jo, io)
    sch.parallel(outer)
    acc = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(acc, outer)
    sch.unroll(ii)
    sch.vectorize(ji)
    init = sch.decompose_reduction(blk, kk)
    sch.vectorize(sch.get_loops(init)[-1])
    wi, wj = sch.get_loops(acc)[-2:]
    sch.vectorize(wj)
    del wi
    return sch.mod


def build(mod: tvm.IRModule, target) -> tvm.runtime.Module:
    return tvm.compile(mod, target=target)


def ms_replay(mod: tvm.IRModule, i_tiles, j_tiles, k_tiles, unroll: int = 0, pack: int = 0) -> tvm.IRModule:
    """`mod` (tvm_rl's matmul workload: x[M,K] @ B[K,N]) scheduled with exactly the steps of one point of
    MetaSchedule's default LLVM space (MultiLevelTiling "SSRSRS" with a global write cache at the second spatial
    level, then ParallelizeVectorizeUnroll's fuse/parallel/vectorize and an explicit-unroll annotation), with the
    tile sizes given: whether that space holds a schedule as fast as `gemm`. `pack` > 0 also rewrites B's layout
    to [N/pack, K, pack] (what MetaSchedule's RewriteLayout would do for a layout-free weight; the kernel then
    takes B packed)."""
    sch = tvm.s_tir.Schedule(mod)
    blk = sch.get_sblock("matmul")
    i, j, k = sch.get_loops(blk)
    a = sch.split(i, list(i_tiles))
    b = sch.split(j, list(j_tiles))
    c = sch.split(k, list(k_tiles))
    sch.reorder(a[0], b[0], a[1], b[1], c[0], a[2], b[2], c[1], a[3], b[3])
    acc = sch.cache_write(blk, 0, "global")
    sch.reverse_compute_at(acc, b[1])
    outer = sch.fuse(a[0], b[0], a[1], b[1])
    sch.parallel(outer)
    sch.vectorize(b[3])
    if unroll:
        sch.annotate(outer, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(outer, "pragma_unroll_explicit", 1)
    sch.vectorize(sch.fuse(*sch.get_loops(acc)[-1:]))
    sch.decompose_reduction(blk, c[0])
    if pack:
        sch.transform_layout(blk, "B", lambda kk, jj: (jj // pack, kk, jj % pack))
    return sch.mod


def pack_conv_weight(w: np.ndarray, ct: int) -> np.ndarray:
    """W [Co, C, 3, 3] as [Co/ct, C, 3, 3, ct] (output channels innermost, ct per block)."""
    co, c, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(co // ct, ct, c, kh, kw).transpose(0, 2, 3, 4, 1))


def conv3x3(c: int, h: int, w: int, co: int, wt: int = 7, ct: int = 32) -> tvm.IRModule:
    """Direct 3x3 conv (batch 1, NCHW in and out, stride 1, pad 1), the weight prepacked (`pack_conv_weight`):
    each core computes wt output pixels of a row x ct output channels in registers (the channels vectorized, the
    pixels unrolled, one broadcast input value per pixel and reduction step) into an NCHW[ct]c buffer, then a
    copy to NCHW."""
    if co % ct or w % wt:
        raise ValueError(f"tile {wt}x{ct} does not divide conv {h}x{w}x{c}->{co}")
    x = te.placeholder((1, c, h, w), "float32", name="x")
    wp = te.placeholder((co // ct, c, 3, 3, ct), "float32", name="Wp")
    pad = te.compute((c, h + 2, w + 2), lambda ci, y, z: te.if_then_else(
        te.all(y >= 1, y <= h, z >= 1, z <= w), x[0, ci, y - 1, z - 1], te.const(0.0, "float32")), name="pad")
    rc, ry, rx = te.reduce_axis((0, c), "rc"), te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
    convc = te.compute((co // ct, h, w, ct), lambda cb, y, z, cc: te.sum(
        pad[rc, y + ry, z + rx] * wp[cb, rc, ry, rx, cc], axis=[rc, ry, rx]), name="convc")
    out = te.compute((1, co, h, w), lambda n, o, y, z: convc[o // ct, y, z, o % ct], name="out")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, wp, out]).with_attr("global_symbol", "main"))
    sch.parallel(sch.get_loops(sch.get_sblock("pad"))[0])
    blk = sch.get_sblock("convc")
    cb, y, z, cc, rc_, ry_, rx_ = sch.get_loops(blk)
    zo, zi = sch.split(z, [None, wt])
    sch.reorder(cb, y, zo, rc_, ry_, rx_, zi, cc)
    outer = sch.fuse(cb, y)
    sch.parallel(outer)
    acc = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(acc, zo)
    sch.unroll(zi)
    sch.vectorize(cc)
    init = sch.decompose_reduction(blk, rc_)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(acc)[-1])
    o_loops = sch.get_loops(sch.get_sblock("out"))
    sch.parallel(sch.fuse(o_loops[0], o_loops[1]))
    sch.vectorize(o_loops[-1]) if w % 16 == 0 else None
    return sch.mod
