"""Fast import of TVM's tensorize intrinsics, which every MetaSchedule TuneContext and build worker needs."""
from __future__ import annotations

import inspect
import sys


def preload_tensor_intrinsics() -> None:
    """Import `tvm.s_tir.tensor_intrin` (which every TuneContext imports) in seconds instead of minutes.

    Its ~250 TVMScript intrinsics each call `inspect.stack()`, which reads source context for every frame and,
    for import-machinery frames with no file, rescans all of sys.modules: about a minute on a small CPU. The
    parser uses only the frames themselves (the source context matters only for prim_funcs defined inside a
    class, and the intrinsic modules define none), so during this one import `inspect.stack` returns frames
    without source context. A no-op once imported.
    """
    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    original = inspect.stack

    def frames_only(context: int = 1) -> list[inspect.FrameInfo]:
        frame, out = sys._getframe(1), []
        while frame is not None:
            out.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name,
                                         None, None))
            frame = frame.f_back
        return out

    inspect.stack = frames_only
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401  (registers the intrinsics)
    finally:
        inspect.stack = original
