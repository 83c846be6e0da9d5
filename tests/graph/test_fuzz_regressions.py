"""Regressions found by the rewrite fuzzer (tests/support/fuzz.py): each unsafe match it caught, now refused.

Each test rebuilds the smallest graph showing the bug (the fuzzer's own graphs were larger).
"""
import numpy as np
from tvm import relax

from tests.support import graph_examples as T
from tvm_rl.graph.candidates import enumerate_candidates
from tvm_rl.graph.rules import get_rule
from tvm_rl.graph.verify import compare_variants

R = relax.op


def _attention(dtype):
    def body(e, q, k, v):
        s = e(R.matmul(q, e(R.permute_dims(k, [0, 2, 1]))))
        s = e(R.multiply(s, relax.const(np.asarray(0.5, dtype))))
        w = e(R.matmul(e(R.nn.softmax(s, axis=-1)), v))
        return e(R.matmul(w, relax.const(np.ones((5, 2), dtype))))  # a float16 reader of the result

    return T.module(body, [(2, 3, 4), (2, 3, 4), (2, 3, 5)], dtype=dtype)


def test_attention_in_float16_is_not_fused():
    """TVM legalizes a float16 R.nn.attention (with its float32 scale) to a float32 result, so the fused
    graph no longer built at the next float16 operator."""
    fuse = get_rule("fuse_attention")
    assert fuse.matches(_attention("float16")) == []
    assert len(fuse.matches(_attention("float32"))) == 1


def _dilated_pool(hw, pad):
    return T.module(lambda e, x: e(R.nn.max_pool2d(e(R.nn.relu(x)), pool_size=2, strides=1, padding=pad,
                                                   dilation=3)), [(1, 2, hw, hw)])


def test_maxpool_window_with_only_padding_taps_is_not_offered():
    """A dilated window can straddle the input with both taps in the padding: pool 2, dilation 3 and
    padding 2 on a 1- or 2-pixel input. max_pool2d(relu(x)) gives the padding value there, relu(max_pool2d(x))
    gives 0, so the activation must not move."""
    rule = get_rule("activation_after_maxpool")
    assert rule.matches(_dilated_pool(1, 2)) == [] and rule.matches(_dilated_pool(2, 2)) == []
    ok = _dilated_pool(4, 2)  # every window has a tap on the input
    (m,) = rule.matches(ok)
    assert compare_variants(ok, {"moved": rule.apply(ok, m)})["moved"].ok


def test_scalar_motion_refuses_a_matmul_with_an_out_dtype():
    """matmul(a16, b16, out_dtype=float32) * 0.5 moved the float32 factor onto a float16 operand: a type
    error raised in the middle of candidate enumeration."""
    def body(e, x):
        y = e(R.matmul(x, e(R.permute_dims(x, [1, 0])), out_dtype="float32"))
        return e(R.multiply(y, relax.const(np.asarray(0.5, "float32"))))

    mod = T.module(body, [(3, 4)], dtype="float16")
    assert get_rule("scalar_mul_motion").matches(mod) == []
    enumerate_candidates(mod)  # nothing raises
    same = T.module(lambda e, x: e(R.multiply(e(R.matmul(x, e(R.permute_dims(x, [1, 0])))),
                                              relax.const(np.asarray(0.5, "float16")))), [(3, 4)], dtype="float16")
    assert len(get_rule("scalar_mul_motion").matches(same)) == 2  # either operand, without an out_dtype
