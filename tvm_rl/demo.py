"""`tvm-rl demo` (`make demo`): the main job, `tvm_rl.optimize` (graph rewrite pass + the default search strategy
with the shipped cost model), on a built-in full-size CNN block, beside what a user would otherwise run on the same
block:

- TVM's default pipeline (no tuning),
- MetaSchedule's evolutionary search with its own XGBoost cost model, with the same trials per kernel,
- PyTorch eager and ONNX Runtime.

The block is MobileNet-V2's inverted residual at its real size (24 -> 144 -> 24 channels at 56x56): small
enough to tune in minutes on a 2-core CPU, big enough that its kernels are the ones a full model runs.
Every build's outputs are checked against PyTorch's; the final latencies are timed in interleaved rounds so
that load from other processes hits every arm alike. Tuning resumes from the arms' databases after an
interruption. Writes `<work-dir>/demo.json` and `<work-dir>/demo.png`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from . import measure, models, paths
from .database import TuningDatabase
from .graph import defaults

# (channels, expansion, spatial size): "full" is MobileNet-V2's second stage; "tiny" keeps tests fast.
SIZES = {"full": (24, 6, 56), "tiny": (8, 2, 14)}
DEFAULT_TRIALS = 32


class InvertedResidual(nn.Module):
    """MobileNet-V2's block: 1x1 expand + BN + ReLU6, 3x3 depthwise + BN + ReLU6, 1x1 project + BN, residual add."""

    def __init__(self, channels: int, expansion: int):
        super().__init__()
        hidden = channels * expansion
        self.body = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def demo_model(size: str = "full", seed: int = 0) -> models.Model:
    """The demo's block as a tvm-rl Model (Relax module, inputs, PyTorch reference), weights drawn from `seed`."""
    channels, expansion, hw = SIZES[size]
    torch.manual_seed(seed)
    block = InvertedResidual(channels, expansion)
    for bn in (m for m in block.modules() if isinstance(m, nn.BatchNorm2d)):
        # Trained-looking statistics: with the defaults (mean 0, var 1) folding a batch norm would be a no-op.
        nn.init.uniform_(bn.weight, 0.5, 1.5)
        nn.init.uniform_(bn.bias, -0.2, 0.2)
        assert bn.running_mean is not None and bn.running_var is not None  # track_running_stats is on
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 1.5)
    return models.from_torch(block.eval(), (torch.randn(1, channels, hw, hw),), name=f"mbconv_{size}")


def _say(step: str) -> None:
    print(f"\n== {step}", flush=True)


def _tvm_sampler(executable, target) -> tuple[Callable[[list[np.ndarray]], list[np.ndarray]], Callable]:
    runner = measure.Runner(executable, target)

    def prepare(inputs):
        args = runner.device_tensors(inputs)
        evaluator = runner.vm.time_evaluator("main", runner.device, number=1, repeat=1)
        return lambda: evaluator(*args).results[0] * 1e3

    return runner, prepare


def _wall_sampler(fn: Callable[[], object], sync: Callable[[], object] | None = None) -> Callable[[], float]:
    def sample() -> float:
        start = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        return (time.perf_counter() - start) * 1e3

    return sample


def time_rounds(samplers: dict[str, Callable[[], float]], rounds: int, block: int = 5,
                warmup: int = 2) -> dict[str, measure.Timing]:
    """Median latency of each arm over `rounds` rounds; each round runs every arm in turn, `block` timed runs
    after `warmup` untimed ones. Rounds spread load from other processes over every arm alike; blocks (rather
    than one call per arm in turn) let the previous arm's thread pool stop spinning before timing starts,
    which matters when PyTorch, ONNX Runtime and TVM share two cores."""
    samples: dict[str, list[float]] = {k: [] for k in samplers}
    for _ in range(rounds):
        for key, sample in samplers.items():
            for _ in range(warmup):
                sample()
            samples[key].extend(sample() for _ in range(block))
    return {k: measure.summarize(v) for k, v in samples.items()}


def _arm_db(path: Path) -> dict:
    folder = TuningDatabase(path)
    if folder.is_empty():
        return {"measurements": 0, "failed": 0}
    return {"measurements": folder.record_count(), "failed": folder.failure_count()}


def run(size: str = "full", trials: int = DEFAULT_TRIALS, target: str = "llvm",
        work_dir: str | Path | None = None,
        seed: int = 0, rewrite_seconds: float = defaults.TIME_BUDGET_S, rounds: int = 30, threads: int | None = None,
        fresh: bool = False, plot: bool = True, ablation: bool = True) -> dict:
    """Run the demo and return its result (also written to `work_dir/demo.json`; default work dir:
    `paths.work_dir() / "demo"`)."""
    import onnxruntime as ort

    from .flow import optimize
    from .graph.arms import DEFAULT_ARM
    from .tune import search_strategy, tune_model

    tgt = measure.parse_target(target)
    if measure.is_gpu(tgt):
        from .errors import TvmRlError

        raise TvmRlError("the demo compares against PyTorch and ONNX Runtime on the CPU; for CUDA use "
                         "`tvm-rl optimize` and benchmarks/baseline.py --target cuda")
    threads = threads or os.cpu_count() or 1
    root = Path(work_dir) if work_dir is not None else paths.work_dir() / "demo"
    work = root / f"{size}_{tgt.kind.name}_{trials}t_seed{seed}"
    if fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    saved = json.loads((work / "demo.json").read_text()) if (work / "demo.json").exists() else {}
    spent: dict[str, float] = saved.get("tuning_s", {})
    started = time.perf_counter()

    _say(f"1/5 the block: MobileNet-V2 inverted residual ({size}), imported from PyTorch into Relax")
    m = demo_model(size, seed)
    expected = m.reference_outputs()
    atol = measure.tolerance(expected)
    print(f"{m.name}: input {m.inputs[0].shape}")

    _say("2/5 TVM's default pipeline (no tuning)")
    default_exe = measure.build(m.mod, tgt)
    check = measure.compare(measure.Runner(default_exe, tgt)(m.inputs), expected, rtol=1e-3, atol=atol)
    print(f"built; outputs match PyTorch: {check.ok} (max abs err {check.max_abs_err:.2g})")

    _say(f"3/5 MetaSchedule evolutionary search, {trials} trials per kernel, on the block as imported")
    t = time.perf_counter()
    evo_db, evo_report = tune_model(m.mod, tgt, work / "evolutionary", trials_per_kernel=trials,
                                    trials_per_iter=min(8, trials), strategy="evolutionary", seed=seed,
                                    cost_model="xgb")
    spent["evolutionary"] = spent.get("evolutionary", 0.0) + (time.perf_counter() - t)
    evo_exe = measure.build(m.mod, tgt, evo_db)

    tuner = f"{search_strategy.DEFAULT} search"
    _say(f"4/5 tvm_rl.optimize: graph rewrite pass ({DEFAULT_ARM}), then {tuner} with the shipped cost model, "
         f"{trials} trials per kernel")
    result = optimize(m, tgt, work_dir=work / "tvm_rl", trials_per_kernel=trials, rewrite_seconds=rewrite_seconds,
                      seed=seed)
    rewritten = result.rewritten
    rep = result.report
    spent["tvm_rl"] = spent.get("tvm_rl", 0.0) + rep.seconds.get("graph pass", 0.0) + rep.seconds.get("tuning", 0.0)
    print(f"graph pass applied: {', '.join(rep.graph_rewrites) or 'nothing'} ({rep.graph_reason})")
    ablation_exe = None
    if ablation:
        # The same rewritten graph tuned by stock MetaSchedule: splits what the pass bought from what our tuner did.
        _say(f"4b/5 ablation: the rewritten graph, tuned by evolutionary search ({trials} trials per kernel)")
        t = time.perf_counter()
        abl_db, abl_report = tune_model(rewritten, tgt, work / "rl_pass_evolutionary", trials_per_kernel=trials,
                                        trials_per_iter=min(8, trials), strategy="evolutionary", seed=seed,
                                        cost_model="xgb")
        spent["rl_pass_evolutionary"] = spent.get("rl_pass_evolutionary", 0.0) + (time.perf_counter() - t)
        ablation_exe = measure.build(rewritten, tgt, abl_db)

    _say(f"5/5 timing every arm in {rounds} interleaved rounds ({threads} threads for PyTorch and ONNX Runtime)")
    samplers: dict[str, Callable[[], float]] = {}
    outputs: dict[str, list[np.ndarray]] = {}
    # `result.executable` is what optimize returns to its caller (the default build, if tuning lost to it).
    builds = [("tvm_default", default_exe), ("evolutionary", evo_exe), ("rl_pass_evolutionary", ablation_exe),
              ("tvm_rl", result.executable)]
    for key, exe in [(k, e) for k, e in builds if e is not None]:
        runner, prepare = _tvm_sampler(exe, tgt)
        outputs[key] = runner(m.inputs)
        samplers[key] = prepare(m.inputs)
    torch.set_num_threads(threads)
    block, args = m.torch_module, [torch.from_numpy(x) for x in m.inputs]
    assert block is not None  # the demo's model always comes from PyTorch
    with torch.no_grad():
        outputs["pytorch"] = [block(*args).numpy()]
    samplers["pytorch"] = _wall_sampler(torch.no_grad()(lambda: block(*args)))
    onnx_path = models.export_onnx(block, args, work / f"{m.name}.onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    feed = dict(zip([i.name for i in session.get_inputs()], m.inputs))
    outputs["onnxruntime"] = session.run(None, feed)
    samplers["onnxruntime"] = _wall_sampler(lambda: session.run(None, feed))
    correct = {k: measure.compare(v, expected, rtol=1e-3, atol=atol).ok for k, v in outputs.items()}
    timings = time_rounds(samplers, rounds)

    arms = {
        "pytorch": {"label": "PyTorch eager"},
        "onnxruntime": {"label": "ONNX Runtime"},
        "tvm_default": {"label": "TVM default build"},
        "evolutionary": {"label": f"MetaSchedule evolutionary ({trials}/kernel)", "kernels": evo_report.tasks,
                         "tuning_s": round(spent["evolutionary"], 1), **_arm_db(work / "evolutionary")},
        "rl_pass_evolutionary": {"label": f"graph pass + MetaSchedule evolutionary ({trials}/kernel)",
                                 "tuning_s": round(spent.get("rl_pass_evolutionary", 0.0), 1),
                                 **_arm_db(work / "rl_pass_evolutionary")},
        "tvm_rl": {"label": f"tvm_rl.optimize (graph pass + {tuner}, {trials}/kernel)", "kernels": rep.kernels_tuned,
                   "tuning_s": round(spent["tvm_rl"], 1), **_arm_db(work / "tvm_rl" / "tuning" / tgt.kind.name),
                   "graph_rewrites": rep.graph_rewrites, "graph_policy": rep.graph_policy,
                   "kept_default_build": rep.kept_default},
    }
    if ablation_exe is None:
        del arms["rl_pass_evolutionary"]
    for key, arm in arms.items():
        arm.update(ms=timings[key].median_ms, iqr_ms=timings[key].iqr_ms, correct=correct[key])
    cpu = f"{tgt.kind.name} -mcpu={tgt.attrs.get('mcpu', 'generic')}"
    out = {"date": datetime.now(timezone.utc).isoformat(), "model": m.name, "target": cpu, "size": size,
           "trials_per_kernel": trials, "seed": seed, "threads": threads, "rounds": rounds,
           "command": f"tvm-rl demo --size {size} --trials {trials} --seed {seed}"
           + ("" if ablation else " --no-ablation"), "tuning_s": spent,
           "wall_s": round(time.perf_counter() - started, 1), "arms": arms}
    (work / "demo.json").write_text(json.dumps(out, indent=1))
    print("\n" + table(out))
    if plot:
        write_plot(out, {"evolutionary": work / "evolutionary",
                         "rl_pass_evolutionary": work / "rl_pass_evolutionary",
                         "tvm_rl": work / "tvm_rl" / "tuning" / tgt.kind.name}, work / "demo.png")
    print(f"\nwrote {work / 'demo.json'}" + (f" and {work / 'demo.png'}" if plot else ""))
    return out


def table(out: dict) -> str:
    """The demo's one table: each arm's latency, how much faster tvm-rl's result is, tuning time, measurements."""
    arms, ours = out["arms"], out["arms"]["tvm_rl"]["ms"]
    width = max(48, *(len(arm["label"]) + 2 for arm in arms.values()))
    head = f"{'arm':<{width}}{'median ms':>10}{'tvm-rl speedup':>16}{'tuning s':>10}{'measured':>10}{'correct':>9}"
    lines = [f"{out['model']} on {out['target']}, {out['threads']} threads, medians of {out['rounds']} "
             "interleaved rounds", head, "-" * len(head)]
    for arm in arms.values():
        tuning = f"{arm['tuning_s']:.0f}" if "tuning_s" in arm else "-"
        measured = str(arm["measurements"]) if "measurements" in arm else "-"
        lines.append(f"{arm['label']:<{width}}{arm['ms']:>10.3f}{arm['ms'] / ours:>15.2f}x{tuning:>10}{measured:>10}"
                     f"{'yes' if arm['correct'] else 'NO':>9}")
    lines.append("tvm-rl speedup = that arm's latency / tvm_rl.optimize's (above 1: tvm-rl is faster)")
    return "\n".join(lines)


def write_plot(out: dict, databases: dict[str, Path], path: Path) -> None:
    """Latency bars for every arm, and the two tuners' best-so-far kernel latency against measurements."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = out["arms"]
    fig, (bars, curves) = plt.subplots(1, 2, figsize=(12, 5))
    keys = list(arms)
    bars.barh(range(len(keys)), [arms[k]["ms"] for k in keys],
              color=[{"tvm_rl": "#d62", "rl_pass_evolutionary": "#e9a"}.get(k, "#69c" if "tvm" in k or "evo" in k
                      else "#999") for k in keys])
    bars.set_yticks(range(len(keys)), [arms[k]["label"] for k in keys], fontsize=8)
    bars.invert_yaxis()
    bars.set_xlabel("median latency (ms)")
    bars.set_title(f"{out['model']}, {out['target'].split()[0]}")
    for key, folder in databases.items():
        if key in arms and not TuningDatabase(folder).is_empty():
            curve = [c * 1e3 for c in _model_curve(folder)]
            curves.plot(range(1, len(curve) + 1), curve, label=arms[key]["label"])
    curves.set_yscale("log")
    curves.set_xlabel("measurements")
    curves.set_ylabel("sum of best kernel latencies so far (ms)")
    curves.set_title("tuning curves\n(the kernels of each arm's own graph)", fontsize=10)
    # Below the axes: the arms' labels are long and would cover the curves' ends.
    curves.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _model_curve(folder: Path) -> list[float]:
    """After each measurement, the sum over kernels of each one's best time so far (once all have one)."""
    db = TuningDatabase(folder)
    n_workloads, out = db.workload_count(), []
    best: dict[int, float] = {}
    for workload, secs in db.measurements():
        if secs and float(np.mean(secs)) < 1e9:  # MetaSchedule records a failed candidate with 1e10 s
            best[workload] = min(best.get(workload, np.inf), float(np.mean(secs)))
        out.append(sum(best.values()) if len(best) == n_workloads else np.nan)
    return out


def parser(prog: str = "tvm-rl demo") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="full", choices=list(SIZES), help="the block's size (tiny: a quick check)")
    ap.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help="measured trials per kernel, for both tuners")
    ap.add_argument("--target", default="llvm", help="a CPU target (default: llvm, this CPU)")
    ap.add_argument("--work-dir", default=None, help="databases, JSON and plot go under here (default "
                    f"{paths.WORK_DIR_HELP}, then demo/)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rewrite-seconds", type=float, default=defaults.TIME_BUDGET_S,
                    help=f"time budget of the graph rewrite pass (default {defaults.TIME_BUDGET_S:g}, the pass's own)")
    ap.add_argument("--rounds", type=int, default=30, help="interleaved timing rounds")
    ap.add_argument("--threads", type=int, default=None, help="threads for PyTorch and ONNX Runtime (default: all)")
    ap.add_argument("--fresh", action="store_true", help="discard this setting's earlier databases and start over")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--no-ablation", action="store_true",
                    help="skip the arm that tunes the rewritten graph with MetaSchedule's evolutionary search "
                         "and its own cost model instead of tvm-rl's tuner")
    return ap


def main(argv: list[str] | None = None, prog: str = "tvm-rl demo") -> int:
    args = parser(prog).parse_args(argv)
    run(args.size, args.trials, args.target, args.work_dir, args.seed, args.rewrite_seconds, args.rounds,
        args.threads, args.fresh, not args.no_plot, not args.no_ablation)
    return 0
