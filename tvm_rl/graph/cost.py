"""Graph cost: what the search and the environment minimise.

Three estimates of a Relax module's latency, from slow and true to fast and rough:
  (b) `end_to_end_ms`: build the module and time it (the harness's median);
  (a) `KernelCostCache`: the sum over the lowered kernels of calls x latency, each distinct kernel
      (structural hash of the scheduled PrimFunc + target + database) timed alone once and kept on disk
      as JSON lines, so later runs and other graphs sharing the kernel reuse it;
  (c) rooflines from FLOPs and bytes moved: `kernel_roofline_ms` over the lowered TIR kernels (TVM's
      own fusion, ~0.5 s a tiny model for lowering) and `graph_roofline_ms` over the kernels `fusion` predicts
      from the Relax bindings (TVM's FoldConstant and FuseOps replayed; milliseconds, what the environment
      scores dozens of candidates with per step).
`compare_costs` says how far (a) and (c) are from (b). Every cost function maps an IRModule to milliseconds.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.ir import Call, GenericConst, Tuple, TupleGetItem, Var

from .. import measure
from ..errors import BuildError
from . import fusion, keepalive
from .fingerprint import module_key
from .rules.ir import Graph, op_name, static_shape

CostFn = Callable[[tvm.IRModule], float]
# (before, after) -> their end-to-end medians in ms, measured side by side: what the never-slower guards use.
PairMeasure = Callable[[tvm.IRModule, tvm.IRModule], tuple[float, float]]

DEFAULT_CACHE_DIR = Path(os.environ.get("TVM_RL_KERNEL_COST_DIR",
                                        Path(__file__).resolve().parents[2] / "logs" / "kernel_cost"))

# ------------------------------------------------------------------------------------------- hardware


@dataclass(frozen=True)
class Hardware:
    """A roofline: a kernel takes max(FLOPs / peak, bytes / bandwidth) plus a fixed launch overhead."""

    peak_gflops: float
    gbps: float
    launch_us: float = 0.0
    source: str = "assumed"

    def time_ms(self, flops: float, nbytes: float, kind: str | None = None) -> float:
        """Roofline time of one kernel; `kind` (see `op_kind`) is accepted for `RooflineModel`'s sake."""
        return max(flops / (self.peak_gflops * 1e9), nbytes / (self.gbps * 1e9)) * 1e3 + self.launch_us * 1e-3

    def as_dict(self) -> dict:
        return asdict(self)


# Convolutions by layout and grouping: tuned on CPU, depthwise convs ran 1.2-3.6x faster in NHWC than the same
# shapes in NCHW, and a layout-blind proxy priced every layout change as a loss (logs/tuning/llvm_s16).
KINDS = ("conv", "conv_nhwc", "group_conv", "group_conv_nhwc", "matmul", "attention", "pool", "reduce",
         "elementwise")
# A kind without a roofline of its own borrows its family's before the all-kinds one: a conv in another layout
# runs closer to a conv than to the average (mostly element-wise) kernel.
FAMILY = {"conv_nhwc": "conv", "group_conv": "conv", "group_conv_nhwc": "group_conv"}


# Reductions by name: softmax and the norms, or sum/max/min/prod/red as a whole word ("relax.max", "lv4_sum",
# "lv88_red"), not inside one ("relax.maximum" is element-wise).
_REDUCE = re.compile(r"softmax|norm|mean|variance|(?:^|[ ._])(?:sum|max|min|prod|red)(?:$|[ ._\d])")


def op_kind(name: str) -> str:
    """The kind of a Relax operator, a lowered kernel's name ("fused_conv2d3_add1_relu1" -> "conv") or a
    kernel's TIR block names joined by spaces: kernels of one kind reach similar fractions of peak, so each
    kind may get its own roofline."""
    name = name.lower()
    if "conv" in name:  # TIR blocks say "group_conv2d_nhwc"; `call_kind` spells a Relax call's attributes so
        kind = "group_conv" if "group" in name or "depthwise" in name else "conv"
        return f"{kind}_nhwc" if "nhwc" in name else kind
    # Attention is its own kind: its tuned kernel (two batch matmuls around a softmax) ran at a fraction of a
    # tuned matmul's rate here, and priced as a matmul every transformer search preferred it, 20-45% slower.
    if "attention" in name or ("matmul" in name and "softmax" in name):
        return "attention"
    if "matmul" in name or "dense" in name:
        return "matmul"
    if "pool" in name:
        return "pool"
    if "batch_norm" in name:  # at inference a per-channel scale and shift: element-wise
        return "elementwise"
    if _REDUCE.search(name):
        return "reduce"
    return "elementwise"


def call_kind(call: Call) -> str:
    """`op_kind` of a Relax call, with a convolution's grouping and data layout read from its attributes."""
    name = op_name(call) or ""
    if name.startswith("relax.nn.conv"):
        groups = int(getattr(call.attrs, "groups", 1))
        name += (" group" if groups > 1 else "") + " " + str(call.attrs.data_layout).lower()
    return op_kind(name)


@dataclass(frozen=True)
class RooflineModel:
    """One roofline per kernel kind (`KINDS`), `default` for the kinds without one."""

    default: Hardware
    per_kind: tuple[tuple[str, Hardware], ...] = ()

    def time_ms(self, flops: float, nbytes: float, kind: str | None = None) -> float:
        own = dict(self.per_kind)
        while kind not in own and kind in FAMILY:
            kind = FAMILY[kind]
        return own.get(kind, self.default).time_ms(flops, nbytes)

    def as_dict(self) -> dict:
        return {"default": self.default.as_dict(), **{k: h.as_dict() for k, h in self.per_kind}}


def default_hardware(target: tvm.target.Target | str) -> Hardware:
    """Nominal figures, stated rather than measured: calibrate them (`calibrate`) before trusting a proxy.

    LLVM: 2 Zen 3 cores, AVX2 FMA at ~3 GHz (16 fp32 FLOP/cycle/core, ~100 GFLOP/s) and ~20 GB/s of DRAM
    bandwidth. Untuned TVM kernels on CPU are naive scalar loops, far below both, so the nominal CPU
    roofline underestimates untuned builds by orders of magnitude. CUDA: an H100 SXM, 67 TFLOP/s fp32
    without tensor cores, 3350 GB/s HBM3, ~3 us per kernel launch.
    """
    target = measure.parse_target(target)
    if measure.is_gpu(target):
        return Hardware(67_000.0, 3350.0, 3.0, "assumed: H100 SXM fp32 (no tensor cores)")
    return Hardware(100.0, 20.0, 1.0, "assumed: 2 Zen 3 cores, AVX2 FMA")


def calibrate(flops: Sequence[float], nbytes: Sequence[float], measured_ms: Sequence[float],
              source: str = "calibrated") -> Hardware:
    """The roofline (peak, bandwidth, launch overhead) that best predicts measured kernel latencies.

    Least mean |log(predicted / measured)| over a log grid: a few kernels suffice, and the log error keeps
    one slow kernel from deciding the fit for all the fast ones.
    """
    f, b, t = (np.asarray(v, dtype=np.float64) for v in (flops, nbytes, measured_ms))
    if not (len(f) == len(b) == len(t)) or len(t) == 0:
        raise ValueError(f"calibrate needs equal, non-empty lists; got {len(f)}, {len(b)}, {len(t)}")
    if np.any(t <= 0):
        raise ValueError("calibrate needs positive measured latencies")
    best = (math.inf, None)
    peaks, bws = np.logspace(-1, 5, 61), np.logspace(-1, 4, 51)  # GFLOP/s, GB/s
    compute = f[None, :] / (peaks[:, None] * 1e9) * 1e3  # (peaks, kernels) in ms
    memory = b[None, :] / (bws[:, None] * 1e9) * 1e3
    for launch_us in (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0):
        pred = np.maximum(compute[:, None, :], memory[None, :, :]) + launch_us * 1e-3
        err = np.abs(np.log(np.maximum(pred, 1e-12) / t)).mean(axis=-1)
        i, j = np.unravel_index(np.argmin(err), err.shape)
        if err[i, j] < best[0]:
            best = (float(err[i, j]), Hardware(float(peaks[i]), float(bws[j]), launch_us, source))
    return best[1]


def calibrate_by_kind(kinds: Sequence[str], flops: Sequence[float], nbytes: Sequence[float],
                      measured_ms: Sequence[float], min_kernels: int = 3) -> RooflineModel:
    """A roofline per kernel kind with at least `min_kernels` measurements, one fitted on all for the rest."""
    rows = list(zip(kinds, flops, nbytes, measured_ms))
    default = calibrate(*zip(*[r[1:] for r in rows]), source="calibrated on all kinds")
    per_kind = []
    for kind in KINDS:
        mine = [r[1:] for r in rows if r[0] == kind]
        if len(mine) >= min_kernels:
            per_kind.append((kind, calibrate(*zip(*mine), source=f"calibrated on {len(mine)} {kind} kernels")))
    return RooflineModel(default, tuple(per_kind))


Roofline = Hardware | RooflineModel  # what the roofline functions accept

# ------------------------------------------------------------------------------------ kernel profiles


def _nbytes(ty) -> int:
    """Bytes of a tensor type (or the sum over a tuple type's fields); 0 when the shape is not static."""
    if isinstance(ty, relax.TupleType):
        return sum(_nbytes(t) for t in ty.fields)
    shape = static_shape(ty)
    if shape is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * tvm.DataType(str(ty.dtype)).itemsize


# Reading shapes through TVM's FFI dominates the cost of scoring a graph, and the candidates of one step share
# almost all their Var and Call objects with the current graph, so per-object results are memoised. TVM
# Keys are looked up by object address (TVM's `==` on expressions is slow: it first asks whether they are
# PrimExprs); each entry keeps its key's objects alive, so an address is never reused while cached.
_MEMO: dict = keepalive.cache({})
_MEMO_LIMIT = 8192  # entries hold bindings and their constants: keep a few steps' worth


_IS_OBJECT: dict[type, bool] = {}  # isinstance against tvm_ffi.Object goes through abc: slow at 10^5 calls a step


def _ident(x):
    t = type(x)
    is_object = _IS_OBJECT.get(t)
    if is_object is None:
        is_object = _IS_OBJECT[t] = isinstance(x, tvm_ffi.Object)
    return ("@", x.__chandle__()) if is_object else x


def memo(key: tuple, compute):
    """`compute()` cached under `key` (a tuple of TVM objects and plain values) for this process."""
    ident = tuple(map(_ident, key))
    hit = _MEMO.get(ident)
    if hit is None:
        if len(_MEMO) > _MEMO_LIMIT:
            _MEMO.clear()
        hit = _MEMO[ident] = (key, compute())
    return hit[1]


_GRAPHS: OrderedDict = keepalive.cache(OrderedDict())


def graph_of(mod: tvm.IRModule) -> Graph:
    """`Graph(mod)`, shared by the encoder and the cost model for the last 128 modules seen."""
    key = mod.__chandle__()
    hit = _GRAPHS.get(key)
    if hit is not None and hit.mod.same_as(mod):
        _GRAPHS.move_to_end(key)
        return hit
    g = _GRAPHS[key] = Graph(mod)
    if len(_GRAPHS) > 128:
        _GRAPHS.popitem(last=False)
    return g


@keepalive.per_object(_MEMO_LIMIT)
def tensor_info(expr) -> tuple[tuple[int, ...] | None, int]:
    """(static shape or None, bytes) of a Var's or constant's type, memoised per object (called for every
    tensor of every candidate graph priced: `memo`'s generic key was a third of pricing)."""
    return static_shape(expr.ty), _nbytes(expr.ty)


@dataclass(frozen=True)
class KernelProfile:
    """One lowered kernel: name, structural hash of its (scheduled) PrimFunc, call count, FLOPs, bytes, and
    its kind (`op_kind` of its TIR blocks' names: a kernel's name does not say its layout)."""

    name: str
    structural_hash: int
    calls: int
    flops: float
    nbytes: int
    kind: str = "elementwise"


_BLOCK = re.compile(r'T\.s?block\("([^"]+)"')


def block_kind(block_names: list[str]) -> str:
    """The kind (`KINDS`) of a kernel from its TIR blocks' names, named as `op_kind` names Relax ops."""
    return op_kind(" ".join(block_names))


def tir_kind(func: tirx.PrimFunc) -> str:
    """`block_kind` of a PrimFunc's blocks."""
    return block_kind(_BLOCK.findall(func.script()))


def _kernel_kind(name: str, func: tirx.PrimFunc) -> str:
    """A lowered kernel's kind; printing its TIR (milliseconds) only for a conv, whose name hides its layout."""
    kind = op_kind(name)
    return tir_kind(func) if kind in ("conv", *FAMILY) else kind


def _prim_func_bytes(func: tirx.PrimFunc) -> int:
    """Bytes of the buffers a kernel reads and writes: a fused kernel's minimum DRAM traffic."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return sum(int(np.prod([int(d) for d in info.shape], dtype=np.int64)) * tvm.DataType(str(info.dtype)).itemsize
               for info in ArgInfo.from_prim_func(func))


def kernel_profiles(mod: tvm.IRModule, target: tvm.target.Target | str, database=None) -> list[KernelProfile]:
    """FLOPs (TVM's TIR estimate) and bytes of every kernel `mod` lowers to, with how often it is called."""
    return _profiles_of(measure.kernel_stage(mod, measure.parse_target(target), database))


def kernel_roofline_ms(mod: tvm.IRModule, target: tvm.target.Target | str, hardware: Roofline | None = None,
                       database=None) -> float:
    """Roofline latency of `mod`'s lowered kernels: sum of calls x hardware.time_ms(FLOPs, bytes)."""
    hardware = hardware or default_hardware(target)
    return sum(k.calls * hardware.time_ms(k.flops, k.nbytes, k.kind)
               for k in kernel_profiles(mod, target, database))


# -------------------------------------------------------------------------------- Relax-level profiles

# FLOPs per output element of the normalisations and softmax (exp, sums, divides; a stated round number).
_PER_ELEMENT = {"relax.nn.softmax": 5, "relax.nn.log_softmax": 5, "relax.nn.layer_norm": 8,
                "relax.nn.batch_norm": 4, "relax.nn.group_norm": 8, "relax.nn.rms_norm": 6,
                "relax.nn.gelu": 8, "relax.nn.silu": 4, "relax.sigmoid": 4}


@dataclass(frozen=True)
class OpProfile:
    """One binding of `main`: its operator ("tuple_get_item", "tuple", "var" for non-calls), FLOPs and the
    bytes it reads and writes when run alone."""

    name: str
    op: str
    flops: float
    nbytes: int
    inputs: tuple[str, ...] = field(default=())
    kind: str = "elementwise"  # `call_kind`: which roofline prices it


def _numel(expr) -> int:
    shape = static_shape(getattr(expr, "ty", None))
    return int(np.prod(shape, dtype=np.int64)) if shape is not None else 0


def op_flops(call: Call, out: Var) -> float:
    """FLOPs of one Relax operator call (multiply-add = 2), from its static shapes."""
    name = op_name(call)
    n_out = _numel(out)
    if name == "relax.matmul":
        a = static_shape(call.args[0].ty)
        return 2.0 * n_out * (a[-1] if a else 0)
    if name in ("relax.nn.conv2d", "relax.nn.conv1d", "relax.nn.conv3d"):
        w = static_shape(call.args[1].ty)
        out_channels = w[str(call.attrs.kernel_layout).index("O")] if w else 1
        return 2.0 * n_out * (int(np.prod(w)) // max(out_channels, 1) if w else 0)
    if name == "relax.nn.attention":
        q, k, v = (static_shape(a.ty) for a in call.args[:3])
        if q and k and v:  # (batch, seq, heads, dim)
            b, s, h, d = q
            s_kv, dv = k[1], v[3]
            return 2.0 * b * h * s * s_kv * (d + dv) + 5.0 * b * h * s * s_kv
    if name in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
        return float(n_out * int(np.prod([int(p) for p in call.attrs.pool_size])))
    if name in ("relax.mean", "relax.sum", "relax.max", "relax.min", "relax.variance"):
        return float(_numel(call.args[0]))
    if name in fusion.VIEW_OPS or name in ("relax.permute_dims", "relax.broadcast_to", "relax.zeros_like",
                                     "relax.concat", "relax.split", "relax.take", "relax.strided_slice"):
        return 0.0
    if name == "relax.nn.batch_norm":  # returns (normalised, mean, var): count the normalised tensor's elements
        n_out = _numel(call.args[0])  # (a tuple has none: batch norm was priced at 0 FLOPs)
    return float(_PER_ELEMENT.get(name, 1) * n_out)


def op_profiles(mod: tvm.IRModule, graph: Graph | None = None) -> list[OpProfile]:
    """FLOPs and bytes of every dataflow binding of `main`, each as if it ran alone (node features)."""
    g = graph or graph_of(mod)
    return [_op_profile(g.vars[name], g.values[name]) for name in g.order]


@keepalive.per_object(_MEMO_LIMIT)
def _op_profile(var: Var, value) -> OpProfile:
    op = op_name(value) or {Tuple: "tuple", TupleGetItem: "tuple_get_item"}.get(type(value), "var")
    args = fusion.inputs_of(value)
    if op.startswith("relax.") and op not in fusion.VIEW_OPS:
        flops, nbytes = op_flops(value, var), sum(tensor_info(a)[1] for a in args) + tensor_info(var)[1]
    else:
        flops, nbytes = 0.0, 0
    kind = call_kind(value) if isinstance(value, Call) else op_kind(op)
    return OpProfile(var.name, op, flops, nbytes, tuple(a.name for a in args if isinstance(a, Var)), kind)


def fused_groups(mod: tvm.IRModule, graph: Graph | None = None) -> list[tuple[float, int, str]]:
    """(FLOPs, bytes, kind of its anchor op) of every kernel `main` will run, predicted without lowering.

    Kernels are `fusion.partition`'s replay of TVM's FoldConstant and FuseOps (checked against TVM's own
    lowering in the tests); a kernel of reshapes alone is a view and is left out. A kernel's bytes are the
    tensors it reads from outside (constants included) plus those it writes that are read outside (or
    returned); its FLOPs are its operators' (`op_flops`).
    """
    g = graph or graph_of(mod)
    profiles = {p.name: p for p in op_profiles(mod, g)}
    kernels = fusion.partition(g)
    group = {n: gi for gi, names in enumerate(kernels) for n in names}
    readers: dict[str, set] = {}
    for name in g.order:
        for raw in profiles[name].inputs:
            readers.setdefault(raw, set()).add(group.get(name))
    var_bytes = {name: tensor_info(g.vars[name])[1] for name in g.order}
    params = {p.name: tensor_info(p)[1] for p in g.func.params}
    out = []
    for gi, names in enumerate(kernels):
        if fusion.is_free(g, names):
            continue
        nbytes, seen = 0, set()
        for n in names:
            for arg in fusion.inputs_of(g.values[n]):
                if isinstance(arg, Var) and group.get(arg.name) == gi:
                    continue
                key = arg.name if isinstance(arg, Var) else id(arg)
                if key not in seen:
                    seen.add(key)
                    nbytes += tensor_info(arg)[1] if isinstance(arg, GenericConst) else \
                        var_bytes.get(arg.name, params.get(arg.name, tensor_info(arg)[1]))
            if g.external[n] or any(r != gi for r in readers.get(n, ())):
                nbytes += var_bytes[n]
        anchor = next((n for n in names if fusion.pattern_of(g.values[n]) == fusion.OUT_EWISE_FUSABLE), names[0])
        out.append((sum(profiles[n].flops for n in names), nbytes, profiles[anchor].kind))
    return out


def graph_roofline_ms(mod: tvm.IRModule, hardware: Roofline) -> float:
    """Roofline latency of `main` from its Relax bindings and a fusion model (no lowering: milliseconds)."""
    return sum(hardware.time_ms(f, b, kind) for f, b, kind in fused_groups(mod))


# ------------------------------------------------------------------------------------ measured costs


def database_tag(database) -> str:
    """The part of a cache key that says which kernels were used: "untuned", or a JSON database's path."""
    if database is None:
        return "untuned"
    path = getattr(database, "path_tuning_record", None)
    if path:
        return f"json:{os.path.abspath(str(path))}"
    raise ValueError(f"cannot name database {type(database).__name__} in a cache key; pass database_tag=...")


@dataclass(frozen=True)
class KernelCost:
    """One kernel's measured median latency (ms), its call count, and whether the cache already had it."""

    profile: KernelProfile
    latency_ms: float
    cached: bool

    @property
    def total_ms(self) -> float:
        return self.profile.calls * self.latency_ms


class KernelCostCache:
    """Per-kernel latency, measured once per (kernel, target, database) and kept on disk across runs.

    The cost of a module is sum(calls x latency) over its lowered kernels. Keys are the structural hash of
    the kernel *after* the database's schedule is applied, the target's JSON and `database_tag(database)`,
    so a tuned and an untuned kernel never share an entry and one database serves every graph alike.
    Entries are JSON lines in `directory/kernels.jsonl` (appended as measured; unreadable lines skipped).
    """

    def __init__(self, target: tvm.target.Target | str, database=None, directory: str | Path | None = None,
                 tag: str | None = None, repeat: int = 10):
        self.target = measure.parse_target(target)
        self.database = database
        self.tag = tag or database_tag(database)
        self.repeat = repeat
        self.directory = Path(directory) if directory is not None else DEFAULT_CACHE_DIR
        self.path = self.directory / "kernels.jsonl"
        self.entries: dict[str, dict] = {}
        self.hits = self.misses = 0
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                    self.entries[entry["key"]] = entry
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a line cut short by a killed run: re-measure that kernel when needed

    def key(self, structural_hash: int) -> str:
        return f"{structural_hash}|{self.target}|{self.tag}"

    def kernel_costs(self, mod: tvm.IRModule) -> list[KernelCost]:
        """Every kernel of `mod` with its latency, timing only those not in the cache."""
        lowered = measure.kernel_stage(mod, self.target, self.database)
        profiles = _profiles_of(lowered)
        out = []
        rng = np.random.default_rng(0)
        for profile in profiles:
            key = self.key(profile.structural_hash)
            entry = self.entries.get(key)
            if entry is not None:
                self.hits += 1
                out.append(KernelCost(profile, float(entry["median_ms"]), True))
                continue
            self.misses += 1
            timing = _time_kernel(lowered, profile.name, self.target, rng, self.repeat)
            entry = {"key": key, "structural_hash": profile.structural_hash, "target": str(self.target),
                     "database": self.tag, "name": profile.name, "flops": profile.flops,
                     "nbytes": profile.nbytes, **timing.as_dict()}
            self._append(entry)
            out.append(KernelCost(profile, timing.median_ms, False))
        return out

    def __call__(self, mod: tvm.IRModule) -> float:
        """sum(calls x latency) over `mod`'s kernels, in ms."""
        return sum(k.total_ms for k in self.kernel_costs(mod))

    def _append(self, entry: dict) -> None:
        self.entries[entry["key"]] = entry
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:  # one write per line: concurrent runs interleave whole lines
            f.write(json.dumps(entry) + "\n")


def _profiles_of(lowered: tvm.IRModule) -> list[KernelProfile]:
    from tvm.s_tir.analysis import estimate_tir_flops

    calls = measure.kernel_calls(lowered)
    out = []
    for gvar, func in lowered.functions.items():
        if isinstance(func, tirx.PrimFunc) and gvar.name_hint in calls:
            try:
                flops = float(estimate_tir_flops(tvm.IRModule({gvar.name_hint: func})))
            except Exception:  # data-dependent loops: TVM cannot count them
                flops = 0.0
            out.append(KernelProfile(gvar.name_hint, tvm_ffi.structural_hash(func), calls[gvar.name_hint],
                                     flops, _prim_func_bytes(func), _kernel_kind(gvar.name_hint, func)))
    return out


def _time_kernel(lowered: tvm.IRModule, name: str, target: tvm.target.Target, rng: np.random.Generator,
                 repeat: int) -> measure.Timing:
    """One kernel built alone and timed on random inputs (as `measure.time_kernels` does for all)."""
    func = lowered[name]
    device = measure.device_for(target)
    try:
        lib = tvm.compile(tvm.IRModule({name: func.with_attr("global_symbol", name)}), target=target)
    except Exception as err:
        raise BuildError(f"kernel {name} failed to build for {target.kind.name}: {err}") from err
    args = measure.random_args(func, device, rng)
    runnable = lib.jit()
    runnable[name](*args)  # warm-up
    evaluator = runnable.time_evaluator(name, device, number=1, repeat=repeat)
    return measure.summarize([s * 1e3 for s in evaluator(*args).results])


def end_to_end_ms(mod: tvm.IRModule, target: tvm.target.Target | str, inputs: Sequence[np.ndarray],
                  database=None, repeat: int = 10) -> measure.Timing:
    """Build `mod` (with `database`'s tuned kernels) and time it on `inputs`: the harness's median."""
    target = measure.parse_target(target)
    runner = measure.Runner(measure.build(mod, target, database), target)
    return runner.time(inputs, repeat=repeat)


# -------------------------------------------------------------------------------------- cost functions


class Memo:
    """A cost function memoised by graph key (search and the environment revisit graphs).

    Only keys and values are kept (the last `max_graphs`, least recently used dropped first), never the
    graphs: on full-size models every candidate carries its own folded weights, and a memo that held its
    graphs grew past 15 GB over one search. Keys are `module_key`'s 64-bit hashes; two different graphs
    sharing one (odds of about 1e-10 over a search's 1e4 graphs) would share a cost, and the measured
    guards (`search.confirm`, `RLRewritePass(confirm=True)`) still stand between that and the user."""

    def __init__(self, fn: CostFn, max_graphs: int = 100_000):
        self.fn = fn
        self.max_graphs = max_graphs
        self.values: OrderedDict[int, float] = OrderedDict()
        self.calls = 0

    def __call__(self, mod: tvm.IRModule) -> float:
        key = module_key(mod)
        value = self.values.get(key)
        if value is not None:
            self.values.move_to_end(key)
            return value
        self.calls += 1
        value = self.values[key] = float(self.fn(mod))
        if len(self.values) > self.max_graphs:
            self.values.popitem(last=False)
        return value


def roofline_cost(hardware: Roofline) -> CostFn:
    """The fast proxy as a cost function: `graph_roofline_ms(mod, hardware)`, memoised."""
    return Memo(lambda mod: graph_roofline_ms(mod, hardware))


def kernel_sum_cost(cache: KernelCostCache) -> CostFn:
    """The cached per-kernel sum as a cost function, memoised."""
    return Memo(cache)


def end_to_end_cost(target: tvm.target.Target | str, inputs: Sequence[np.ndarray], database=None,
                    repeat: int = 10) -> CostFn:
    """The measured end-to-end median as a cost function, memoised."""
    return Memo(lambda mod: end_to_end_ms(mod, target, inputs, database, repeat).median_ms)


def pair_measure(target: tvm.target.Target | str, inputs: Sequence[np.ndarray] | None = None, database=None,
                 repeat: int = 10, tune: Callable[[tvm.IRModule], object] | None = None) -> PairMeasure:
    """(before, after) -> end-to-end medians, both built with the same schedules and timed in alternating rounds.

    Measured apart, the two sides of a guard see different load and machine state: ResNet-18's input timed
    alone early in a benchmark run measured 143 ms, and 129 ms in rounds beside its rewritten graph, which
    passed a graph 4% slower as 12% faster. `inputs`: default `verify.random_inputs(before)`. `tune(mod) ->
    database`, when given, tunes each side's kernels first and builds with the database it returns.
    """
    target = measure.parse_target(target)

    def measure_both(before: tvm.IRModule, after: tvm.IRModule) -> tuple[float, float]:
        from .verify import random_inputs

        runners = {}
        for key, mod in (("before", before), ("after", after)):
            db = tune(mod) if tune is not None else database
            runners[key] = measure.Runner(measure.build(mod, target, db), target)
        timings = measure.time_interleaved(runners, random_inputs(before) if inputs is None else inputs,
                                           repeat=repeat)
        return timings["before"].median_ms, timings["after"].median_ms

    return measure_both


def tuned_pair_measure(target: tvm.target.Target | str, inputs: Sequence[np.ndarray] | None, work_dir: str | Path,
                       trials_per_kernel: int = 16, repeat: int = 10, **tune_options) -> PairMeasure:
    """`pair_measure` after tuning both graphs' kernels into `work_dir` (see `tuned_end_to_end_cost` for why)."""
    return pair_measure(target, inputs, repeat=repeat,
                        tune=_tuner(target, work_dir, trials_per_kernel, **tune_options))


def tuned_end_to_end_cost(target: tvm.target.Target | str, inputs: Sequence[np.ndarray], work_dir: str | Path,
                          trials_per_kernel: int = 16, repeat: int = 10, **tune_options) -> CostFn:
    """The measured end-to-end median after tuning the graph's kernels into `work_dir`, memoised.

    Rewrites create kernels the database has never seen (a merged matmul, a conv with its batch norm folded
    in); built untuned they are naive loops on CPU, so timing them untuned would condemn every such rewrite.
    Each graph's kernels are tuned first to the same `trials_per_kernel` (`tune.tune_model`: kernels already
    in the database are skipped, so graphs sharing kernels tune them once), then the graph is timed.
    """
    tune = _tuner(target, work_dir, trials_per_kernel, **tune_options)
    return Memo(lambda mod: end_to_end_ms(mod, target, inputs, tune(mod), repeat).median_ms)


def _tuner(target, work_dir: str | Path, trials_per_kernel: int, **tune_options) -> Callable[[tvm.IRModule], object]:
    """mod -> the database of `work_dir` after tuning mod's kernels there (`tune.tune_model`)."""
    from ..tune import tune_model

    return lambda mod: tune_model(mod, target, work_dir, trials_per_kernel=trials_per_kernel, **tune_options)[0]


# ------------------------------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class CostComparison:
    """The estimates of one module's latency (ms) and their relative errors against end-to-end."""

    end_to_end_ms: float
    kernel_sum_ms: float
    kernel_roofline_ms: float
    graph_roofline_ms: float
    hardware: Roofline

    @staticmethod
    def rel(estimate: float, truth: float) -> float:
        return (estimate - truth) / truth

    def errors(self) -> dict[str, float]:
        return {"kernel_sum": self.rel(self.kernel_sum_ms, self.end_to_end_ms),
                "kernel_roofline": self.rel(self.kernel_roofline_ms, self.end_to_end_ms),
                "graph_roofline": self.rel(self.graph_roofline_ms, self.end_to_end_ms)}

    def as_dict(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k != "hardware"}, "hardware": self.hardware.as_dict(),
                "rel_error": self.errors()}


def compare_costs(mod: tvm.IRModule, target: tvm.target.Target | str, inputs: Sequence[np.ndarray],
                  cache: KernelCostCache, hardware: Roofline | None = None, repeat: int = 10) -> CostComparison:
    """All estimates of `mod`'s latency on `target` with `cache`'s database, against the measured median.

    Relative errors are (estimate - end-to-end) / end-to-end: negative means the estimate is too low.
    """
    hardware = hardware or default_hardware(target)
    e2e = end_to_end_ms(mod, cache.target, inputs, cache.database, repeat).median_ms
    kernels = cache.kernel_costs(mod)
    return CostComparison(e2e, sum(k.total_ms for k in kernels),
                          sum(k.profile.calls * hardware.time_ms(k.profile.flops, k.profile.nbytes,
                                                                 k.profile.kind) for k in kernels),
                          graph_roofline_ms(mod, hardware), hardware)
