"""`to_channels_last`: every NCHW conv moved to NHWC, the transposes between them cancelled, outputs unchanged."""
import numpy as np
import tvm
from tvm.script import relax as R

from tests.support import graph_examples as T
from tests.support.rewrite_steps import conv_layouts, count_calls
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


def test_every_conv_goes_nhwc_and_only_the_boundary_transposes_stay():
    mod = _block_graph()
    out = to_channels_last(mod)
    assert conv_layouts(out) == ["NHWC"] * 3
    # one transpose into NHWC at the input, one back before the NCHW-shaped mean: the six around the convs cancel
    assert count_calls(out, "relax.permute_dims") == 2
    (cmp,) = compare_variants(mod, {"nhwc": out}).values()
    assert cmp.ok, cmp


def test_pools_and_concats_stay_channels_last():
    """A SqueezeNet fire module after a pooled stem: the max pool and the concat of the two expand convs run in
    NHWC too, so only the input's and the head's transposes stay."""
    rng = np.random.default_rng(1)

    def body(emit, x):
        y = emit(R.nn.relu(emit(R.nn.conv2d(x, T.rand(rng, 8, 3, 3, 3), strides=2))))
        y = emit(R.nn.max_pool2d(y, pool_size=3, strides=2, ceil_mode=True))
        s = emit(R.nn.relu(emit(R.nn.conv2d(y, T.rand(rng, 4, 8, 1, 1)))))
        a = emit(R.nn.relu(emit(R.nn.conv2d(s, T.rand(rng, 6, 4, 1, 1)))))
        b = emit(R.nn.relu(emit(R.nn.conv2d(s, T.rand(rng, 6, 4, 3, 3), padding=1))))
        return emit(R.mean(emit(R.concat([a, b], axis=1)), axis=[2, 3]))

    mod = T.module(body, [(1, 3, 17, 17)])
    out = to_channels_last(mod)
    assert conv_layouts(out) == ["NHWC"] * 4
    assert count_calls(out, "relax.permute_dims") == 1  # the input's; the mean's [1, C] needs none
    (cmp,) = compare_variants(mod, {"nhwc": out}).values()
    assert cmp.ok, cmp


def test_a_grouped_strided_chain_stays_exact():
    mod = T.conv_chain_graph(cin=4, mid=8, cout=3, hw=7, stride=2, groups=2, seed=3)
    out = ChannelsLast()(mod)
    assert conv_layouts(out) == ["NHWC", "NHWC"]
    (cmp,) = compare_variants(mod, {"nhwc": out}).values()
    assert cmp.ok, cmp


def test_a_module_without_nchw_convs_is_returned_as_is():
    mod = T.module(lambda emit, x: emit(R.nn.relu(x)), [(1, 4, 6, 6)])
    assert to_channels_last(mod) is mod
    nhwc = to_channels_last(_block_graph())
    assert to_channels_last(nhwc) is nhwc


def test_a_model_tvm_cannot_convert_is_left_as_it_is(monkeypatch, caplog):
    from tvm_rl.graph import channels_last

    def fail(layouts):
        raise RuntimeError("no layout rule for some.op")

    monkeypatch.setattr(channels_last.relax.transform, "ConvertLayout", fail)
    mod = _block_graph()
    assert to_channels_last(mod) is mod
    assert "left the module in NCHW" in caplog.text and "some.op" in caplog.text
