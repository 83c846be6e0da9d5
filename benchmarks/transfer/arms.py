"""The transfer cost models compared by `benchmarks/transfer_models.py` (issue 68 item 4), each behind one small
interface: `fit(train, seed)` on other kernels' measured schedules, `score(features)` (higher: predicted faster),
and `updated(own)`, a copy after the online step a tuning run takes on a kernel's first measured records.

- `xgb`: the shipped form (`tvm_rl.tune.corpus.train`): MetaSchedule's XGBModel objective (pack-sum regression on
  per-kernel normalised speed), refined online with 20 trees as the tuner refines it.
- `xgb-rank`: XGBoost as a ranker (LambdaMART, `rank:pairwise`, one query per kernel) over each schedule's store
  features summed; updated online with 20 more trees on the kernel's own records.
- `mlp`: MetaSchedule's SegmentSumMLP (`tvm.s_tir.meta_schedule.cost_model.mlp_model`) trained as its
  SegmentSumMLPTrainer trains it (lambda-rank loss over batches of 128, Adam 7e-4, 50 epochs, learning rate x0.8
  every 5, gradient norm 0.5, the epoch with the lowest loss on a fifth of the kernels kept), with one change: the
  features are scaled by the training set's maxima at prediction too (MetaSchedule's loader rescales each
  prediction batch by its own maxima); updated online with its 5 incremental epochs.
- `shipped`: the shipped pre-trained model as given (trained on another CPU's corpus), refined online like `xgb`.
- `random`: random scores, the floor.
"""
from __future__ import annotations

import random as py_random
from collections.abc import Sequence
from typing import Any

import numpy as np

from tvm_rl.tune.corpus.train import train
from tvm_rl.tune.cost_model.features import WorkloadFeatures, normalized_scores
from tvm_rl.tune.cost_model.pretrained import TrainConfig, load_model, predict, refine

# One thread each: on a shared machine OpenMP's spinning threads slow to a crawl when a core is taken away.
THREADS = 1
ARMS = ("xgb", "xgb-rank", "mlp", "shipped", "random")
RANK_ROUNDS = 300
RANK_PARAMS = {"objective": "rank:pairwise", "eta": 0.1, "max_depth": 8, "min_child_weight": 1.0,
               "subsample": 0.8, "colsample_bytree": 0.8, "tree_method": "hist", "verbosity": 0,
               "nthread": THREADS}
ONLINE_ROUNDS = 20


class Arm:
    """A cost model: fitted once per fold, copied and updated per held-out kernel."""

    name = ""
    seeded = False  # whether `fit`'s seed changes the model (then each seed is a run of its own)

    def fit(self, train_set: Sequence[WorkloadFeatures], seed: int) -> None:
        raise NotImplementedError

    def score(self, features: Sequence[np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def updated(self, own: WorkloadFeatures) -> Arm:
        """A copy updated on a kernel's own first records (this arm is left as it is)."""
        raise NotImplementedError


class XGBArm(Arm):
    name = "xgb"

    def __init__(self, booster: Any = None, config: TrainConfig | None = None) -> None:
        self.booster, self.config = booster, config or TrainConfig(nthread=THREADS)

    def fit(self, train_set, seed):
        self.config = TrainConfig(seed=seed, nthread=THREADS)
        self.booster = train(train_set, self.config)

    def score(self, features):
        return predict(self.booster, features)

    def updated(self, own):
        return type(self)(refine(self.booster, [own], self.config), self.config)


class ShippedArm(XGBArm):
    name = "shipped"

    def fit(self, train_set, seed):
        from tvm_rl.tune.cost_model import shipped_model

        self.booster = load_model(shipped_model("llvm"))[0]  # not retrained: the model as users get it


def summed(features: Sequence[np.ndarray]) -> np.ndarray:
    """One row per schedule: its stores' feature rows summed (the segment sum, before any learning)."""
    return np.stack([f.sum(axis=0) if len(f) else np.zeros(f.shape[1], np.float32) for f in features])


class RankArm(Arm):
    name = "xgb-rank"
    seeded = True  # row and column subsampling

    def __init__(self, booster: Any = None, seed: int = 0) -> None:
        self.booster, self.seed = booster, seed

    @staticmethod
    def _matrix(data: Sequence[WorkloadFeatures]):
        import xgboost as xgb

        data = [d for d in data if len(d.valid) > 1]
        x = np.concatenate([summed(d.features) for d in data])
        y = np.concatenate([normalized_scores(d.seconds) for d in data])
        qid = np.concatenate([np.full(len(d), i) for i, d in enumerate(data)])
        return xgb.DMatrix(x, label=y, qid=qid)

    def fit(self, train_set, seed):
        import xgboost as xgb

        self.seed = seed
        self.booster = xgb.train({**RANK_PARAMS, "seed": seed}, self._matrix(train_set), RANK_ROUNDS)

    def score(self, features):
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(summed(features))).astype(np.float64)

    def updated(self, own):
        import xgboost as xgb

        if len(own.valid) < 2:
            return self
        booster = xgb.train({**RANK_PARAMS, "seed": self.seed}, self._matrix([own]), ONLINE_ROUNDS,
                            xgb_model=self.booster.copy())
        return type(self)(booster, self.seed)


class MLPArm(Arm):
    name = "mlp"
    seeded = True
    batch, lr, weight_decay, epochs, incremental_epochs, clip, test_split = 128, 7e-4, 1e-6, 50, 5, 0.5, 0.2

    def __init__(self, model: Any = None, norm: Any = None, seed: int = 0) -> None:
        self.model, self.norm, self.seed = model, norm, seed

    def _batches(self, features, labels, shuffle: bool, generator=None):
        import torch

        order = torch.randperm(len(features), generator=generator) if shuffle else torch.arange(len(features))
        for start in range(0, len(features), self.batch):
            idx = order[start:start + self.batch].tolist()
            sizes = torch.tensor([len(features[i]) for i in idx])
            x = torch.from_numpy(np.concatenate([features[i] for i in idx])) / self.norm
            yield sizes, x, (torch.tensor(labels[idx]) if labels is not None else None)

    def _epochs(self, features, labels, epochs: int, generator, scheduled: bool, check=None):
        import torch
        from tvm.s_tir.meta_schedule.cost_model.mlp_model import lambda_rank_loss

        opt = torch.optim.Adam(self.model.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=max(1, epochs // 10), gamma=0.8) if scheduled else None
        best, best_state = float("inf"), None
        for _ in range(epochs):
            self.model.train()
            for sizes, x, y in self._batches(features, labels, True, generator):
                if len(sizes) < 2:
                    continue
                opt.zero_grad()
                loss = lambda_rank_loss(self.model(sizes, x), y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
                opt.step()
            if sched is not None:
                sched.step()
            if check is not None:
                loss = check()
                if loss < best:
                    best, best_state = loss, {k: v.clone() for k, v in self.model.state_dict().items()}
        if best_state is not None:
            self.model.load_state_dict(best_state)

    def fit(self, train_set, seed):
        import torch
        from tvm.s_tir.meta_schedule.cost_model.mlp_model import SegmentSumMLP, lambda_rank_loss

        torch.set_num_threads(THREADS)
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        self.seed = seed
        kernels = [d for d in train_set if len(d)]
        test = set(py_random.Random(seed).sample(range(len(kernels)), k=int(len(kernels) * self.test_split)))

        def flat(part):
            chosen = [d for i, d in enumerate(kernels) if (i in test) == part]
            labels = [normalized_scores(d.seconds) for d in chosen]
            return ([f for d in chosen for f in d.features],
                    np.concatenate(labels).astype(np.float32) if labels else np.zeros(0, np.float32))

        train_x, train_y = flat(False)
        test_x, test_y = flat(True)
        norm = np.concatenate(train_x).max(axis=0)
        norm[norm == 0] = 1
        self.norm = torch.from_numpy(norm.astype(np.float32))
        self.model = SegmentSumMLP(input_dim=len(norm))

        def test_loss() -> float:
            self.model.eval()
            with torch.no_grad():
                losses = [lambda_rank_loss(self.model(s, x), y).item()
                          for s, x, y in self._batches(test_x, test_y, False) if len(s) > 1]
            return float(np.mean(losses)) if losses else 0.0

        self._epochs(train_x, train_y, self.epochs, generator, scheduled=True, check=test_loss if test_x else None)

    def score(self, features):
        import torch

        self.model.eval()
        with torch.no_grad():
            out = [self.model(s, x).reshape(-1) for s, x, _ in self._batches(list(features), None, False)]
        return torch.cat(out).numpy().astype(np.float64) if out else np.zeros(0)

    def updated(self, own):
        import copy

        import torch

        if len(own.valid) < 2:
            return self
        arm = type(self)(copy.deepcopy(self.model), self.norm, self.seed)
        labels = normalized_scores(own.seconds).astype(np.float32)
        arm._epochs(list(own.features), labels, self.incremental_epochs,
                    torch.Generator().manual_seed(self.seed), scheduled=False)
        return arm


class RandomArm(Arm):
    name = "random"
    seeded = True

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def fit(self, train_set, seed):
        self.rng = np.random.default_rng(seed)

    def score(self, features):
        return self.rng.random(len(features))

    def updated(self, own):
        return self


def make_arm(name: str) -> Arm:
    """A fresh, unfitted arm by name (one of ARMS)."""
    arms = {a.name: a for a in (XGBArm, RankArm, MLPArm, ShippedArm, RandomArm)}
    if name not in arms:
        raise SystemExit(f"unknown arm {name!r}; known: {', '.join(ARMS)}")
    return arms[name]()
