# SPDX-License-Identifier: Apache-2.0
"""ecc.serving: what a serving engine needs around the cache, importing no
engine. The scheduler side (no GPU) decides per multimodal item whether it is
loaded, encoded and saved, deferred behind another writer or encoded here; the
worker side (one per rank) saves and loads what it decided; namespaced keys
keep models apart. Per-step data is plain and picklable."""

from .namespace import Namespace
from .plan import (Answer, Decision, Failure, Item, LoadOrder, SaveOrder, StepMeta,
                   WorkerReport)
from .scheduler import SchedulerSide, ServingStats
from .worker import WorkerSide

__all__ = ["Namespace", "Item", "Answer", "Decision", "SaveOrder", "LoadOrder", "StepMeta",
           "Failure", "WorkerReport", "SchedulerSide", "ServingStats", "WorkerSide"]
