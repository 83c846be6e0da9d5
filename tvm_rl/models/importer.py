"""Turn a PyTorch module or an ONNX file into a Relax IRModule, with errors that name the model and the op."""
from __future__ import annotations

import contextlib
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.utils._pytree as pytree
import tvm
from tvm.relax.frontend.onnx import from_onnx as _tvm_from_onnx
from tvm.relax.frontend.torch import from_exported_program

from ..errors import ModelImportError
from .bool_ops import fix_bool_ops

Reference = Callable[[Sequence[np.ndarray]], "list[np.ndarray]"]


@dataclass
class Model:
    """A Relax module with example inputs and a reference implementation to check it against."""

    name: str
    mod: tvm.IRModule
    inputs: list[np.ndarray]
    reference: Reference
    torch_module: torch.nn.Module | None = field(default=None, repr=False)
    source: str = "torch"
    # The structure of the source model's outputs (torch's pytree spec: a ModelOutput, dict, nested tuples), whose
    # leaves are the Relax function's outputs in order; None: a flat list (ONNX, Relax).
    output_spec: pytree.TreeSpec | None = field(default=None, repr=False)

    def reference_outputs(self, inputs: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """The reference's outputs (PyTorch or ONNX Runtime) on `inputs`, by default the example inputs."""
        return self.reference(self.inputs if inputs is None else inputs)

    def structure(self, leaves: Sequence[Any]) -> Any:
        """`leaves` (the flat outputs, in order) in the source model's output structure; a list when the model
        returns one tensor or has no structure (ONNX, Relax)."""
        return structure(leaves, self.output_spec)


def structure(leaves: Sequence[Any], spec: pytree.TreeSpec | None) -> Any:
    """`leaves` put back into `spec` (a ModelOutput, dict, nested tuples of them); a list when `spec` is None or
    one tensor (what `optimize(...)(x)` returned before outputs had structure)."""
    if spec is None or spec.is_leaf():
        return list(leaves)
    if spec.num_leaves != len(leaves):
        raise ModelImportError(f"the model has {spec.num_leaves} outputs, got {len(leaves)}")
    return pytree.tree_unflatten(list(leaves), spec)


def output_leaves(out: Any, name: str = "model") -> list[torch.Tensor]:
    """A model's outputs (any pytree torch knows: tensors, tuples, lists, dicts, Hugging Face ModelOutputs) as
    a flat list of tensors; ModelImportError naming the output that is not a tensor."""
    flat, _ = pytree.tree_flatten_with_path(out)
    for path, leaf in flat:
        if not isinstance(leaf, torch.Tensor):
            where = pytree.keystr(path) or "output"
            hint = (" (a key/value cache: call the model with use_cache=False, or wrap it to return the logits)"
                    if "cache" in type(leaf).__name__.lower() or "past_key_values" in where else "")
            raise ModelImportError(f"model {name!r}: output {where} is a {type(leaf).__name__}, not a tensor{hint}")
    return [leaf for _, leaf in flat]


def torch_reference(module: torch.nn.Module, name: str = "model") -> Reference:
    """A reference function running `module` eagerly on numpy inputs; its outputs flattened as torch's pytree
    does (the order torch.export and the Relax module give them)."""

    def run(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = module(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
        return [t.detach().numpy() for t in output_leaves(out, name)]

    return run


@contextlib.contextmanager
def quiet_exporters():
    """Hide the deprecation chatter torch.export and torch.onnx print about their own internals (pytree,
    onnxscript): a user of tvm-rl can do nothing about it, and it buries the messages that matter."""
    onnx_log = logging.getLogger("torch.onnx")
    level = onnx_log.level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        onnx_log.setLevel(max(level, logging.ERROR))
        try:
            yield
        finally:
            onnx_log.setLevel(level)


def from_torch(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], name: str = "model") -> Model:
    """Export `module` with torch.export at the shapes of `example_inputs` and import it into Relax.

    Weights become constants of the module, so graph rewrites can fold them. Outputs may be any pytree (tuples,
    dicts, Hugging Face ModelOutputs): the Relax function returns their tensors flat, in torch's pytree order,
    and `Model.output_spec` keeps the structure. Bool ops TVM cannot build are rewritten (`bool_ops`).
    """
    module = module.eval()
    example_inputs = tuple(example_inputs)
    try:
        with torch.no_grad(), quiet_exporters():
            program = torch.export.export(module, example_inputs)
    except Exception as err:  # torch raises many types here; all mean "cannot trace this model"
        raise ModelImportError(f"torch.export failed on model {name!r}: {type(err).__name__}: "
                               f"{err}{_export_hint(err)}") from err
    spec = program.call_spec.out_spec
    _check_outputs(program, spec, name)
    _drop_empty_concat_inputs(program)
    try:
        with quiet_exporters():  # TVM's frontend deep-copies the program, which trips torch's pytree deprecation
            mod = from_exported_program(program, keep_params_as_input=False, unwrap_unit_return_tuple=True)
    except AssertionError as err:
        if "Unsupported function types" in str(err):
            ops = str(err).split("Unsupported function types", 1)[1].strip()
            raise ModelImportError(
                f"model {name!r} uses operators TVM's PyTorch frontend does not support: {ops}. "
                "Rewrite them with supported ops or export the model to ONNX instead."
            ) from err
        raise ModelImportError(f"importing model {name!r} into Relax failed: {err}") from err
    except Exception as err:
        raise ModelImportError(f"importing model {name!r} into Relax failed: {type(err).__name__}: {err}") from err
    mod, _ = fix_bool_ops(mod)
    inputs = [t.detach().numpy().copy() for t in example_inputs]
    return Model(name, mod, inputs, torch_reference(module, name), module, "torch", spec)


def _drop_empty_concat_inputs(program: torch.export.ExportedProgram) -> None:
    """Drop the 1-D empty tensors from `aten.cat`'s inputs, as torch.cat does (a legacy rule TVM's importer
    lacks: "Concat expects all input tensors to have same ndim"). A decoder's key/value cache starts as such a
    tensor, so a model run with its cache on (and wrapped to return tensors) imports as the prefill graph."""
    changed = False
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target != torch.ops.aten.cat.default or not node.args:
            continue
        parts = list(node.args[0])
        shapes = [getattr(getattr(n, "meta", {}).get("val"), "shape", None) for n in parts]
        kept = [n for n, shape in zip(parts, shapes) if shape is None or tuple(shape) != (0,)]
        if kept and len(kept) < len(parts):
            node.args = (kept, *node.args[1:])
            changed = True
    if changed:
        program.graph.eliminate_dead_code()
        program.graph_module.recompile()


def _export_hint(err: Exception) -> str:
    text = str(err)
    if "Cache" in text or "past_key_values" in text:
        return (". A decoder's key/value cache cannot be exported as an output: call the model with "
                "use_cache=False (the prefill graph), or wrap it to return the logits")
    return ""


def _check_outputs(program: torch.export.ExportedProgram, spec: pytree.TreeSpec | None, name: str) -> None:
    """ModelImportError naming each output of the exported program that is not a tensor, by its pytree path."""
    from torch.export.graph_signature import OutputKind, TensorArgument

    user = [s for s in program.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    if spec is not None and spec.num_leaves == len(user):
        paths = [pytree.keystr(p) or "output" for p, _ in
                 pytree.tree_flatten_with_path(pytree.tree_unflatten(list(range(len(user))), spec))[0]]
    else:
        paths = [f"output {i}" for i in range(len(user))]
    for path, s in zip(paths, user):
        if not isinstance(s.arg, TensorArgument):
            raise ModelImportError(f"model {name!r}: output {path} is {s.arg}, not a tensor; TVM modules return "
                                   "tensors only (drop it from the outputs or wrap the model)")
    if any(s.kind != OutputKind.USER_OUTPUT for s in program.graph_signature.output_specs):
        kinds = sorted({s.kind.name for s in program.graph_signature.output_specs if s.kind != OutputKind.USER_OUTPUT})
        raise ModelImportError(f"model {name!r} mutates its buffers or inputs in forward ({', '.join(kinds)}); "
                               "TVM builds are pure functions: export a copy that does not (e.g. use_cache=False)")


def _onnx_dtype(elem_type: int) -> np.dtype:
    import onnx

    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def onnx_reference(path: str | Path) -> Reference:
    """A reference function running the ONNX file with ONNX Runtime on the CPU."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return list(session.run(None, dict(zip(names, inputs))))

    return run


def from_onnx(path: str | Path, shapes: dict[str, Sequence[int]] | None = None, name: str | None = None,
              seed: int = 0) -> Model:
    """Import an ONNX file into Relax; random example inputs are drawn at its (or the given) input shapes.

    `shapes` fixes dynamic dimensions, e.g. {"input": [1, 3, 224, 224]}.
    """
    import onnx

    path = Path(path)
    name = name or path.stem
    if not path.is_file():
        raise ModelImportError(f"ONNX file not found: {path}")
    try:
        proto = onnx.load(str(path))
        onnx.checker.check_model(proto)
    except Exception as err:
        raise ModelImportError(f"{path} is not a valid ONNX model ({type(err).__name__}: {err}); re-export or "
                               "re-download it (a truncated copy fails this way too)") from err
    initializers = {t.name for t in proto.graph.initializer}
    graph_inputs = [i for i in proto.graph.input if i.name not in initializers]
    shapes = dict(shapes or {})
    rng = np.random.default_rng(seed)
    inputs, shape_dict, dtype_dict = [], {}, {}
    for inp in graph_inputs:
        ttype = inp.type.tensor_type
        dims = shapes.get(inp.name) or [d.dim_value if d.HasField("dim_value") else None for d in ttype.shape.dim]
        if any(d is None or d <= 0 for d in dims):
            raise ModelImportError(
                f"{path}: input {inp.name!r} has dynamic or symbolic shape {list(dims)}; "
                f"give a static one, e.g. shapes={{{inp.name!r}: [1, ...]}}"
            )
        dtype = _onnx_dtype(ttype.elem_type)
        shape_dict[inp.name], dtype_dict[inp.name] = list(dims), str(dtype)
        if np.issubdtype(dtype, np.integer):
            inputs.append(rng.integers(0, 2, size=dims).astype(dtype))
        else:
            inputs.append(rng.standard_normal(dims).astype(dtype))
    known = set(_supported_onnx_ops())
    missing = sorted({n.op_type for n in proto.graph.node if n.op_type not in known and n.op_type != "Constant"})
    if missing:
        raise ModelImportError(f"{path}: operators not supported by TVM's ONNX frontend: {', '.join(missing)}")
    try:
        mod = _tvm_from_onnx(proto, shape_dict=shape_dict, dtype_dict=dtype_dict)
    except Exception as err:
        raise ModelImportError(f"importing {path} into Relax failed: {type(err).__name__}: {err}") from err
    mod, _ = fix_bool_ops(mod)
    return Model(name, mod, inputs, onnx_reference(path), None, "onnx")


def _supported_onnx_ops() -> list[str]:
    from tvm.relax.frontend.onnx import onnx_frontend

    return [*onnx_frontend._get_convert_map(), "If"]


def export_onnx(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], path: str | Path,
                opset: int = 18) -> Path:
    """Write `module` to an ONNX file at `path` with the torch.export-based exporter (static shapes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), quiet_exporters():
        torch.onnx.export(module.eval(), tuple(example_inputs), str(path), opset_version=opset, dynamo=True,
                          external_data=False, verbose=False)
    return path
