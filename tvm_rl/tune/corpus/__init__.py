"""What builds the tuner's knowledge offline, beside the tuning itself: a corpus of measured schedules (`build`,
its workloads from `sources`), the pre-trained cost model's training on it (`features`, `train`), its
leave-one-workload-out evaluation (`pretrained_eval`), the agent's offline pre-training (`policy_pretrain`) and
`tvm-rl corpus` (`command`). Tuning never imports this package: it loads the model file `train` writes
(`tune.cost_model.pretrained`)."""
from .build import Corpus, CorpusReport, WorkloadRecords, build_corpus
from .sources import (
    CorpusError,
    Workload,
    distinct,
    has_reduction,
    host_info,
    safe_name,
    tophub_logs,
    tophub_workloads,
    zoo_workloads,
)

__all__ = ["Corpus", "CorpusError", "CorpusReport", "Workload", "WorkloadRecords", "build_corpus", "distinct",
           "has_reduction", "host_info", "safe_name", "tophub_logs", "tophub_workloads", "zoo_workloads"]
