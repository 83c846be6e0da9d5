"""TopHub logs as a workload suite: parsing, dedup, selection, errors, and topi rebuilds checked against torch."""
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tvm

from tvm_rl.errors import TvmRlError
from tvm_rl.tune import tophub
from tvm_rl.tune.tophub import TophubTask

CUDA_COUNTS = {"conv2d_nchw.cuda": 600, "depthwise_conv2d_nchw.cuda": 97, "conv2d_nchw_winograd.cuda": 95,
               "batch_matmul.cuda": 18, "conv2d_transpose_nchw.cuda": 14, "conv1d_transpose_nchw.cuda": 1}
LLVM_COUNTS = {"conv2d_NCHWc.x86": 35}
RECORD = ('{"input": ["cuda -model=v100", "batch_matmul.cuda", [["TENSOR", [1, 4, 20], "float32"], '
          '["TENSOR", [1, 4, 20], "float32"]], {}], "config": {}, "result": [[3e-06, 2e-06], 0, 1.0, 0], '
          '"version": 0.2}\n')


@pytest.fixture(scope="module")
def tophub_logs() -> Path:
    # CI clones the repo to X/main next to X/shared
    path = Path(__file__).resolve().parents[3] / "shared" / "tophub"
    if not path.is_dir():
        pytest.skip(f"no TopHub logs at {path}")
    return path


@pytest.fixture(scope="module")
def tasks(tophub_logs):
    return tophub.load_tasks(tophub_logs)


def test_record_counts_per_log(tophub_logs):
    cuda = tophub.parse_log(tophub_logs / "cuda_v0.10.log")
    llvm = tophub.parse_log(tophub_logs / "llvm_v0.04.log")
    assert Counter(r.task_name for r in cuda.records) == CUDA_COUNTS
    assert Counter(r.task_name for r in llvm.records) == LLVM_COUNTS
    assert not cuda.skipped and not llvm.skipped
    assert {r.device for r in cuda.records} == {"titanx", "1080ti", "v100", "tx2", "jetson-nano"}
    assert {r.device for r in llvm.records} == {"skylake-avx512"}
    assert all(r.op in tophub.KNOWN_OPS and r.latency > 0 for r in cuda.records + llvm.records)
    first = cuda.records[0]
    assert (first.line, first.op, first.device) == (1, "conv2d", "titanx")
    assert first.args[0] == ("TENSOR", (1, 2048, 8, 8), "float32")
    assert first.latency == pytest.approx(5.69732536806342e-05)
    assert llvm.records[0].line == 3  # after the two comment lines


def test_transpose_output_padding_in_kernel_entry(tophub_logs):
    # one v100 record keeps output_padding inside the kernel's tensor entry and has 5 args
    records = tophub.parse_log(tophub_logs / "cuda_v0.10.log").records
    transposes = [r for r in records if r.op == "conv2d_transpose"]
    assert all(len(r.args) == 6 and len(r.args[1]) == 3 for r in transposes)
    odd = [r for r in transposes if r.args[0][1] == (1, 512, 1, 128)]
    assert odd and odd[0].args[5] == (0, 0)


def test_dedup_is_deterministic(tophub_logs, tasks):
    records = tophub.load_records(tophub_logs)
    assert len(records) == 860
    assert len(tasks) < len(records)
    again = tophub.load_tasks(tophub_logs)
    assert [(t.op, t.args, t.recorded) for t in again] == [(t.op, t.args, t.recorded) for t in tasks]
    assert [(t.op, t.args) for t in tasks] == sorted((t.op, t.args) for t in tasks)
    assert len({t.name for t in tasks}) == len(tasks)
    assert len({(t.op, t.args) for t in tasks}) == len(tasks)
    by_op = tophub.tasks_by_op(tasks)
    assert set(by_op) == set(tophub.KNOWN_OPS) and sum(by_op.values()) == len(tasks)
    assert all(by_op[op] <= n for op, n in [("conv2d", 600), ("depthwise_conv2d", 97), ("conv2d_x86", 35)])
    # recorded latency per device model is the best of that model's records
    best = {}
    for r in records:
        key = (r.op, r.args, r.device)
        best[key] = min(best.get(key, 1.0), r.latency)
    assert all(t.recorded[d] == best[(t.op, t.args, d)] for t in tasks for d in t.recorded)
    assert any(len(t.recorded) > 1 for t in tasks)


def test_same_op_tasks_are_distinct_workloads(tasks):
    hashes = [(t.op, t.workload_hash()) for t in tasks if t.op in ("conv2d", "depthwise_conv2d")]
    assert len(set(hashes)) == len(hashes)


def test_selection(tophub_logs, tasks):
    some = tophub.load_tasks(tophub_logs, ops=["conv2d", "depthwise_conv2d"])
    assert {t.op for t in some} == {"conv2d", "depthwise_conv2d"}
    assert some == [t for t in tasks if t.op in ("conv2d", "depthwise_conv2d")]
    assert tophub.load_tasks(tophub_logs, ops=["batch_matmul"], max_tasks=3) == \
        [t for t in tasks if t.op == "batch_matmul"][:3]
    small = tophub.load_tasks(tophub_logs, shape_filter=lambda t: t.flops < 10**7)
    assert small and all(t.flops < 10**7 for t in small)
    assert small == [t for t in tasks if t.flops < 10**7]
    with pytest.raises(TvmRlError, match="conv3d"):
        tophub.load_tasks(tophub_logs, ops=["conv3d"])


def test_missing_directory_explains(tmp_path, monkeypatch):
    monkeypatch.delenv(tophub.ENV_VAR, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(TvmRlError, match="tlc-pack/tophub") as err:
        tophub.tophub_dir()
    assert tophub.ENV_VAR in str(err.value) and str(tmp_path / ".tvm" / "tophub") in str(err.value)
    monkeypatch.setenv(tophub.ENV_VAR, str(tmp_path))  # exists but holds no logs
    with pytest.raises(TvmRlError, match="no \\*.log") as err:
        tophub.load_tasks()
    assert "tlc-pack/tophub" in str(err.value) and tophub.ENV_VAR in str(err.value)
    (tmp_path / "cuda_v0.10.log").write_text(RECORD)
    assert tophub.tophub_dir() == tmp_path
    assert [t.name for t in tophub.load_tasks()] == ["batch_matmul_b1_m4_n4_k20"]
    assert tophub.load_tasks()[0].recorded == {"v100": 2e-06}


def test_malformed_line(tmp_path):
    log = tmp_path / "bad.log"
    log.write_text("# comment\n" + RECORD + '{"input": ["cuda", "conv2d_nchw.cuda"]}\n' + "not json\n" + RECORD)
    with pytest.raises(TvmRlError, match=f"{log}:3"):
        tophub.parse_log(log)
    parsed = tophub.parse_log(log, strict=False)
    assert [r.line for r in parsed.records] == [2, 5]
    assert [line for line, _ in parsed.skipped] == [3, 4]
    with pytest.raises(TvmRlError, match="bad.log:3"):
        tophub.load_tasks(tmp_path)
    assert len(tophub.load_tasks(tmp_path, strict=False)) == 1


def test_unknown_task_names_are_left_out(tmp_path):
    other = RECORD.replace("batch_matmul.cuda", "dense_small_batch.cuda")
    (tmp_path / "a.log").write_text(RECORD + other)
    records = tophub.load_records(tmp_path)
    assert [r.op for r in records] == ["batch_matmul", "dense_small_batch.cuda"]
    assert [t.op for t in tophub.load_tasks(tmp_path)] == ["batch_matmul"]
    with pytest.raises(TvmRlError, match="a.log:2"):
        TophubTask(records[1].op, records[1].args, origin=records[1].where)


def test_conv2d_flops(tasks):
    task = next(t for t in tasks if t.name == "conv2d_n1_c2048_h8_w8_o192_k1_s1_p0")
    assert task.flops == 2 * 1 * 192 * 8 * 8 * 2048 * 1 * 1
    strided = next(t for t in tasks if t.op == "conv2d" and t.args[2] == (2, 2) and t.args[1][1][2] == 3)
    (n, c, h, w), (o, _, kh, kw) = strided.args[0][1], strided.args[1][1]
    out_h, out_w = (h + 2 * strided.args[3][0] - kh) // 2 + 1, (w + 2 * strided.args[3][1] - kw) // 2 + 1
    assert strided.flops == 2 * n * o * out_h * out_w * c * kh * kw


def _pad2d(x: torch.Tensor, pad) -> torch.Tensor:
    top, left, bottom, right = pad
    return F.pad(x, (left, right, top, bottom))


def reference(task: TophubTask, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The task's output computed by torch (asymmetric padding applied by hand)."""
    a, x, y = task.args, torch.from_numpy(x).double(), torch.from_numpy(y).double()
    if task.op == "batch_matmul":
        out = x @ y.transpose(1, 2)
    elif task.op == "depthwise_conv2d":
        c, m, kh, kw = y.shape
        out = F.conv2d(_pad2d(x, a[3]), y.reshape(c * m, 1, kh, kw), stride=a[2], dilation=a[4], groups=c)
    elif task.op == "conv2d_transpose":
        full = F.conv_transpose2d(x, y, stride=a[2], output_padding=a[5])
        top, left, bottom, right = a[3]
        out = full[:, :, top:full.shape[2] - bottom, left:full.shape[3] - right]
    elif task.op == "conv1d_transpose":
        out = F.conv_transpose1d(x, y, stride=a[2], padding=a[3], output_padding=a[5])
    else:
        groups = x.shape[1] // y.shape[1]
        out = F.conv2d(_pad2d(x, a[3]), y, stride=a[2], dilation=a[4], groups=groups)
    return out.numpy()


def check_against_torch(task: TophubTask) -> None:
    lib = tvm.compile(task.mod(), target=tvm.target.Target("llvm"))
    rng = np.random.default_rng(0)
    x, y = (rng.uniform(-1, 1, size=task.args[i][1]).astype("float32") for i in (0, 1))
    want = reference(task, x, y)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(want.shape, "float32"), dev)
    lib["main"](tvm.runtime.tensor(x, dev), tvm.runtime.tensor(y, dev), out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def smallest(tasks, op, where=lambda t: True) -> TophubTask:
    return min((t for t in tasks if t.op == op and where(t)), key=lambda t: t.flops)


CASES = {
    "conv2d": ("conv2d", lambda t: t.args[2] == (2, 2) and t.args[1][1][2] == 3),  # strided, padded 3x3
    "conv2d_asym_pad": ("conv2d", lambda t: len(set(t.args[3])) > 1),
    "conv2d_winograd": ("conv2d_winograd", lambda t: True),
    "conv2d_x86": ("conv2d_x86", lambda t: True),
    "depthwise_conv2d": ("depthwise_conv2d", lambda t: t.args[2] == (2, 2)),
    "batch_matmul": ("batch_matmul", lambda t: True),
    "conv2d_transpose": ("conv2d_transpose", lambda t: t.args[5] != (0, 0)),  # stride 2 with output padding
    "conv2d_transpose_cropped": ("conv2d_transpose", lambda t: t.args[3] == (0, 256, 0, 256)),
    "conv1d_transpose": ("conv1d_transpose", lambda t: True),
}


@pytest.mark.parametrize("case", CASES)
def test_builds_and_matches_torch(tasks, case):
    op, where = CASES[case]
    task = smallest(tasks, op, where)
    assert task.flops < 2 * 10**8, task.name  # keep the unscheduled CPU run short
    func = task.prim_func()
    assert isinstance(func, tvm.tirx.PrimFunc) and list(task.mod().functions)[0].name_hint == "main"
    check_against_torch(task)


def test_grouped_conv2d_matches_torch():
    # no TopHub record is grouped; data channels a multiple of kernel channels mean groups
    task = TophubTask("conv2d", (("TENSOR", (1, 8, 6, 6), "float32"), ("TENSOR", (4, 2, 3, 3), "float32"),
                                 (1, 1), (1, 1, 1, 1), (1, 1), "float32"))
    assert task.name == "conv2d_n1_c8_h6_w6_o4_k3_s1_p1_g4"
    assert task.flops == 2 * 4 * 6 * 6 * 8 * 3 * 3 // 4
    check_against_torch(task)


def test_unbuildable_record_is_named():
    task = TophubTask("conv2d_x86", (("TENSOR", (1, 8, 6, 6), "float32"), ("TENSOR", (4, 8, 3, 3), "float32"),
                                     (1, 1), (1, 1, 1, 1), (1, 1), "NCHW8c", "NCHW8c", "float32"),
                      origin="x86.log:7")
    with pytest.raises(TvmRlError, match="x86.log:7"):
        task.mod()
