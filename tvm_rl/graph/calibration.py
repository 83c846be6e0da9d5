"""Fit the graph proxy's rooflines to the kernels a MetaSchedule database has tuned.

The nominal roofline (`roofline.default_hardware`) says what the chip could do; tuned TVM kernels reach a
different fraction of it for each kind of kernel (a tuned conv far more than a memory-bound batch norm),
and that ratio decides which rewrites pay. A tuning database already holds the answer: every workload with
its best measured latency. `tuned_roofline` reads them, counts each kernel's FLOPs and bytes, classifies it
by its blocks' names, and fits one roofline per kind (`roofline.calibrate_by_kind`). The fit is kept beside the
database (`roofline.json`) and redone when the database has grown.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm

from ..database import DatabaseLike, TuningDatabase, record_seconds
from . import gemm_cost, profiles, roofline


def _folder(work_dir: TuningDatabase | str | os.PathLike) -> TuningDatabase:
    """The database folder `work_dir`, or FileNotFoundError naming it when it holds no records file."""
    folder = TuningDatabase.of(work_dir)
    if folder is None:
        raise FileNotFoundError(f"{work_dir!r} is not a tuning database folder")
    if not folder.records_path.exists():
        raise FileNotFoundError(f"no MetaSchedule database in {folder.path} ({folder.records_path.name} missing)")
    return folder


@dataclass(frozen=True)
class TunedKernel:
    """One tuned workload: its kind, FLOPs, bytes moved and best measured latency (ms)."""

    kind: str
    flops: float
    nbytes: int
    best_ms: float
    shapes: tuple[tuple[int, ...], ...] = ()  # its buffers' shapes, in argument order


def best_records(work_dir: TuningDatabase | str | os.PathLike) -> dict:
    """{workload: (workload, best ms)} over the successful measurements of the JSON database in `work_dir` (a
    record's time is the mean of its runs)."""
    best: dict = {}
    for record in _folder(work_dir).records():
        seconds = record_seconds(record.run_secs)
        if seconds is None:
            continue  # failed runs are stored with huge or missing latencies
        ms_ = seconds * 1e3
        key = record.workload
        if key not in best or ms_ < best[key][1]:
            best[key] = (record.workload, ms_)
    return best


def tuned_kernels(work_dir: TuningDatabase | str | os.PathLike) -> list[TunedKernel]:
    """Every workload of the JSON database in `work_dir` that has a successful measurement, at its best."""
    return [tuned_kernel(workload, best_ms) for workload, best_ms in best_records(work_dir).values()]


def tuned_kernel(workload, best_ms: float) -> TunedKernel:
    """One workload of a database (`best_records`) with its best latency, as the fits read it."""
    from tvm.s_tir.analysis import estimate_tir_flops

    func = workload.mod["main"]
    try:
        flops = float(estimate_tir_flops(workload.mod))
    except Exception:  # data-dependent loops: TVM cannot count them
        flops = 0.0
    return TunedKernel(roofline.tir_kind(func), flops, profiles.prim_func_bytes(func), best_ms,
                       profiles.arg_shapes(func))


def layout_pairs(kernels: list[TunedKernel]) -> list[tuple[TunedKernel, TunedKernel]]:
    """(NCHW, NHWC) pairs of tuned convs that are the same convolution in two layouts: same kind family, same
    FLOPs, and buffers whose dimensions are the same up to order. How much a layout change buys, per kernel."""
    def key(k: TunedKernel) -> tuple:
        return k.flops, tuple(sorted(tuple(sorted(s)) for s in k.shapes))

    nchw = {key(k): k for k in kernels if k.kind in ("conv", "group_conv") and k.shapes}
    return [(nchw[key(k)], k) for k in kernels
            if k.kind.endswith("_nhwc") and k.shapes and key(k) in nchw
            and nchw[key(k)].kind == k.kind.removesuffix("_nhwc")]


def tuned_gemms(kernels: list[TunedKernel]) -> list[tuple[gemm_cost.GemmShape, TunedKernel]]:
    """The tuned matmul kernels whose GEMM shape their buffers tell (`gemm_cost.kernel_gemm_shape`)."""
    out = []
    for k in kernels:
        shape = gemm_cost.matmul_gemm(k.kind, k.shapes, k.flops)
        if shape is not None:
            out.append((shape, k))
    return out


def fit(kernels: list[TunedKernel]) -> roofline.RooflineModel:
    """One roofline per kind with enough kernels, one over all for the rest (`roofline.calibrate_by_kind`),
    and GEMM efficiency by shape when the matmuls are enough (`gemm_cost.fit`)."""
    if not kernels:
        raise ValueError("no tuned kernels to fit a roofline to")
    model = roofline.calibrate_by_kind([k.kind for k in kernels], [k.flops for k in kernels],
                                       [k.nbytes for k in kernels], [k.best_ms for k in kernels])
    gemms = tuned_gemms(kernels)
    shapes, measured = [s for s, _ in gemms], [k.best_ms for _, k in gemms]
    gemm = gemm_cost.fit(shapes, measured)
    if gemm is not None:
        # Kept only where shape predicts better out of sample than one rate does in sample: with few trials
        # per kernel, tuning luck can move one shape's rate 5x, and a model of noise would only add noise.
        flat = float(np.median([abs(model.time_ms(k.flops, k.nbytes, "matmul") / k.best_ms - 1) for _, k in gemms]))
        if float(np.nanmedian(gemm_cost.leave_one_out(shapes, measured))) >= flat:
            gemm = None
    return roofline.RooflineModel(model.default, model.per_kind, gemm)


def tuned_roofline(work_dir: TuningDatabase | str | os.PathLike,
                   target: tvm.target.Target | str | None = None) -> roofline.RooflineModel:
    """The rooflines of the kernels tuned in `work_dir`, cached in `work_dir/roofline.json`.

    `target` (a database holds one target's kernels) is written into the cache for whoever reads it.
    """
    folder = _folder(work_dir)
    stamp = folder.records_path.stat().st_size
    path = folder.roofline_path
    if path.exists():
        try:
            saved = json.loads(path.read_text())
            if saved["records_bytes"] == stamp and saved.get("kinds") == list(roofline.KINDS) and "gemm" in saved:
                return roofline.RooflineModel.from_dict({"default": saved["default"], **saved["per_kind"],
                                                         "gemm": saved["gemm"]})
        except (json.JSONDecodeError, KeyError, TypeError):
            pass  # refit below
    kernels = tuned_kernels(folder)
    model = fit(kernels)
    path.write_text(json.dumps({"records_bytes": stamp, "kinds": list(roofline.KINDS), "kernels": len(kernels),
                                "target": str(target) if target is not None else None,
                                "default": model.default.as_dict(),
                                "per_kind": {k: h.as_dict() for k, h in model.per_kind},
                                "gemm": model.gemm.as_dict() if model.gemm is not None else None}, indent=1))
    return model


def proxy_roofline(target: tvm.target.Target | str, database: DatabaseLike = None) -> roofline.Roofline:
    """The roofline a graph search should price kernels with: fitted to `database`'s tuned kernels (a work dir
    or a JSON database) when it has any, else the nominal figures (`roofline.default_hardware`)."""
    folder = TuningDatabase.of(database)  # None for no database, or one with no files (in memory)
    if folder is None or folder.is_empty():
        return roofline.default_hardware(target)
    try:
        return tuned_roofline(folder, target)
    except ValueError:  # records, but none measured successfully
        return roofline.default_hardware(target)


def recorded_proxy(path: str | os.PathLike) -> roofline.Roofline:
    """The roofline a graph benchmark's JSON recorded under "proxy" (`benchmarks/graph_rl.py --proxy-from`,
    `tvm-rl train --proxy-from`); ValueError naming the file and what is wrong with it."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"--proxy-from {path}: cannot read it as JSON ({err})") from None
    if not isinstance(record, dict) or not isinstance(record.get("proxy"), dict):
        raise ValueError(f"--proxy-from {path}: no \"proxy\" record in it (a benchmarks/graph_rl.py JSON has one)")
    try:
        return roofline.from_dict(record["proxy"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"--proxy-from {path}: its \"proxy\" record is unreadable ({type(err).__name__}: {err})"
                         ) from None


def fit_error(model: roofline.Roofline, kernels: list[TunedKernel]) -> dict[str, float]:
    """Median |predicted / measured - 1| per kind and over all: how far the fitted rooflines are off."""
    rel: dict[str, list[float]] = {}
    for k in kernels:
        shape = gemm_cost.matmul_gemm(k.kind, k.shapes, k.flops)
        err = abs(model.time_ms(k.flops, k.nbytes, k.kind, shape) / k.best_ms - 1)
        rel.setdefault(k.kind, []).append(err)
        rel.setdefault("all", []).append(err)
    return {kind: float(np.median(v)) for kind, v in rel.items()}
