"""benchmarks/kernel_times.py: a built model's time per kernel, from the VM's own calls."""
import json

from benchmarks import kernel_times


def test_every_kernel_call_is_timed_and_the_shares_add_up(tmp_path, capsys):
    out = tmp_path / "k.json"
    assert kernel_times.main(["--model", "resnet18", "--size", "tiny", "--runs", "2", "--out", str(out)]) == 0
    kernels = json.loads(out.read_text())["kernels"]
    convs = {k: v for k, v in kernels.items() if k.startswith("conv2d")}
    assert convs and all(v["ms"] > 0 and v["calls"] >= 1 for v in convs.values())
    assert sum(v["calls"] for v in convs.values()) >= 8  # tiny ResNet-18's convolutions, each called per run
    assert "ms per run in VM calls" in capsys.readouterr().out
