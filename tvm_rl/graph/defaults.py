"""The graph pass's default limits, in one place: `RLRewritePass`, `tvm_rl.optimize`, the `torch.compile` backend,
`tvm-rl optimize` / `rewrite` and the ablation benchmark (`ablation.Settings`) all read them, so the pass users get
is the pass the benchmarks measured. Plain numbers: importing this module imports nothing."""

TIME_BUDGET_S = 10.0  # seconds of search per run (issue 20's bound for a full-size model)
MAX_STEPS = 50  # rewrites per episode; the time budget usually ends an episode first on full-size models
EPISODES = 4  # cheapest-first's first episode is greedy, the rest sample, while the budget lasts
# Candidates enumerated per step. Enumerating all of them left no time for a single step in 10 s on ViT and the
# Transducer, and 1-2 on Inception-V3 (docs/results/graph_ablation.md, "The pass's candidate cap").
CAP = 64
SHORTLIST = 16  # of those, the cheapest by the proxy are shown to the policy
