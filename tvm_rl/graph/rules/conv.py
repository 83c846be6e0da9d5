"""Convolution rules: fold inference BatchNorm into conv2d, merge sibling conv2d, enlarge 1x1 kernels."""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import TupleGetItem, Var

from .base import Match, Rule, register
from .ir import Edit, Graph, channel_bias, const, float_tensor, ints, op_name, out_dtype, split_outputs
from .matmul import const_weight_matmul


def plain_conv(g: Graph, name: str) -> dict | None:
    """Attributes of conv2d binding `name` when it is one our rules can rewrite, else None.

    Needs: NCHW data, OIHW weight, NCHW output, a constant(-foldable) weight, float static shapes.
    """
    call = g.values.get(name)
    if getattr(getattr(call, "op", None), "name", None) != "relax.nn.conv2d":
        return None
    a = call.attrs
    if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout)) != ("NCHW", "OIHW", "NCHW"):
        return None
    out, x = float_tensor(g.vars[name]), float_tensor(call.args[0])
    weight = g.const(call.args[1])
    if out is None or x is None or weight is None or weight.ndim != 4 or str(weight.dtype) != out[1]:
        return None
    return {"x": call.args[0], "weight": weight, "strides": ints(a.strides), "padding": ints(a.padding),
            "dilation": ints(a.dilation), "groups": int(a.groups), "out_dtype": out_dtype(a),
            "kernel": weight.shape[2:], "shape": out[0], "dtype": out[1]}


def make_conv(x, weight, c: dict, padding=None):
    """A conv2d like `c` (see plain_conv) on `x` with a new weight (and padding)."""
    return relax.op.nn.conv2d(x, weight, strides=c["strides"], padding=padding or c["padding"],
                              dilation=c["dilation"], groups=c["groups"], data_layout="NCHW",
                              kernel_layout="OIHW", out_layout="NCHW",
                              out_dtype=c["out_dtype"])


@register
class FoldBatchNorm(Rule):
    """batch_norm(conv2d(x, W), constants)[0] (inference) -> conv2d(x, W * s) + b; also
    batch_norm(permute_dims(x @ W), constants)[0] with the normalised axis the matmul's output columns (a 1x1
    conv made a matmul by `conv1x1_to_matmul`) -> permute_dims(x @ (W * s)) + b. Without the second form,
    turning a conv into a matmul first (as greedy search did on ResNet-50) left its batch norm unfoldable."""

    name = "fold_batchnorm"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, bn in g.calls("relax.nn.batch_norm"):
            a = bn.attrs
            producer = bn.args[0]
            if bool(a.training) or not isinstance(producer, Var) or g.single_use(producer.name) != name:
                continue
            item = g.single_use(name)
            value = g.values.get(item) if item else None
            # Only the normalised tensor may be read: the other outputs are the running statistics.
            if not (isinstance(value, TupleGetItem) and int(value.index) == 0):
                continue
            c = plain_conv(g, producer.name)
            if c is not None:
                channels, names = (c["shape"][1] if int(a.axis) % len(c["shape"]) == 1 else None), ()
            else:
                channels, names = _permuted_matmul_columns(g, producer.name, int(a.axis)), ("matmul",)
            if channels is None:
                continue
            params = [g.const(p) for p in bn.args[1:]]
            if any(p is None or p.shape != (channels,) for p in params):
                continue
            out.append(self.match((producer.name, name, item), f"fold {name} into {producer.name}", names))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        producer, bn_name, item = m.names
        bn = g.values[bn_name]
        gamma, beta, mean, var = (g.const(p).astype(np.float64) for p in bn.args[1:])
        a = bn.attrs
        gamma = gamma if bool(a.scale) else np.ones_like(gamma)
        beta = beta if bool(a.center) else np.zeros_like(beta)
        scale = gamma / np.sqrt(var + float(a.epsilon))
        shift = beta - mean * scale
        edit.remove(bn_name)
        if m.params == ("matmul",):  # permute_dims(x @ W): scale W's columns, shift on the normalised axis
            mm_name = g.values[producer].args[0].name
            mm = const_weight_matmul(g, mm_name)
            weight = mm["weight"].astype(np.float64) * scale[None, :]
            edit.set_value(mm_name, relax.op.matmul(mm["x"], const(weight, mm["dtype"]), out_dtype=mm["out_dtype"]))
            rank = len(mm["shape"])  # permute_dims keeps the rank
            shape = [1] * rank
            shape[int(a.axis) % rank] = -1
            edit.set_value(item, relax.op.add(g.vars[producer], const(shift.reshape(shape), mm["dtype"])))
            return
        c = plain_conv(g, producer)
        weight = c["weight"].astype(np.float64) * scale[:, None, None, None]
        edit.set_value(producer, make_conv(c["x"], const(weight, c["dtype"]), c))
        edit.set_value(item, relax.op.add(g.vars[producer], const(shift.reshape(1, -1, 1, 1), c["dtype"])))


def _permuted_matmul_columns(g: Graph, name: str, axis: int) -> int | None:
    """The column count of x @ W when `name` = permute_dims(x @ W) (W a constant, the product read only there)
    and `axis` of the permuted tensor is the product's last one; else None."""
    perm = g.values.get(name)
    if op_name(perm) != "relax.permute_dims" or perm.attrs.axes is None or not isinstance(perm.args[0], Var):
        return None
    mm_name = perm.args[0].name
    mm = const_weight_matmul(g, mm_name)
    if mm is None or g.single_use(mm_name) != name or float_tensor(g.vars[name]) is None:
        return None
    rank, axes = len(mm["shape"]), [int(x) for x in perm.attrs.axes]
    if axes[axis % rank] != rank - 1:
        return None
    return mm["weight"].shape[1]


def _merge_key(c: dict) -> tuple:
    return (c["x"].name, c["strides"], c["padding"], c["dilation"], c["kernel"], c["out_dtype"], c["dtype"])


@register
class MergeParallelConv2D(Rule):
    """Sibling conv2d on one input (same stride, padding, dilation, kernel size, groups=1) -> one conv2d
    with the weights concatenated on output channels, then split; constant bias adds are merged too."""

    name = "merge_parallel_conv2d"

    def find(self, g: Graph) -> list[Match]:
        groups: dict[tuple, list[str]] = {}
        for name, _ in g.calls("relax.nn.conv2d"):
            c = plain_conv(g, name)
            # Each conv's output must have one reader: the split part replaces exactly that use.
            if c is None or c["groups"] != 1 or not isinstance(c["x"], Var) or g.single_use(name) is None:
                continue
            groups.setdefault(_merge_key(c), []).append(name)
        out = []
        for names in groups.values():
            if len(names) >= 2:
                with_bias = all(channel_bias(g, n, plain_conv(g, n)["shape"][1], 3) for n in names)
                out.append(self.match(tuple(names), f"merge {', '.join(names)}" + (" (+bias)" if with_bias
                                                                                   else ""), (with_bias,)))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        names, (with_bias,) = m.names, m.params
        convs = [plain_conv(g, n) for n in names]
        c0, first = convs[0], names[0]
        sizes = [c["shape"][1] for c in convs]
        weight = const(np.concatenate([c["weight"] for c in convs], axis=0), c0["dtype"])
        y = edit.emit(first, make_conv(c0["x"], weight, c0), f"{first}_merged")
        targets = list(names)
        if with_bias:
            biases = [channel_bias(g, n, s, 3) for n, s in zip(names, sizes)]
            bias = np.concatenate([b for _, b in biases]).reshape(1, -1, 1, 1)
            y = edit.emit(first, relax.op.add(y, const(bias, c0["dtype"])), f"{first}_merged_bias")
            targets = [add for add, _ in biases]
        split_outputs(edit, first, y, sizes, 1, targets, first)


@register
class EnlargeConvKernel(Rule):
    """A 1x1 conv2d (no padding) with a kxk sibling on the same input -> a kxk conv2d (zero-padded weight,
    padding (k-1)/2) computing the same, so the two can then merge."""

    name = "enlarge_conv_kernel"

    def find(self, g: Graph) -> list[Match]:
        convs = {n: plain_conv(g, n) for n, _ in g.calls("relax.nn.conv2d")}
        convs = {n: c for n, c in convs.items() if c is not None and c["groups"] == 1}
        out = []
        for name, c in convs.items():
            if c["kernel"] != (1, 1) or any(c["padding"]) or c["dilation"] != (1, 1):
                continue
            sizes = []
            for other, o in convs.items():
                kh, kw = o["kernel"]
                if (other == name or not o["x"].same_as(c["x"]) or o["strides"] != c["strides"]
                        or o["dilation"] != (1, 1) or kh % 2 == 0 or kw % 2 == 0 or (kh, kw) == (1, 1)):
                    continue
                ph, pw = kh // 2, kw // 2
                if o["padding"] == (ph, pw, ph, pw) and (kh, kw) not in sizes:
                    sizes.append((kh, kw))
            for kh, kw in sizes:
                out.append(self.match((name,), f"{name} 1x1 -> {kh}x{kw}", (kh, kw)))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,), (kh, kw) = m.names, m.params
        c = plain_conv(g, name)
        w = c["weight"]
        weight = np.zeros((*w.shape[:2], kh, kw), dtype=w.dtype)
        weight[:, :, kh // 2, kw // 2] = w[:, :, 0, 0]
        edit.set_value(name, make_conv(c["x"], const(weight, c["dtype"]), c,
                                       padding=(kh // 2, kw // 2, kh // 2, kw // 2)))
