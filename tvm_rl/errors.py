"""Errors tvm-rl raises on bad input: each names what is wrong (file, op, target, output) and what to do."""
import signal


class TvmRlError(Exception):
    """Base class of every error tvm-rl raises on purpose."""


class ModelImportError(TvmRlError):
    """A model could not be turned into a Relax module (bad file, unsupported operator, export failure)."""


class UnknownModelError(TvmRlError, ValueError):
    """A zoo model name or size that does not exist (a ValueError too, as it was before)."""


class TargetError(TvmRlError):
    """A target string or device that tvm-rl cannot use."""


class BuildError(TvmRlError):
    """TVM failed to compile a module for a target."""


class MismatchError(TvmRlError):
    """Outputs differ from the reference by more than the stated tolerance."""


class DatabaseError(TvmRlError):
    """A tuning database folder that cannot be used (corrupt lines, foreign files, a file in its place)."""


class DatabaseTypeError(DatabaseError, TypeError):
    """Something given as a tuning database that is none of the kinds accepted (`tvm_rl.database.DatabaseLike`)."""


class SearchNameError(TvmRlError, ValueError):
    """A graph search named to the pass with a budget it cannot run (e.g. "backtracking-0")."""


class CheckpointError(TvmRlError):
    """A saved policy that cannot be loaded (missing, truncated, corrupt, or written by something else)."""


class FeatureMismatchError(CheckpointError):
    """A graph policy asked to read other features than it was trained on (another roofline or target kind)."""


class TuningInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during tuning. A KeyboardInterrupt still (so callers that stop on Ctrl-C keep doing
    so), whose message says where the completed measurements are and how to resume; `signum` is the signal."""

    signum: int = signal.SIGINT


def exit_code(err: BaseException) -> int:
    """The shell's exit status for a run stopped by `err`: 128 + the signal (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + getattr(err, "signum", signal.SIGINT)
