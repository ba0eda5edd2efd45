"""Several training processes (``accelerate launch --num_processes N``): what the rankers need to share.

``torch.distributed.all_gather`` carries no gradient (nor does ``Accelerator.gather``); in-batch negatives
gathered across processes need ``torch.distributed.nn.functional.all_gather``, whose backward sums each
process's gradient for a shard back into the process that owns it. With DDP averaging parameter gradients over
the processes, the gradient is then that of the mean loss over the global batch (see ``gather_rows``).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_gather


def world_size() -> int:
    """Number of processes of the default group (1 when torch.distributed is not initialised)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if world_size() > 1 else 0


def barrier() -> None:
    """Wait for every process (nothing to wait for in one process)."""
    if world_size() > 1:
        dist.barrier()


def gather_objects(obj: Any) -> list[Any]:
    """Every process's ``obj`` (pickled; for small things such as row keys), in rank order."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_rows(x: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """All processes' ``x`` (rows, ...) concatenated in rank order, with gradient flowing back to each shard's
    owner, and the row offset of every process's shard. Processes may hold different row counts (padded for the
    collective, trimmed after). The local shard is the caller's own tensor put back in place, so its gradient
    from this process's loss flows directly; the other processes' contributions arrive through the gather's
    backward (a sum over processes)."""
    n = world_size()
    if n == 1:
        return x, [0]
    counts = torch.tensor([x.shape[0]], device=x.device)
    all_counts = [torch.zeros_like(counts) for _ in range(n)]
    dist.all_gather(all_counts, counts)
    sizes = [int(c) for c in all_counts]
    width = max(sizes)
    padded = x if x.shape[0] == width else torch.cat([x, x.new_zeros(width - x.shape[0], *x.shape[1:])])
    shards = all_gather(padded)
    me = rank()
    parts = [x if i == me else shard[: sizes[i]] for i, shard in enumerate(shards)]
    offsets = [sum(sizes[:i]) for i in range(n)]
    return torch.cat(parts), offsets


__all__ = ["barrier", "gather_objects", "gather_rows", "rank", "world_size"]
