"""`to_channels_last`: every NCHW conv moved to NHWC, the transposes between them cancelled, outputs unchanged."""
import numpy as np
import tvm
from tvm.script import relax as R

from tests.support import graph_examples as T
from tests.support.rewrite_steps import count_calls
from tvm_rl.graph.channels_last import ChannelsLast, to_channels_last
from tvm_rl.graph.verify import compare_variants


def _block_graph(seed: int = 0) -> tvm.IRModule:
    """A MobileNet-V2 block: 1x1 expand, ReLU6 (clip), depthwise 3x3, ReLU6, 1x1 project, residual add, then a
    head (global mean, matmul) that must stay NCHW-shaped."""
    rng = np.random.default_rng(seed)

    def body(emit, x):
        y = emit(R.add(emit(R.nn.conv2d(x, T.rand(rng, 16, 4, 1, 1))), T.rand(rng, 1, 16, 1, 1)))
        y = emit(R.clip(y, 0.0, 6.0))
        y = emit(R.clip(emit(R.nn.conv2d(y, T.rand(rng, 16, 1, 3, 3), padding=1, groups=16)), 0.0, 6.0))
        y = emit(R.add(emit(R.nn.conv2d(y, T.rand(rng, 4, 16, 1, 1))), x))
        pooled = emit(R.reshape(emit(R.mean(y, axis=[2, 3], keepdims=True)), [1, 4]))
        return emit(R.matmul(pooled, T.rand(rng, 4, 3)))

    return T.module(body, [(1, 4, 6, 6)])


def _layouts(mod: tvm.IRModule) -> list[str]:
    found = []
    tvm.relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e.attrs.data_layout) if isinstance(
        e, tvm.relax.Call) and getattr(e.op, "name", "") == "relax.nn.conv2d" else None)
    return found


def test_every_conv_goes_nhwc_and_only_the_boundary_transposes_stay():
    mod = _block_graph()
    out = to_channels_last(mod)
    assert _layouts(out) == ["NHWC"] * 3
    # one transpose into NHWC at the input, one back before the NCHW-shaped mean: the six around the convs cancel
    assert count_calls(out, "relax.permute_dims") == 2
    (cmp,) = compare_variants(mod, {"nhwc": out}).values()
    assert cmp.ok, cmp


def test_a_grouped_strided_chain_stays_exact():
    mod = T.conv_chain_graph(cin=4, mid=8, cout=3, hw=7, stride=2, groups=2, seed=3)
    out = ChannelsLast()(mod)
    assert _layouts(out) == ["NHWC", "NHWC"]
    (cmp,) = compare_variants(mod, {"nhwc": out}).values()
    assert cmp.ok, cmp


def test_a_module_without_nchw_convs_is_returned_as_is():
    mod = T.module(lambda emit, x: emit(R.nn.relu(x)), [(1, 4, 6, 6)])
    assert to_channels_last(mod) is mod
    nhwc = to_channels_last(_block_graph())
    assert to_channels_last(nhwc) is nhwc
