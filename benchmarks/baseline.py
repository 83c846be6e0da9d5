"""Baseline benchmark: TVM default, TVM + MetaSchedule-tuned kernels, PyTorch eager and ONNX Runtime on every
zoo model. `python benchmarks/baseline.py --help` for options; the logic lives in tvm_rl/bench.py."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tvm_rl.bench import main  # noqa: E402

if __name__ == "__main__":
    main()
