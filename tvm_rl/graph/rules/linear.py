"""Dense <-> 1x1 convolution: a pointwise conv2d as a matmul over channels-last pixels, and back."""
from __future__ import annotations

from tvm import relax

from .base import Match, Rule, register
from .conv import plain_conv
from .ir import Edit, Graph, const
from .matmul import const_weight_matmul


def _pointwise(c: dict | None) -> bool:
    """A conv2d (see plain_conv) that mixes channels at each pixel and nothing else."""
    return (c is not None and c["kernel"] == (1, 1) and c["strides"] == (1, 1) and not any(c["padding"])
            and c["groups"] == 1)


@register
class Conv1x1ToMatmul(Rule):
    """1x1 conv2d (stride 1, no padding, groups 1, NCHW) -> permute to NHWC, matmul by W^T, permute back."""

    name = "conv1x1_to_matmul"

    def find(self, g: Graph) -> list[Match]:
        return [self.match((name,), f"{name} = 1x1 conv2d -> matmul")
                for name, _ in g.calls("relax.nn.conv2d") if _pointwise(plain_conv(g, name))]

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,) = m.names
        c = plain_conv(g, name)
        pixels = edit.emit(name, relax.op.permute_dims(c["x"], [0, 2, 3, 1]), f"{name}_nhwc")
        weight = const(c["weight"][:, :, 0, 0].T, c["dtype"])
        y = edit.emit(name, relax.op.matmul(pixels, weight, out_dtype=c["out_dtype"]), f"{name}_matmul")
        edit.set_value(name, relax.op.permute_dims(y, [0, 3, 1, 2]))


@register
class MatmulToConv1x1(Rule):
    """x @ W for x of shape [N, C] and a constant W [C, O] -> a 1x1 conv2d on x as [N, C, 1, 1]."""

    name = "matmul_to_conv1x1"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, _ in g.calls("relax.matmul"):
            mm = const_weight_matmul(g, name)
            if mm is None or len(mm["shape"]) != 2 or mm["weight"].shape[0] != int(mm["x"].ty.shape[1]):
                continue
            out.append(self.match((name,), f"{name} = [N, C] @ W -> 1x1 conv2d"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,) = m.names
        mm = const_weight_matmul(g, name)
        (n, o), (cin, _) = mm["shape"], mm["weight"].shape
        x = edit.emit(name, relax.op.reshape(mm["x"], (n, cin, 1, 1)), f"{name}_nchw")
        weight = const(mm["weight"].T.reshape(o, cin, 1, 1), mm["dtype"])
        y = edit.emit(name, relax.op.nn.conv2d(x, weight, data_layout="NCHW", kernel_layout="OIHW",
                                               out_layout="NCHW", out_dtype=mm["out_dtype"]), f"{name}_conv")
        edit.set_value(name, relax.op.reshape(y, (n, o)))
