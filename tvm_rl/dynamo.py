"""`torch.compile(model, backend="tvm_rl")`: every graph TorchDynamo captures goes through `tvm_rl.optimize`.

    compiled = torch.compile(model, backend="tvm_rl", options={"trials_per_kernel": 8})
    with torch.no_grad():
        y = compiled(x)

The backend is registered through the `torch_dynamo_backends` entry point group (pyproject.toml), so installing
the package is enough. Per graph: FX graph -> torch.export -> Relax (`models.from_torch`) -> RLRewritePass ->
kernels tuned by a search strategy (none by default: `trials_per_kernel` 0 is TVM's default build, plus any records
an earlier run left in the database) -> build -> outputs checked against the graph run eagerly -> a callable
that takes and returns torch tensors (DLPack, no copies for aligned contiguous CPU tensors).

Parameters and buffers that dynamo lifts into graph inputs are frozen into the TVM module as constants by
default (`freeze`), so the graph pass can fold them; every call checks they are the same tensors, unmodified
(identity, storage, version counter), and rebuilds the graph with the new values if not.

What TVM cannot take (an operator its PyTorch frontend lacks, symbolic shapes, outputs that need gradients,
inputs mutated in place, non-tensor inputs or outputs, tensors not on the CPU) runs that graph eagerly with one
`FallbackWarning` saying why; with `options={"fallback": False}` it raises a TvmRlError instead (which dynamo
reports as `BackendCompilerFailed`, the TvmRlError in its `inner_exception`). See docs/torch_compile.md.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from .errors import ModelImportError, TvmRlError
from .graph import defaults

log = logging.getLogger("tvm_rl.dynamo")


class FallbackWarning(UserWarning):
    """A graph (or a call) runs eagerly in PyTorch instead of through TVM; the message says why."""


@dataclass(frozen=True)
class Options:
    """`torch.compile(..., backend="tvm_rl", options={...})`; the names and defaults of `tvm_rl.optimize`
    except `trials_per_kernel` (0: no tuning), `work_dir` (None: `paths.cache_dir() / "torch_compile"`) and
    `repeat`."""

    target: Any = "llvm"  # "llvm" / "cpu" (this CPU), a target JSON dict or its text, or a tvm Target
    trials_per_kernel: int = 0  # measured schedules per kernel; 0: no tuning stage
    budget: int | None = None  # instead: measurements for the whole graph, spent where its latency is
    minutes: float | None = None  # instead (or as well): minutes of tuning per graph
    work_dir: str | Path | None = None  # tuning database and per-graph reports
    rewrite: bool = True  # RLRewritePass on the graph
    seed: int = 0
    fallback: bool = True  # False: raise TvmRlError instead of running a graph eagerly
    freeze: bool = True  # parameters and buffers lifted into graph inputs become constants of the TVM module
    strategy: str | None = None  # None: tvm_rl.tune.search_strategy.DEFAULT
    rewrite_steps: int = defaults.MAX_STEPS  # the graph pass: rewrites per episode; seconds per graph below
    rewrite_seconds: float = defaults.TIME_BUDGET_S
    rtol: float = 1e-3
    atol: float = 1e-3  # relative to the largest output, as in `optimize`
    repeat: int = 10  # timed runs of the default and the optimized build (the faster one is kept)
    fast_math: bool | None = None  # None: on for CPU targets (`tvm_rl.fast_math.default_for`)
    channels_last: bool | None = None  # None: on for CPU targets (`tvm_rl.graph.channels_last.default_for`)

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None = None, mode: str | None = None) -> Options:
        """Options from torch.compile's `options` dict (unknown names are an error, so a typo is not ignored)
        and its `mode`: "max-autotune" / "max-autotune-no-cudagraphs" tune 16 trials per kernel."""
        given = dict(options or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise TvmRlError(f"torch.compile backend 'tvm_rl': unknown option(s) {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(sorted(known))}")
        if mode in ("max-autotune", "max-autotune-no-cudagraphs"):
            given.setdefault("trials_per_kernel", 16)
        elif mode not in (None, "default", "reduce-overhead"):
            raise TvmRlError(f"torch.compile backend 'tvm_rl': unknown mode {mode!r}; use 'default' or "
                             "'max-autotune' (16 tuning trials per kernel), or options={'trials_per_kernel': N}")
        opts = cls(**given)
        if not isinstance(opts.trials_per_kernel, int) or opts.trials_per_kernel < 0:
            raise TvmRlError(f"option trials_per_kernel must be an integer >= 0, got {opts.trials_per_kernel!r}")
        return opts

    def resolved_work_dir(self) -> Path:
        from .paths import cache_dir

        return Path(self.work_dir).expanduser() if self.work_dir is not None else cache_dir() / "torch_compile"


def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, options: Mapping[str, Any] | None = None,
            mode: str | None = None) -> Callable[..., Any]:
    """The `tvm_rl` TorchDynamo backend: a callable running `gm` through TVM, or `gm.forward` (with a
    FallbackWarning) for a graph TVM cannot take. torch.compile passes its `options` and `mode` as keywords."""
    opts = Options.parse(options, mode)
    return _compile_or_fall_back(gm, list(example_inputs), opts)


def _compile_or_fall_back(gm: torch.fx.GraphModule, inputs: list[Any], opts: Options) -> Callable[..., Any]:
    try:
        with _real_tensor_mode():
            return compile_graph(gm, inputs, opts)
    except TvmRlError as err:
        if not opts.fallback:
            raise
        reason = str(err)
    except Exception as err:  # TVM and torch.export raise many types; all mean "not through TVM"
        if not opts.fallback:
            raise TvmRlError(f"tvm_rl could not compile graph {_graph_name(gm, inputs)}: "
                             f"{type(err).__name__}: {err}") from err
        reason = f"{type(err).__name__}: {err}"
    warnings.warn(f"tvm_rl: running a graph eagerly in PyTorch: {_one_line(reason)}", FallbackWarning,
                  stacklevel=2)
    return gm.forward


def compile_graph(gm: torch.fx.GraphModule, inputs: Sequence[Any], opts: Options) -> TvmGraph:
    """`gm` through `tvm_rl.optimize` at the shapes of `inputs` (real tensors, in dynamo's order); raises a
    TvmRlError (ModelImportError for what TVM cannot take) instead of falling back."""
    from .flow import optimize

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    _check_inputs(placeholders, inputs)
    as_list, dtypes = _check_outputs(gm, inputs)
    frozen = [i for i, x in enumerate(inputs) if opts.freeze and _is_param_or_buffer(placeholders[i], x)]
    module = _Frozen(gm, inputs, frozen)
    runtime = [x.detach() for i, x in enumerate(inputs) if i not in module.frozen]
    name = _graph_name(gm, inputs)
    out = optimize(module, opts.target, example_inputs=runtime, name=name, work_dir=opts.resolved_work_dir(),
                   rewrite=opts.rewrite, rewrite_steps=opts.rewrite_steps, rewrite_seconds=opts.rewrite_seconds,
                   trials_per_kernel=opts.trials_per_kernel, strategy=opts.strategy, seed=opts.seed,
                   repeat=opts.repeat, rtol=opts.rtol, atol=opts.atol, fast_math=opts.fast_math,
                   channels_last=opts.channels_last, budget=opts.budget, minutes=opts.minutes)
    graph = TvmGraph(gm, out, {i: inputs[i] for i in frozen}, len(inputs), as_list, dtypes, opts)
    graph.verify(inputs)
    log.info("tvm_rl: %s", out.report.summary())
    return graph


class TvmGraph:
    """A dynamo graph compiled by TVM: called with the graph's inputs (torch tensors, dynamo's order), returns
    what the FX graph returns (a tuple or list of tensors). `optimized` is `tvm_rl.optimize`'s result (its
    `.report` says what the graph pass and tuning did)."""

    def __init__(self, gm: torch.fx.GraphModule, optimized: Any, frozen: dict[int, torch.Tensor], n_inputs: int,
                 as_list: bool, dtypes: list[torch.dtype], opts: Options):
        from tvm import relax

        from . import measure

        self.gm, self.optimized, self.opts = gm, optimized, opts
        self.name = optimized.report.model
        self.n_inputs, self.as_list, self.dtypes = n_inputs, as_list, dtypes
        self.runtime_indices = [i for i in range(n_inputs) if i not in frozen]
        # What each frozen input was when it was built in: the tensor, its storage and its version counter.
        self.frozen = {i: (t, t.data_ptr(), t._version) for i, t in frozen.items()}
        self.vm = relax.VirtualMachine(optimized.executable, measure.device_for(optimized.target))
        self.main = self.vm["main"]
        self._replacement: Callable[..., Any] | None = None

    def __call__(self, *args: Any) -> tuple[torch.Tensor, ...] | list[torch.Tensor]:
        if self._replacement is not None:
            return self._replacement(*args)
        if len(args) != self.n_inputs:
            raise TvmRlError(f"{self.name}: called with {len(args)} inputs, compiled for {self.n_inputs}")
        stale = self._stale_frozen(args)
        if stale is not None:
            return self._rebuild(args, stale)(*args)
        result = self.main(*[_to_tvm(args[i]) for i in self.runtime_indices])
        outs = [_to_torch(t, dtype) for t, dtype in zip(_flatten_tvm(result), self.dtypes)]
        return outs if self.as_list else tuple(outs)

    def verify(self, inputs: Sequence[torch.Tensor]) -> None:
        """Run once through the torch-facing path (DLPack in and out) on `inputs` and check the outputs against
        the graph run eagerly, with `optimize`'s tolerances (which `optimize` checked on its own path already)."""
        from .errors import MismatchError

        got = list(self(*inputs))
        with torch.no_grad():
            want = list(self.gm(*inputs))
        if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
            raise ModelImportError(
                f"{self.name}: the TVM module returns {[tuple(g.shape) for g in got]}, the graph "
                f"{[tuple(w.shape) for w in want]}")
        scale = max([float(w.abs().max()) for w in want if w.numel() and w.is_floating_point()] + [1.0])
        for k, (g, w) in enumerate(zip(got, want)):
            if not torch.allclose(g.double(), w.double(), rtol=self.opts.rtol, atol=self.opts.atol * scale):
                err = float((g.double() - w.double()).abs().max()) if g.numel() else 0.0
                raise MismatchError(f"{self.name}: output {k} differs from the graph run eagerly by {err:.3g} "
                                    f"(rtol {self.opts.rtol}, atol {self.opts.atol} x {scale:.3g})")

    def _stale_frozen(self, args: Sequence[Any]) -> int | None:
        for i, (t, ptr, version) in self.frozen.items():
            a = args[i]
            if a is not t or a.data_ptr() != ptr or a._version != version:
                return i
        return None

    def _rebuild(self, args: Sequence[Any], index: int) -> Callable[..., Any]:
        warnings.warn(f"tvm_rl: graph {self.name}: frozen input {index} (a parameter or buffer) changed since it "
                      "was built in; rebuilding the graph with the current values (options={'freeze': False} "
                      "keeps them as inputs instead)", FallbackWarning, stacklevel=3)
        new = _compile_or_fall_back(self.gm, list(args), self.opts)
        if isinstance(new, TvmGraph):  # dynamo keeps calling this object: it runs the new build from now on
            vars(self).update(vars(new))
        else:
            self._replacement = new
        return self


# ------------------------------------------------------------------------------------------- checks


def _check_inputs(placeholders: Sequence[torch.fx.Node], inputs: Sequence[Any]) -> None:
    from torch._subclasses.fake_tensor import is_fake

    if len(placeholders) != len(inputs):
        raise ModelImportError(f"the graph has {len(placeholders)} inputs, dynamo gave {len(inputs)}")
    for node, x in zip(placeholders, inputs):
        if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) or _symbolic(node.meta.get("example_value")):
            raise ModelImportError(
                f"input {node.name!r} has a symbolic (dynamic) shape, which tvm_rl does not compile; "
                "torch.compile(..., dynamic=False) makes dynamo specialise each shape (one TVM build per shape)")
        if not isinstance(x, torch.Tensor):
            raise ModelImportError(f"input {node.name!r} is a {type(x).__name__}, not a tensor")
        if is_fake(x):
            raise ModelImportError(f"input {node.name!r} is a fake tensor (compiled inside another trace); tvm_rl "
                                   "needs real values to check its build against")
        if x.device.type != "cpu":
            raise ModelImportError(f"input {node.name!r} is on {x.device}; tvm_rl's torch.compile backend runs "
                                   "CPU tensors only")
        if x.layout != torch.strided or x.is_quantized or x.is_complex() or x.dtype in _NO_NUMPY:
            raise ModelImportError(f"input {node.name!r} is a {x.dtype} {str(x.layout).replace('torch.', '')} "
                                   "tensor, which tvm_rl does not compile")


_NO_NUMPY = {torch.bfloat16, *(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32",
                                                          "uint64") if hasattr(torch, n))}


def _symbolic(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(d, torch.SymInt) for d in (*value.shape, *value.stride()))
    return False


def _check_outputs(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]) -> tuple[bool, list[torch.dtype]]:
    """Run `gm` on fake copies of `inputs` (no memory, no compute): ModelImportError if it mutates an input in
    place, returns anything but a flat tuple or list of tensors, or returns tensors that need gradients.
    Returns whether it returns a list, and the outputs' dtypes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    fakes = [mode.from_tensor(x) for x in inputs]
    versions = [f._version for f in fakes]
    try:
        with mode:
            out = gm(*fakes)
    except Exception as err:
        raise ModelImportError(f"tracing the graph with fake tensors failed: {type(err).__name__}: {err}") from err
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    for name, fake, version in zip(placeholders, fakes, versions):
        if fake._version != version:
            raise ModelImportError(f"the graph mutates its input {name!r} in place, which a TVM build would not do")
    if not isinstance(out, (tuple, list)) or not out:
        raise ModelImportError(f"the graph returns {type(out).__name__} {out!r}, not a tuple of tensors")
    for k, y in enumerate(out):
        if not isinstance(y, torch.Tensor):
            raise ModelImportError(f"output {k} of the graph is a {type(y).__name__} ({y!r}), not a tensor")
        if y.requires_grad:
            raise ModelImportError(
                f"output {k} of the graph requires grad; TVM builds are inference-only: call the compiled model "
                "under torch.no_grad() or torch.inference_mode()")
    return isinstance(out, list), [y.dtype for y in out]


def _is_param_or_buffer(node: torch.fx.Node, x: torch.Tensor) -> bool:
    """Whether dynamo lifted `x` from a module's parameters or buffers (not a user input)."""
    if isinstance(x, torch.nn.Parameter):
        return True
    try:
        from torch._dynamo.source import is_from_unspecialized_param_buffer_source
    except ImportError:  # a torch that moved it: parameters still freeze, buffers stay inputs
        return False
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    return source is not None and is_from_unspecialized_param_buffer_source(source)


# ------------------------------------------------------------------------------------------- helpers


class _Frozen(torch.nn.Module):
    """`gm` with the inputs at `frozen` bound to their current values as buffers, so torch.export (and the
    Relax importer after it) takes them as constants; forward takes the other inputs, in order."""

    def __init__(self, gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor], frozen: Sequence[int]):
        super().__init__()
        self.gm = gm
        self.n = len(inputs)
        self.frozen = set(frozen)
        for i in frozen:
            self.register_buffer(f"frozen_{i}", inputs[i].detach())

    def forward(self, *xs: torch.Tensor) -> Any:
        rest = iter(xs)
        return self.gm(*[getattr(self, f"frozen_{i}") if i in self.frozen else next(rest) for i in range(self.n)])


def _to_tvm(x: torch.Tensor) -> Any:
    """A torch CPU tensor as a TVM tensor: shared through DLPack when contiguous and 64-byte aligned (TVM's
    kernels assume both), otherwise a contiguous copy first."""
    import tvm

    x = x.detach()
    if not x.is_contiguous() or x.data_ptr() % 64:
        x = x.clone(memory_format=torch.contiguous_format)
    return tvm.runtime.from_dlpack(x)


def _to_torch(t: Any, dtype: torch.dtype) -> torch.Tensor:
    """A TVM output as a torch tensor sharing its memory (DLPack); cast if TVM's dtype differs from torch's."""
    y = torch.from_dlpack(t)
    return y if y.dtype == dtype else y.to(dtype)


def _flatten_tvm(out: Any) -> list[Any]:
    import tvm
    import tvm_ffi

    if isinstance(out, tvm.runtime.Tensor):
        return [out]
    if isinstance(out, (list, tuple, tvm_ffi.Array)):
        return [y for x in out for y in _flatten_tvm(x)]
    raise ModelImportError(f"unexpected TVM output {type(out).__name__}")


def _graph_name(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> str:
    """A name stable across runs for the same graph at the same shapes (its report file is overwritten, not
    added to)."""
    sig = "".join(f"{tuple(x.shape)}{x.dtype}" if isinstance(x, torch.Tensor) else repr(type(x)) for x in inputs)
    return "torch_compile_" + hashlib.sha1((gm.code + sig).encode()).hexdigest()[:12]


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines)[:500] if lines else "unknown error"


@contextlib.contextmanager
def _real_tensor_mode() -> Iterator[None]:
    """Outside dynamo's tracing context and dispatch modes while we export, build and run for real: inside them
    torch.load and torch.export would see dynamo's fake tensor mode (the graph policy would load as meta
    tensors)."""
    with contextlib.ExitStack() as stack:
        try:
            from torch._guards import tracing
            from torch.utils._python_dispatch import _disable_current_modes
        except ImportError:  # a torch that moved them
            pass
        else:
            stack.enter_context(tracing(None))
            stack.enter_context(_disable_current_modes())
        yield
