"""What the tuner benchmark runs: its tasks (TopHub's and BERT's kernels) and its arms (a search strategy and a
cost model each, built from the benchmark's options)."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tvm.s_tir import meta_schedule as ms

from tvm_rl.errors import TvmRlError
from tvm_rl.tune.tophub import TophubTask, load_tasks, tophub_dir

# Two conv2d, two depthwise and one tall-skinny batch_matmul from TVM's TopHub CUDA log (none is in the LLVM log
# the corpus is built from), and three BERT-base kernels (`transformer_tasks`).
TASKS = ["conv2d_n1_c256_h28_w28_o256_k1_s1_p0", "conv2d_n1_c256_h7_w7_o512_k3_s2_p1",
         "depthwise_conv2d_n1_c144_h56_w56_o144_k3_s1_p1", "depthwise_conv2d_n1_c24_h112_w112_o24_k3_s2_p1",
         "batch_matmul_b1_m9216_n64_k64", "batch_matmul_b12_m128_n128_k64", "batch_matmul_b12_m128_n64_k128",
         "batch_matmul_b1_m128_n768_k768"]
QUICK_TASKS = ["depthwise_conv2d_n1_c24_h112_w112_o24_k3_s2_p1", "batch_matmul_b12_m128_n128_k64",
               "conv2d_n1_c256_h28_w28_o256_k1_s1_p0"]
ARMS = ["evolutionary", "evolutionary-pretrained", "ppo", "ppo-pretrained-model", "ppo-pretrained", "random-walk",
        "ppo-topk", "random"]
EXTRA_ARMS = ["annealing", "evolutionary-pretrained-frozen", "evolutionary-pretrained-calibrated",
              "evolutionary-own-first", "evolutionary-pretrained-own-first"]


def transformer_tasks() -> dict[str, TophubTask]:
    """BERT-base kernels at sequence length 128 (12 heads of 64), as batch_matmul tasks (B x M x K by B x N x K):
    the attention scores Q.K^T, the attention-weighted values, and the 768 x 768 projection (a dense layer)."""
    def bmm(b: int, m: int, n: int, k: int, what: str) -> TophubTask:
        return TophubTask("batch_matmul", (("TENSOR", (b, m, k), "float32"), ("TENSOR", (b, n, k), "float32")),
                          origin=f"BERT-base, sequence 128: {what}")

    tasks = [bmm(12, 128, 128, 64, "attention scores Q.K^T"), bmm(12, 128, 64, 128, "attention x V"),
             bmm(1, 128, 768, 768, "768 x 768 projection")]
    return {t.name: t for t in tasks}


@dataclass(frozen=True)
class Arm:
    """A benchmark arm: its strategy for a seed, its cost model, and whether the strategy reads the shared batch
    from the database itself (the knob-space strategies; MetaSchedule's get it via `runs.run_arm`).
    `own_first_batch`: the arm starts from an empty database and picks its first batch itself, as `tvm-rl tune`
    does (where a pre-trained model already guides the first round), instead of the shared random one."""

    name: str
    strategy: Callable[[int], ms.SearchStrategy]
    cost_model: Callable[[], ms.CostModel]
    resumes: bool
    own_first_batch: bool = False


def make_arms(args: argparse.Namespace) -> tuple[dict[str, Arm], dict[str, str]]:
    """The arms these options allow, and for each one left out, why."""
    from tvm_rl.tune.agent import PPOAgent, PPOConfig
    from tvm_rl.tune.cost_model import create as create_cost_model
    from tvm_rl.tune.search_strategy import evolutionary
    from tvm_rl.tune.search_strategy.ppo import PPOSearch

    effort = {k: v for k, v in (("walks", args.walks), ("max_evaluations", args.evaluations)) if v is not None}

    def config(seed: int) -> PPOConfig:
        return PPOConfig(seed=seed, **effort)

    def xgb() -> ms.CostModel:
        return create_cost_model("xgb-no-warmup")

    def pretrained(**settings: Any) -> Callable[[], ms.CostModel]:
        def make() -> ms.CostModel:
            if not args.cost_model_file:
                return xgb()
            return create_cost_model("xgb-pretrained", path=args.cost_model_file, **settings)
        return make

    def annealing(seed: int) -> ms.SearchStrategy:
        from tvm_rl.tune.search_strategy.annealing import SimulatedAnnealing

        return SimulatedAnnealing(seed=seed, **({"max_evaluations": args.evaluations} if args.evaluations else {}))

    arms = [Arm("evolutionary", evolutionary, xgb, False),
            Arm("evolutionary-own-first", evolutionary, xgb, False, own_first_batch=True),
            # The PPOSearch arms other than ppo-topk keep adaptive sampling spelled out: an arm's name means what
            # it meant when the blocks pooled across CPUs were run, whatever PPOSearch's default is now.
            Arm("ppo", lambda seed: PPOSearch(config=config(seed), adaptive=True, seed=seed), xgb, True),
            Arm("ppo-topk", lambda seed: PPOSearch(config=config(seed), adaptive=False, seed=seed), xgb, True),
            Arm("random", lambda seed: ms.search_strategy.ReplayTrace(), xgb, False),
            Arm("annealing", annealing, xgb, True)]
    skipped = {}
    if args.cost_model_file:
        arms.append(Arm("evolutionary-pretrained", evolutionary, pretrained(), False))
        # The default as `tvm-rl tune` runs it: the model picks the first batch too (the others share a random one).
        arms.append(Arm("evolutionary-pretrained-own-first", evolutionary, pretrained(), False, own_first_batch=True))
        # The default's own ablations: the model never refined on the run's records, and refined on them mapped
        # onto its own scale first (`pretrained._on_base_scale`).
        arms.append(Arm("evolutionary-pretrained-frozen", evolutionary, pretrained(refine_rounds=0), False))
        arms.append(Arm("evolutionary-pretrained-calibrated", evolutionary, pretrained(refine_calibrate=True),
                        False))
        # The untrained agent with the pre-trained model: what "ppo-pretrained" gains over it is the policy's.
        arms.append(Arm("ppo-pretrained-model", lambda seed: PPOSearch(config=config(seed), adaptive=True, seed=seed),
                        pretrained(), True))
    else:
        for name in ("evolutionary-pretrained", "evolutionary-pretrained-own-first", "evolutionary-pretrained-frozen",
                     "evolutionary-pretrained-calibrated", "ppo-pretrained-model"):
            skipped[name] = "no --cost-model-file (a model from `tvm-rl corpus train`)"
    if args.policy:
        arms.append(Arm("ppo-pretrained", lambda seed: PPOSearch(agent=PPOAgent.load(args.policy), adaptive=True,
                                                                 seed=seed),
                        pretrained(), True))
    else:
        skipped["ppo-pretrained"] = "no --policy (a tuner agent saved with PPOAgent.save)"
    arms.append(Arm("random-walk", lambda seed: PPOSearch(config=config(seed), adaptive=True, seed=seed, learn=False),
                    xgb, True))
    return {a.name: a for a in arms}, skipped


def resolve_tasks(names: list[str], tophub: str | None) -> dict[str, TophubTask]:
    """Task name -> task: the built-in transformer kernels, then TopHub's (read only when a name needs them)."""
    known = transformer_tasks()
    rest = [n for n in names if n not in known]
    if rest:
        try:
            known.update({t.name: t for t in load_tasks(tophub_dir(tophub))})
        except TvmRlError as err:  # said as the script's one line, as the CLI says it, not as a traceback
            raise SystemExit(f"tasks {', '.join(rest)} come from TopHub: {err}") from None
    missing = [n for n in names if n not in known]
    if missing:
        raise SystemExit(f"unknown task(s) {missing}: give TopHub task names (like {TASKS[0]}) or one of the "
                         f"transformer kernels {', '.join(transformer_tasks())}")
    return {n: known[n] for n in names}


def default_arm(target_kind: str = "llvm") -> str:
    """The arm that runs what `tvm-rl tune` and `tvm_rl.optimize` run by default for a target kind: the default
    strategy, with the shipped pre-trained cost model where one ships for the kind."""
    from tvm_rl.tune.cost_model import shipped_model
    from tvm_rl.tune.search_strategy import DEFAULT

    if shipped_model(target_kind) is None:
        return DEFAULT
    return {"evolutionary": "evolutionary-pretrained", "ppo": "ppo-pretrained-model"}.get(DEFAULT, DEFAULT)


def pretraining_overlap(path: str, tasks: dict[str, TophubTask]) -> list[str]:
    """The tasks the pre-trained model file was trained on (by structural hash)."""
    from tvm_rl.tune.cost_model.pretrained import load_model

    _, meta = load_model(path)
    seen = {str(w.get("structural_hash")) for w in meta.get("workloads", [])}
    return [name for name, task in tasks.items() if str(task.workload_hash()) in seen]
