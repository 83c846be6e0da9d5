"""Small TVM workloads shared by the tuning tests."""
import tvm
from tvm import te


def matmul(n: int = 64) -> tvm.IRModule:
    """An n x n x n float32 matmul as a PrimFunc `main`."""
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})
