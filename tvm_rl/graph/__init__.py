"""Graph level: verified rewrite rules over Relax modules and the candidate set the search picks from
(`rules`, `candidates`, `verify`), the graph cost (`cost`), the Gymnasium environment (`env`), the search
baselines (`search`: greedy, TASO-style backtracking, random rollouts), the GNN policy (`gnn`, `agent`,
`train`) and `RLRewritePass`, the module pass users insert before `tvm.compile`."""


def __getattr__(name: str):
    # Lazy: importing torch for the pass should not slow down users of the rules alone.
    if name in ("RLRewritePass", "RewriteReport"):
        from . import rewrite_pass

        return getattr(rewrite_pass, name)
    raise AttributeError(f"module 'tvm_rl.graph' has no attribute {name!r}")
