"""Turn a PyTorch module or an ONNX file into a Relax IRModule, with errors that name the model and the op."""
from __future__ import annotations

import contextlib
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import tvm
from tvm.relax.frontend.onnx import from_onnx as _tvm_from_onnx
from tvm.relax.frontend.torch import from_exported_program

from ..errors import ModelImportError

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

    def reference_outputs(self, inputs: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """The reference's outputs (PyTorch or ONNX Runtime) on `inputs`, by default the example inputs."""
        return self.reference(self.inputs if inputs is None else inputs)


def _flatten(out) -> list:
    if isinstance(out, (list, tuple)):
        return [y for x in out for y in _flatten(x)]
    return [out]


def torch_reference(module: torch.nn.Module) -> Reference:
    """A reference function running `module` eagerly on numpy inputs."""

    def run(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = module(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
        return [t.detach().numpy() for t in _flatten(out)]

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

    Weights become constants of the module, so graph rewrites can fold them.
    """
    module = module.eval()
    example_inputs = tuple(example_inputs)
    try:
        with torch.no_grad(), quiet_exporters():
            program = torch.export.export(module, example_inputs)
    except Exception as err:  # torch raises many types here; all mean "cannot trace this model"
        raise ModelImportError(f"torch.export failed on model {name!r}: {type(err).__name__}: {err}") from err
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
    inputs = [t.detach().numpy().copy() for t in example_inputs]
    return Model(name, mod, inputs, torch_reference(module), module, "torch")


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
