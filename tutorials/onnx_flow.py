"""# Tutorial (c): your ONNX model, optimized end to end

What a user does with a model of their own: one command takes an `.onnx` file through the graph pass
(`RLRewritePass`), kernel tuning (MetaSchedule's evolutionary search, the default) into one database, the
build, a check of the outputs against the ONNX model run by ONNX Runtime's reference, timing, and the export of
a library that runs without tvm-rl.

    tvm-rl optimize --onnx model.onnx --trials 16 --work-dir logs/mymodel --export logs/mymodel/model.so

Here the "user's model" is a PyTorch network exported to ONNX first (any exporter's file works the same way;
symbolic input dimensions need `--shape NAME=D1,D2,...`). Everything lands in `--work-dir`: the tuning database
(rerun the command and tuning resumes), `optimize_<model>.json`, and `tvm-rl report`'s summary.

- **Quick** (`--quick`, ~2 min, run in CI): the demo's MobileNet-V2 block (three convolutions, three batch
  norms) at its tiny size, 2 trials per kernel. (Tiny SqueezeNet has 23 kernels: with MetaSchedule's
  evolutionary search, the default, that is 7 minutes on two cores even at 2 trials each.)
- **Full** (default, ~15 min): SqueezeNet 1.1 at 224x224, 16 trials per kernel.
"""
import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import torch
import tvm
from tvm import relax

from tvm_rl import demo, models

ap = argparse.ArgumentParser(description="Tutorial (c): your ONNX model, optimized end to end")
ap.add_argument("--quick", action="store_true", help="the demo's small block, 2 trials per kernel (~2 min)")
ap.add_argument("--out", default="logs/tutorial_onnx", help="the work dir: database, report, library")
args = ap.parse_args()
work = Path(args.out)
work.mkdir(parents=True, exist_ok=True)

# 1. A model of "yours", as an ONNX file.
torch.manual_seed(0)
if args.quick:
    block = demo.demo_model("tiny")
    net, example, trials, stem = block.torch_module, (torch.from_numpy(block.inputs[0]),), 2, "mbconv"
else:
    (net, example), trials, stem = models.spec("squeezenet1_1").build("full"), 16, "squeezenet"
onnx_path = models.export_onnx(net, example, work / f"{stem}.onnx")
print(f"exported {onnx_path} (input {tuple(example[0].shape)})")

# 2. The one command (here through the same entry point the `tvm-rl` console script calls).
command = [sys.executable, "-m", "tvm_rl.cli", "optimize", "--onnx", str(onnx_path), "--trials", str(trials),
           "--work-dir", str(work), "--export", str(work / f"{stem}.so")]
print("$ tvm-rl " + " ".join(command[3:]))
run = subprocess.run(command, capture_output=True, text=True)
print(run.stdout.strip().splitlines()[-2])  # the report's summary line
print(run.stdout.strip().splitlines()[-1])
if run.returncode:
    sys.exit(run.stderr)

# 3. The exported library on its own: TVM's runtime only, checked against ONNX Runtime.
lib = tvm.runtime.load_module(str(work / f"{stem}.so"))
vm = relax.VirtualMachine(lib, tvm.cpu())
x = np.random.default_rng(1).standard_normal(example[0].shape).astype("float32")
ours = vm["main"](tvm.runtime.tensor(x)).numpy()
session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
theirs = session.run(None, {session.get_inputs()[0].name: x})[0]
print(f"exported library vs ONNX Runtime on a fresh input: max abs difference {np.abs(ours - theirs).max():.2e}")

# 4. What the work dir now holds.
report = subprocess.run([sys.executable, "-m", "tvm_rl.cli", "report", "--work-dir", str(work)],
                        capture_output=True, text=True, check=True)
print(report.stdout.split("## Tuning databases")[0].strip())
print(f"figure: {work / 'report_speedups.png'}")
