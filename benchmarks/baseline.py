"""Reference latencies for every zoo model: TVM default build, TVM with MetaSchedule-tuned kernels, PyTorch
eager and ONNX Runtime. Every later speedup in tvm-rl is measured against this table.

    python benchmarks/baseline.py                       # full zoo on this CPU (LLVM); hours on a small one
    python benchmarks/baseline.py --models resnet18 --size tiny --trials-per-kernel 8
    python benchmarks/baseline.py --target cuda         # the same on a GPU (CUDA build of torch there)

One tuning database is shared by all models (identical kernels are tuned once) and lives in --db-dir.
The run is resumable: each finished model row is written to the JSON at once and skipped on a rerun with the
same settings, and tuning resumes from the database. Writes logs/baseline_<target>_<size>.json and a plot.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from tvm_rl import measure, models
from tvm_rl.database import DatabaseLike
from tvm_rl.measure import tolerance
from tvm_rl.tune import tune_model

ORDER = ["resnet18", "squeezenet1_1", "mobilenet_v2", "bert", "vit", "dalle", "transducer", "resnet50",
         "resnext50", "vgg16", "inception_v3"]



def repeats_for(seconds_per_run: float, budget_s: float, lo: int = 3, hi: int = 30) -> int:
    """As many repeats as fit in `budget_s`, at least `lo` (naive CPU builds of big models take seconds)."""
    return int(min(hi, max(lo, budget_s // max(seconds_per_run, 1e-6))))


def time_tvm(mod, target, inputs, reference, database: DatabaseLike = None, budget_s: float = 20.0) -> dict:
    start = time.perf_counter()
    executable = measure.build(mod, target, database=database)
    build_s = time.perf_counter() - start
    runner = measure.Runner(executable, target)
    start = time.perf_counter()
    outputs = runner(inputs)
    first = time.perf_counter() - start
    check = measure.compare(outputs, reference, rtol=1e-3, atol=tolerance(reference))
    timing = runner.time(inputs, warmup=1, repeat=repeats_for(first, budget_s))
    return {"ms": timing.median_ms, "timing": timing.as_dict(), "build_s": round(build_s, 2),
            "max_abs_err": check.max_abs_err, "correct": check.ok}


def _time_after_first_run(fn: Callable[[], object], sync: Callable[[], object] | None = None) -> measure.Timing:
    """`fn` run once (its seconds set how many repeats fit in 10 s), then timed."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    return measure.time_callable(fn, warmup=2, repeat=repeats_for(first, 10), sync=sync)


def _torch_call(model: models.Model, device: str, threads: int):
    """The model's module on `device`, its inputs there, and the device's sync (None on the CPU)."""
    torch.set_num_threads(threads)
    module = model.torch_module.to(device)
    args = [torch.from_numpy(x).to(device) for x in model.inputs]
    return module, args, torch.cuda.synchronize if device == "cuda" else None


def time_torch(model: models.Model, device: str, threads: int) -> dict:
    module, args, sync = _torch_call(model, device, threads)
    with torch.no_grad():
        timing = _time_after_first_run(lambda: module(*args), sync)
    model.torch_module.to("cpu")
    return {"ms": timing.median_ms, "timing": timing.as_dict()}


class InductorTimer:
    """PyTorch's `torch.compile` (Inductor, its default backend) on the model: compiled on the first call, whose
    seconds are kept as `compile_s`, and timed as `time_torch` times eager on every call after."""

    def __init__(self, model: models.Model, device: str, threads: int):
        self.model, self.device, self.threads = model, device, threads
        self.compiled = None
        self.compile_s: float | None = None

    def __call__(self) -> float:
        module, args, sync = _torch_call(self.model, self.device, self.threads)
        with torch.no_grad():
            if self.compiled is None:
                start = time.perf_counter()
                self.compiled = torch.compile(module)
                self.compiled(*args)
                self.compile_s = round(time.perf_counter() - start, 1)
            compiled = self.compiled
            return _time_after_first_run(lambda: compiled(*args), sync).median_ms


class OrtTimer:
    """ONNX Runtime on the model's ONNX export: exported and loaded on the first call, timed on every call."""

    def __init__(self, model: models.Model, scratch: Path, gpu: bool, threads: int):
        self.model, self.scratch, self.gpu, self.threads = model, scratch, gpu, threads
        self.run: Callable[[], object] | None = None
        self.note: str | None = None

    def _load(self) -> None:
        import onnxruntime as ort

        path = models.export_onnx(self.model.torch_module, [torch.from_numpy(x) for x in self.model.inputs],
                                  self.scratch / f"{self.model.name}.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        providers = ["CUDAExecutionProvider"] if self.gpu else ["CPUExecutionProvider"]
        if self.gpu and "CUDAExecutionProvider" not in ort.get_available_providers():
            self.note = "onnxruntime has no CUDA provider here"
            return
        session = ort.InferenceSession(str(path), options, providers=providers)
        path.unlink(missing_ok=True)
        feed = dict(zip([i.name for i in session.get_inputs()], self.model.inputs))
        self.run = lambda: session.run(None, feed)

    def timing(self) -> measure.Timing | None:
        """One timing (None where ORT cannot run here: `note` says why)."""
        if self.run is None and self.note is None:
            self._load()
        return None if self.run is None else _time_after_first_run(self.run)

    def __call__(self) -> float | None:
        timing = self.timing()
        return None if timing is None else timing.median_ms


def time_onnxruntime(model: models.Model, scratch: Path, gpu: bool, threads: int) -> dict:
    timer = OrtTimer(model, scratch, gpu, threads)
    timing = timer.timing()
    if timing is None:
        return {"ms": None, "note": timer.note}
    return {"ms": timing.median_ms, "timing": timing.as_dict()}


def fmt(ms) -> str:
    return "-" if ms is None else f"{ms:.2f}"


def print_table(rows: dict, settings: dict) -> None:
    print(f"\nBaseline latency, median ms ({settings['target_name']}, {settings['size']}, "
          f"MetaSchedule {settings['trials_per_kernel']} trials/kernel)")
    head = f"{'model':<14}{'TVM default':>13}{'TVM tuned':>11}{'PyTorch':>10}{'ORT':>10}{'tuned/PyTorch':>15}"
    print(head + "\n" + "-" * len(head))
    for name, row in rows.items():
        tuned, ref = row.get("tvm_tuned", {}).get("ms"), row.get("torch", {}).get("ms")
        ratio = f"{ref / tuned:.2f}x" if tuned and ref else "-"
        print(f"{name:<14}{fmt(row.get('tvm_default', {}).get('ms')):>13}{fmt(tuned):>11}{fmt(ref):>10}"
              f"{fmt(row.get('onnxruntime', {}).get('ms')):>10}{ratio:>15}")


def plot(rows: dict, settings: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rows)
    cols = [("tvm_default", "TVM default"), ("tvm_tuned", "TVM tuned"), ("torch", "PyTorch"), ("onnxruntime", "ORT")]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names)), 4))
    width = 0.2
    for i, (key, label) in enumerate(cols):
        vals = [rows[n].get(key, {}).get("ms") or np.nan for n in names]
        ax.bar(np.arange(len(names)) + (i - 1.5) * width, vals, width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel("median latency (ms, log)")
    ax.set_title(f"Baseline, {settings['target_name']} ({settings['size']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parser(prog: str = "benchmarks/baseline.py") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="llvm", help="llvm (this CPU), cuda, cuda:sm_80, or a JSON target")
    ap.add_argument("--models", nargs="*", default=ORDER, help="zoo models (default: all)")
    ap.add_argument("--size", default="full", choices=models.SIZES)
    ap.add_argument("--trials-per-kernel", type=int, default=16, help="MetaSchedule budget per distinct kernel")
    ap.add_argument("--db-dir", default=None, help="shared tuning database (default logs/tuning/<target>)")
    ap.add_argument("--out", default=None, help="JSON output (default logs/baseline_<target>_<size>.json)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for PyTorch and ORT")
    ap.add_argument("--skip-default", action="store_true", help="skip the untuned TVM build")
    ap.add_argument("--force", action="store_true",
                    help="re-measure the given models even if the JSON has them (tuning resumes from the database)")
    ap.add_argument("--work-dir", default="logs", help="where JSON, plots and the tuning database go")
    return ap


def main(argv: list[str] | None = None, prog: str = "benchmarks/baseline.py") -> dict:
    """Run the baseline benchmark with command-line arguments `argv`; returns the table's rows."""
    args = parser(prog).parse_args(argv)
    work = Path(args.work_dir)

    target = measure.parse_target(args.target)
    target_name = target.kind.name
    gpu = measure.is_gpu(target)
    db_dir = Path(args.db_dir or work / "tuning" / target_name)
    out = Path(args.out or work / f"baseline_{target_name}_{args.size}.json")
    scratch = work / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    settings = {"target": str(target), "target_name": target_name, "size": args.size,
                "trials_per_kernel": args.trials_per_kernel, "threads": args.threads,
                "machine": f"{platform.machine()} {os.cpu_count()} cores", "torch": torch.__version__,
                "command": f"{prog} " + " ".join(argv if argv is not None else sys.argv[1:])}
    saved = json.loads(out.read_text()) if out.exists() else {}
    same = {k: saved.get("settings", {}).get(k) for k in ("target", "size", "trials_per_kernel")} == \
        {k: settings[k] for k in ("target", "size", "trials_per_kernel")}
    rows = saved.get("models", {}) if same else {}

    for name in args.models:
        if name in rows and not args.force:
            print(f"[{name}] already measured with these settings; skipping (use --force to redo)")
            continue
        t0 = time.perf_counter()
        model = models.load(name, args.size)
        reference = model.reference_outputs()
        row: dict = {}
        if not args.skip_default:
            print(f"[{name}] TVM default build ...", flush=True)
            row["tvm_default"] = time_tvm(model.mod, target, model.inputs, reference)
        print(f"[{name}] tuning kernels ({args.trials_per_kernel} trials each, shared db {db_dir}) ...", flush=True)
        database, report = tune_model(model.mod, target, db_dir, trials_per_kernel=args.trials_per_kernel)
        row["tuning"] = {"kernels": report.tasks, "tuned_now": len(report.tuned), "already_tuned": len(report.skipped),
                         "trials": report.trials, "seconds": round(report.seconds, 1)}
        row["tvm_tuned"] = time_tvm(model.mod, target, model.inputs, reference, database=database)
        print(f"[{name}] PyTorch and ONNX Runtime ...", flush=True)
        row["torch"] = time_torch(model, "cuda" if gpu else "cpu", args.threads)
        row["onnxruntime"] = time_onnxruntime(model, scratch, gpu, args.threads)
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows[name] = row
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"settings": settings, "date": datetime.now(timezone.utc).isoformat(),
                                   "models": rows}, indent=1))
        print_table({name: row}, settings)
    print_table(rows, settings)
    plot(rows, settings, out.with_suffix(".png"))
    print(f"\nwrote {out} and {out.with_suffix('.png')}")
    return rows



if __name__ == "__main__":
    main()
