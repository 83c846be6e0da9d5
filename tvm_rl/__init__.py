"""tvm-rl: RL graph rewriting (RLRewritePass, `tvm_rl.graph`) and PPO schedule tuning (PPOSearch, `tvm_rl.tune`)
for Apache TVM. `tvm_rl.optimize(model, target)` runs the whole flow."""
from .threads import use_all_cores

# Before any TVM kernel runs in this process: TVM's own default leaves half the cores idle without SMT.
use_all_cores()


def optimize(*args, **kwargs):
    """The whole flow in one call; see `tvm_rl.flow.optimize` (imported lazily: it pulls in torch)."""
    from .flow import optimize as _optimize

    return _optimize(*args, **kwargs)
