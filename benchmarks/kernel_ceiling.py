"""What caps our tuned CPU kernels below ONNX Runtime on the same shape ("the ceiling").

    python -m benchmarks.kernel_ceiling                      # all shapes, MetaSchedule at 64 trials (resumable)
    python -m benchmarks.kernel_ceiling --no-tune --shapes gemm:128x768x3072 --rounds 15   # re-time only

Per shape (BERT-base matmuls x[128,K] @ W[K,N]; ResNet-18 3x3 convs, batch 1, NCHW fp32, stride 1, pad 1) it
measures GFLOP/s of: the machine (numpy/OpenBLAS float32 2048^3 matmul, 2 threads, in a subprocess); ONNX Runtime
on a one-op model with the weight a constant initializer (intra_op_num_threads=--threads); TVM's default build of
the kernel (`tvm_rl.measure.kernel_stage`: untuned CPU kernels stay naive loops); the best schedule of a
MetaSchedule tuning through `tvm_rl.tune.tune_workloads` (--trials, in ./tvm_rl_work/kernel_ceiling/default);
hand-written TIR schedules (`benchmarks.kernels.hand`: GEMM with the weight prepacked into [N/nt, K, nt] panels
and mt x nt register tiles; a direct conv with the weight prepacked, output channels vectorized); for GEMMs
MetaSchedule's default space replayed at the hand schedule's tiles (`hand.ms_replay`, weight packed or not); and
on --variant-shapes the same tuning in variant design spaces (`benchmarks.kernels.tuned.VARIANTS`: "prepack"
marks the weight layout-free so RewriteLayout packs it; "prepack_ssrs" also tiles "SSRS", GEMMs only), each in
./tvm_rl_work/kernel_ceiling/<variant>. Every TVM kernel is checked against numpy (a prepacked variant through
its unstripped module). TVM kernels (TVM's time_evaluator) and ORT are timed in interleaved rounds, each sample
>= 10 ms of runs, --rounds rounds; reported: the median, and IQR / median as the noise. The tuning records' own
times are kept in the JSON. Writes docs/results/kernel_ceiling.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.kernels.workloads import DEFAULT_SHAPES, Shape, parse_shape

ROOT = Path(__file__).resolve().parents[1]
MACHINE_SNIPPET = """
import time, numpy as np
a = np.random.rand({n}, {n}).astype('float32'); b = np.random.rand({n}, {n}).astype('float32')
a @ b
ts = []
for _ in range({repeat}):
    t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)
print(sorted(ts)[len(ts) // 2])
"""


def machine_gflops(threads: int = 2, n: int = 2048, repeat: int = 9) -> float:
    """numpy float32 n^3 matmul rate with BLAS limited to `threads` (env vars set before numpy loads)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", MACHINE_SNIPPET.format(n=n, repeat=repeat)], env=env,
                         capture_output=True, text=True, check=True)
    return 2.0 * n**3 / float(out.stdout.strip()) / 1e9


def ort_session(shape: Shape, weight: np.ndarray, threads: int):
    """An ONNX Runtime session of the one op, the weight a constant initializer."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    x, _ = shape.arrays()
    y = shape.reference(x, weight)
    node = (helper.make_node("MatMul", ["x", "w"], ["y"]) if shape.kind == "gemm"
            else helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[1, 1],
                                  kernel_shape=[3, 3]))
    graph = helper.make_graph([node], "one_op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y.shape)],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


class Timed:
    """One kernel to time: a zero-argument callable running it once, its output (for the check), and for a TVM
    kernel `timer(number)`: a TVM time_evaluator of `number` runs, returning ms per run."""

    def __init__(self, run, output=None, timer=None):
        self.run, self.output, self.timer = run, output, timer


def tvm_kernel(mod, target, args: list[np.ndarray], out_shape) -> Timed:
    """A TVM PrimFunc module compiled for `target`, bound to `args` (inputs, then an output buffer)."""
    import tvm

    lib = tvm.compile(mod, target=target).jit()
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in args]
    tensors.append(tvm.runtime.tensor(np.zeros(out_shape, "float32"), dev))
    fn = lib["main"]

    def timer(number: int) -> float:
        return lib.time_evaluator("main", dev, number=number, repeat=1)(*tensors).results[0] * 1e3

    return Timed(lambda: fn(*tensors), lambda: tensors[-1].numpy(), timer)


def tvm_stripped(mod, target) -> Timed:
    """A tuned module whose weight-layout rewrite block is removed (weight taken prepacked, as MetaSchedule times
    it), on random inputs of its parameter shapes (its output is not checked; the unstripped module is)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from benchmarks.kernels import tuned

    stripped = tuned.without_weight_rewrite(mod)
    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in info.shape] for info in ArgInfo.from_prim_func(stripped["main"])]
    args = [rng.uniform(-1, 1, shape).astype("float32") for shape in shapes[:-1]]
    kern = tvm_kernel(stripped, target, args, shapes[-1])
    return Timed(kern.run, None, kern.timer)


def variants(shape: Shape, target, trials: int, work_dir: Path, tile: tuple[int, int], tune: bool = True,
             space_variants: tuple[str, ...] = (), conv_tile: tuple[int, int] = (14, 16)) -> dict:
    """The TVM kernels of `shape` to time (name -> Timed), and notes (tuning record times, skipped variants)."""
    from benchmarks.kernels import hand, tuned

    x, w = shape.arrays()
    ref = shape.reference(x, w)
    out, notes = {}, {}
    mod = tuned.workload(shape, target)
    out["tvm_default"] = tvm_kernel(mod, target, [x, w], ref.shape)  # the kernel as `measure.build` ships it
    if tune and trials > 0:
        start = time.time()
        tuned.tune(shape, target, work_dir, trials)
        notes["tune_seconds"] = round(time.time() - start, 1)
    best, secs, n = tuned.best(mod, target, work_dir)
    notes["ms_records"], notes["ms_record_ms"] = n, (secs * 1e3 if secs else None)
    if best is not None:
        out[f"ms_tuned_{trials}"] = tvm_kernel(best, target, [x, w], ref.shape)
    if shape.kind == "gemm":
        m, k, n_ = shape.dims
        mt, nt = tile
        out["hand"] = tvm_kernel(hand.gemm(m, k, n_, mt, nt), target, [x, hand.pack_weight(w, nt)], ref.shape)
        tiles = ([m // mt, 1, 1, mt], [n_ // nt, 1, 1, nt], [1, k])
        out["ms_space_at_hand_tiles"] = tvm_kernel(hand.ms_replay(mod, *tiles), target, [x, w], ref.shape)
        out["ms_space_at_hand_tiles_packed"] = tvm_kernel(hand.ms_replay(mod, *tiles, pack=nt), target,
                                                          [x, hand.pack_weight(w, nt)], ref.shape)
    else:
        c, h, wd, co = shape.dims
        wt, ct = conv_tile
        out["hand"] = tvm_kernel(hand.conv3x3(c, h, wd, co, wt, ct), target, [x, hand.pack_conv_weight(w, ct)],
                                 ref.shape)
    for variant in space_variants:  # (d): the same tuning with one change to the space (`tuned.VARIANTS`)
        if variant.endswith("_ssrs") and shape.kind != "gemm":
            continue  # a GEMM loop-nest structure
        vdir = work_dir.parent / variant
        vmod = (tuned.tune_variant(shape, target, vdir, trials, variant) if tune and trials > 0
                else tuned.variant_workload(shape, target, variant))
        vbest, vsecs, vn = tuned.best(vmod, target, vdir)
        notes[f"{variant}_records"], notes[f"{variant}_record_ms"] = vn, (vsecs * 1e3 if vsecs else None)
        if vbest is not None:
            out[f"{variant}_check"] = tvm_kernel(vbest, target, [x, w], ref.shape)  # checked, not timed
            out[f"ms_{variant}_{trials}"] = tvm_stripped(vbest, target)
    out = {k: v for k, v in out.items() if v is not None}
    errors = {}
    for name, kern in out.items():
        if kern.output is None:
            continue
        kern.run()
        errors[name] = float(np.abs(kern.output() - ref).max())
        if not np.allclose(kern.output(), ref, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(ref).max()))):
            raise AssertionError(f"{shape.name} {name}: max abs error {errors[name]:.3g}")
    notes["max_abs_err"] = errors
    out = {k: v for k, v in out.items() if not k.endswith("_check")}
    return {"kernels": out, "notes": notes}


def time_rounds(kernels: dict, rounds: int, min_ms: float = 10.0) -> dict:
    """Median ms per run of each kernel over `rounds` interleaved rounds; each sample runs the kernel enough times
    to last >= `min_ms` (TVM kernels through TVM's time_evaluator, others by the wall clock around the calls).
    Returns name -> {median_ms, iqr_rel, number, samples_ms}."""
    number = {}
    for name, k in kernels.items():
        k.run()
        start = time.perf_counter()
        k.run()
        once = max(time.perf_counter() - start, 1e-6) * 1e3
        number[name] = max(1, int(np.ceil(min_ms / once)))
    samples = {name: [] for name in kernels}
    for _ in range(rounds):
        for name, k in kernels.items():
            if k.timer is not None:
                samples[name].append(k.timer(number[name]))
                continue
            start = time.perf_counter()
            for _ in range(number[name]):
                k.run()
            samples[name].append((time.perf_counter() - start) * 1e3 / number[name])
    out = {}
    for name, xs in samples.items():
        q1, med, q3 = np.percentile(xs, [25, 50, 75])
        out[name] = {"median_ms": float(med), "iqr_rel": float((q3 - q1) / med), "number": number[name],
                     "samples_ms": [round(s, 5) for s in xs]}
    return out


def measure_shape(shape: Shape, target, args) -> dict:
    x, w = shape.arrays()
    space_variants = tuple(args.variants) if shape.name in {parse_shape(s).name for s in args.variant_shapes} else ()
    got = variants(shape, target, args.trials, Path(args.work_dir), tuple(args.tile), not args.no_tune,
                   space_variants, tuple(args.conv_tile))
    kernels = dict(got["kernels"])
    if not args.no_ort:
        sess = ort_session(shape, w, args.threads)
        kernels["onnxruntime"] = Timed(lambda: sess.run(None, {"x": x}))
        y = sess.run(None, {"x": x})[0]
        ref = shape.reference(x, w)
        got["notes"]["max_abs_err"]["onnxruntime"] = float(np.abs(y - ref).max())
    timings = time_rounds(kernels, args.rounds)
    for t in timings.values():
        t["gflops"] = shape.flops / (t["median_ms"] * 1e-3) / 1e9
    return {"shape": shape.name, "kind": shape.kind, "dims": list(shape.dims), "gflop": shape.flops / 1e9,
            "timings": timings, **got["notes"]}


COLUMNS = (("onnxruntime", "ort"), ("tvm_default", "tvm_default"), ("ms_tuned_{n}", "ms@{n}"),
           ("ms_prepack_{n}", "ms_prepack@{n}"), ("ms_prepack_ssrs_{n}", "ms_ssrs@{n}"), ("hand", "hand"),
           ("ms_space_at_hand_tiles", "ms_at_hand"), ("ms_space_at_hand_tiles_packed", "ms_at_hand_pk"))


def table(result: dict) -> str:
    """The GFLOP/s table (and % of the machine's GEMM rate), one row per shape; '-' where not measured."""
    machine, n = result["machine_gflops"], result["trials"]
    lines = [f"machine GEMM (numpy 2048^3, {result['threads']} threads): {machine:.1f} GFLOP/s "
             f"(again after: {result.get('machine_gflops_after', float('nan')):.1f})",
             f"{'shape':<24}" + "".join(f"{head.format(n=n):>15}" for _, head in COLUMNS)]
    for row in result["rows"]:
        cells = []
        for key, _ in COLUMNS:
            t = row["timings"].get(key.format(n=n))
            cells.append(f"{t['gflops']:6.1f} ({100 * t['gflops'] / machine:3.0f}%)" if t else "-")
        lines.append(f"{row['shape']:<24}" + "".join(f"{c:>15}" for c in cells))
    noise = [t["iqr_rel"] for row in result["rows"] for t in row["timings"].values()]
    if noise:
        lines.append(f"noise: IQR/median over {result['rounds']} rounds: median {100 * np.median(noise):.1f}%, "
                     f"worst {100 * max(noise):.1f}%")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), help="gemm:MxKxN or conv:HxWxCinxCout")
    ap.add_argument("--trials", type=int, default=64, help="MetaSchedule trials per kernel (0: read the database)")
    ap.add_argument("--no-tune", action="store_true", help="only read what the database holds")
    ap.add_argument("--work-dir", default="tvm_rl_work/kernel_ceiling/default")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds (>= 7)")
    ap.add_argument("--tile", type=int, nargs=2, default=(8, 32), metavar=("MT", "NT"), help="hand GEMM tile")
    ap.add_argument("--conv-tile", type=int, nargs=2, default=(14, 16), metavar=("WT", "CT"),
                    help="hand conv tile: output pixels x output channels")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--variants", nargs="*", default=["prepack", "prepack_ssrs"],
                    help="variant design spaces (benchmarks.kernels.tuned.VARIANTS)")
    ap.add_argument("--variant-shapes", nargs="*", default=["gemm:128x768x3072", "conv:56x56x64x64"])
    ap.add_argument("--machine-size", type=int, default=2048)
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "kernel_ceiling.json"))
    args = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))  # TVM's thread pool: read when it first starts
    from tvm_rl.measure import host_cpu_target

    target = host_cpu_target(cores=args.threads)
    start = time.time()
    result = {"command": "python -m benchmarks.kernel_ceiling " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d"), "target": str(target), "threads": args.threads,
              "trials": args.trials, "rounds": args.rounds, "tile": list(args.tile),
              "machine_gflops": machine_gflops(args.threads, args.machine_size), "rows": []}
    for text in args.shapes:
        row = measure_shape(parse_shape(text), target, args)
        result["rows"].append(row)
        print(row["shape"], {k: round(v["gflops"], 1) for k, v in row["timings"].items()}, flush=True)
    result["machine_gflops_after"] = machine_gflops(args.threads, args.machine_size)
    result["seconds"] = round(time.time() - start, 1)
    print(table(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
