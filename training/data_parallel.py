"""Data-parallel training on torch.distributed (`torchrun`): every rank runs the same update on the same
global batch, computes the gradient of its share of each minibatch, and the shares are summed.

Rank r of N owns positions r, r + N, r + 2N, ... of any list (envs, minibatch items, questions to evaluate),
so the split depends only on positions, never on timing. Losses are written as sums over a rank's share
divided by the global minibatch size; summing the ranks' gradients then gives the one-process gradient, and
every rank takes the same optimizer step. One process is the special case: it owns everything and nothing is
communicated.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from jetgym.runs.ranks import Ranks


class Shards:
    """This rank's share of the work and the collectives that join the shares (no-ops for one process)."""

    def __init__(self, ranks: Ranks = Ranks()):
        self.ranks = ranks

    @property
    def writer(self) -> bool:
        """Rank 0 writes the run's files; the other ranks only compute."""
        return self.ranks.rank == 0

    def mine(self, n: int) -> list[int]:
        """The positions of a list of `n` items that this rank handles."""
        return list(range(self.ranks.rank, n, self.ranks.world_size))

    def gather(self, value: Any) -> list:
        """Every rank's `value`, in rank order."""
        if not self.ranks.distributed:
            return [value]
        import torch.distributed as dist

        every: list = [None] * self.ranks.world_size
        dist.all_gather_object(every, value)
        return every

    def map(self, function: Callable[[list], list], items: Sequence) -> list:
        """`function` over all `items` (one output per item, in order), each rank computing its share."""
        if not self.ranks.distributed:
            return list(function(list(items)))
        mine = self.mine(len(items))
        out: list = [None] * len(items)
        for rank, part in enumerate(self.gather(list(function([items[i] for i in mine])) if mine else [])):
            for position, value in zip(range(rank, len(items), self.ranks.world_size), part):
                out[position] = value
        return out

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of `values` over the ranks."""
        if not self.ranks.distributed:
            return [float(v) for v in values]
        import torch.distributed as dist

        tensor = torch.tensor(list(values), dtype=torch.float64)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def sum_gradients(self, parameters: Sequence[torch.nn.Parameter]) -> None:
        """Sum the gradients over the ranks in place (a rank whose share was empty contributes zeros)."""
        if not self.ranks.distributed:
            return
        import torch.distributed as dist

        for parameter in parameters:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
        flat = torch.cat([p.grad.reshape(-1) for p in parameters])
        dist.all_reduce(flat)
        offset = 0
        for parameter in parameters:
            n = parameter.numel()
            parameter.grad.copy_(flat[offset : offset + n].view_as(parameter))
            offset += n
