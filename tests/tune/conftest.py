import pytest


@pytest.fixture(scope="module")
def space(cpu):
    """The knob space of a small padded 3x3 conv2d on this CPU (tiles of 4 and 2 levels, an unroll depth, the
    padding's compute-at location): built here, so the tests need no TopHub logs."""
    import tvm
    from tvm import te, topi

    from tvm_rl.tune import knobs

    data = te.placeholder((1, 16, 14, 14), name="data")
    weight = te.placeholder((32, 16, 3, 3), name="weight")
    out = topi.nn.conv2d_nchw(data, weight, 1, 1, 1)
    mod = tvm.IRModule({"main": te.create_prim_func([data, weight, out])})
    return knobs.knob_spaces(knobs.make_context(mod, cpu, "conv2d", seed=0))[0]
