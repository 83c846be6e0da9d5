"""tvm-rl: RL graph rewriting (RLRewritePass, `tvm_rl.graph`) and PPO schedule tuning (PPOSearch, `tvm_rl.tune`)
for Apache TVM. `tvm_rl.optimize(model, target)` runs the whole flow."""


def optimize(*args, **kwargs):
    """The whole flow in one call; see `tvm_rl.flow.optimize` (imported lazily: it pulls in torch)."""
    from .flow import optimize as _optimize

    return _optimize(*args, **kwargs)
