"""TopHub's pre-tuned AutoTVM logs as a workload suite: each distinct kernel shape becomes a TIR task.

TopHub (github.com/tlc-pack/tophub, folder `tophub/`) holds JSON-lines logs AutoTVM tuned on real GPUs and CPUs;
TVM used to download them into ~/.tvm/tophub. AutoTVM is gone from TVM 0.27, so the logs' schedules cannot be
replayed, but their workloads (the convolution and matmul shapes of common networks) and recorded latencies are
a ready-made benchmark: every distinct workload is rebuilt from topi as a PrimFunc, and the recorded latencies
per device model stay attached for comparison.
"""
from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
import tvm_ffi
from tvm import te, topi

from ..errors import TvmRlError

log = logging.getLogger(__name__)

ENV_VAR = "TVM_RL_TOPHUB_DIR"

# AutoTVM task name -> op kind. Winograd keeps its own kind so it can be reported apart from direct conv2d.
OP_KINDS: dict[str, str] = {
    "conv2d_nchw.cuda": "conv2d",
    "conv2d_nchw_winograd.cuda": "conv2d_winograd",
    "depthwise_conv2d_nchw.cuda": "depthwise_conv2d",
    "batch_matmul.cuda": "batch_matmul",
    "conv2d_transpose_nchw.cuda": "conv2d_transpose",
    "conv1d_transpose_nchw.cuda": "conv1d_transpose",
    "conv2d_NCHWc.x86": "conv2d_x86",
}
KNOWN_OPS: tuple[str, ...] = tuple(sorted(set(OP_KINDS.values())))

# Argument layout per op kind: "T<rank>" a tensor, "L<n>" a list of n ints, "s" a string.
_SIGNATURES: dict[str, tuple[str, ...]] = {
    "conv2d": ("T4", "T4", "L2", "L4", "L2", "s"),
    "conv2d_winograd": ("T4", "T4", "L2", "L4", "L2", "s"),
    "depthwise_conv2d": ("T4", "T4", "L2", "L4", "L2", "s"),
    "conv2d_x86": ("T4", "T4", "L2", "L4", "L2", "s", "s", "s"),
    "batch_matmul": ("T3", "T3"),
    "conv2d_transpose": ("T4", "T4", "L2", "L4", "s", "L2"),
    "conv1d_transpose": ("T3", "T3", "L1", "L1", "s", "L1"),
}

_WHERE_FROM = (
    "TopHub logs are AutoTVM's pre-tuned JSON-lines files (cuda_v0.10.log, llvm_v0.04.log, ...) from the "
    "tophub/ folder of https://github.com/tlc-pack/tophub; TVM used to download them into ~/.tvm/tophub. "
    f"Point tvm-rl at a folder holding them with the `directory` argument or the {ENV_VAR} environment variable."
)


def tophub_dir(path: str | Path | None = None) -> Path:
    """The folder of TopHub logs: `path`, else $TVM_RL_TOPHUB_DIR, else TVM's old cache ~/.tvm/tophub."""
    if path is not None:
        where, how = Path(path).expanduser(), "given"
    elif os.environ.get(ENV_VAR):
        where, how = Path(os.environ[ENV_VAR]).expanduser(), f"from {ENV_VAR}"
    else:
        where, how = Path.home() / ".tvm" / "tophub", "TVM's default cache"
    if not where.is_dir():
        raise TvmRlError(f"TopHub folder {where} ({how}) does not exist. {_WHERE_FROM}")
    if not any(where.glob("*.log")):
        raise TvmRlError(f"TopHub folder {where} ({how}) holds no *.log files. {_WHERE_FROM}")
    return where


@dataclass(frozen=True)
class TophubRecord:
    """One tuning record of a TopHub log; `args` are normalized (tensors as ("TENSOR", shape, dtype))."""

    target: str
    device: str
    task_name: str
    op: str  # an op kind of KNOWN_OPS, or the raw task name when tvm-rl does not know it
    args: tuple
    latency: float | None  # best measured seconds; None when the measurement failed
    source: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


@dataclass(frozen=True)
class ParsedLog:
    """A log's records, and the (line, reason) of each malformed line skipped with strict=False."""

    path: Path
    records: tuple[TophubRecord, ...]
    skipped: tuple[tuple[int, str], ...] = ()


def device_model(target: str) -> str:
    """The device a target string was tuned on: its -model (GPUs), else its -mcpu (CPUs), else its kind."""
    words = target.split()
    for flag in ("-model=", "-mcpu="):
        for word in words:
            if word.startswith(flag):
                return word[len(flag):]
    return words[0] if words else "unknown"


def _to_tuple(value: Any) -> Any:
    return tuple(_to_tuple(v) for v in value) if isinstance(value, list) else value


def _is_tensor(value: Any) -> bool:
    return isinstance(value, list) and len(value) >= 3 and value[0] == "TENSOR"


def _normalize_args(op: str, args: list) -> tuple:
    """Tensors as ("TENSOR", shape, dtype), lists as tuples; checks the layout of known op kinds."""
    out, extras = [], []
    for arg in args:
        if _is_tensor(arg):
            if not (isinstance(arg[1], list) and all(isinstance(d, int) for d in arg[1]) and isinstance(arg[2], str)):
                raise ValueError(f"bad tensor entry {arg!r}")
            out.append(("TENSOR", tuple(arg[1]), arg[2]))
            extras.extend(arg[3:])
        else:
            out.append(_to_tuple(arg))
    # One v100 conv2d_transpose record (older AutoTVM) stores output_padding inside the kernel's tensor entry.
    if op == "conv2d_transpose" and len(out) == 5:
        out.append(_to_tuple(extras.pop()) if extras else (0, 0))
    if op not in _SIGNATURES:
        return tuple(out)
    if extras:
        raise ValueError(f"unexpected extra fields {extras!r} in a tensor entry")
    want = _SIGNATURES[op]
    if len(out) != len(want):
        raise ValueError(f"{op} wants {len(want)} arguments, the record has {len(out)}")
    for i, (arg, kind) in enumerate(zip(out, want)):
        if kind[0] == "T":
            ok = isinstance(arg, tuple) and arg[:1] == ("TENSOR",) and len(arg[1]) == int(kind[1:])
        elif kind[0] == "L":
            ok = isinstance(arg, tuple) and len(arg) == int(kind[1:]) and all(isinstance(v, int) for v in arg)
        else:
            ok = isinstance(arg, str)
        if not ok:
            raise ValueError(f"argument {i} of {op} should be {kind}, got {arg!r}")
    return tuple(out)


def parse_record(line: str, source: Path, lineno: int) -> TophubRecord:
    """One JSON line as a TophubRecord; ValueError (or KeyError/TypeError) if it is not a tuning record."""
    record = json.loads(line)
    target, task_name, args = record["input"][0], record["input"][1], record["input"][2]
    if not (isinstance(target, str) and isinstance(task_name, str) and isinstance(args, list)):
        raise ValueError("`input` should be [target, task name, args, kwargs]")
    costs, error_no = record["result"][0], record["result"][1]
    op = OP_KINDS.get(task_name, task_name)
    latency = float(min(costs)) if error_no == 0 and costs else None
    return TophubRecord(target, device_model(target), task_name, op, _normalize_args(op, args), latency,
                        source, lineno)


def parse_log(path: str | Path, strict: bool = True) -> ParsedLog:
    """The records of one log. A malformed line raises TvmRlError naming file and line, or with strict=False
    is skipped and listed in `skipped`."""
    path = Path(path)
    records, skipped = [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                records.append(parse_record(line, path, lineno))
            except (ValueError, KeyError, IndexError, TypeError) as err:
                if strict:
                    raise TvmRlError(f"{path}:{lineno}: not a TopHub tuning record ({type(err).__name__}: {err}); "
                                     "fix or delete the line, or load with strict=False to skip it") from err
                skipped.append((lineno, f"{type(err).__name__}: {err}"))
    if skipped:
        log.warning("%s: skipped %d malformed line(s), first at line %d", path, len(skipped), skipped[0][0])
    return ParsedLog(path, tuple(records), tuple(skipped))


def load_records(directory: str | Path | None = None, strict: bool = True) -> list[TophubRecord]:
    """Every record of every *.log in the TopHub folder (see tophub_dir), files in name order."""
    folder = tophub_dir(directory)
    return [r for path in sorted(folder.glob("*.log")) for r in parse_log(path, strict).records]


def _dims(args: tuple, i: int) -> tuple[int, ...]:
    return args[i][1]


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    return (size + pad - dilation * (kernel - 1) - 1) // stride + 1


@dataclass
class TophubTask:
    """A distinct TopHub workload: op kind, normalized args, and the best latency recorded per device model.

    `mod()` rebuilds it from topi as a one-PrimFunc IRModule ("main") for MetaSchedule. conv2d_winograd is built
    as the plain NCHW conv2d of the same shape (MetaSchedule picks its own schedule, Winograd or not); it keeps
    its op kind so it can be reported apart. conv2d_x86 (AutoTVM's NCHWc template) records NCHW layout args and
    is built as the NCHW conv2d too.
    """

    op: str
    args: tuple
    recorded: dict[str, float] = field(default_factory=dict)
    origin: str = ""  # file:line of the first record with this workload, for error messages
    name: str = field(init=False)
    flops: int = field(init=False)

    def __post_init__(self) -> None:
        if self.op not in KNOWN_OPS:
            raise self._error(f"op kind {self.op!r} cannot be built (known: {', '.join(KNOWN_OPS)})")
        self.name = self._make_name()
        self.flops = self._count_flops()

    def _error(self, why: str) -> TvmRlError:
        return TvmRlError(f"TopHub record {self.origin or '(no source)'} {self.op} {self.args!r}: {why}")

    # --- conv2d-like shapes (conv2d, conv2d_winograd, conv2d_x86, depthwise_conv2d) ---
    def _conv2d_shape(self) -> dict[str, Any]:
        (n, c, h, w), (o, ck, kh, kw) = _dims(self.args, 0), _dims(self.args, 1)
        strides, pad, dil = self.args[2], self.args[3], self.args[4]
        if self.op == "depthwise_conv2d":
            # depthwise kernels are (C, multiplier, KH, KW)
            if o != c:
                raise self._error(f"depthwise kernel has {o} channels, data has {c}")
            groups, out_c = c, c * ck
        else:
            if ck <= 0 or c % ck:
                raise self._error(f"data channels {c} are not a multiple of kernel channels {ck}")
            groups, out_c = c // ck, o
            if o % groups:
                raise self._error(f"{o} output channels do not split into {groups} groups")
        out_h = _conv_out(h, kh, strides[0], pad[0] + pad[2], dil[0])
        out_w = _conv_out(w, kw, strides[1], pad[1] + pad[3], dil[1])
        if out_h <= 0 or out_w <= 0:
            raise self._error("empty output")
        return dict(n=n, c=c, h=h, w=w, o=out_c, kh=kh, kw=kw, groups=groups, out_h=out_h, out_w=out_w)

    def _out_dtype(self) -> str | None:
        """The recorded out_dtype (batch_matmul records have none: it is the inputs')."""
        if self.op == "batch_matmul":
            return None
        return self.args[4] if self.op.endswith("transpose") else self.args[-1]

    def _make_name(self) -> str:
        a = self.args

        def fmt(values: Iterable[int]) -> str:
            values = tuple(values)
            return str(values[0]) if len(set(values)) == 1 else "x".join(map(str, values))

        dtypes = {a[0][2], a[1][2], self._out_dtype() or a[0][2]}
        suffix = "" if dtypes == {"float32"} else "_" + "_".join(sorted(dtypes))
        if self.op == "batch_matmul":
            (b, m, k), (_, n, _) = _dims(a, 0), _dims(a, 1)
            return f"batch_matmul_b{b}_m{m}_n{n}_k{k}{suffix}"
        if self.op == "conv1d_transpose":
            (n, c, w), (_, o, k) = _dims(a, 0), _dims(a, 1)
            return (f"conv1d_transpose_n{n}_c{c}_w{w}_o{o}_k{k}_s{a[2][0]}_p{a[3][0]}_op{a[5][0]}{suffix}")
        if self.op == "conv2d_transpose":
            (n, c, h, w), (_, o, kh, kw) = _dims(a, 0), _dims(a, 1)
            return (f"conv2d_transpose_n{n}_c{c}_h{h}_w{w}_o{o}_k{fmt((kh, kw))}_s{fmt(a[2])}_p{fmt(a[3])}"
                    f"_op{fmt(a[5])}{suffix}")
        s = self._conv2d_shape()
        name = f"{self.op}_n{s['n']}_c{s['c']}_h{s['h']}_w{s['w']}_o{s['o']}_k{fmt((s['kh'], s['kw']))}"
        name += f"_s{fmt(a[2])}_p{fmt(a[3])}"
        if set(a[4]) != {1}:
            name += f"_d{fmt(a[4])}"
        if s["groups"] > 1 and self.op != "depthwise_conv2d":
            name += f"_g{s['groups']}"
        if self.op == "conv2d_x86" and (a[5], a[6]) != ("NCHW", "NCHW"):
            name += f"_{a[5]}_{a[6]}"
        return name + suffix

    def _count_flops(self) -> int:
        """Multiply-adds x2. Convolutions count every tap, padding included (the usual convention); transposed
        convolutions count every input pixel against every kernel tap, including taps cropped by padding."""
        a = self.args
        if self.op == "batch_matmul":
            (b, m, k), (_, n, _) = _dims(a, 0), _dims(a, 1)
            return 2 * b * m * n * k
        if self.op == "conv1d_transpose":
            (n, c, w), (_, o, k) = _dims(a, 0), _dims(a, 1)
            return 2 * n * c * w * o * k
        if self.op == "conv2d_transpose":
            (n, c, h, w), (_, o, kh, kw) = _dims(a, 0), _dims(a, 1)
            return 2 * n * c * h * w * o * kh * kw
        s = self._conv2d_shape()
        return 2 * s["n"] * s["o"] * s["out_h"] * s["out_w"] * (s["c"] // s["groups"]) * s["kh"] * s["kw"]

    def prim_func(self) -> tvm.tirx.PrimFunc:
        """The workload as a PrimFunc computed by topi (unscheduled TIR, the input MetaSchedule expects)."""
        a = self.args
        x = te.placeholder(_dims(a, 0), dtype=a[0][2], name="data")
        y = te.placeholder(_dims(a, 1), dtype=a[1][2], name="kernel")
        if self.op == "batch_matmul":
            # AutoTVM's batch_matmul takes the second operand as (batch, N, K): topi's transpose_b=True default.
            out = topi.nn.batch_matmul(x, y, transpose_b=True)
        elif self.op == "conv1d_transpose":
            out = topi.nn.conv1d_transpose_ncw(x, y, a[2], a[3], a[4], a[5])
        elif self.op == "conv2d_transpose":
            out = topi.nn.conv2d_transpose_nchw(x, y, a[2], a[3], a[4], a[5])
        elif self.op == "depthwise_conv2d":
            self._conv2d_shape()
            out = topi.nn.depthwise_conv2d_nchw(x, y, a[2], a[3], a[4], a[5])
        else:
            if self.op == "conv2d_x86" and (a[5], a[6]) != ("NCHW", "NCHW"):
                raise self._error(f"layouts {a[5]}/{a[6]} are not NCHW; only NCHW conv2d_NCHWc records are built")
            groups = self._conv2d_shape()["groups"]
            if groups == 1:
                out = topi.nn.conv2d_nchw(x, y, a[2], a[3], a[4], self._out_dtype())
            else:
                out = topi.nn.group_conv2d_nchw(x, y, a[2], a[3], a[4], groups, self._out_dtype())
        try:
            return te.create_prim_func([x, y, out]).with_attr("global_symbol", "main")
        except Exception as err:  # topi or TE rejecting the shapes: say which record
            raise self._error(f"topi could not build it ({err})") from err

    def mod(self) -> tvm.IRModule:
        """An IRModule with the PrimFunc as "main", for MetaSchedule's tune_tir or a TuneContext."""
        return tvm.IRModule({"main": self.prim_func()})

    def workload_hash(self) -> int:
        """Structural hash of `mod()`, as tune.tasks keys MetaSchedule database workloads."""
        return tvm_ffi.structural_hash(self.mod())


def tasks_from_records(records: Iterable[TophubRecord]) -> list[TophubTask]:
    """Distinct (op kind, args) workloads of `records` in sorted order, keeping the best latency per device.
    Records of unknown task names are left out (logged once)."""
    best: dict[tuple[str, tuple], dict[str, float]] = {}
    origin: dict[tuple[str, tuple], str] = {}
    unknown: Counter = Counter()
    for r in records:
        if r.op not in KNOWN_OPS:
            unknown[r.task_name] += 1
            continue
        key = (r.op, r.args)
        per_device = best.setdefault(key, {})
        origin.setdefault(key, r.where)
        if r.latency is not None and r.latency < per_device.get(r.device, float("inf")):
            per_device[r.device] = r.latency
    if unknown:
        log.warning("TopHub: left out records of task names tvm-rl cannot build: %s", dict(unknown))
    # Args of one op kind share a checked layout (_SIGNATURES), so tuples compare field by field.
    keys = sorted(best)
    return [TophubTask(op, args, dict(sorted(best[(op, args)].items())), origin[(op, args)]) for op, args in keys]


def load_tasks(directory: str | Path | None = None, ops: Iterable[str] | None = None, max_tasks: int | None = None,
               shape_filter: Callable[[TophubTask], bool] | None = None, strict: bool = True) -> list[TophubTask]:
    """Distinct TopHub workloads, sorted by op kind then args: those of kinds `ops` (all known kinds when None)
    for which `shape_filter(task)` holds, the first `max_tasks` of them."""
    if ops is not None:
        ops = set(ops)
        unknown = ops - set(KNOWN_OPS)
        if unknown:
            raise TvmRlError(f"unknown TopHub op kind(s) {sorted(unknown)}; known: {', '.join(KNOWN_OPS)}")
    records = [r for r in load_records(directory, strict) if ops is None or r.op in ops]
    tasks = tasks_from_records(records)
    if shape_filter is not None:
        tasks = [t for t in tasks if shape_filter(t)]
    return tasks if max_tasks is None else tasks[:max_tasks]


def tasks_by_op(tasks: Iterable[TophubTask]) -> dict[str, int]:
    """How many tasks of each op kind, in op kind order."""
    return dict(sorted(Counter(t.op for t in tasks).items()))


__all__ = [
    "ENV_VAR", "KNOWN_OPS", "OP_KINDS", "ParsedLog", "TophubRecord", "TophubTask", "device_model", "load_records",
    "load_tasks", "parse_log", "parse_record", "tasks_by_op", "tasks_from_records", "tophub_dir",
]
