"""Data-parallel facts of a run: one process, or several under ``accelerate launch`` (gloo on CPU,
NCCL on GPUs). Process 0 polls knobs and writes the run folder; every process rolls out its share of
the tasks; gradients are averaged by DDP; advantage whitening sums over every process."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch


class Dist:
    """Process-group facts and the few collectives the trainer uses (identity with one process)."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.accelerator = None
        if self.world > 1:
            from accelerate import Accelerator

            self.accelerator = Accelerator(cpu=not torch.cuda.is_available())
        self.rank = self.accelerator.process_index if self.accelerator else 0
        self.main = self.rank == 0
        self.device = (
            self.accelerator.device
            if self.accelerator
            else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        )

    def broadcast(self, obj: Any) -> Any:
        """Process 0's ``obj`` on every process."""
        if self.world == 1:
            return obj
        import torch.distributed as td

        box = [obj]
        td.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every process's ``obj``, in rank order."""
        if self.world == 1:
            return [obj]
        import torch.distributed as td

        out: list[Any] = [None] * self.world
        td.all_gather_object(out, obj)
        return out

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        """The element-wise sum of ``t`` over every process."""
        if self.world == 1:
            return t
        import torch.distributed as td

        t = t.clone()
        td.all_reduce(t)
        return t

    def close(self) -> None:
        """Wait for every rank (process 0 may still be writing its last checkpoint), then tear the
        process group down: a rank that exits with gloo's threads alive can abort (SIGABRT)."""
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()
            self.accelerator.end_training()


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's global generators from one seed."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
